//! What a rank counts during an epoch. Every part of a node adds to one [`Stats`] through
//! its context (`Ctx::stats`); the node resets it when an epoch starts.

use crate::Rank;

/// Per-epoch figures of one rank.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stats {
    /// Tasks this rank owns.
    pub tasks_owned: u64,
    /// Tasks this rank ran (its own and others').
    pub tasks_run: u64,
    /// Of those, tasks owned by other ranks (a spawned task's owner is the rank that
    /// spawned it).
    pub tasks_run_for_others: u64,
    /// Tasks spawned here by tasks running here (`crate::spawn`).
    pub tasks_spawned: u64,
    /// Tasks this rank took from victims.
    pub tasks_stolen: u64,
    /// Steal attempts.
    pub steal_attempts: u64,
    /// Advertisements this rank sent (it had work again for thieves that waited).
    pub adverts_sent: u64,
    /// Advertisements this rank received from its victims.
    pub adverts_received: u64,
    /// Attempts that brought tasks.
    pub steals_ok: u64,
    /// Attempts that found the victim empty.
    pub steals_empty: u64,
    /// Attempts that found the victim locked (`lock`) or busy.
    pub steals_locked: u64,
    /// Time from the first operation of an attempt to its outcome, per attempt (ns;
    /// with [`crate::Config::steal_log`]).
    pub steal_latency_ns: Vec<u64>,
    /// Their sum (ns), kept either way.
    pub steal_ns: u64,
    /// Task bytes moved by steals.
    pub bytes_stolen: u64,
    /// Result chunks sent.
    pub chunks_sent: u64,
    /// Result chunks received.
    pub chunks_received: u64,
    /// Result bytes sent in chunks.
    pub bytes_results: u64,
    /// Result records forwarded for other owners.
    pub records_forwarded: u64,
    /// Hops taken by the results of this rank's tasks (sum and histogram).
    pub result_hops: Vec<u64>,
    /// Inbox reservations that overflowed (backpressure events).
    pub inbox_overflows: u64,
    /// This rank's predicted load at the start of the epoch, ns (0: no prediction: it took
    /// no part in diffusion).
    pub predicted_ns: u64,
    /// Tasks this rank pushed to diffusion neighbours at the start of the epoch.
    pub tasks_pushed: u64,
    /// Their predicted cost, ns.
    pub pushed_ns: u64,
    /// When the write of this rank's last chunk of pushed tasks completed, from the start
    /// of the epoch on this rank (ns; 0: none).
    pub pushed_out_at_ns: u64,
    /// Of the tasks pushed, those dealt along the costly string of a split string plan
    /// ([`crate::StringLoads::with_split`]).
    pub tasks_pushed_costly: u64,
    /// Tasks neighbours pushed to this rank.
    pub tasks_pushed_in: u64,
    /// When the first of them arrived, from the start of the epoch on this rank (ns; 0:
    /// none came).
    pub pushed_in_at_ns: u64,
    /// Pushed tasks this rank passed on towards the rank they go to (the string plan).
    pub tasks_forwarded: u64,
    /// Bytes of pushed-task chunks sent.
    pub bytes_pushed: u64,
    /// `claim`: published generations taken back because cheaper tasks joined the queue
    /// after them (the queue in predicted order: the costly published ones would have run
    /// last).
    pub shares_retracted: u64,
    /// When this rank entered the termination barrier for the last time: its subtree was
    /// complete and it sent UP (under waves, its last report), or, at the root, the epoch
    /// ended; from the start of the epoch on this rank (ns; `None`: it never did).
    pub barrier_at_ns: Option<u64>,
    /// Operations that failed because their peer's process was gone and left the epoch
    /// standing: the end was known here, or a peer that may have had DONE (`DONE_GRACE`).
    pub gone_tolerated: u64,
    /// Remote operations issued.
    pub ops: u64,
    /// Completed operations by kind ([`OP_KINDS`]): how many, and their time from issue
    /// to completion — what each kind costs this rank's protocols on this fabric, the same
    /// figure in the runtime and the simulator.
    pub op_latency: [OpLatency; OP_KINDS.len()],
    /// Grains the workers took from the queue ([`crate::Node::take_grain`]; each one
    /// lock of the rank's state in the runtime): tasks run / grains is the mean grain.
    pub grains: u64,
    /// Successful steals, in order (at most [`STEAL_LOG_MAX`]; with
    /// [`crate::Config::steal_log`]): the timeline of who took work from whom; with
    /// [`crate::Config::timeline`], the failed ones too.
    pub steal_log: Vec<StealEvent>,
    /// With [`crate::Config::timeline`]: the chunks this rank sent and received, results
    /// and pushed tasks, in order (at most [`TRANSFER_LOG_MAX`]).
    pub transfer_log: Vec<TransferEvent>,
}

/// The kinds of [`Stats::op_latency`], in its order: reads, writes that carry data,
/// signals (writes of nothing), compare-and-swaps, fetch-adds (all on other ranks), and
/// any operation on this rank's own memory.
pub const OP_KINDS: [&str; 6] = ["read", "write", "signal", "cas", "fetch-add", "own"];

/// Completed operations of one kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpLatency {
    /// How many completed.
    pub count: u64,
    /// Their issue-to-completion times, summed (ns).
    pub ns: u64,
}

impl OpLatency {
    /// The mean issue-to-completion time (ns; 0 when none completed).
    pub fn mean_ns(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.ns as f64 / self.count as f64
        }
    }
}

/// The index of `op`'s kind in [`OP_KINDS`], issued by `rank`.
pub(crate) fn op_kind(op: &crate::Op, rank: Rank) -> usize {
    use crate::Op;
    let (peer, kind) = match op {
        Op::Read { peer, .. } => (*peer, 0),
        Op::Write { peer, pieces, .. } if pieces.is_empty() => (*peer, 2),
        Op::Write { peer, .. } => (*peer, 1),
        Op::Cas { peer, .. } => (*peer, 3),
        Op::FetchAdd { peer, .. } => (*peer, 4),
    };
    if peer == rank { 5 } else { kind }
}

/// The most steals a rank logs per epoch.
pub const STEAL_LOG_MAX: usize = 1 << 20;

/// One successful steal of this rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StealEvent {
    /// When it ended, from the start of the epoch on this rank (ns).
    pub at_ns: u64,
    /// The rank the tasks came from.
    pub victim: Rank,
    /// How many tasks.
    pub tasks: u32,
    /// From the attempt's first operation to its outcome (ns).
    pub latency_ns: u64,
    /// What it found.
    pub outcome: StealOutcome,
}

/// Most chunks [`Stats::transfer_log`] keeps an epoch.
pub const TRANSFER_LOG_MAX: usize = 1 << 16;

/// A chunk that left or reached this rank ([`Stats::transfer_log`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransferEvent {
    /// When, from the start of the epoch on this rank (ns).
    pub at_ns: u64,
    /// The next hop it went to, or the rank it came from.
    pub peer: Rank,
    /// Its bytes.
    pub bytes: u64,
    /// What it carried, and which way.
    pub kind: Transfer,
}

/// What a chunk carried, and which way ([`TransferEvent`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transfer {
    /// Results, sent towards their homes.
    ResultsSent,
    /// Results, received (home or to pass on).
    ResultsReceived,
    /// Tasks pushed (diffusion, the string plan), sent.
    TasksSent,
    /// Tasks pushed here or through here, received.
    TasksReceived,
}

impl Transfer {
    /// Every kind, in the order of its code in a trace ([`Transfer::code`]).
    pub const ALL: [Self; 4] = [
        Self::ResultsSent,
        Self::ResultsReceived,
        Self::TasksSent,
        Self::TasksReceived,
    ];

    /// Its number in a trace: its place in [`Transfer::ALL`].
    pub fn code(self) -> u64 {
        self as u64
    }

    /// Its name in a trace.
    pub fn name(self) -> &'static str {
        match self {
            Self::ResultsSent => "results sent",
            Self::ResultsReceived => "results received",
            Self::TasksSent => "tasks pushed",
            Self::TasksReceived => "tasks pushed in",
        }
    }
}

impl Stats {
    /// The successful steals of [`Stats::steal_log`] (a timeline keeps the failed ones
    /// too), in order.
    pub fn steals_got(&self) -> impl Iterator<Item = &StealEvent> {
        self.steal_log
            .iter()
            .filter(|e| e.outcome == StealOutcome::Got)
    }

    /// Logs a chunk (with [`crate::Config::timeline`]; at most [`TRANSFER_LOG_MAX`]).
    pub(crate) fn log_transfer(&mut self, on: bool, event: TransferEvent) {
        if on && self.transfer_log.len() < TRANSFER_LOG_MAX {
            self.transfer_log.push(event);
        }
    }
}

/// What a steal found ([`StealEvent`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StealOutcome {
    /// Tasks.
    #[default]
    Got,
    /// Nothing to take.
    Empty,
    /// The victim's set locked by another thief.
    Locked,
}

impl StealOutcome {
    /// Every outcome, in the order of its code in a trace ([`StealOutcome::code`]).
    pub const ALL: [Self; 3] = [Self::Got, Self::Empty, Self::Locked];

    /// Its number in a trace: its place in [`StealOutcome::ALL`].
    pub fn code(self) -> u64 {
        self as u64
    }

    /// Its name in a trace.
    pub fn name(self) -> &'static str {
        match self {
            Self::Got => "got",
            Self::Empty => "empty",
            Self::Locked => "locked",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_codes_are_places_in_all() {
        // The codes are in trace files: each kind's code is its place, and stays so.
        for (i, t) in Transfer::ALL.iter().enumerate() {
            assert_eq!(t.code(), i as u64, "{t:?}");
        }
        for (i, o) in StealOutcome::ALL.iter().enumerate() {
            assert_eq!(o.code(), i as u64, "{o:?}");
        }
        assert_eq!(Transfer::TasksReceived.name(), "tasks pushed in");
    }
}
