//! Synchronisation this crate's lock-free code uses: std's, or loom's under `--cfg loom`,
//! so the same code runs in the model checker (`RUSTFLAGS="--cfg loom" cargo test -p
//! titus-fabric --lib loom`, run by `.ci/test`).

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, AtomicUsize, Ordering, fence};
#[cfg(loom)]
pub use loom::sync::{Condvar, Mutex};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering, fence};
#[cfg(not(loom))]
pub use std::sync::{Condvar, Mutex};

use std::time::Duration;

/// A condition variable whose notifications are skipped while nobody waits: a notify is
/// a futex syscall, about a microsecond on a completion path that runs per operation.
///
/// The handshake (checked by the loom model below):
/// 1. A sleeper counts itself in `waiters` (SeqCst), *then* locks the state and checks
///    its condition, and waits on the condition variable (which releases the lock).
/// 2. A waker changes the state under the lock, releases it, *then* reads `waiters`
///    (SeqCst) and notifies if it is non-zero.
///
/// Either the waker's state change happened before the sleeper's check (the sleeper sees
/// it and does not wait), or the sleeper's increment happened before the waker's read
/// (the waker notifies, and the sleeper is waiting or about to re-check under the lock).
#[derive(Debug, Default)]
pub struct WakeGate {
    waiters: AtomicUsize,
}

impl WakeGate {
    /// A gate with no sleepers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Blocks on `cv` for at most `timeout` unless `ready` holds for the state in `m`.
    pub fn sleep_unless<T>(
        &self,
        m: &Mutex<T>,
        cv: &Condvar,
        timeout: Duration,
        ready: impl Fn(&T) -> bool,
    ) {
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let g = m.lock().unwrap_or_else(|p| p.into_inner());
        if !ready(&g) {
            #[cfg(not(loom))]
            drop(
                cv.wait_timeout(g, timeout)
                    .unwrap_or_else(|p| p.into_inner()),
            );
            // The model has no clock: a wait without timeout turns a lost wake-up into a
            // deadlock loom reports.
            #[cfg(loom)]
            {
                let _ = timeout;
                drop(cv.wait(g).unwrap_or_else(|p| p.into_inner()));
            }
        }
        self.waiters.fetch_sub(1, Ordering::SeqCst);
    }

    /// Wakes the sleepers, if any. Call after changing the state under the mutex and
    /// releasing it.
    pub fn wake(&self, cv: &Condvar) {
        if self.waiters.load(Ordering::SeqCst) > 0 {
            cv.notify_all();
        }
    }
}

#[cfg(loom)]
mod loom_tests {
    use super::*;
    use loom::sync::Arc;

    #[test]
    fn a_wake_is_never_lost() {
        loom::model(|| {
            let state = Arc::new((Mutex::new(false), Condvar::new(), WakeGate::new()));
            let sleeper = {
                let state = state.clone();
                loom::thread::spawn(move || {
                    let (m, cv, gate) = &*state;
                    while !*m.lock().unwrap() {
                        gate.sleep_unless(m, cv, Duration::from_secs(1), |done| *done);
                    }
                })
            };
            let (m, cv, gate) = &*state;
            *m.lock().unwrap() = true;
            gate.wake(cv);
            sleeper.join().unwrap();
        });
    }
}
