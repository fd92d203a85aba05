//! What the kernel says of a process on this node, for backends that name a frozen peer:
//! a process stopped by SIGSTOP, held in a debugger or stuck in swap keeps its pid, so
//! it is not gone, yet it will not answer. Its state letter comes from `/proc/PID/stat`;
//! [`Stillness`] says how long something a peer should change (its beat, its state) has
//! stood still across reads close enough together to say so.

use std::sync::Mutex;
use std::time::Duration;

/// How long a stopped peer may stand still before it is named (at most the operation
/// timeout, at least [`FROZEN_MIN`]): the bound a silent host gets.
pub const FROZEN_AFTER: Duration = Duration::from_secs(5);
/// The least of that bound, whatever the operation timeout.
pub const FROZEN_MIN: Duration = Duration::from_secs(1);
/// Reads further apart than this start afresh: the reader itself may have been stopped
/// (a whole job paused and resumed) and cannot say the peer stood still meanwhile.
const READS_APART: Duration = Duration::from_secs(2);

/// Nanoseconds on a monotonic clock of this process (from its first call), the times
/// [`Stillness`] is read at.
pub fn now_ns() -> u64 {
    static ORIGIN: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    ORIGIN
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_nanos() as u64
}

/// The bound a stopped peer gets under `op_timeout`.
pub fn frozen_after(op_timeout: Duration) -> Duration {
    FROZEN_AFTER.min(op_timeout).max(FROZEN_MIN)
}

/// Process `pid`'s state letter in `/proc/PID/stat` (`R` running, `S` sleeping, `T`
/// stopped, `t` traced, `D` in the kernel, `Z` a zombie), where it can be read.
pub fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    state_of(&stat)
}

/// The state letter of a `/proc/PID/stat` line: the field after the command, which is in
/// parentheses and may itself hold spaces and parentheses.
fn state_of(stat: &str) -> Option<char> {
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().next()?.chars().next()
}

/// Whether a process in `state` is stopped: by a signal, or by a debugger.
pub fn is_stopped(state: Option<char>) -> bool {
    matches!(state, Some('T' | 't'))
}

/// Why a process in `state` does not progress, in words.
pub fn why_still(state: Option<char>) -> &'static str {
    match state {
        Some('T') => "it is stopped (SIGSTOP or job control)",
        Some('t') => "it is stopped by a debugger",
        Some('D') => "it waits in the kernel (disk or swap)",
        Some('Z') => "it has exited",
        _ => "it is alive but does not run",
    }
}

/// A value read now and then (fabric nanoseconds) and how long it has stood still.
#[derive(Debug)]
pub struct Stillness {
    /// Several threads ask at once: one lock keeps the value and its times together.
    seen: Mutex<Seen>,
}

#[derive(Debug, Clone, Copy)]
struct Seen {
    /// The value (`None`: none read yet).
    value: Option<u64>,
    /// When it was first read at that value.
    since: u64,
    /// When it was last read.
    read: u64,
}

impl Default for Stillness {
    fn default() -> Self {
        Self {
            seen: Mutex::new(Seen {
                value: None,
                since: 0,
                read: 0,
            }),
        }
    }
}

impl Stillness {
    /// How long the value has stood still, read as `value` at `now_ns`: unchanged since it
    /// was first read at this value, by reads no further apart than [`READS_APART`].
    pub fn still(&self, now_ns: u64, value: u64) -> Duration {
        let mut s = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let apart = now_ns.saturating_sub(s.read) > READS_APART.as_nanos() as u64;
        if s.value != Some(value) || apart {
            s.value = Some(value);
            s.since = now_ns;
        }
        s.read = now_ns;
        Duration::from_nanos(now_ns.saturating_sub(s.since))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_follows_the_command_whatever_it_holds() {
        assert_eq!(state_of("42 (sleep) S 1 42"), Some('S'));
        assert_eq!(state_of("42 (a) b) T 1 42"), Some('T'));
        assert_eq!(state_of("42 (x"), None);
        assert_eq!(state_of(""), None);
        assert!(is_stopped(Some('T')) && is_stopped(Some('t')));
        assert!(!is_stopped(Some('R')) && !is_stopped(Some('D')) && !is_stopped(None));
        // This process runs.
        assert!(!is_stopped(state(std::process::id())));
        assert_eq!(why_still(Some('t')), "it is stopped by a debugger");
    }

    #[test]
    fn a_value_stands_still_only_between_reads_close_together() {
        let l = Stillness::default();
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
        assert_eq!(frozen_after(Duration::from_secs(30)), FROZEN_AFTER);
        assert_eq!(frozen_after(Duration::from_millis(100)), FROZEN_MIN);
    }
}
