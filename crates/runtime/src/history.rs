//! The rank's cost history between epochs, recorded off the step's critical path.
//!
//! An epoch's measured costs join the history (`titus_core::CostHistory::record`: a copy of
//! every key and cost, and the search for how the costs moved) after its last result is
//! home. At 131,072 tasks that took 1.5–3 ms, which the caller waited for before it got its
//! results. Between two steps the caller runs its own serial code (reads the results,
//! hands the next step over) while the workers' cores sit idle, so a large epoch's record
//! runs on a thread of its own; whatever reads the history next waits for it first.

use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use titus_core::CostHistory;

/// Epochs of fewer tasks record in place: starting a thread (tens of µs) would cost them
/// more than the record itself.
const BACKGROUND_MIN: usize = 1 << 14;

/// The last measured cost of each task key, with the record of the last epoch that may
/// still be under way.
#[derive(Default)]
pub(crate) struct History {
    costs: Arc<Mutex<CostHistory>>,
    recording: Mutex<Option<JoinHandle<()>>>,
}

impl History {
    /// The history, once every record handed over has joined it.
    pub(crate) fn lock(&self) -> MutexGuard<'_, CostHistory> {
        self.wait();
        self.costs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds an epoch's measured costs (`costs_ns[i]` of `keys[i]`): on a thread of its own
    /// for a large epoch, else here.
    pub(crate) fn record(&self, keys: Vec<u64>, costs_ns: Vec<u64>) {
        self.wait();
        if keys.len() < BACKGROUND_MIN {
            record_into(&self.costs, &keys, &costs_ns);
            return;
        }
        // Shared with the thread, so that a thread that cannot start leaves it here.
        let job = Arc::new(Mutex::new(Some((keys, costs_ns))));
        let (costs, its_job) = (Arc::clone(&self.costs), Arc::clone(&job));
        let spawned = std::thread::Builder::new()
            .name("titus-history".into())
            .spawn(move || {
                if let Some((k, c)) = take(&its_job) {
                    record_into(&costs, &k, &c);
                }
            });
        match spawned {
            Ok(t) => *self.recording.lock().unwrap_or_else(|p| p.into_inner()) = Some(t),
            Err(_) => {
                if let Some((k, c)) = take(&job) {
                    record_into(&self.costs, &k, &c);
                }
            }
        }
    }

    /// Waits for the record under way, if any.
    fn wait(&self) {
        let t = self
            .recording
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(t) = t {
            // A record that panicked left the history as the panic found it (poisoned
            // locks are taken as they are): the next epoch predicts from that.
            let _ = t.join();
        }
    }
}

type Job = Mutex<Option<(Vec<u64>, Vec<u64>)>>;

fn take(job: &Job) -> Option<(Vec<u64>, Vec<u64>)> {
    job.lock().unwrap_or_else(|p| p.into_inner()).take()
}

fn record_into(costs: &Mutex<CostHistory>, keys: &[u64], costs_ns: &[u64]) {
    costs
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .record(keys, costs_ns);
}

impl Drop for History {
    fn drop(&mut self) {
        self.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whatever reads the history sees every epoch recorded before, small or large, as
    /// if each had been recorded in place.
    #[test]
    fn a_read_sees_every_record_before_it() {
        let h = History::default();
        let mut inline = CostHistory::default();
        for (epoch, n) in [
            (1u64, 10usize),
            (2, BACKGROUND_MIN),
            (3, BACKGROUND_MIN + 7),
            (4, 3),
        ] {
            let keys: Vec<u64> = (0..n as u64).collect();
            let costs: Vec<u64> = keys.iter().map(|k| epoch * 1_000 + k % 97).collect();
            inline.record(&keys, &costs);
            h.record(keys.clone(), costs);
            let got = h.lock();
            assert_eq!(got.len(), inline.len(), "epoch {epoch}");
            assert_eq!(got.shift(), inline.shift(), "epoch {epoch}");
            for k in [0, n as u64 / 2, n as u64 - 1] {
                assert_eq!(
                    got.last_cost(k),
                    inline.last_cost(k),
                    "epoch {epoch}, key {k}"
                );
            }
        }
        // Two large records in a row: the second waits for the first.
        let keys: Vec<u64> = (0..BACKGROUND_MIN as u64).collect();
        h.record(keys.clone(), vec![5; keys.len()]);
        h.record(keys.clone(), vec![9; keys.len()]);
        assert_eq!(h.lock().last_cost(17), Some(9));
    }
}
