//! The start of an epoch at scale: what every rank must know of the others before its
//! tasks start, carried by collectives over the job's own fabric in O(k + log N) bytes
//! and messages a rank, where k is its overlay degree — never by gathering every rank's
//! record everywhere.
//!
//! What a rank needs, and the collective that brings it:
//! 1. **The job's facts** ([`JobFacts`]): whether any rank refused its tasks (a key
//!    given twice: the lowest such rank is named), whether every rank is empty, how many
//!    ranks predicted a load and their summed load, and the load per cost class (the
//!    string plan's split). One reduce-and-broadcast over the termination tree
//!    ([`TreeReduce`]): 2 · ⌊log₂ N⌋ rounds, at most three messages in and three out a
//!    rank.
//! 2. **Where its string intervals begin** ([`string::Prefix`]): the excesses and
//!    deficits of the ranks before it along the rank string, by an exclusive scan
//!    ([`ExclusiveScan`], recursive doubling): ⌈log₂ N⌉ rounds, one message in and one
//!    out a round.
//! 3. **Whom a giver sends to** ([`string::ReceiverSearch`]): a binary search over the
//!    deficit intervals the ranks publish in their own segments, by one-sided reads.
//! 4. **Its diffusion neighbours' loads**: one read of each neighbour's published load,
//!    k reads.
//!
//! A repartition plan (`crate::repartition`) is a start of its own kind: the facts, the
//! front and one more scan, the loads before each rank, give every rank its place in
//! the string and so its plan.
//!
//! Every part is sans-IO, as the steal protocol is: messages come in through
//! `handle_message` with the receiver's epoch checked, records through `handle_record`,
//! and what to send or read leaves through `poll_send` and `poll_read`. The runtime and
//! the simulator drive the same parts; neither computes a plan of its own.
//!
//! The messages' format is [`wire`]; every field another rank sent is checked, and a
//! message that fails names its sender and the field ([`StartError`]).

pub mod block;
mod collective;
mod drive;
mod facts;
pub mod front;
pub(crate) mod part;
mod protocol;
mod search;
pub mod string;
pub mod wire;

#[cfg(test)]
mod front_tests;
#[cfg(test)]
mod protocol_tests;
#[cfg(test)]
mod tests;

pub use collective::{
    Combine, ExclusiveScan, Outgoing, Traffic, TreeReduce, Wire, scan_rounds, tree_depth,
};
pub use drive::{OwnPrediction, own_costs};
pub use facts::JobFacts;
pub use protocol::{
    Action, EpochStart, LOAD_RECORD_BYTES, LoadRecord, LoadSum, Record, START_PHASES, StartCarry,
    StartFigures, StartInput, StartOutcome, phases_named,
};

use crate::Rank;

/// Why a start message was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StartError {
    /// The bytes do not decode, or a field is out of its range.
    #[error("rank {from} sent a malformed start message ({field}): {detail}")]
    Malformed {
        /// The sender.
        from: Rank,
        /// The field that is wrong.
        field: &'static str,
        /// Why.
        detail: String,
    },
    /// Peers that did not answer within the start's deadline: dead, frozen, or slow.
    #[error("the epoch start ({phase}) waited {waited:?} for rank{} {}", if peers.len() == 1 { "" } else { "s" }, peers.iter().map(|r| r.to_string()).collect::<Vec<_>>().join(", "))]
    Silent {
        /// Whom it waits for.
        peers: Vec<Rank>,
        /// Where it is.
        phase: &'static str,
        /// How long it waited.
        waited: std::time::Duration,
    },
    /// A well-formed message that the protocol does not allow here: a rank that is not a
    /// tree neighbour or the scan's partner of that round, or a part sent twice.
    #[error("rank {from} sent a start message ({step}) out of turn: {detail}")]
    Unexpected {
        /// The sender.
        from: Rank,
        /// The message's step.
        step: &'static str,
        /// Why it is out of turn.
        detail: String,
    },
}

impl StartError {
    /// The rank that sent it.
    pub fn sender(&self) -> Rank {
        match self {
            Self::Malformed { from, .. } | Self::Unexpected { from, .. } => *from,
            Self::Silent { peers, .. } => peers.first().copied().unwrap_or(0),
        }
    }
}

impl From<StartError> for crate::CoreError {
    fn from(e: StartError) -> Self {
        match e {
            StartError::Silent { .. } => crate::CoreError::Remote {
                op: "epoch start",
                peer: e.sender(),
                detail: e.to_string(),
            },
            _ => crate::CoreError::Malformed {
                from: e.sender(),
                what: e.to_string(),
            },
        }
    }
}

/// The ranks a rank's start collectives talk to: 2^i before and after it along the
/// string (the scans' partners; the binomial tree's parent and children are among them).
/// 2 · ⌈log₂ N⌉ at most. The searches' reads go beyond them, to the ranks their data
/// leads to: those connect on first contact.
pub fn partners(rank: Rank, size: u32) -> impl Iterator<Item = Rank> {
    (0..scan_rounds(size)).flat_map(move |i| {
        let d = 1u64 << i;
        let r = u64::from(rank);
        [
            r.checked_sub(d),
            Some(r + d).filter(|&x| x < u64::from(size)),
        ]
        .into_iter()
        .flatten()
        .map(|x| x as Rank)
    })
}
