//! Titus's one-sided transport: what ranks may do to each other's memory.
//!
//! # The contract
//!
//! - **Segments.** Each rank registers segments, named and numbered in the same order on
//!   every rank ([`SegmentId`] is the index), and exposes each one to all ranks or to a
//!   chosen peer set ([`Exposure`]). A rank talks only to the peers it declared
//!   ([`FabricConfig::peers`]: connected up front, or on first contact where
//!   [`FabricConfig::lazy`]) and to itself.
//! - **Operations** on (peer, segment, offset), also to self: [`Fabric::read`],
//!   [`Fabric::write`], gathered write (several local pieces to one remote range, one call)
//!   with an optional signal ([`Fabric::write_gather`]: the target learns of the signal
//!   only once the data is in its memory), 64-bit [`Fabric::compare_swap`] and
//!   [`Fabric::fetch_add`] on 8-aligned words. Data moves segment to segment, as in
//!   GASPI: local buffers are registered memory too.
//! - **Completions.** Submission never blocks; [`Fabric::test`] polls one operation,
//!   [`Fabric::wait`] blocks (without spinning) for at most a timeout. Atomics complete with
//!   the word's previous value.
//! - **Errors at the initiator.** An offset or length outside the target segment, an
//!   unaligned atomic, an unknown segment, a peer that did not expose the segment or was not
//!   declared: each is a [`FabricError`] at submission, never undefined behaviour at either
//!   end. A dead or silent peer gives an error within the wait's timeout.
//! - **Progress.** Software providers (libfabric's `tcp;ofi_rxm`, `shm`) execute remote
//!   atomics and RMA on the *target's* CPU, inside its fabric calls. Each process therefore
//!   runs a progress thread ([`ProgressThread`]) that blocks in [`Fabric::progress`]; a target
//!   without one stalls its initiators ([`Capabilities::target_progress`] says when).
//! - **Atomicity.** A word that remote ranks change with fabric atomics is changed by its
//!   owner through fabric atomics to self, unless [`Capabilities::coherent_atomics`] says CPU
//!   atomics on [`Segment`] are coherent with remote ones.
//!
//! Backends: [`mem`] (N ranks as threads of one process: the laptop default and the test
//! double, with seeded delays, reordering and software progress on demand) here; libfabric
//! in `titus-fabric-ofi`, which the runtime opens through [`backend::Opener`]. Every backend
//! passes the one [`conformance`] suite.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod avail;
pub mod backend;
pub mod bootstrap;
pub mod conformance;
pub mod env_var;
pub mod log_targets;
pub mod mem;
pub mod process;
mod progress;
mod segment;
mod sync;
pub mod versioned;

/// What the property tests share.
#[cfg(test)]
pub(crate) mod testing {
    /// `PROPTEST_CASES` cases (64 by default; 1,000,000 by hand), no regression files.
    pub(crate) fn proptest_config() -> proptest::test_runner::Config {
        proptest::test_runner::Config {
            cases: std::env::var("PROPTEST_CASES")
                .ok()
                .and_then(|c| c.parse().ok())
                .unwrap_or(64),
            failure_persistence: None,
            ..proptest::test_runner::Config::default()
        }
    }
}
pub use sync::WakeGate;

pub use progress::ProgressThread;
pub use segment::{Segment, SharedWords};

use std::fmt;
use std::time::Duration;

// Ranks, segments and places in them: the core's vocabulary, one definition for the
// protocol and every transport.
pub use titus_core::{Loc, Rank, SegmentId};

/// A piece of a gathered write: `len` bytes of a local segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    /// Where the bytes are.
    pub local: Loc,
    /// How many.
    pub len: u64,
}

/// Total length of a gathered write's pieces, or the error for a sum that overflows:
/// every backend checks it before anything else of the write.
pub fn gathered_len(remote: Loc, pieces: &[Piece]) -> Result<u64, FabricError> {
    pieces
        .iter()
        .try_fold(0u64, |acc, p| acc.checked_add(p.len))
        .ok_or(FabricError::OutOfBounds {
            segment: "(gathered pieces)".into(),
            offset: remote.offset,
            len: u64::MAX,
            segment_len: 0,
        })
}

/// Rank `rank`'s segment `id` in its list of segments (or whatever a backend keeps per
/// segment), or the error naming how many there are: every backend's lookup.
pub fn segment_in<T>(list: &[T], rank: Rank, id: SegmentId) -> Result<&T, FabricError> {
    list.get(id.0 as usize).ok_or(FabricError::UnknownSegment {
        rank,
        segment: id.0,
        count: list.len(),
    })
}

/// A backend's completed operations not yet collected, and the thread that submitted each:
/// the collection rules of the contract in one place. An operation is collected once —
/// by [`Fabric::test`], [`Fabric::wait`], or the drain of the thread that submitted it.
#[derive(Debug)]
pub struct Completions<S = std::collections::hash_map::RandomState> {
    done: std::collections::HashMap<u64, Result<u64, FabricError>, S>,
    owners: std::collections::HashMap<u64, std::thread::ThreadId, S>,
}

impl<S: std::hash::BuildHasher + Default> Default for Completions<S> {
    fn default() -> Self {
        Self {
            done: std::collections::HashMap::default(),
            owners: std::collections::HashMap::default(),
        }
    }
}

impl<S: std::hash::BuildHasher> Completions<S> {
    /// The calling thread submitted operation `id`.
    pub fn submitted(&mut self, id: u64) {
        self.owners.insert(id, std::thread::current().id());
    }

    /// Operation `id` completed with `result`.
    pub fn complete(&mut self, id: u64, result: Result<u64, FabricError>) {
        self.done.insert(id, result);
    }

    /// Whether operation `id` completed and was not collected.
    pub fn is_done(&self, id: u64) -> bool {
        self.done.contains_key(&id)
    }

    /// Completed, uncollected operations.
    pub fn len(&self) -> usize {
        self.done.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.done.is_empty()
    }

    /// Collects operation `id` if it completed.
    pub fn take(&mut self, id: u64) -> Option<Result<u64, FabricError>> {
        let r = self.done.remove(&id)?;
        self.owners.remove(&id);
        Some(r)
    }

    /// Collects every completed operation the calling thread submitted into `out`
    /// ([`Fabric::drain_completions`]).
    pub fn take_own(&mut self, out: &mut Vec<(OpId, Result<u64, FabricError>)>) {
        let me = std::thread::current().id();
        let mine: Vec<u64> = self
            .done
            .keys()
            .copied()
            .filter(|id| self.owners.get(id) == Some(&me))
            .collect();
        for id in mine {
            if let Some(r) = self.take(id) {
                out.push((OpId(id), r));
            }
        }
    }
}

/// Which ranks may access a segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exposure {
    /// Every rank of the job.
    All,
    /// Only these ranks (and the owner).
    Peers(Vec<Rank>),
}

impl Exposure {
    /// Whether `rank` may access a segment of `owner` exposed this way.
    pub fn allows(&self, owner: Rank, rank: Rank) -> bool {
        rank == owner
            || match self {
                Self::All => true,
                Self::Peers(p) => p.contains(&rank),
            }
    }
}

/// A segment to register.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentSpec {
    /// Name, for errors and logs.
    pub name: String,
    /// Length in bytes (rounded up to a multiple of 8).
    pub len: u64,
    /// Who may access it.
    pub exposure: Exposure,
}

/// What a rank registers and whom it talks to.
#[derive(Debug, Clone)]
pub struct FabricConfig {
    /// Segments, in [`SegmentId`] order.
    pub segments: Vec<SegmentSpec>,
    /// Peers this rank will talk to (itself is always allowed).
    pub peers: Vec<Rank>,
    /// Connect each peer on first contact instead of when the fabric opens: what a
    /// balancer over the complete graph wants (a random stealer addresses every rank but
    /// talks to few), so a rank pays only for the connections it uses. Backends that map
    /// memory rather than connect (the node backend) map at open either way.
    pub lazy: bool,
    /// Default timeout of the blocking helpers (`*_sync`).
    pub op_timeout: Duration,
}

/// How remote addresses name memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Addressing {
    /// Offsets from the start of the registered region.
    Offset,
    /// Virtual addresses of the target process (`FI_MR_VIRT_ADDR`).
    Virtual,
}

/// Who chooses memory keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyMode {
    /// No keys (in-process).
    None,
    /// The application (`requested_key`).
    Application,
    /// The provider (`FI_MR_PROV_KEY`); keys are exchanged at bootstrap.
    Provider,
}

/// What a backend offers; callers adapt to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capabilities {
    /// Backend name: `mem` or `ofi`.
    pub backend: &'static str,
    /// Provider name (`mem`, `tcp;ofi_rxm`, `shm`, ...).
    pub provider: String,
    /// CPU atomics on local [`Segment`] words are coherent with remote atomics.
    pub coherent_atomics: bool,
    /// The target must call into the fabric (a progress thread) for operations on its
    /// memory to complete.
    pub target_progress: bool,
    /// A signal travels right behind its data, without waiting for the data's completion.
    pub ordered_signal: bool,
    /// Progress must poll (the provider has no wait object, as libfabric's shm): workers
    /// should call [`Progress::poll`] between tasks, so the progress thread can nap long
    /// instead of waking every few microseconds on a core a worker needs.
    pub polled_progress: bool,
    /// Every operation completes inside the call that submits it (a CPU doing the work on
    /// mapped memory): its completion can be collected at once with [`Fabric::test`], so
    /// any thread may drive the protocol inline instead of handing operations to a
    /// progress thread. (A signal that must wait for room at its target is the exception:
    /// `test` then says it is still open.)
    pub immediate: bool,
    /// How remote memory is addressed.
    pub addressing: Addressing,
    /// Who chooses memory keys.
    pub keys: KeyMode,
}

impl Capabilities {
    /// Whether a rank's workers drive its node themselves between tasks — the signals
    /// that arrived, its timers, its operations' completions, and on
    /// [`Capabilities::immediate`] backends its commands — while its progress thread naps
    /// as long as they all run tasks: on immediate backends, and on libfabric's where
    /// progress polls (shm: the workers poll it between tasks anyway). Whatever handling
    /// an input costs is then a worker's time between two tasks, not the progress
    /// thread's taken from one (the simulator's node model follows this).
    pub fn workers_serve(&self) -> bool {
        // (libfabric's own fabric: the hybrid's passes polls on but not signals.)
        self.immediate || (self.polled_progress && self.backend == "ofi")
    }
}

/// An operation in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpId(pub u64);

/// A signal received: `from` wrote data with [`Fabric::write_gather`] and it is here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Signal {
    /// The rank that wrote.
    pub from: Rank,
    /// The value it attached.
    pub value: u64,
}

/// Why an operation failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FabricError {
    /// A byte range outside a segment.
    #[error("{offset}+{len} is outside segment '{segment}' ({segment_len} bytes)")]
    OutOfBounds {
        /// Segment name.
        segment: String,
        /// Start of the range.
        offset: u64,
        /// Length of the range.
        len: u64,
        /// Length of the segment.
        segment_len: u64,
    },
    /// Atomics need an 8-aligned offset.
    #[error("atomic at offset {offset} is not 8-byte aligned")]
    Misaligned {
        /// The offending offset.
        offset: u64,
    },
    /// No segment with this number.
    #[error("rank {rank} has no segment {segment} (it registered {count})")]
    UnknownSegment {
        /// Whose segment.
        rank: Rank,
        /// The number asked for.
        segment: u16,
        /// How many there are.
        count: usize,
    },
    /// A rank outside the job.
    #[error("rank {rank} is outside the job (size {size})")]
    NoSuchRank {
        /// The rank asked for.
        rank: Rank,
        /// Job size.
        size: u32,
    },
    /// The peer was not declared in [`FabricConfig::peers`].
    #[error("rank {peer} is not among this rank's peers (declare it in FabricConfig::peers)")]
    NotAPeer {
        /// The peer.
        peer: Rank,
    },
    /// The target does not expose the segment to this rank.
    #[error("rank {peer} does not expose segment '{segment}' to rank {rank}")]
    NotExposed {
        /// The target.
        peer: Rank,
        /// Segment name.
        segment: String,
        /// This rank.
        rank: Rank,
    },
    /// No completion within the timeout.
    #[error(
        "{op} to rank {peer} did not complete within {timeout:?} (is rank {peer} alive and progressing?)"
    )]
    Timeout {
        /// Operation kind.
        op: &'static str,
        /// Target rank.
        peer: Rank,
        /// The timeout.
        timeout: Duration,
    },
    /// The peer is gone.
    #[error("rank {peer} is unreachable: {detail}")]
    PeerDead {
        /// The peer.
        peer: Rank,
        /// What the transport said.
        detail: String,
    },
    /// An [`OpId`] this fabric does not know (already waited for, or never issued).
    #[error("operation {0:?} is unknown (already completed and collected?)")]
    UnknownOp(OpId),
    /// The transport refused or failed an operation.
    #[error("{call} failed: {detail} (code {code})")]
    Transport {
        /// The call that failed.
        call: &'static str,
        /// The provider's error code.
        code: i32,
        /// The provider's message.
        detail: String,
    },
    /// A request this backend cannot serve (a provider without atomics, say).
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// Bootstrap failed.
    #[error("bootstrap: {0}")]
    Bootstrap(#[from] bootstrap::BootstrapError),
    /// The fabric was shut down.
    #[error("the fabric is closed")]
    Closed,
}

/// How a rank's threads share the fabric's progress: waking the progress call, workers
/// that poll and serve signals between tasks, hints about long tasks and naps. Separate
/// from the one-sided operations ([`Fabric`]), which every backend offers alike; these
/// are scheduling hooks, and a backend that needs none keeps the defaults.
pub trait Progress: Send + Sync {
    /// Makes a [`Fabric::progress`] call that is blocked (or the next one) return now:
    /// another thread has work for the progress thread.
    fn wake(&self);

    /// Drives progress once without blocking, unless another thread polls right now —
    /// for backends whose progress must poll ([`Capabilities::polled_progress`]): a
    /// worker calls it between tasks, so remote operations on this rank and signals to it
    /// are served within a task's length while the progress thread naps. What it finds
    /// wakes a [`Fabric::progress`] call as any arrival does. Others do nothing.
    fn poll(&self) {}

    /// Moves the signals that arrived into `signals` without blocking and without
    /// consuming a [`Progress::wake`] meant for a progress call; returns whether any came.
    /// Backends whose operations are [`Capabilities::immediate`] or whose progress polls
    /// ([`Capabilities::polled_progress`]: a worker's [`Progress::poll`] collects them)
    /// implement it, so a worker can serve signals between tasks; others collect signals
    /// only in [`Fabric::progress`] and return false.
    fn take_signals(&self, signals: &mut Vec<Signal>) -> bool {
        let _ = signals;
        false
    }

    /// A hint for backends whose workers collect signals between tasks
    /// ([`Progress::take_signals`]): `on` while every worker runs tasks and does so, so a
    /// [`Fabric::progress`] call need not be woken by each arriving signal (or, where
    /// progress polls, each completion a worker's poll finds) — it naps instead (10 ms at
    /// most) and leaves them to the workers; [`Progress::wake`] and a peer's
    /// [`Progress::urge`] still wake it. Others ignore it.
    fn set_workers_serve(&self, on: bool) {
        let _ = on;
    }

    /// A worker starts (`running`) or ends a task that keeps it from serving signals for
    /// long (the runtime's costly tasks, `titus_core::COSTLY_TASK_NS`); meanwhile the progress
    /// call serves what arrives. By default the start turns the workers' serving off
    /// ([`Progress::set_workers_serve`]) and wakes the progress call ([`Progress::wake`]), so
    /// that it blocks where senders wake it; the end does nothing (the progress thread
    /// turns serving back on). A backend whose senders can wake a napping progress call
    /// asks them to instead, and spares the wake-up: on a shared core that hands the
    /// worker's core away before every such task.
    fn long_task(&self, running: bool) {
        if running {
            self.set_workers_serve(false);
            self.wake();
        }
    }

    /// Asks `peer`'s progress to serve the signals already sent to it now, even where
    /// its workers serve them between tasks (a thief waits for the answer, and a task
    /// may run for milliseconds). Transports whose target progress needs no asking
    /// ignore it.
    fn urge(&self, peer: Rank) {
        let _ = peer;
    }

    /// A hint for backends whose progress must poll (libfabric's shm has no wait object):
    /// the longest nap of an idle progress thread between polls. Remote operations on
    /// this rank wait up to that long, and an idle rank wakes once per nap: keep it short
    /// while this rank expects remote operations (it has work to share), long otherwise.
    /// Backends that block in a wait object ignore it.
    fn set_progress_nap(&self, max: Duration) {
        let _ = max;
    }
}

/// A one-sided transport for one rank. See the crate documentation for the contract. Its
/// scheduling hooks are [`Progress`]'s.
pub trait Fabric: Progress + fmt::Debug {
    /// This rank.
    fn rank(&self) -> Rank;
    /// Number of ranks.
    fn size(&self) -> u32;
    /// What the backend offers.
    fn caps(&self) -> &Capabilities;
    /// Default timeout of the `*_sync` helpers.
    fn op_timeout(&self) -> Duration;
    /// This rank's memory of segment `id`.
    fn segment(&self, id: SegmentId) -> Result<&Segment, FabricError>;

    /// Copies `len` bytes of `peer`'s `remote` into this rank's `local`.
    fn read(&self, peer: Rank, remote: Loc, local: Loc, len: u64) -> Result<OpId, FabricError>;
    /// Copies the local pieces, back to back, to `peer`'s `remote`; with `signal`, `peer`
    /// receives it from [`Fabric::progress`] once all the data is in its memory. No pieces
    /// and a signal: a signal alone. Signal values whose top four bits are all set are
    /// reserved for backends (the hybrid's mailbox), which may refuse them.
    fn write_gather(
        &self,
        peer: Rank,
        remote: Loc,
        pieces: &[Piece],
        signal: Option<u64>,
    ) -> Result<OpId, FabricError>;
    /// Sets `peer`'s word at `remote` to `desired` if it holds `expected`; completes with the
    /// previous value (equal to `expected` on success).
    fn compare_swap(
        &self,
        peer: Rank,
        remote: Loc,
        expected: u64,
        desired: u64,
    ) -> Result<OpId, FabricError>;
    /// Adds `delta` (wrapping) to `peer`'s word at `remote`; completes with the previous value.
    fn fetch_add(&self, peer: Rank, remote: Loc, delta: u64) -> Result<OpId, FabricError>;

    /// The operation's result if it completed (and forgets it), driving progress.
    fn test(&self, op: OpId) -> Option<Result<u64, FabricError>>;
    /// Blocks until the operation completes or `timeout` passes.
    fn wait(&self, op: OpId, timeout: Duration) -> Result<u64, FabricError>;
    /// Serves remote operations on this rank's memory and collects signals, blocking up to
    /// `timeout` while nothing happens: it returns early when a signal arrives or when one
    /// of this rank's operations completes during the call (collect it with
    /// [`Fabric::test`]) — on [`Capabilities::immediate`] backends, where operations
    /// complete inside the submitting call, only those that stayed open count. The
    /// progress thread's loop, and a driver's wait for "anything".
    fn progress(&self, timeout: Duration, signals: &mut Vec<Signal>) -> Result<(), FabricError>;

    /// Moves every completed operation that the calling thread submitted into `out`
    /// (instead of testing them one by one), driving progress once without blocking.
    /// Operations of other threads stay for their own `test`/`wait`/drain: a driver that
    /// drains never takes a completion another thread waits for.
    fn drain_completions(&self, out: &mut Vec<(OpId, Result<u64, FabricError>)>);

    /// Whether `peer`'s process is known to be gone, in words (`None`: alive, or not
    /// knowable from here). A driver asks when an operation to `peer` is slow, so that a
    /// vanished process fails the epoch within a second or so instead of after the whole
    /// operation timeout, which stays for peers that are alive but silent. Backends that
    /// cannot tell say nothing.
    fn peer_gone(&self, peer: Rank) -> Option<String> {
        let _ = peer;
        None
    }

    /// Whether `peer`'s host has stopped answering (down, or cut off the network), as
    /// opposed to its process having exited: a rank that aborted an epoch exits on its
    /// own, but its host does not fall silent for it. Backends that cannot tell: false.
    fn peer_host_silent(&self, peer: Rank) -> bool {
        let _ = peer;
        false
    }

    /// How long connecting to the peers took when the fabric opened (first contacts and
    /// the closing barrier; zero where nothing connects).
    fn connect_time(&self) -> Duration {
        Duration::ZERO
    }

    /// Whether peers connect on their first operation rather than at open
    /// ([`FabricConfig::lazy`], where the backend connects at all).
    fn connects_lazily(&self) -> bool {
        false
    }

    /// The memory one connection to a peer holds on this rank, bytes: each backend's
    /// figure from `titus fabric-bench --connections` (resident memory grown per peer
    /// contacted), an estimate for reports, not an accounting. Zero where nothing
    /// connects (one process).
    fn connection_bytes(&self) -> u64 {
        0
    }

    /// [`Fabric::write_gather`] of one piece, no signal.
    fn write(&self, peer: Rank, remote: Loc, local: Loc, len: u64) -> Result<OpId, FabricError> {
        self.write_gather(peer, remote, &[Piece { local, len }], None)
    }
    /// Read and wait.
    fn read_sync(&self, peer: Rank, remote: Loc, local: Loc, len: u64) -> Result<(), FabricError> {
        let op = self.read(peer, remote, local, len)?;
        self.wait(op, self.op_timeout()).map(drop)
    }
    /// Write and wait.
    fn write_sync(&self, peer: Rank, remote: Loc, local: Loc, len: u64) -> Result<(), FabricError> {
        let op = self.write(peer, remote, local, len)?;
        self.wait(op, self.op_timeout()).map(drop)
    }
    /// Compare-and-swap and wait; returns the previous value.
    fn compare_swap_sync(
        &self,
        peer: Rank,
        remote: Loc,
        expected: u64,
        desired: u64,
    ) -> Result<u64, FabricError> {
        let op = self.compare_swap(peer, remote, expected, desired)?;
        self.wait(op, self.op_timeout())
    }
    /// Fetch-and-add and wait; returns the previous value.
    fn fetch_add_sync(&self, peer: Rank, remote: Loc, delta: u64) -> Result<u64, FabricError> {
        let op = self.fetch_add(peer, remote, delta)?;
        self.wait(op, self.op_timeout())
    }
}
