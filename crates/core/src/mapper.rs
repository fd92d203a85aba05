//! The mapper: the policy of stealing, apart from its mechanism (Legion's mapper calls,
//! seed 001: `target_task_steal`, `permit_task_steal`, priorities, `notify_profiling_info`).
//!
//! A [`Mapper`] answers four questions; the core asks them at the same points whether the
//! runtime or the simulator drives it, and every answer has a default that is today's
//! behaviour ([`DefaultMapper`]):
//! - **thief side** — [`Mapper::target_steal`]: which out-neighbour to probe now, given
//!   who is ready, backed off or blacklisted ([`Victims`]); `None` is a valid answer (no
//!   steal now; the thief asks again at its next input or backoff deadline);
//! - **owner side** — [`Mapper::permit_steal`]: of the tasks the owner is about to share,
//!   which may go. Under `request` the thief is known; under `claim` and `lock` the owner
//!   publishes before any thief shows up (one-sided), so the answer is for any thief.
//!   Refused tasks stay in the owner's queue; a mapper that refuses everything keeps every
//!   task local, and the epoch still ends (each owner runs its own);
//! - **execution order** — each task carries a signed priority (`i16`, default 0) from
//!   its submitter, [`Mapper::priority`] may change it when the task is queued; a rank
//!   runs higher priorities first and shares from the other end (lowest first);
//! - **profiling** — [`Mapper::task_finished`]: every task a rank ran, with its measured
//!   duration, to feed cost estimates ([`CostModel`], kept by the default mapper);
//! - **estimates** — [`Mapper::estimate_ns`]: the cost of a task that joins this rank's
//!   queue without one (no hint from its submitter, no prediction): the default mapper's
//!   measured mean of its kind. Cost-aware sharing (`crate::Config::cost_aware`) splits
//!   the queue by these estimates; a stolen task's estimate is bounded by it.
//!
//! A mapper lives on one rank ([`crate::Node::set_mapper`]) and sees only that rank's
//! view; what ranks must agree on (the protocol, the overlay) stays in [`crate::Config`].

use crate::neighbours::{Backoff, Neighbours};
use crate::{Rank, Time};
use titus_overlay::rng::Rng;

/// What a mapper sees of a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskInfo {
    /// The rank that owns it (its result goes there).
    pub owner: Rank,
    /// Its index there.
    pub index: u32,
    /// Its kind.
    pub kind: u16,
    /// Its priority (higher runs first).
    pub priority: i16,
    /// Its estimated cost, ns (0: unknown), as it travels with the task.
    pub cost_ns: u64,
}

/// A finished task, as [`Mapper::task_finished`] reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Profile {
    /// The task's kind.
    pub kind: u16,
    /// Its owner.
    pub owner: Rank,
    /// Its index there.
    pub index: u32,
    /// The rank that ran it (this one).
    pub rank: Rank,
    /// How long it ran, ns (measured by the driver).
    pub duration_ns: u64,
}

/// The thief's targets as [`Mapper::target_steal`] sees them: indices `0..len()` name
/// out-neighbours in ascending rank order.
#[derive(Debug)]
pub struct Victims<'a> {
    pub(crate) targets: &'a Neighbours,
    pub(crate) backoff: &'a Backoff,
    pub(crate) now: Time,
    pub(crate) favourite: Option<usize>,
    pub(crate) rng: &'a mut Rng,
}

impl Victims<'_> {
    /// How many targets.
    pub fn len(&self) -> usize {
        self.targets.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.targets.is_empty()
    }

    /// The rank of target `i` (< `len()`).
    pub fn rank(&self, i: usize) -> Rank {
        self.targets.at(i)
    }

    /// The index of `rank`, if it is a target.
    pub fn index_of(&self, rank: Rank) -> Option<usize> {
        self.targets.index_of(rank)
    }

    /// Whether target `i` may be probed now: not backed off, not blacklisted, and the
    /// thief not pacing itself.
    pub fn is_ready(&self, i: usize) -> bool {
        self.backoff.is_ready(i, self.now)
    }

    /// Whether target `i` is blacklisted (found empty; waiting for its advertisement).
    pub fn is_blacklisted(&self, i: usize) -> bool {
        self.backoff.is_blacklisted(i)
    }

    /// The target that gave work last (or advertised), while it is not found empty.
    pub fn favourite(&self) -> Option<usize> {
        self.favourite
    }

    /// A target drawn uniformly among the ready ones (from the thief's seeded stream).
    pub fn pick_ready(&mut self) -> Option<usize> {
        self.backoff.pick_ready(self.now, self.rng)
    }

    /// The thief's seeded random stream, for a mapper's own draws.
    pub fn rng(&mut self) -> &mut Rng {
        self.rng
    }

    /// The default choice: the favourite while it is ready, else uniform among the ready.
    pub fn default_choice(&mut self) -> Option<usize> {
        match self.favourite {
            Some(v) if self.is_ready(v) => Some(v),
            _ => self.pick_ready(),
        }
    }
}

/// A rank's stealing policy. Every method has today's behaviour as its default.
pub trait Mapper: Send + std::fmt::Debug {
    /// Thief: the index of the target to probe now, or `None` for no steal now. An index
    /// out of range is taken as `None`; a target that is not ready may be chosen (the
    /// blacklist and backoff are advice).
    fn target_steal(&mut self, victims: &mut Victims<'_>) -> Option<usize> {
        victims.default_choice()
    }

    /// Owner: `offered` are about to be shared with `thief` (`None`: published for any
    /// thief, under `claim` and `lock`); clear `permit[i]` to keep task `i` here. All
    /// permitted by default.
    fn permit_steal(&mut self, thief: Option<Rank>, offered: &[TaskInfo], permit: &mut [bool]) {
        let _ = (thief, offered, permit);
    }

    /// The priority a task runs with on this rank (higher first); the submitter's by
    /// default.
    fn priority(&mut self, task: &TaskInfo) -> i16 {
        task.priority
    }

    /// The estimated cost of `task` (ns; `None` or 0: unknown), asked when a task joins
    /// this rank's queue without an estimate of its own, and to bound the estimate a
    /// stolen task carries (remote data). None by default.
    fn estimate_ns(&mut self, task: &TaskInfo) -> Option<u64> {
        let _ = task;
        None
    }

    /// A task this rank ran finished.
    fn task_finished(&mut self, profile: &Profile) {
        let _ = profile;
    }
}

/// Per-kind mean task durations measured on this rank: the profiling feed's cost model.
#[derive(Debug, Default, Clone)]
pub struct CostModel {
    /// kind → (tasks measured, sum of their durations, ns), but for `last`'s kind.
    kinds: crate::fasthash::IntMap<u16, (u64, u64)>,
    /// The kind measured last and its entry, out of the map: a step's tasks come in runs
    /// of one kind, and a map lookup per task was most of recording it.
    last: Option<(u16, (u64, u64))>,
}

impl CostModel {
    /// Adds a measured task.
    pub fn record(&mut self, p: &Profile) {
        let e = match &mut self.last {
            Some((kind, e)) if *kind == p.kind => e,
            last => {
                if let Some((kind, e)) = last.take() {
                    self.kinds.insert(kind, e);
                }
                let e = self.kinds.remove(&p.kind).unwrap_or_default();
                &mut last.insert((p.kind, e)).1
            }
        };
        e.0 += 1;
        e.1 = e.1.saturating_add(p.duration_ns);
    }

    /// The mean duration of `kind` measured so far, ns, if any ran here.
    pub fn mean_ns(&self, kind: u16) -> Option<u64> {
        match self.last {
            Some((k, e)) if k == kind => Some(e),
            _ => self.kinds.get(&kind).copied(),
        }
        .filter(|e| e.0 > 0)
        .map(|(n, sum)| sum / n)
    }
}

/// Today's behaviour, and the per-kind cost model from the profiling feed.
#[derive(Debug, Default)]
pub struct DefaultMapper {
    /// Mean durations per kind measured on this rank.
    pub costs: CostModel,
}

impl Mapper for DefaultMapper {
    fn estimate_ns(&mut self, task: &TaskInfo) -> Option<u64> {
        self.costs.mean_ns(task.kind)
    }

    fn task_finished(&mut self, profile: &Profile) {
        self.costs.record(profile);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cost_model_keeps_a_mean_per_kind() {
        let mut m = DefaultMapper::default();
        // Runs of kinds that come back (the last kind's entry is kept apart).
        for (kind, d) in [(1, 10), (1, 30), (2, 7), (1, 50), (2, 9)] {
            m.task_finished(&Profile {
                kind,
                owner: 0,
                index: 0,
                rank: 0,
                duration_ns: d,
            });
        }
        assert_eq!(m.costs.mean_ns(1), Some(30));
        assert_eq!(m.costs.mean_ns(2), Some(8));
        assert_eq!(m.costs.mean_ns(3), None);
    }
}
