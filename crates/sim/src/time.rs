//! Virtual time's range. Times are u64 nanoseconds; every event is scheduled at the
//! present plus a few delays. A job whose single delays all stay under [`DELAY_MAX_NS`]
//! and a run that stops at [`HORIZON_NS`] can therefore never leave u64: the horizon
//! plus a thousand such delays is about 2^63. So the job is checked once, before it runs
//! ([`check`]), instead of every addition.

use crate::Job;
use titus_core::resources::Variants;

/// The longest single delay a job may make the simulator schedule, ns (about 52 days):
/// a task at its slowest, an operation, a stall.
pub const DELAY_MAX_NS: u64 = 1 << 52;

/// The virtual time at which a run stops with an error, ns (about 146 years).
pub const HORIZON_NS: u64 = 1 << 62;

/// A duration in seconds, for errors.
fn seconds(ns: f64) -> String {
    format!("{:.3e} s", ns / 1e9)
}

/// [`DELAY_MAX_NS`] in seconds, for errors.
fn delay_max() -> String {
    seconds(DELAY_MAX_NS as f64)
}

/// What of a job could schedule a delay past [`DELAY_MAX_NS`] ([`check`]): the job is
/// refused before it runs, since past it virtual time could leave u64.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TimeError {
    /// The costliest task, at its slowest, lasts too long.
    #[error(
        "the costliest task ({}) slowed {factor:.3e} times (--slow, resource speeds, the \
         node model's sharing) would last {} of virtual time; at most {} ({DELAY_MAX_NS} ns)",
        seconds(*.costliest_ns as f64),
        seconds(*.longest_ns),
        delay_max()
    )]
    TaskTooLong {
        /// The costliest task's cost, ns.
        costliest_ns: u64,
        /// The most a task can be slowed.
        factor: f64,
        /// The task at its slowest, ns (NaN where it cannot be known).
        longest_ns: f64,
    },
    /// A rank's stall that ends too late.
    #[error(
        "the stall of rank {rank} ends at {}; at most {}",
        seconds(*.from_ns as f64 + *.len_ns as f64),
        delay_max()
    )]
    StallTooLong {
        /// The stalled rank.
        rank: u32,
        /// When the stall starts, ns.
        from_ns: u64,
        /// How long it lasts, ns.
        len_ns: u64,
    },
    /// A start skew too long.
    #[error("a start skew of {}; at most {}", seconds(*.0 as f64), delay_max())]
    StartSkew(
        /// The skew, ns.
        u64,
    ),
    /// An operation of a fabric model that takes too long, or a negative or NaN time.
    #[error("fabric model '{model}': its {op} takes {}; at most {}", seconds(*.ns), delay_max())]
    FabricOp {
        /// The model's name.
        model: String,
        /// The operation.
        op: &'static str,
        /// Its time, ns.
        ns: f64,
    },
}

/// The most any one task of `job` can be slowed: its rank's `--slow` factor on a CPU
/// worker, or its slowest resource; times the node model's sharing of the cores at its
/// fullest (every worker of every rank of a node busy, and their progress threads).
fn slowest_factor(job: &Job<'_>) -> f64 {
    let slow = job
        .faults
        .slow
        .iter()
        .map(|&(_, f)| f)
        .fold(1.0_f64, f64::max);
    let resources = job
        .resources
        .per_rank
        .iter()
        .flatten()
        // Each resource's slowest variant.
        .map(|spec| match &spec.variants {
            Variants::All(s) => *s,
            Variants::Kinds(k) => k.iter().map(|(_, s)| *s).fold(f64::INFINITY, f64::min),
        })
        .map(|s| 1.0 / s)
        .fold(1.0_f64, f64::max);
    let sharing = job.model.cpu.as_ref().map_or(1.0, |cpu| {
        let ranks = match &job.model.node {
            Some((k, _)) => *k,
            None => cpu.ranks_per_node(job.workers),
        };
        cpu.factor(ranks.saturating_mul(job.workers as u32), ranks)
            .max(1.0)
    });
    slow.max(resources) * sharing
}

/// Refuses a job that could schedule a delay past [`DELAY_MAX_NS`]: its costliest task at
/// the slowest its faults, resources and node model make it, a stall, the start's skew,
/// or an operation of its fabric model. The error names what is too long.
pub fn check(job: &Job<'_>) -> Result<(), TimeError> {
    let limit = DELAY_MAX_NS as f64;
    let costliest = job
        .tasks
        .iter()
        .chain(job.later_epochs.iter().flatten())
        .flatten()
        .map(|t| t.cost_ns)
        .max()
        .unwrap_or(0);
    let factor = slowest_factor(job);
    let longest = costliest as f64 * factor;
    // (NaN cannot happen: costs are integers and factors finite; refused all the same.)
    if longest.is_nan() || longest > limit {
        return Err(TimeError::TaskTooLong {
            costliest_ns: costliest,
            factor,
            longest_ns: longest,
        });
    }
    if let Some((rank, from, len)) = job.faults.stall
        && from.saturating_add(len) > DELAY_MAX_NS
    {
        return Err(TimeError::StallTooLong {
            rank,
            from_ns: from,
            len_ns: len,
        });
    }
    if job.start_skew_ns > DELAY_MAX_NS {
        return Err(TimeError::StartSkew(job.start_skew_ns));
    }
    let models = std::iter::once(&job.model).chain(job.model.node.as_ref().map(|(_, m)| &**m));
    for m in models {
        let ops = [
            ("latency", m.latency_ns * (1.0 + job.faults.jitter.max(0.0))),
            ("signal", m.signal_ns),
            ("atomic", m.atomic_ns),
            ("event", m.event_ns),
            ("first contact", m.connect_ns),
            // The largest transfer: an inbox or a task slot area of at most 2^31 bytes.
            (
                "2 GiB transfer",
                2.0 * (1u64 << 30) as f64 / m.bandwidth * 1e9 * job.task_bytes_scale.max(1.0),
            ),
        ];
        if let Some((what, ns)) = ops.iter().find(|(_, ns)| !(0.0..=limit).contains(ns)) {
            return Err(TimeError::FabricOp {
                model: m.name.clone(),
                op: what,
                ns: *ns,
            });
        }
    }
    Ok(())
}
