//! Why a configuration every rank must share is impossible ([`crate::CoreError::Config`]).
//! Each variant names the values at fault; the messages are the ones users read.

use crate::Rank;

/// A configuration, or a driver's input to planning, that cannot be run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A rank number outside the job.
    #[error("rank {rank} outside a job of {size}")]
    RankOutsideJob {
        /// The rank.
        rank: Rank,
        /// The job's ranks.
        size: u32,
    },
    /// `max_payload` or `max_result` past what a task slot or a result may hold.
    #[error("{what} {bytes} is over the {max} bytes (64 MiB) a task slot or result may hold")]
    PayloadMax {
        /// Which limit: `max_payload` or `max_result`.
        what: &'static str,
        /// Its value.
        bytes: u32,
        /// The most a slot or result may hold (`layout::PAYLOAD_MAX`).
        max: u32,
    },
    /// `shared_capacity` outside 1..=65535.
    #[error("shared_capacity {0} outside 1..=65535")]
    SharedCapacity(u32),
    /// `chunk_bytes` cannot hold one result of `max_result` bytes.
    #[error(
        "chunk_bytes {chunk_bytes} cannot hold one {max_result}-byte result ({floor} bytes with headers)"
    )]
    ChunkTooSmall {
        /// The chunk size.
        chunk_bytes: u64,
        /// The largest result.
        max_result: u32,
        /// The least chunk that holds it with its headers.
        floor: u64,
    },
    /// `inbox_bytes` below one chunk, or past 2^30.
    #[error(
        "inbox_bytes {inbox_bytes} must hold a chunk ({chunk_bytes} bytes) and stay below 2^30"
    )]
    InboxBytes {
        /// The inbox size.
        inbox_bytes: u64,
        /// The chunk size.
        chunk_bytes: u64,
    },
    /// No outbox slot.
    #[error("outbox_slots must be at least 1")]
    NoOutboxSlots,
    /// A spawning job's reduction has no lane or too many, or it bounds its queue at 0.
    #[error(
        "spawning: {lanes} reduction lanes (at most {max}; none: results travel home) and a queue bound of {queued_max} tasks (at least 1)"
    )]
    Spawning {
        /// Its lanes.
        lanes: usize,
        /// The most lanes.
        max: usize,
        /// Its bound on queued tasks.
        queued_max: u64,
    },
    /// A spawning job's reduction cannot be used ([`crate::spawn::Spawning::check`]).
    #[error("spawning: {0}")]
    Reduction(String),
    /// More resource types than a type mask holds.
    #[error("{types} resource types; at most {max}")]
    ResourceTypes {
        /// Types given.
        types: usize,
        /// The most.
        max: usize,
    },
    /// A resource type's kinds not in ascending order, or repeated.
    #[error(
        "resource type {rtype} lists kinds {kinds:?}: give each type's kinds in ascending order, without repeats"
    )]
    ResourceKinds {
        /// The type.
        rtype: usize,
        /// Its kinds as given.
        kinds: Vec<u16>,
    },
    /// Work sharing under a protocol other than `request`.
    #[error("work sharing needs the request protocol")]
    SharingNeedsRequest,
    /// A prediction whose lengths do not match the tasks'.
    #[error("{costs} predicted costs and {costly} costly flags for {tasks} tasks")]
    PredictionLength {
        /// Predicted costs.
        costs: usize,
        /// Costly flags.
        costly: usize,
        /// Tasks.
        tasks: usize,
    },
    /// The overlay has no route between two ranks.
    #[error("no route from rank {from} to rank {to}")]
    NoRoute {
        /// From.
        from: Rank,
        /// To.
        to: Rank,
    },
    /// A work-sharing group size outside the job.
    #[error("group size {size}: expected 1..={ranks} (the job's ranks)")]
    GroupSize {
        /// The size given.
        size: u32,
        /// The job's ranks (at least 1).
        ranks: u32,
    },
    /// Load estimates that do not cover the job's ranks.
    #[error("{loads} load estimates for {ranks} ranks")]
    LoadEstimates {
        /// Estimates given.
        loads: usize,
        /// The job's ranks.
        ranks: u32,
    },
    /// A repartition plan asked for before any epoch measured costs.
    #[error("a repartition plan needs the measured costs of one epoch first")]
    RepartitionWithoutCosts,
    /// A rank refused its part of the repartition plan.
    #[error("rank {0} could not take part in the repartition plan")]
    RepartitionRefused(Rank),
    /// A rank's place in the rank string that no plan could have given.
    #[error("a place in the string that cannot be: {0}")]
    ImpossiblePosition(String),
    /// A rank outside the string of loads it plans over.
    #[error("rank {rank} outside a string of {loads} loads")]
    RankOutsideString {
        /// The rank.
        rank: Rank,
        /// The loads.
        loads: usize,
    },
    /// A work-sharing group without members.
    #[error("sharing group {0} is empty")]
    EmptyGroup(usize),
    /// A work-sharing group naming a rank outside the job.
    #[error("sharing group {group} names rank {rank}, outside a job of {ranks}")]
    GroupRankOutside {
        /// The group.
        group: usize,
        /// The rank it names.
        rank: Rank,
        /// The job's ranks.
        ranks: u32,
    },
    /// A rank in two work-sharing groups.
    #[error("rank {rank} is in sharing groups {first} and {second}")]
    RankInTwoGroups {
        /// The rank.
        rank: Rank,
        /// The first group naming it.
        first: u32,
        /// The second.
        second: usize,
    },
    /// A rank in no work-sharing group.
    #[error("rank {0} is in no sharing group")]
    RankInNoGroup(Rank),
    /// Work-sharing groups that cover another number of ranks than the job's.
    #[error("sharing groups cover {covered} ranks in a job of {ranks}")]
    GroupsCover {
        /// Ranks the groups cover.
        covered: u32,
        /// The job's ranks.
        ranks: u32,
    },
    /// Work sharing past the ranks it supports.
    #[error("work sharing supports at most {0} ranks")]
    SharingRanks(u32),
}
