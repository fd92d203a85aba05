//! Whether a peer's process lives and progresses. An exited process is told by its pidfd
//! (or `kill(pid, 0)`); a frozen one — stopped by SIGSTOP, held in a debugger, stuck in
//! swap — keeps its pid, and a steal on this backend never waits for it, so nothing
//! would ever time out. Each rank's progress call therefore advances a beat word in its
//! own object ([`crate::layout::W_BEAT`]); a peer whose beat has not moved for
//! [`Life::frozen`]'s bound is named, with its state from `/proc/PID/stat` where that
//! says why. A rank deep in a long task still beats: its progress thread runs beside the
//! workers and wakes at least every driver wait (50 ms).

use rustix::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// How long a peer's beat may stand still before it is named frozen (at most the
/// operation timeout): the bound a silent host gets over libfabric.
pub(crate) const FROZEN_AFTER: Duration = Duration::from_secs(5);

/// Whether a peer's process lives: its pidfd becomes readable when it exits; and when
/// its beat was last seen to move.
#[derive(Debug)]
pub(crate) struct Life {
    pub(crate) pid: u32,
    pidfd: Option<OwnedFd>,
    /// Nanoseconds since the fabric's origin of the last check.
    checked: AtomicU64,
    dead: AtomicBool,
    /// The beat last read, and when (fabric nanoseconds) it was first read at that value.
    beat: AtomicU64,
    beat_since: AtomicU64,
}

impl Life {
    /// The process `pid` (watched through `pidfd` where the kernel gave one), first seen
    /// at `now_ns`.
    pub(crate) fn new(pid: u32, pidfd: Option<OwnedFd>, now_ns: u64) -> Self {
        Self {
            pid,
            pidfd,
            checked: AtomicU64::new(0),
            dead: AtomicBool::new(false),
            beat: AtomicU64::new(u64::MAX),
            beat_since: AtomicU64::new(now_ns),
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

    /// How long the peer has made no progress, where that is `after` or longer, its beat
    /// reading `beat` at `now_ns`. The beat is unchanged since it was first read at this
    /// value, so the peer has not progressed since then at least.
    pub(crate) fn frozen(&self, now_ns: u64, beat: u64, after: Duration) -> Option<Duration> {
        if self.beat.swap(beat, Ordering::Relaxed) != beat {
            self.beat_since.store(now_ns, Ordering::Relaxed);
            return None;
        }
        let still =
            Duration::from_nanos(now_ns.saturating_sub(self.beat_since.load(Ordering::Relaxed)));
        (still >= after).then_some(still)
    }

    /// Why a frozen process does not progress, as far as `/proc/PID/stat` tells.
    pub(crate) fn why_frozen(&self) -> &'static str {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid)).ok();
        match stat.as_deref().and_then(process_state) {
            Some('T') => "it is stopped (SIGSTOP or job control)",
            Some('t') => "it is stopped by a debugger",
            Some('D') => "it waits in the kernel (disk or swap)",
            Some('Z') => "it has exited",
            _ => "it is alive but its progress thread does not run",
        }
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
    }

    #[test]
    fn a_beat_that_stands_still_is_frozen_only_after_the_bound() {
        let l = Life::new(std::process::id(), None, 0);
        let s = Duration::from_secs(1).as_nanos() as u64;
        let after = Duration::from_secs(5);
        assert_eq!(l.frozen(0, 7, after), None); // First read: the baseline.
        assert_eq!(l.frozen(4 * s, 7, after), None);
        assert_eq!(l.frozen(5 * s, 7, after), Some(Duration::from_secs(5)));
        // It moved: a new baseline from the read that saw it move.
        assert_eq!(l.frozen(6 * s, 8, after), None);
        assert_eq!(l.frozen(10 * s, 8, after), None);
        assert_eq!(l.frozen(11 * s, 8, after), Some(Duration::from_secs(5)));
        // This process runs: its state is not a stop.
        assert_eq!(
            l.why_frozen(),
            "it is alive but its progress thread does not run"
        );
    }
}
