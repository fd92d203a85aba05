//! Why an epoch fails, and the small codes that say so over the wire.
//!
//! A rank that fails floods ABORT(origin, code) (`layout::signal`); every other rank ends
//! its epoch with [`CoreError::Aborted`] carrying that code. The codes are therefore part
//! of the wire format: [`error_code`] names them once, and drivers ask
//! [`CoreError::is_task_failure`] instead of matching numbers.

use crate::Rank;

/// The codes ABORT signals carry, one per [`CoreError`] variant. On the wire: never
/// renumber them (ranks running different builds must agree).
pub mod error_code {
    /// [`super::CoreError::Malformed`].
    pub const MALFORMED: u32 = 1;
    /// [`super::CoreError::Duplicate`].
    pub const DUPLICATE: u32 = 2;
    /// [`super::CoreError::UnknownTask`].
    pub const UNKNOWN_TASK: u32 = 3;
    /// [`super::CoreError::ResultTooLarge`].
    pub const RESULT_TOO_LARGE: u32 = 4;
    /// [`super::CoreError::PayloadTooLarge`].
    pub const PAYLOAD_TOO_LARGE: u32 = 5;
    /// [`super::CoreError::Remote`].
    pub const REMOTE: u32 = 6;
    /// [`super::CoreError::TaskFailed`].
    pub const TASK_FAILED: u32 = 7;
    // 8 is not used: `CoreError::Aborted` passes on the code of the rank that failed
    // first.
    /// [`super::CoreError::Config`].
    pub const CONFIG: u32 = 9;
    /// [`super::CoreError::Usage`].
    pub const USAGE: u32 = 10;
    /// [`super::CoreError::DuplicateKey`].
    pub const DUPLICATE_KEY: u32 = 11;
    /// [`super::CoreError::SpawnBound`].
    pub const SPAWN_BOUND: u32 = 12;
    /// [`super::CoreError::SpawnedResult`].
    pub const SPAWNED_RESULT: u32 = 13;
    /// [`super::CoreError::Interrupted`].
    pub const INTERRUPTED: u32 = 14;

    /// What `code` says, in words (for a rank that learned only the code).
    pub fn meaning(code: u32) -> &'static str {
        match code {
            MALFORMED => "it received a malformed message",
            DUPLICATE => "it received a result twice",
            UNKNOWN_TASK => "it received a result for a task it does not own",
            RESULT_TOO_LARGE => "a task's result was over the limit",
            PAYLOAD_TOO_LARGE => "a task's payload was over the limit",
            REMOTE => "a peer of it is gone or silent",
            TASK_FAILED => "a task failed",
            CONFIG => "a bad configuration",
            USAGE => "a call out of turn",
            DUPLICATE_KEY => "a task key given twice",
            SPAWN_BOUND => "its spawned tasks passed the job's queue bound (Spawning::queued_max)",
            SPAWNED_RESULT => "a spawned task's result did not fit the reduction",
            INTERRUPTED => "it was interrupted (a signal, Ctrl-C)",
            _ => "an unknown code",
        }
    }

    /// Whether `code` says that a task itself failed (its function failed, or its payload
    /// or result exceeded the limits), as opposed to the protocol or the fabric.
    pub fn is_task_failure(code: u32) -> bool {
        matches!(
            code,
            RESULT_TOO_LARGE | PAYLOAD_TOO_LARGE | TASK_FAILED | SPAWN_BOUND | SPAWNED_RESULT
        )
    }
}

/// Why an epoch failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CoreError {
    /// Another rank wrote something that does not decode.
    #[error("rank {from} sent malformed data: {what}")]
    Malformed {
        /// The sender.
        from: Rank,
        /// What was wrong.
        what: String,
    },
    /// A result arrived twice: a protocol bug, never silently ignored.
    #[error("the result of task {index} arrived twice (second copy from rank {from})")]
    Duplicate {
        /// Task index.
        index: u32,
        /// Sender of the second copy.
        from: Rank,
    },
    /// A result for a task this rank does not own.
    #[error("rank {from} sent a result for task {index}, but this rank owns {count} tasks")]
    UnknownTask {
        /// Task index.
        index: u32,
        /// Sender.
        from: Rank,
        /// Tasks owned here.
        count: u32,
    },
    /// A result larger than the configured limit.
    #[error("task {index} produced {len} bytes, over the {limit}-byte result limit")]
    ResultTooLarge {
        /// Task index.
        index: u32,
        /// Result size.
        len: usize,
        /// Limit.
        limit: u32,
    },
    /// A task whose payload exceeds the slot.
    #[error("task {index} has a {len}-byte payload, over the {limit}-byte limit")]
    PayloadTooLarge {
        /// Task index.
        index: u32,
        /// Payload size.
        len: usize,
        /// Limit.
        limit: u32,
    },
    /// A remote operation failed.
    #[error("{op} on rank {peer} failed: {detail}")]
    Remote {
        /// What the node was doing.
        op: &'static str,
        /// Target rank.
        peer: Rank,
        /// The transport's words.
        detail: String,
    },
    /// A task failed where it ran.
    #[error("task {index} of rank {owner} failed on rank {ran_on}: {detail}")]
    TaskFailed {
        /// Owner.
        owner: Rank,
        /// Index.
        index: u32,
        /// Where it ran.
        ran_on: Rank,
        /// The panic message or error.
        detail: String,
    },
    /// Another rank failed and told this one.
    #[error("rank {rank} aborted the epoch ({}, code {code})", error_code::meaning(*code))]
    Aborted {
        /// The rank that failed first.
        rank: Rank,
        /// Its error code.
        code: u32,
    },
    /// A configuration every rank must share is impossible.
    #[error("bad configuration: {0}")]
    Config(#[from] crate::ConfigError),
    /// An API call out of turn.
    #[error("{0}")]
    Usage(&'static str),
    /// Two tasks of one epoch carry the same key (task identities must be unique).
    #[error("task key {key} appears twice in this epoch's tasks (tasks {first} and {second})")]
    DuplicateKey {
        /// The key.
        key: u64,
        /// The first task with it.
        first: u32,
        /// The second.
        second: u32,
    },
    /// Spawned tasks filled this rank's queue past the job's bound (a runaway tree).
    #[error(
        "rank {rank} holds {queued} queued tasks after a spawn, over the job's bound of {bound} (Spawning::queued_max): a runaway tree"
    )]
    SpawnBound {
        /// The rank.
        rank: Rank,
        /// Its queued tasks with the spawn.
        queued: u64,
        /// The bound.
        bound: u64,
    },
    /// The driver's user stopped the epoch on this rank (a signal: Ctrl-C): every rank
    /// stops.
    #[error("the epoch was interrupted on rank {rank}: {why}")]
    Interrupted {
        /// The rank.
        rank: Rank,
        /// By what.
        why: String,
    },
    /// A spawned task's result is not one u64 per lane of the job's reduction.
    #[error(
        "a spawned task of kind {kind} returned {len} bytes on rank {ran_on}; the job's reduction takes {expected} (8 per lane)"
    )]
    SpawnedResult {
        /// Its kind.
        kind: u16,
        /// Its result's length.
        len: usize,
        /// What the reduction takes.
        expected: usize,
        /// Where it ran.
        ran_on: Rank,
    },
}

impl CoreError {
    /// The code an ABORT signal carries for this error ([`error_code`]).
    pub fn code(&self) -> u32 {
        use error_code as c;
        match self {
            Self::Malformed { .. } => c::MALFORMED,
            Self::Duplicate { .. } => c::DUPLICATE,
            Self::UnknownTask { .. } => c::UNKNOWN_TASK,
            Self::ResultTooLarge { .. } => c::RESULT_TOO_LARGE,
            Self::PayloadTooLarge { .. } => c::PAYLOAD_TOO_LARGE,
            Self::Remote { .. } => c::REMOTE,
            Self::TaskFailed { .. } => c::TASK_FAILED,
            Self::Aborted { code, .. } => *code,
            Self::Config(_) => c::CONFIG,
            Self::Usage(_) => c::USAGE,
            Self::DuplicateKey { .. } => c::DUPLICATE_KEY,
            Self::SpawnBound { .. } => c::SPAWN_BOUND,
            Self::SpawnedResult { .. } => c::SPAWNED_RESULT,
            Self::Interrupted { .. } => c::INTERRUPTED,
        }
    }

    /// Whether a task failed (here, or on the rank whose ABORT ended this epoch): its
    /// function failed, or its payload or result exceeded the limits — the application's
    /// fault rather than the protocol's or the fabric's.
    pub fn is_task_failure(&self) -> bool {
        error_code::is_task_failure(self.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_the_wire_values_and_classify_task_failures() {
        let task = CoreError::TaskFailed {
            owner: 0,
            index: 1,
            ran_on: 2,
            detail: "boom".into(),
        };
        assert_eq!(task.code(), 7);
        assert!(task.is_task_failure());
        let big = CoreError::ResultTooLarge {
            index: 0,
            len: 9,
            limit: 8,
        };
        assert_eq!(big.code(), 4);
        assert!(big.is_task_failure());
        let remote = CoreError::Remote {
            op: "read",
            peer: 1,
            detail: "gone".into(),
        };
        assert_eq!(remote.code(), 6);
        assert!(!remote.is_task_failure());
        // An abort is what the first failure was.
        assert!(CoreError::Aborted { rank: 3, code: 5 }.is_task_failure());
        assert!(!CoreError::Aborted { rank: 3, code: 1 }.is_task_failure());
        assert_eq!(CoreError::Usage("x").code(), 10);
        assert_eq!(CoreError::from(crate::ConfigError::NoOutboxSlots).code(), 9);
    }
}
