//! Tasks that create tasks: what a job declares to spawn, and how the results of spawned
//! tasks are combined.
//!
//! A running task hands its children to its rank ([`crate::Node::spawned`]) before it is
//! reported done. They join the front of that rank's queue (its workers go depth first,
//! so a tree's frontier stays small) and are stolen from the back like any other task
//! (the oldest, nearest the root: the work that splits furthest).
//!
//! A spawned task belongs to the owner of the epoch task it descends from, and carries
//! the key its spawner gave it. Its result goes one of two ways ([`Spawning::lanes`]):
//! - **home** (the default, no lanes): routed to that owner like an epoch task's result,
//!   hop by hop and coarsened, exactly once; the owner gets it with its key
//!   ([`crate::SpawnedResult`]);
//! - **reduced**: one u64 per lane of an associative, commutative reduction, combined into
//!   the partial of the rank that ran it; nothing per task travels, and the partials are
//!   combined over the termination tree as the epoch ends (`crate::termination`).
//!
//! Epoch tasks keep their results, which go home as always.
//!
//! Termination cannot rest on owners alone once the bag grows: the termination tree runs
//! waves of created and completed counts instead (`crate::termination`, "Waves").

use std::sync::Arc;

/// Index of a spawned task: it has none in its owner's task list.
pub const SPAWNED_INDEX: u32 = u32::MAX;

/// Most lanes a reduction may have (a wave's report carries them all).
pub const LANES_MAX: usize = 8;

/// Default bound on the spawned tasks a rank holds queued ([`Spawning::queued_max`]).
pub const QUEUED_MAX_DEFAULT: u64 = 1 << 22;

/// How one lane of a reduction combines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Wrapping sum.
    Sum,
    /// Maximum.
    Max,
    /// Minimum.
    Min,
    /// The job's own combine ([`Combine`]), over every lane at once: a job's lanes are
    /// all custom or none.
    Custom,
}

impl ReduceOp {
    /// The value that changes nothing (a custom lane's is its [`Combine`]'s).
    pub fn identity(self) -> u64 {
        match self {
            Self::Sum | Self::Max | Self::Custom => 0,
            Self::Min => u64::MAX,
        }
    }

    /// `a ⊕ b` (a custom lane is combined by its [`Combine`], never here).
    pub fn combine(self, a: u64, b: u64) -> u64 {
        match self {
            Self::Sum | Self::Custom => a.wrapping_add(b),
            Self::Max => a.max(b),
            Self::Min => a.min(b),
        }
    }

    /// Its name in flags and errors.
    pub fn name(self) -> &'static str {
        match self {
            Self::Sum => "sum",
            Self::Max => "max",
            Self::Min => "min",
            Self::Custom => "custom",
        }
    }
}

/// A reduction's combine given as code (a Rust closure, or a C callback through
/// libtitus): `acc ⊕= value` over all lanes at once. It must be associative and
/// commutative, as the built-in lanes are: partials are combined in whatever order the
/// termination tree and the task runs give. Every rank gives the same one.
#[derive(Clone)]
pub struct Combine {
    /// The value that changes nothing, one u64 per lane: a rank's partial before any
    /// spawned task ran.
    pub identity: Vec<u64>,
    f: Arc<CombineFn>,
}

/// [`Combine`]'s function: folds the second argument into the first (same lengths).
pub type CombineFn = dyn Fn(&mut [u64], &[u64]) + Send + Sync;

impl Combine {
    /// A combine of `identity.len()` lanes by `f`.
    pub fn new(identity: Vec<u64>, f: impl Fn(&mut [u64], &[u64]) + Send + Sync + 'static) -> Self {
        Self {
            identity,
            f: Arc::new(f),
        }
    }
}

impl std::fmt::Debug for Combine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Combine")
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

/// Two combines are the same when they are one function with one identity.
impl PartialEq for Combine {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.f, &other.f) && self.identity == other.identity
    }
}

impl Eq for Combine {}

impl std::str::FromStr for ReduceOp {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "sum" => Ok(Self::Sum),
            "max" => Ok(Self::Max),
            "min" => Ok(Self::Min),
            "custom" => Ok(Self::Custom),
            _ => Err(format!("reduction '{s}': sum, max, min or custom")),
        }
    }
}

/// A job whose tasks may spawn tasks (every rank the same).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spawning {
    /// How spawned tasks' results combine: each result is one little-endian u64 per lane.
    /// No lanes: each result travels home with its key instead.
    pub lanes: Vec<ReduceOp>,
    /// The most spawned tasks a rank may hold queued: a runaway tree fails the epoch on
    /// every rank, naming this bound, before it exhausts memory.
    pub queued_max: u64,
    /// The combine of [`ReduceOp::Custom`] lanes: given with them
    /// ([`Spawning::combined`]), or later, before an epoch (`Node::set_combine`).
    pub combine: Option<Combine>,
}

impl Default for Spawning {
    fn default() -> Self {
        Self::home()
    }
}

impl Spawning {
    /// A job whose spawned tasks' results travel home, each with its key, to the owner of
    /// the epoch task they descend from.
    pub fn home() -> Self {
        Self::reduced(Vec::new())
    }

    /// A job whose spawned tasks' results are combined lane by lane with `lanes`.
    pub fn reduced(lanes: Vec<ReduceOp>) -> Self {
        Self {
            lanes,
            queued_max: QUEUED_MAX_DEFAULT,
            combine: None,
        }
    }

    /// A job whose spawned tasks' results are combined by `combine`, over as many lanes
    /// as its identity has.
    pub fn combined(combine: Combine) -> Self {
        Self {
            combine: Some(combine.clone()),
            ..Self::reduced(vec![ReduceOp::Custom; combine.identity.len()])
        }
    }

    /// Whether spawned results travel home (no reduction).
    pub fn routes_home(&self) -> bool {
        self.lanes.is_empty()
    }

    /// Whether the lanes are the job's own combine's.
    pub fn is_custom(&self) -> bool {
        self.lanes.contains(&ReduceOp::Custom)
    }

    /// Why these lanes cannot be declared, if they cannot: too many, or custom lanes mixed
    /// with built-in ones.
    pub fn check_lanes(&self) -> Result<(), String> {
        let n = self.lanes.len();
        if n > LANES_MAX {
            return Err(format!("{n} reduction lanes, at most {LANES_MAX}"));
        }
        if self.is_custom() && self.lanes.iter().any(|&op| op != ReduceOp::Custom) {
            return Err(
                "custom lanes mixed with built-in ones: a job's lanes are all custom or none"
                    .into(),
            );
        }
        Ok(())
    }

    /// Why these lanes cannot reduce an epoch, if they cannot: [`Spawning::check_lanes`],
    /// or custom lanes without a combine of as many lanes.
    pub fn check(&self) -> Result<(), String> {
        self.check_lanes()?;
        let n = self.lanes.len();
        if self.is_custom() {
            match &self.combine {
                None => return Err(format!("{n} custom lanes and no combine given for them")),
                Some(c) if c.identity.len() != n => {
                    return Err(format!(
                        "{n} custom lanes and a combine of {} (its identity's length)",
                        c.identity.len()
                    ));
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// Every lane's identity: a rank's partial before any spawned task ran.
    pub fn identity(&self) -> Vec<u64> {
        match &self.combine {
            Some(c) if self.is_custom() => c.identity.clone(),
            _ => self.lanes.iter().map(|op| op.identity()).collect(),
        }
    }

    /// Combines `right` into `acc`, lane by lane (both have [`Spawning::lanes`]' length),
    /// or by the job's own combine: the values may come from other ranks, so a combine
    /// that panics on them fails the epoch (the panic's message) rather than the rank.
    pub fn combine(&self, acc: &mut [u64], right: &[u64]) -> Result<(), String> {
        if let Some(c) = &self.combine
            && self.is_custom()
        {
            let run = std::panic::AssertUnwindSafe(|| (c.f)(acc, right));
            return std::panic::catch_unwind(run).map_err(|p| {
                let why = p
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| p.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                format!("the reduction's combine panicked: {why}")
            });
        }
        for ((a, &b), op) in acc.iter_mut().zip(right).zip(&self.lanes) {
            *a = op.combine(*a, b);
        }
        Ok(())
    }

    /// Bytes of one spawned task's result.
    pub fn result_bytes(&self) -> usize {
        self.lanes.len() * 8
    }

    /// Lane values as a spawned task's result: little-endian u64s.
    pub fn encode(values: &[u64]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    /// A spawned task's result as lane values, if it has the right length.
    pub fn decode(&self, data: &[u8]) -> Option<Vec<u64>> {
        (data.len() == self.result_bytes()).then(|| {
            data.chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
                .collect()
        })
    }
}

/// A rank's spawned tasks this epoch: what its waves report (`crate::termination`), with
/// those spawned here (`Stats::tasks_spawned`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    /// Completed here (wherever they were spawned).
    pub(crate) completed: u64,
    /// The reduction of their results, lane by lane.
    pub(crate) partial: Vec<u64>,
}

/// Why a spawn was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpawnError {
    /// The job did not declare spawning (`Config::spawning`).
    #[error("this job's tasks may not spawn (it declared no spawning: Config::spawning)")]
    NotSpawning,
    /// No epoch runs here.
    #[error("a task was spawned while no epoch runs")]
    NoEpoch,
    /// The spawning task's owner is not a rank of the job.
    #[error("a task was spawned by a task whose owner, rank {0}, is outside the job")]
    NoParent(u32),
    /// A child's payload is over `Config::max_payload`.
    #[error("a spawned task has a {len}-byte payload, over the {limit}-byte limit")]
    PayloadTooLarge {
        /// Its length.
        len: usize,
        /// The limit.
        limit: u32,
    },
    /// The epoch already failed (or this spawn failed it: the queue passed its bound).
    #[error("the epoch failed: {0}")]
    Failed(crate::CoreError),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_combine_by_their_operations() {
        let s = Spawning::reduced(vec![ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min]);
        let mut acc = s.identity();
        assert_eq!(acc, [0, 0, u64::MAX]);
        s.combine(&mut acc, &[3, 7, 9]).unwrap();
        s.combine(&mut acc, &[4, 2, 5]).unwrap();
        assert_eq!(acc, [7, 7, 5]);
        let bytes: Vec<u8> = [1u64, 2, 3].iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(s.decode(&bytes), Some(vec![1, 2, 3]));
        assert_eq!(s.decode(&bytes[..16]), None, "a short result is refused");
        assert_eq!(ReduceOp::Sum.combine(u64::MAX, 2), 1, "sums wrap");
    }

    #[test]
    fn a_custom_combine_folds_every_lane_at_once_and_is_checked() {
        // (count, argmax): the greatest value and how many tasks ran.
        let c = Combine::new(vec![0, 0], |acc, v| {
            acc[0] += v[0];
            acc[1] = acc[1].max(v[1]);
        });
        let s = Spawning::combined(c.clone());
        assert!(s.is_custom() && !s.routes_home());
        assert_eq!(s.check(), Ok(()));
        let mut acc = s.identity();
        s.combine(&mut acc, &[1, 9]).unwrap();
        s.combine(&mut acc, &[1, 4]).unwrap();
        assert_eq!(acc, [2, 9]);
        // Values that make it panic (an overflow here) fail the epoch, not the rank.
        let checked = Spawning::combined(Combine::new(vec![0], |acc, v| {
            acc[0] = acc[0].checked_add(v[0]).expect("no overflow");
        }));
        let mut acc = vec![u64::MAX];
        let e = checked.combine(&mut acc, &[1]).unwrap_err();
        assert!(e.contains("combine panicked: no overflow"), "{e}");
        let missing = Spawning::reduced(vec![ReduceOp::Custom; 2]);
        assert!(missing.check().unwrap_err().contains("no combine"));
        let mixed = Spawning {
            combine: Some(c.clone()),
            ..Spawning::reduced(vec![ReduceOp::Custom, ReduceOp::Sum])
        };
        assert!(mixed.check().unwrap_err().contains("mixed"));
        let short = Spawning {
            combine: Some(c),
            ..Spawning::reduced(vec![ReduceOp::Custom; 3])
        };
        assert!(short.check().unwrap_err().contains("a combine of 2"));
    }
}
