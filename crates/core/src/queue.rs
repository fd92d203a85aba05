//! A rank's queue of tasks: its workers run it from the front, its owner side shares
//! from the back (half of it, at most the shared capacity, never leaving fewer than
//! `min_private`), and stolen or reclaimed tasks join it at the back.

use crate::Config;
use crate::layout::Task;
use std::collections::VecDeque;

/// Tasks to run or share, and whether the workers found it empty.
#[derive(Debug, Default)]
pub(crate) struct Queue {
    /// Front: run next; back: share first.
    tasks: VecDeque<Task>,
    /// Workers asked for tasks and found none (cleared when work arrives or the epoch
    /// ends): the owner side then takes its published tasks back.
    pub(crate) hungry: bool,
}

impl Queue {
    /// A new epoch's queue.
    pub(crate) fn start(&mut self, tasks: VecDeque<Task>) {
        self.tasks = tasks;
        self.hungry = false;
    }

    pub(crate) fn len(&self) -> usize {
        self.tasks.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// How many tasks the owner may share now.
    pub(crate) fn shareable(&self, cfg: &Config) -> usize {
        let q = self.tasks.len();
        (q / 2)
            .min(q.saturating_sub(cfg.min_private as usize))
            .min(cfg.shared_capacity as usize)
    }

    /// Up to `max` tasks from the front, for the workers.
    pub(crate) fn take_front(&mut self, max: usize) -> Vec<Task> {
        let n = max.min(self.tasks.len());
        self.tasks.drain(..n).collect()
    }

    /// `k` (≤ `len()`) tasks from the back, in queue order.
    pub(crate) fn take_back(&mut self, k: usize) -> Vec<Task> {
        let at = self.tasks.len() - k;
        self.tasks.split_off(at).into()
    }

    /// Tasks join at the back.
    pub(crate) fn extend(&mut self, tasks: impl IntoIterator<Item = Task>) {
        self.tasks.extend(tasks);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(index: u32) -> Task {
        Task {
            owner: 0,
            index,
            kind: 0,
            payload: Vec::new(),
        }
    }

    #[test]
    fn shares_half_from_the_back_within_the_limits() {
        let cfg = Config {
            min_private: 3,
            shared_capacity: 2,
            ..Config::default()
        };
        let mut q = Queue::default();
        q.start((0..5).map(task).collect());
        // Half of 5 is 2, 5 − 3 private is 2, the capacity 2.
        assert_eq!(q.shareable(&cfg), 2);
        let back = q.take_back(2);
        assert_eq!(back.iter().map(|t| t.index).collect::<Vec<_>>(), [3, 4]);
        assert_eq!(q.shareable(&cfg), 0, "3 tasks stay private");
        assert_eq!(q.take_front(2).len(), 2);
        q.extend(back);
        assert_eq!(q.len(), 3);
    }
}
