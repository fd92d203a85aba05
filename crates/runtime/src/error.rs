//! The runtime's errors.

use super::*;

/// Why a runtime call failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RuntimeError {
    /// The protocol failed (a dead peer, a malformed message, a failed task, ...).
    #[error(transparent)]
    Core(#[from] CoreError),
    /// The fabric could not be set up.
    #[error(transparent)]
    Fabric(#[from] FabricError),
    /// A bad configuration.
    #[error("bad runtime configuration: {0}")]
    Config(String),
    /// The epoch exceeded `epoch_timeout`; with what this rank waits for, in one sentence
    /// (`Node::stall`; its full protocol state goes to the log at debug level).
    #[error(
        "the epoch did not end within {0:?}: {1} (this rank's state is logged at debug level: TITUS_LOG=titus_runtime=debug)"
    )]
    EpochTimeout(Duration, String),
    /// The barrier between epochs failed.
    #[error("the barrier between epochs failed: {0}")]
    Barrier(String),
}

impl RuntimeError {
    /// The user asked for something this job cannot have (a bad configuration, a
    /// provider not offered on every rank, a rendezvous missing): a program exits 2 on it,
    /// as on any bad input, rather than 1 (a failure while running).
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            Self::Config(_) | Self::Fabric(FabricError::Unsupported(_))
        )
    }
}
