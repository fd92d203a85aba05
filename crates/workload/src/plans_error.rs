//! Why every rank's repartition plans cannot be applied to the ownership
//! ([`crate::apply_plans`]): each rank applies the same plans, so a bad one is refused
//! before anything moves rather than leave ranks disagreeing on who owns what.

/// A set of repartition plans that names a move no rank could make.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlansError {
    /// Plans for another number of ranks than the ownership's.
    #[error("{plans} repartition plans for {ranks} ranks")]
    Count {
        /// Plans given.
        plans: usize,
        /// Ranks owning tasks.
        ranks: usize,
    },
    /// A move to the rank itself, outside the job, or (neighbours only) past a string
    /// neighbour.
    #[error("rank {from} planned a move to rank {to}")]
    MoveTo {
        /// The rank whose plan it is.
        from: usize,
        /// Where it would move the task.
        to: u32,
    },
    /// One task moved twice.
    #[error("rank {from} planned to move task {key} twice")]
    Twice {
        /// The rank whose plan it is.
        from: usize,
        /// The task's global number.
        key: u64,
    },
    /// A move of a task the rank does not own.
    #[error("rank {from} planned to move task {key} it does not own")]
    NotOwned {
        /// The rank whose plan it is.
        from: usize,
        /// The task's global number.
        key: u64,
    },
}
