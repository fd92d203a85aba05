//! What an epoch gives back: results, their costs, and the epoch's figures.

use super::*;

/// The connections a rank made and their price, since it started
/// ([`Runtime::connections`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Connections {
    /// Ranks this rank operated on, ascending. Operations are one-sided: which ranks
    /// operated on this one only they know (a job's report joins both directions).
    pub contacted: Vec<u32>,
    /// Ranks connected when the fabric opened, ascending (none where it connects on
    /// first contact).
    pub opened: Vec<u32>,
    /// Connection time: opening's where the fabric connects at open; where it connects
    /// lazily, every first contact's (submission to completion of the first operation
    /// to each rank).
    pub connect: Duration,
    /// Whether peers are connected on first contact.
    pub lazy: bool,
    /// Memory one connection holds on this fabric, bytes ([`Fabric::connection_bytes`]).
    pub bytes_per_connection: u64,
}

/// One task of [`Runtime::run_epoch_keyed`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskIn {
    /// The task's identity across epochs: its measured cost is remembered under this key
    /// and predicts its cost next epoch (diffusion). Unique within an epoch.
    pub key: u64,
    /// Task kind (registered function).
    pub kind: u16,
    /// Input bytes.
    pub payload: Vec<u8>,
    /// Priority: higher runs first, lower is shared first (0: the default).
    pub priority: i16,
    /// Estimated cost, ns (0: unknown): a hint for cost-aware sharing
    /// (`titus_core::Config::cost_aware`; `NewTask::cost_hint_ns`).
    pub cost_hint_ns: u64,
}

/// An epoch's outcome on this rank.
#[derive(Debug, Clone, PartialEq)]
pub struct EpochOutput {
    /// This rank's results, in task order.
    pub results: Vec<Vec<u8>>,
    /// Each task's duration measured where it ran (ns), in task order.
    pub costs_ns: Vec<u64>,
    /// A spawning job's reduction of its spawned tasks' results over every rank, lane
    /// by lane (the same on every rank); empty when the job does not spawn or routes
    /// spawned results home.
    pub reduced: Vec<u64>,
    /// A job that routes spawned results home: the results of the spawned tasks that
    /// descend from this rank's tasks, each once with its key, ordered by key.
    pub spawned: Vec<titus_core::SpawnedResult>,
    /// Figures.
    pub stats: EpochStats,
    /// What the epoch start found (the job's facts, this rank's load after the front, its
    /// neighbours' loads, its part of the string plan) and what the rank brought to it:
    /// what its pushes were planned from.
    pub start_view: titus_core::start::StartOutcome,
}
