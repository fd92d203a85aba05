//! Whether a peer's process lives and progresses. An exited process is told by its pidfd
//! (or `kill(pid, 0)`); a frozen one — stopped by SIGSTOP, held in a debugger, stuck in
//! swap — keeps its pid, and a steal on this backend never waits for it, so nothing
//! would ever time out. Each rank therefore advances a beat word in its own object
//! ([`crate::layout::W_BEAT`]) from a thread of its own ([`Beat`]: no lock of the
//! runtime's holds it up, and a rank deep in a long task still beats), and a peer whose
//! beat stands still is named ([`Life::still`]): after [`FROZEN_AFTER`] where
//! `/proc/PID/stat` says it is stopped, traced or waiting in the kernel, after the
//! operation timeout otherwise.

use rustix::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long a stopped peer's beat may stand still before it is named (at most the
/// operation timeout, at least [`FROZEN_MIN`]): the bound a silent host gets over
/// libfabric.
pub(crate) const FROZEN_AFTER: Duration = Duration::from_secs(5);
/// The least of that bound, whatever the operation timeout: a beat is 100 ms apart.
pub(crate) const FROZEN_MIN: Duration = Duration::from_secs(1);
/// How often a rank beats.
const BEAT_EVERY: Duration = Duration::from_millis(100);
/// Reads of a peer's beat further apart than this start afresh: the reader itself may
/// have been stopped (a whole job paused and resumed) and cannot say the peer stood
/// still meanwhile.
const READS_APART: Duration = Duration::from_secs(2);

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

/// A peer's beat as this rank last read it.
#[derive(Debug, Clone, Copy)]
struct BeatSeen {
    /// The value (`u64::MAX`: none read yet).
    beat: u64,
    /// When (fabric nanoseconds) it was first read at that value.
    since: u64,
    /// When it was last read.
    read: u64,
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
    /// Several threads ask at once (the progress thread's sweeps, a worker's failed
    /// operation): one lock keeps the value and its times together.
    seen: Mutex<BeatSeen>,
}

impl Life {
    /// The process `pid` (watched through `pidfd` where the kernel gave one).
    pub(crate) fn new(pid: u32, pidfd: Option<OwnedFd>) -> Self {
        Self {
            pid,
            pidfd,
            checked: AtomicU64::new(0),
            dead: AtomicBool::new(false),
            seen: Mutex::new(BeatSeen {
                beat: u64::MAX,
                since: 0,
                read: 0,
            }),
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

    /// How long the peer has made no progress, its beat reading `beat` at `now_ns`: the
    /// beat is unchanged since it was first read at this value (by reads no further apart
    /// than [`READS_APART`]), so the peer has not progressed since then at least.
    pub(crate) fn still(&self, now_ns: u64, beat: u64) -> Duration {
        let mut s = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let apart = now_ns.saturating_sub(s.read) > READS_APART.as_nanos() as u64;
        if s.beat != beat || apart {
            s.beat = beat;
            s.since = now_ns;
        }
        s.read = now_ns;
        Duration::from_nanos(now_ns.saturating_sub(s.since))
    }

    /// The process's state letter in `/proc/PID/stat` (`T` stopped, `t` traced, `D` in
    /// the kernel, …), where it can be read.
    pub(crate) fn state(&self) -> Option<char> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid)).ok()?;
        process_state(&stat)
    }
}

/// Whether a process in `state` is frozen rather than merely slow: stopped, traced, or
/// waiting in the kernel (disk, swap).
pub(crate) fn is_stopped(state: Option<char>) -> bool {
    matches!(state, Some('T' | 't' | 'D'))
}

/// Why a process in `state` does not progress, in words.
pub(crate) fn why_still(state: Option<char>) -> &'static str {
    match state {
        Some('T') => "it is stopped (SIGSTOP or job control)",
        Some('t') => "it is stopped by a debugger",
        Some('D') => "it waits in the kernel (disk or swap)",
        Some('Z') => "it has exited",
        _ => "it is alive but does not run",
    }
}

/// The state letter of a `/proc/PID/stat` line: the field after the command, which is in
/// parentheses and may itself hold spaces and parentheses.
fn process_state(stat: &str) -> Option<char> {
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().next()?.chars().next()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_follows_the_command_whatever_it_holds() {
        assert_eq!(process_state("42 (sleep) S 1 42"), Some('S'));
        assert_eq!(process_state("42 (a) b) T 1 42"), Some('T'));
        assert_eq!(process_state("42 (x"), None);
        assert_eq!(process_state(""), None);
        assert!(is_stopped(Some('T')) && is_stopped(Some('t')) && is_stopped(Some('D')));
        assert!(!is_stopped(Some('R')) && !is_stopped(Some('S')) && !is_stopped(None));
    }

    #[test]
    fn a_beat_stands_still_only_between_reads_close_together() {
        let l = Life::new(std::process::id(), None);
        let ms = |x: u64| x * 1_000_000;
        let secs = |d: Duration| d.as_secs_f64();
        assert_eq!(l.still(ms(0), 7), Duration::ZERO); // The first read: the baseline.
        assert_eq!(secs(l.still(ms(1_000), 7)), 1.0);
        assert_eq!(secs(l.still(ms(2_500), 7)), 2.5);
        // It moved: a new baseline from the read that saw it move.
        assert_eq!(l.still(ms(3_000), 8), Duration::ZERO);
        assert_eq!(secs(l.still(ms(4_000), 8)), 1.0);
        // Reads 10 s apart (this reader paused too): afresh.
        assert_eq!(l.still(ms(14_000), 8), Duration::ZERO);
        assert_eq!(secs(l.still(ms(15_000), 8)), 1.0);
        // This process runs: not stopped.
        assert!(!is_stopped(l.state()));
        assert_eq!(
            why_still(Some('T')),
            "it is stopped (SIGSTOP or job control)"
        );
    }

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
