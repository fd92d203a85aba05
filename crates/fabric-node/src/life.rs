//! Whether a peer's process lives and progresses. An exited process is told by its pidfd
//! (or `kill(pid, 0)`); a frozen one — stopped by SIGSTOP, held in a debugger, stuck in
//! swap — keeps its pid, and a steal on this backend never waits for it, so nothing
//! would ever time out. Each rank therefore advances a beat word in its own object
//! ([`crate::layout::W_BEAT`]) from a thread of its own ([`Beat`]: no lock of the
//! runtime's holds it up, and a rank deep in a long task still beats), and a peer whose
//! beat stands still is named ([`Life::still`]): after `titus_fabric::process`'s 5 s
//! where `/proc/PID/stat` says it is stopped, traced or waiting in the kernel, after the
//! operation timeout otherwise.

use rustix::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use titus_fabric::process::Stillness;

/// How often a rank beats.
const BEAT_EVERY: Duration = Duration::from_millis(100);

/// This rank's beat: a thread that advances the beat word every [`BEAT_EVERY`] until
/// dropped.
#[derive(Debug)]
pub(crate) struct Beat {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Beat {
    /// Beats in `word` (this rank's, in its object, which `keep` holds mapped).
    pub(crate) fn start<K: Send + 'static>(
        keep: K,
        word: impl Fn(&K) -> &AtomicU64 + Send + 'static,
    ) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let halt = stop.clone();
        let thread = std::thread::Builder::new()
            .name("titus-beat".into())
            .spawn(move || {
                while !halt.load(Ordering::Acquire) {
                    word(&keep).fetch_add(1, Ordering::Relaxed);
                    std::thread::park_timeout(BEAT_EVERY);
                }
            })?;
        Ok(Self {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Beat {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

/// Whether a peer's process lives: its pidfd becomes readable when it exits; and how
/// long its beat has stood still.
#[derive(Debug)]
pub(crate) struct Life {
    pub(crate) pid: u32,
    pidfd: Option<OwnedFd>,
    /// Nanoseconds since the fabric's origin of the last check.
    checked: AtomicU64,
    dead: AtomicBool,
    /// How long its beat has stood still.
    beat: Stillness,
}

impl Life {
    /// The process `pid` (watched through `pidfd` where the kernel gave one).
    pub(crate) fn new(pid: u32, pidfd: Option<OwnedFd>) -> Self {
        Self {
            pid,
            pidfd,
            checked: AtomicU64::new(0),
            dead: AtomicBool::new(false),
            beat: Stillness::default(),
        }
    }

    /// Whether the process is known gone: checked anew when the last check is `every` old.
    pub(crate) fn gone(&self, now_ns: u64, every: Duration) -> bool {
        if self.dead.load(Ordering::Relaxed) {
            return true;
        }
        let last = self.checked.load(Ordering::Relaxed);
        if now_ns.saturating_sub(last) < every.as_nanos() as u64 {
            return false;
        }
        self.checked.store(now_ns, Ordering::Relaxed);
        let gone = match &self.pidfd {
            Some(fd) => {
                let mut p = [rustix::event::PollFd::new(fd, rustix::event::PollFlags::IN)];
                rustix::event::poll(&mut p, Some(&rustix::event::Timespec::default()))
                    .is_ok_and(|n| n > 0)
            }
            None => rustix::process::Pid::from_raw(self.pid as i32)
                .is_none_or(|p| rustix::process::test_kill_process(p).is_err()),
        };
        if gone {
            self.dead.store(true, Ordering::Relaxed);
        }
        gone
    }

    /// How long the peer has made no progress, its beat reading `beat` at `now_ns`
    /// ([`Stillness::still`]).
    pub(crate) fn still(&self, now_ns: u64, beat: u64) -> Duration {
        self.beat.still(now_ns, beat)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_beat_advances_until_dropped() {
        let word = Arc::new(AtomicU64::new(0));
        let beat = Beat::start(word.clone(), |w: &Arc<AtomicU64>| &**w).unwrap();
        let t = std::time::Instant::now();
        while word.load(Ordering::Relaxed) < 2 {
            assert!(t.elapsed() < Duration::from_secs(5), "no beat");
            std::thread::sleep(Duration::from_millis(10));
        }
        drop(beat);
        let after = word.load(Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(250));
        assert_eq!(word.load(Ordering::Relaxed), after, "beats after the drop");
    }
}
