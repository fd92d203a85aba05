//! Why every rank's repartition plan between two epochs ([`crate::Between::repartition_plan`])
//! could not be made: the driver's keys, the start's run over the simulated fabric, or a
//! rank's start or plan.

use crate::Violation;
use titus_core::CoreError;
use titus_core::repartition::StringPosition;

/// A repartition plan between epochs that failed, naming the rank where one is at fault.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RepartitionError {
    /// Key lists for another number of ranks than the job's.
    #[error("{lists} key lists for a repartition plan of {ranks} ranks")]
    KeyLists {
        /// Lists given.
        lists: usize,
        /// The job's ranks.
        ranks: usize,
    },
    /// The repartition start's run broke an invariant or did not end.
    #[error("{0}")]
    Run(Violation),
    /// A rank's repartition start failed.
    #[error("rank {rank}: {error}")]
    Start {
        /// The rank.
        rank: usize,
        /// Why.
        error: CoreError,
    },
    /// A rank's start placed it elsewhere in the string than the whole job's plan, which
    /// [`crate::Job::check_start`] holds it to. (The places are boxed: they would make
    /// every result of a plan large.)
    #[error(
        "rank {rank}: the repartition start placed it at {start:?}, the whole job's plan at {whole:?}"
    )]
    Position {
        /// The rank.
        rank: usize,
        /// Where its start placed it.
        start: Box<Option<StringPosition>>,
        /// Where the whole job's plan places it.
        whole: Box<Option<StringPosition>>,
    },
    /// A rank could not plan from its start's outcome.
    #[error("rank {rank}: {error}")]
    Plan {
        /// The rank.
        rank: usize,
        /// Why.
        error: CoreError,
    },
}
