//! One rank's protocol state: the public API, the bookkeeping of commands in flight,
//! timers, and termination.
//!
//! # Termination (a non-blocking tree reduction)
//!
//! Ranks form a binary tree by number (parent of r is (r − 1)/2), depth ⌈log₂ N⌉. A rank
//! is *locally complete* once every result of its own tasks is home; results are never
//! lost or duplicated, so that stays true for the rest of the epoch.
//! 1. A rank that is locally complete and has heard UP from each child sends UP to its
//!    parent.
//! 2. The root, in the same state, knows every rank is complete: every task ran and every
//!    result is home. It sends DONE to its children, who forward it.
//! 3. Until DONE, complete ranks keep stealing and routing (other ranks' results may still
//!    pass through them). After DONE a rank issues nothing new and reports done once its
//!    last operations completed (a stale steal must not land in the next epoch).
//!
//! A rank that fails floods ABORT over the tree and its overlay neighbours; every rank
//! stops with an error within O(log N) signal hops.

use crate::fasthash::IntMap;
use crate::layout::signal::Signal;
use crate::layout::{self, Task, seg, tasks};
use crate::neighbours::Neighbours;
use crate::results::{Inbox, Outbound};
use crate::steal::{Owner, Pending as StealPending, Thief};
use crate::{Command, Config, CoreError, Loc, Memory, Op, OpFailure, Protocol, Rank, Time, Token};
use std::collections::VecDeque;
use titus_overlay::Overlay;
use titus_overlay::rng::Rng;
use titus_overlay::route::Rows;

/// Operations in flight, by token. Tokens are issued in order and mostly complete in
/// order, so a window of slots from the oldest outstanding token serves insert and remove
/// in O(1) without hashing (the simulator handles hundreds of millions of them).
#[derive(Debug, Default)]
struct InFlight {
    /// Token of `slots[0]`.
    base: u64,
    slots: std::collections::VecDeque<Option<Pending>>,
    len: usize,
}

impl InFlight {
    /// Records `token`, the newest issued (tokens only grow).
    fn push(&mut self, token: u64, p: Pending) {
        if self.slots.is_empty() {
            self.base = token;
        }
        debug_assert_eq!(
            token,
            self.base + self.slots.len() as u64,
            "tokens in order"
        );
        self.slots.push_back(Some(p));
        self.len += 1;
    }

    /// Takes `token` out, if it is in flight.
    fn remove(&mut self, token: u64) -> Option<Pending> {
        let i = usize::try_from(token.checked_sub(self.base)?).ok()?;
        let p = self.slots.get_mut(i)?.take()?;
        self.len -= 1;
        while self.slots.front().is_some_and(Option::is_none) {
            self.slots.pop_front();
            self.base += 1;
        }
        Some(p)
    }

    fn len(&self) -> usize {
        self.len
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn iter(&self) -> impl Iterator<Item = &Pending> {
        self.slots.iter().flatten()
    }
}

/// What a command's completion means.
#[derive(Debug)]
pub(crate) enum Pending {
    /// Steal protocols (thief and owner sides).
    Steal(StealPending),
    /// Results routing.
    Results(crate::results::Pending),
    /// A signal whose completion needs no action (UP, DONE, ABORT, RESET).
    Signal(&'static str),
}

/// Per-epoch figures of one rank.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stats {
    /// Tasks this rank owns.
    pub tasks_owned: u64,
    /// Tasks this rank ran (its own and others').
    pub tasks_run: u64,
    /// Of those, tasks owned by other ranks.
    pub tasks_run_for_others: u64,
    /// Tasks this rank took from victims.
    pub tasks_stolen: u64,
    /// Steal attempts.
    pub steal_attempts: u64,
    /// Attempts that brought tasks.
    pub steals_ok: u64,
    /// Attempts that found the victim empty.
    pub steals_empty: u64,
    /// Attempts that found the victim locked (`lock`) or busy.
    pub steals_locked: u64,
    /// Time from the first operation of an attempt to its outcome, per attempt (ns).
    pub steal_latency_ns: Vec<u64>,
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
    /// Remote operations issued.
    pub ops: u64,
    /// Successful steals, in order (at most [`STEAL_LOG_MAX`]): the timeline of who took
    /// work from whom.
    pub steal_log: Vec<StealEvent>,
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
}

/// One rank of the protocol. See the crate documentation.
#[derive(Debug)]
pub struct Node {
    pub(crate) cfg: Config,
    pub(crate) rank: Rank,
    pub(crate) size: u32,
    pub(crate) overlay: Overlay,
    /// Rows of this rank and of its out-neighbours (routing looks two hops ahead).
    pub(crate) rows: IntMap<Rank, Vec<Rank>>,
    /// Next hop (index into `victims`) per destination, as decided before.
    hop_cache: IntMap<Rank, u32>,
    /// This rank's out-neighbours: its victims and next hops.
    pub(crate) victims: Neighbours,
    /// Whom the thief asks: the victims, or (work sharing) this epoch's master.
    pub(crate) targets: Neighbours,
    /// Work sharing (master side and member side).
    pub(crate) share: crate::share::ShareState,
    pub(crate) rng: Rng,
    pub(crate) slot: u64,
    pub(crate) now: Time,
    /// When this epoch started here.
    pub(crate) started: Time,
    pub(crate) epoch: u64,
    running: bool,
    failed: Option<CoreError>,
    // Own tasks and their results.
    pub(crate) own: u32,
    pub(crate) results: Vec<Option<Vec<u8>>>,
    pub(crate) home: u32,
    /// Tasks to run or share (front: run next; back: share first).
    pub(crate) queue: VecDeque<Task>,
    /// Workers asked for tasks and found none.
    pub(crate) hungry: bool,
    pub(crate) owner: Owner,
    pub(crate) thief: Thief,
    /// Records buffered and chunks travelling per next hop (index into `victims`); only
    /// hops with either are present.
    pub(crate) outs: IntMap<u32, Outbound>,
    /// OUTBOX slots (of `chunk_bytes`) not holding a chunk in flight.
    pub(crate) outbox_free: Vec<u32>,
    /// The next hops (keys of `outs`) in the order they became active.
    pub(crate) active_outs: Vec<u32>,
    pub(crate) inbox: Inbox,
    // Termination.
    children_up: u32,
    sent_up: bool,
    done: bool,
    aborted: bool,
    /// Signals that arrived between epochs: they belong to the next one (a rank that
    /// started it a little earlier already steals, routes and reports), replayed by
    /// `start_epoch`.
    early: Vec<(Rank, u64)>,
    // Commands.
    commands: VecDeque<Command>,
    pending: InFlight,
    next_token: u64,
    pub(crate) stats: Stats,
}

/// Rows of this rank and its neighbours, for routing.
struct RowView<'a>(&'a IntMap<Rank, Vec<Rank>>);

impl Rows for RowView<'_> {
    fn row(&self, rank: Rank) -> &[Rank] {
        self.0.get(&rank).map_or(&[], Vec::as_slice)
    }
}

/// Destinations whose next hop a rank remembers (the cache restarts when full).
const HOP_CACHE_MAX: usize = 4096;

fn tree_parent(r: Rank) -> Option<Rank> {
    (r > 0).then(|| (r - 1) / 2)
}

fn tree_children(r: Rank, size: u32) -> impl Iterator<Item = Rank> {
    [2 * u64::from(r) + 1, 2 * u64::from(r) + 2]
        .into_iter()
        .filter(move |&c| c < u64::from(size))
        .map(|c| c as Rank)
}

impl Node {
    /// A node for `rank` of `overlay`'s ranks.
    pub fn new(cfg: Config, overlay: Overlay, rank: Rank) -> Result<Self, CoreError> {
        let size = overlay.ranks();
        if rank >= size {
            return Err(CoreError::Config(format!(
                "rank {rank} outside a job of {size}"
            )));
        }
        if cfg.shared_capacity == 0 || cfg.shared_capacity > u32::from(u16::MAX) {
            return Err(CoreError::Config(format!(
                "shared_capacity {} outside 1..=65535",
                cfg.shared_capacity
            )));
        }
        let chunk_floor =
            (layout::CHUNK_HEADER + layout::record_len(cfg.max_result as usize)) as u64;
        if cfg.chunk_bytes < chunk_floor {
            return Err(CoreError::Config(format!(
                "chunk_bytes {} cannot hold one {}-byte result ({chunk_floor} bytes with headers)",
                cfg.chunk_bytes, cfg.max_result
            )));
        }
        // A CHUNK signal carries the chunk's offset and length in 30 bits each.
        if cfg.inbox_bytes < cfg.chunk_bytes || cfg.inbox_bytes >= 1 << 30 {
            return Err(CoreError::Config(format!(
                "inbox_bytes {} must hold a chunk ({} bytes) and stay below 2^30",
                cfg.inbox_bytes, cfg.chunk_bytes
            )));
        }
        if cfg.outbox_slots == 0 {
            return Err(CoreError::Config("outbox_slots must be at least 1".into()));
        }
        if let Some(sh) = &cfg.sharing {
            sh.check(size)?;
            if cfg.protocol != Protocol::Request {
                return Err(CoreError::Config(
                    "work sharing needs the request protocol".into(),
                ));
            }
        }
        // The complete graph is implicit: every rank is a neighbour and a result's next
        // hop is its owner, so neither rows nor a routing table are kept.
        let victims = if overlay.is_complete() {
            Neighbours::All { size, me: rank }
        } else {
            Neighbours::List(overlay.row(rank))
        };
        let mut rows = IntMap::default();
        if let Neighbours::List(row) = &victims {
            if cfg.routing == crate::Routing::Non {
                for &v in row {
                    rows.insert(v, overlay.row(v));
                }
            }
            rows.insert(rank, row.clone());
        }
        let slot = layout::slot_size(cfg.max_payload);
        let cfg_shares = cfg.sharing.is_some();
        let mut node = Self {
            rng: Rng::from_keys(&[cfg.seed, 0x5354_4541_4c00, u64::from(rank)]),
            slot,
            thief: Thief::new(&victims),
            owner: Owner::default(),
            outs: IntMap::default(),
            outbox_free: Vec::new(),
            active_outs: Vec::new(),
            inbox: Inbox::default(),
            cfg,
            rank,
            size,
            overlay,
            rows,
            targets: if cfg_shares {
                Neighbours::List(Vec::new())
            } else {
                victims.clone()
            },
            share: Default::default(),
            victims,
            now: Time(0),
            started: Time(0),
            epoch: 0,
            running: false,
            failed: None,
            own: 0,
            results: Vec::new(),
            home: 0,
            queue: VecDeque::new(),
            hungry: false,
            children_up: 0,
            sent_up: false,
            done: true,
            aborted: false,
            early: Vec::new(),
            commands: VecDeque::new(),
            pending: InFlight::default(),
            hop_cache: IntMap::default(),
            next_token: 1,
            stats: Stats::default(),
        };
        node.outbox_free = (0..node.outbox_slots() as u32).rev().collect();
        Ok(node)
    }

    /// This rank.
    pub fn rank(&self) -> Rank {
        self.rank
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// The ranks this rank sends operations to: out-neighbours, its tree parent and
    /// children, and the ranks that steal from it or send it results, `in_neighbours`
    /// (`request` victims answer their thieves; an inbox reset is signalled to the senders
    /// that overflowed it, under every protocol) — which the driver computes once
    /// (`Overlay::in_neighbours`, O(N·k)) and also uses for segment exposure.
    pub fn peers(&self, in_neighbours: &[Rank]) -> Vec<Rank> {
        let mut p: Vec<Rank> = self.victims.to_vec();
        p.extend(tree_parent(self.rank));
        p.extend(tree_children(self.rank, self.size));
        p.extend_from_slice(in_neighbours);
        if let Some(sh) = &self.cfg.sharing {
            p.extend_from_slice(sh.members(self.rank));
        }
        p.sort_unstable();
        p.dedup();
        p.retain(|&r| r != self.rank);
        p
    }

    /// Bytes of each segment, in [`layout::seg`] order.
    pub fn segment_sizes(&self) -> [u64; 3] {
        let cap = u64::from(self.cfg.shared_capacity);
        [
            tasks::HEADER + 3 * cap * self.slot,
            crate::results::INBOX_DATA + self.cfg.inbox_bytes,
            self.outbox_slots() as u64 * self.cfg.chunk_bytes,
        ]
    }

    /// Writes the layout's version word; call once before the first epoch, on every rank,
    /// and let every rank finish before any starts (the driver's barrier).
    pub fn init_memory(&self, mem: &dyn Memory) {
        mem.write(
            Loc::new(seg::TASKS, tasks::MAGIC),
            &layout::LAYOUT_MAGIC.to_le_bytes(),
        );
    }

    /// Starts an epoch with this rank's tasks (kind, payload). Every rank calls it, after a
    /// barrier that follows the previous epoch's end on every rank. Signals that arrived
    /// since the previous epoch ended are handled now, in the new epoch.
    pub fn start_epoch(
        &mut self,
        now: Time,
        tasks: Vec<(u16, Vec<u8>)>,
        mem: &dyn Memory,
    ) -> Result<(), CoreError> {
        if self.running {
            return Err(CoreError::Usage("start_epoch while an epoch is running"));
        }
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if let Some((i, (_, p))) = tasks
            .iter()
            .enumerate()
            .find(|(_, (_, p))| p.len() > self.cfg.max_payload as usize)
        {
            return Err(CoreError::PayloadTooLarge {
                index: i as u32,
                len: p.len(),
                limit: self.cfg.max_payload,
            });
        }
        self.now = now;
        self.started = now;
        self.epoch += 1;
        self.running = true;
        self.done = false;
        self.children_up = 0;
        self.sent_up = false;
        self.own = tasks.len() as u32;
        self.results = vec![None; tasks.len()];
        self.home = 0;
        self.hungry = false;
        self.stats = Stats {
            tasks_owned: tasks.len() as u64,
            ..Stats::default()
        };
        self.rng = Rng::from_keys(&[
            self.cfg.seed,
            0x5354_4541_4c00,
            u64::from(self.rank),
            self.epoch,
        ]);
        self.thief.reset_backoff();
        self.share_start();
        let rank = self.rank;
        self.queue = tasks
            .into_iter()
            .enumerate()
            .map(|(i, (kind, payload))| Task {
                owner: rank,
                index: i as u32,
                kind,
                payload,
            })
            .collect();
        for (from, value) in std::mem::take(&mut self.early) {
            self.handle_signal(now, from, value, mem);
        }
        self.drive(mem);
        Ok(())
    }

    /// The next command to perform, if any.
    pub fn poll_command(&mut self) -> Option<Command> {
        self.commands.pop_front()
    }

    /// When [`Node::handle_timeout`] should next be called.
    pub fn poll_timeout(&self) -> Option<Time> {
        if !self.running || self.failed.is_some() || self.done {
            return None;
        }
        [
            self.thief_deadline(),
            self.owner_deadline(),
            self.results_deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Whether the epoch is over here: termination was detected and this rank's last
    /// operations completed (or the epoch failed).
    pub fn is_done(&self) -> bool {
        self.failed.is_some() || (self.done && self.pending.is_empty() && self.commands.is_empty())
    }

    /// Whether this rank learned that the epoch is over (DONE reached it, or it is the
    /// root and saw every rank complete); its last operations may still be in flight.
    pub fn termination_detected(&self) -> bool {
        self.running && self.done
    }

    /// Results of this rank's own tasks that are home, and how many tasks it owns.
    pub fn results_home(&self) -> (u32, u32) {
        (self.home, self.own)
    }

    /// The error that ended the epoch, if one did.
    pub fn error(&self) -> Option<&CoreError> {
        self.failed.as_ref()
    }

    /// This epoch's figures so far.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// One line of state, for diagnosing a stalled epoch.
    pub fn debug_summary(&self) -> String {
        format!(
            "rank {}: epoch {} running {} done {} failed {} home {}/{} queue {} hungry {} children_up {} sent_up {} in-flight {:?} {}{} outs [{}] inbox {}",
            self.rank,
            self.epoch,
            self.running,
            self.done,
            self.failed.is_some(),
            self.home,
            self.own,
            self.queue.len(),
            self.hungry,
            self.children_up,
            self.sent_up,
            self.pending
                .iter()
                .map(|p| self.describe(p).0)
                .collect::<Vec<_>>(),
            self.thief_summary(),
            self.owner_summary(),
            self.outs_summary(),
            self.inbox_summary(),
        )
    }

    /// Whether this rank expects remote operations soon (it shares work during an epoch):
    /// a driver polling a fabric keeps its naps short then.
    pub fn expects_remote_ops(&self) -> bool {
        self.running && !self.done && self.failed.is_none() && self.sharing()
    }

    /// Whether commands wait to be polled.
    pub fn has_commands(&self) -> bool {
        !self.commands.is_empty()
    }

    /// The driver failed (its fabric broke): fail the epoch with `detail`.
    pub fn fail_from_driver(&mut self, detail: String) {
        self.fail(CoreError::Remote {
            op: "progress",
            peer: self.rank,
            detail,
        });
    }

    /// Operations in flight.
    pub fn in_flight(&self) -> usize {
        self.pending.len()
    }

    /// Ends the epoch: this rank's results, in task order.
    pub fn take_results(&mut self) -> Result<Vec<Vec<u8>>, CoreError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if !self.is_done() {
            return Err(CoreError::Usage("take_results before the epoch ended"));
        }
        self.running = false;
        std::mem::take(&mut self.results)
            .into_iter()
            .map(|r| r.ok_or(CoreError::Usage("a result is missing at termination")))
            .collect()
    }

    /// Up to `max` tasks for this rank's workers (their private work).
    pub fn take_tasks(&mut self, now: Time, max: usize, mem: &dyn Memory) -> Vec<Task> {
        self.now = now;
        if !self.running || self.failed.is_some() {
            return Vec::new();
        }
        let n = max.min(self.queue.len());
        let out: Vec<Task> = self.queue.drain(..n).collect();
        self.hungry = out.is_empty() && !self.done;
        self.drive(mem);
        out
    }

    /// A worker finished `task` with `result` (or failed it with a message).
    pub fn task_done(
        &mut self,
        now: Time,
        owner: Rank,
        index: u32,
        result: Result<Vec<u8>, String>,
        mem: &dyn Memory,
    ) {
        self.now = now;
        if self.failed.is_some() {
            return;
        }
        self.stats.tasks_run += 1;
        if owner != self.rank {
            self.stats.tasks_run_for_others += 1;
        }
        match result {
            Err(detail) => self.fail(CoreError::TaskFailed {
                owner,
                index,
                ran_on: self.rank,
                detail,
            }),
            Ok(data) if data.len() > self.cfg.max_result as usize => {
                self.fail(CoreError::ResultTooLarge {
                    index,
                    len: data.len(),
                    limit: self.cfg.max_result,
                })
            }
            Ok(data) => {
                let rec = layout::ResultRecord { owner, index, data };
                if let Err(e) = self.route_result(rec, 0, self.rank) {
                    self.fail(e);
                }
            }
        }
        self.drive(mem);
    }

    /// A command completed: `Ok(value)` (an atomic's previous value, else 0) or a failure.
    pub fn handle_completion(
        &mut self,
        now: Time,
        token: Token,
        result: Result<u64, OpFailure>,
        mem: &dyn Memory,
    ) {
        self.now = now;
        let Some(p) = self.pending.remove(token.0) else {
            return;
        };
        if self.failed.is_some() {
            return;
        }
        let value = match result {
            Ok(v) => v,
            Err(f) => {
                let (op, peer) = self.describe(&p);
                self.fail(CoreError::Remote {
                    op,
                    peer,
                    detail: f.detail,
                });
                return;
            }
        };
        let r = match p {
            Pending::Steal(s) => self.steal_completion(s, value, mem),
            Pending::Results(r) => self.results_completion(r, value, mem),
            Pending::Signal(_) => Ok(()),
        };
        if let Err(e) = r {
            self.fail(e);
        }
        self.drive(mem);
    }

    /// A signal from `from` arrived.
    pub fn handle_signal(&mut self, now: Time, from: Rank, value: u64, mem: &dyn Memory) {
        self.now = now;
        if from >= self.size {
            return; // Not a rank: dropped (the transport already checks).
        }
        // Decoded before anything else only to let an ABORT through at any time; a word
        // that does not decode fails the epoch it belongs to.
        let sig = match Signal::unpack(value, from) {
            Ok(Signal::Abort { origin, code }) => {
                self.on_abort(from, origin, code);
                return;
            }
            other => other,
        };
        if self.failed.is_some() {
            return;
        }
        if !self.running {
            self.early.push((from, value));
            return;
        }
        let r = sig.and_then(|sig| match sig {
            Signal::Chunk { .. } | Signal::Overflow { .. } | Signal::Reset => {
                self.results_signal(from, sig, mem)
            }
            Signal::Request { .. }
            | Signal::Reply { .. }
            | Signal::Load { .. }
            | Signal::Forward { .. }
            | Signal::Refill => self.steal_signal(from, sig, mem),
            Signal::Abort { .. } => Ok(()), // Handled above.
            Signal::Up => {
                if tree_children(self.rank, self.size).any(|c| c == from) {
                    self.children_up += 1;
                    Ok(())
                } else {
                    Err(CoreError::Malformed {
                        from,
                        what: "termination UP from a rank that is not a child".into(),
                    })
                }
            }
            Signal::Done => {
                if tree_parent(self.rank) == Some(from) {
                    self.finish();
                    Ok(())
                } else {
                    Err(CoreError::Malformed {
                        from,
                        what: "termination DONE from a rank that is not the parent".into(),
                    })
                }
            }
        });
        if let Err(e) = r {
            self.fail(e);
        }
        self.drive(mem);
    }

    /// Timers: call when [`Node::poll_timeout`] has passed.
    pub fn handle_timeout(&mut self, now: Time, mem: &dyn Memory) {
        self.now = now;
        self.drive(mem);
    }

    /// Queues a command; returns its token.
    pub(crate) fn issue(&mut self, op: Op, pending: Pending) -> Token {
        let token = Token(self.next_token);
        self.next_token += 1;
        self.pending.push(token.0, pending);
        self.commands.push_back(Command { token, op });
        self.stats.ops += 1;
        token
    }

    /// Sends a signal (a write of nothing) to `peer`.
    pub(crate) fn send_signal(&mut self, peer: Rank, value: u64, what: &'static str) {
        self.issue(
            Op::Write {
                peer,
                remote: Loc::new(seg::INBOX, 0),
                pieces: Vec::new(),
                signal: Some(value),
            },
            Pending::Signal(what),
        );
    }

    /// The next hop from this rank towards `dst`, as an index into `victims` (under the
    /// complete graph, `dst` itself).
    /// Decisions are cached (a stolen batch's results all go to one owner, and NoN looks
    /// at every neighbour's row: ~1,000 distances per decision).
    pub(crate) fn next_hop(&mut self, dst: Rank) -> Option<usize> {
        if self.victims.is_all() {
            return self.victims.index_of(dst);
        }
        if let Some(&h) = self.hop_cache.get(&dst) {
            return Some(h as usize);
        }
        let next = titus_overlay::route::next_hop(
            self.overlay.lattice(),
            &RowView(&self.rows),
            self.cfg.routing,
            self.rank,
            dst,
        )?;
        let h = self.victims.index_of(next)?;
        if self.hop_cache.len() >= HOP_CACHE_MAX {
            self.hop_cache.clear();
        }
        self.hop_cache.insert(dst, h as u32);
        Some(h)
    }

    /// Stores a result of this rank's own task.
    pub(crate) fn store_result(
        &mut self,
        index: u32,
        data: Vec<u8>,
        from: Rank,
        hops: u32,
    ) -> Result<(), CoreError> {
        let count = self.own;
        let slot = self
            .results
            .get_mut(index as usize)
            .ok_or(CoreError::UnknownTask { index, from, count })?;
        if slot.is_some() {
            return Err(CoreError::Duplicate { index, from });
        }
        *slot = Some(data);
        self.home += 1;
        let h = hops as usize;
        if self.stats.result_hops.len() <= h {
            self.stats.result_hops.resize(h + 1, 0);
        }
        self.stats.result_hops[h] += 1;
        Ok(())
    }

    fn describe(&self, p: &Pending) -> (&'static str, Rank) {
        match p {
            Pending::Steal(s) => (s.name(), s.peer(&self.targets, self.rank)),
            Pending::Results(r) => (r.name(), r.peer(&self.victims, self.rank)),
            Pending::Signal(what) => (what, self.rank),
        }
    }

    /// The epoch failed, ended here, or is not running: no new work to hand out.
    pub(crate) fn failed_or_done(&self) -> bool {
        self.failed.is_some() || self.done || !self.running
    }

    /// Stops the epoch with `e` and tells the other ranks.
    pub(crate) fn fail(&mut self, e: CoreError) {
        if self.failed.is_some() {
            return;
        }
        let code = e.code();
        let origin = match &e {
            CoreError::Aborted { rank, .. } => *rank,
            _ => self.rank,
        };
        self.failed = Some(e);
        self.flood_abort(origin, code, None);
    }

    fn flood_abort(&mut self, origin: Rank, code: u32, except: Option<Rank>) {
        if self.aborted {
            return;
        }
        self.aborted = true;
        self.commands.clear();
        let mut to: Vec<Rank> = tree_children(self.rank, self.size)
            .chain(tree_parent(self.rank))
            .chain(self.victims.flood_targets())
            .collect();
        to.sort_unstable();
        to.dedup();
        let value = Signal::Abort {
            origin,
            code: (code & 0xffff) as u16,
        }
        .pack();
        for r in to {
            if Some(r) != except && r != self.rank {
                self.send_signal(r, value, "abort");
            }
        }
    }

    fn on_abort(&mut self, from: Rank, origin: Rank, code: u16) {
        // A rank outside the job is not trusted, but the epoch fails all the same.
        let origin = origin.min(self.size.saturating_sub(1));
        let code = u32::from(code);
        if self.failed.is_none() {
            self.failed = Some(CoreError::Aborted { rank: origin, code });
        }
        self.flood_abort(origin, code, Some(from));
    }

    fn finish(&mut self) {
        if self.done {
            return;
        }
        self.done = true;
        self.hungry = false;
        let children: Vec<Rank> = tree_children(self.rank, self.size).collect();
        for c in children {
            self.send_signal(c, Signal::Done.pack(), "termination DONE");
        }
    }

    fn termination_step(&mut self) {
        if self.done || self.sent_up || self.home < self.own {
            return;
        }
        let children = tree_children(self.rank, self.size).count() as u32;
        if self.children_up < children {
            return;
        }
        match tree_parent(self.rank) {
            Some(p) => {
                self.sent_up = true;
                self.send_signal(p, Signal::Up.pack(), "termination UP");
            }
            None => self.finish(),
        }
    }

    /// Decides what to do next after any input.
    pub(crate) fn drive(&mut self, mem: &dyn Memory) {
        if self.failed.is_some() || !self.running {
            return;
        }
        self.termination_step();
        if self.done {
            return;
        }
        let r = self
            .owner_step(mem)
            .and_then(|()| self.thief_step())
            .and_then(|()| self.results_step(mem));
        if let Err(e) = r {
            self.fail(e);
        }
        self.share_step();
        self.termination_step();
    }
}
