//! The progress thread: drives the node over the fabric.
//!
//! Each turn: send the node's commands (atomics on this rank's own words go straight to
//! CPU atomics where the backend says they are coherent), collect completions, fire
//! timers, then block in the fabric until a signal, a completion, a timer or a worker's
//! wake-up. An operation without a completion after `op_timeout` fails the epoch (a dead
//! or silent peer), so nothing waits forever. Sooner: an operation still open after
//! [`LIVENESS_AFTER`] makes the driver ask the fabric whether the peer's process is gone
//! (`Fabric::peer_gone`: on one node, the kernel knows), at most every [`LIVENESS_EVERY`]
//! per peer; a vanished process fails the epoch within about a second, naming the rank.
//!
//! The protocol by which the progress thread and the workers share the node and the
//! fabric's progress, state by state: `serve_and_idle.md`, beside this file.

use crate::{SegMem, Shared};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use titus_core::{Command, Op, OpFailure, Token};
use titus_fabric::{Fabric, FabricError, OpId, Piece};

/// How long a failed operation's peer is asked whether its process exited (see
/// `failure_to`).
const GONE_GRACE: Duration = Duration::from_millis(100);
/// An operation open this long makes the driver ask whether its peer still exists: far
/// above any healthy operation (tens of µs to a few ms here, scheduling delays included),
/// far below the operation timeout (30 s).
const LIVENESS_AFTER: Duration = Duration::from_millis(500);
/// How often one peer's liveness is asked while operations to it stay open (a /proc read),
/// and how often an idle rank sweeps all its peers.
const LIVENESS_EVERY: Duration = Duration::from_millis(250);
/// How often a busy rank sweeps its peers: one whose peer died (or whose host went
/// silent) while it had work of its own learns it within about this, not when it next
/// needs the peer — the epoch cannot end without it anyway.
const LIVENESS_BUSY_EVERY: Duration = Duration::from_secs(1);

/// An operation in flight: the node's token, when it was submitted, the peer, and whether
/// the progress thread submitted it (its drain collects those; others are tested one by
/// one).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Open {
    token: Token,
    since: Instant,
    peer: titus_core::Rank,
    driver: bool,
}

/// The rank's operations in flight, by fabric id ([`crate::shared::ProgressSide::open`]): whoever drives the
/// node — the progress thread, or a worker between tasks — collects what completed, under
/// this map's lock, so each completion is handed to the node once.
pub(crate) type OpenOps = std::collections::HashMap<OpId, Open>;

/// Most commands a worker drives inline at once before leaving the rest to the progress
/// thread (a bound on the time a worker spends away from tasks).
const INLINE_MAX: usize = 64;

/// Where workers serve the node ([`Shared::serve`]), the thread that made the node want
/// something — an idle worker starting a steal, a worker routing a result — serves it
/// under the node's lock it already holds: the signals that arrived, the due timers, and
/// where every operation completes inside its submitting call
/// ([`titus_fabric::Capabilities::immediate`]: the node backend) the node's commands,
/// their completions fed straight back — a steal inside a node is then a few cache-line
/// transfers, not two thread wake-ups (an operation that stays open joins
/// [`crate::shared::ProgressSide::open`]). Where the fabric's progress polls (libfabric's shm) it collects the
/// completions of every open operation instead, so that on a node whose cores all run
/// workers what arrived does not wait for the progress thread to be scheduled (measured
/// on 2 cores: 0.5–2.5 ms per protocol step); submitting stays the progress thread's.
/// Returns whether operations stayed open.
pub(crate) fn drive_inline(sh: &Shared, node: &mut titus_core::Node) -> bool {
    let f = &*sh.fabric;
    let mem = SegMem(f);
    // Signals that arrived meanwhile (a thief's request, a victim's reply) and timers that
    // are due (a results flush, a shared set's check) are served here too, so that
    // neither side waits for its progress thread to be scheduled.
    let mut signals = Vec::new();
    f.take_signals(&mut signals);
    feed(node, sh.now(), signals, &mem);
    if !sh.inline {
        collect_open(sh, node, &mem);
        // Its commands stay for the progress thread: a provider call that never returns
        // (shm spinning on a lock a dead peer held) must not hold the node's lock, which
        // the epoch's watchdog needs (`Shared::stuck_in_fabric`) — the caller wakes it.
        return false;
    }
    let mut handed = false;
    for _ in 0..INLINE_MAX {
        let Some(c) = node.poll_command() else { break };
        let peer = peer_of(&c.op);
        sh.progress.contacts.submitted(peer, sh.now().0);
        let r = match submit(f, &c.op) {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(id)) => match f.test(id) {
                Some(r) => r.map_err(|e| failure_to(f, peer, e)),
                None => {
                    keep_open(sh, id, c.token, peer, false);
                    handed = true;
                    continue;
                }
            },
            Err(e) => Err(failure_to(f, peer, e)),
        };
        let now = sh.now();
        sh.progress.contacts.completed(peer, now.0);
        node.handle_completion(now, c.token, r, &mem);
    }
    // What was handled may have brought tasks: idle siblings need not wait for the
    // progress thread's turn.
    sh.wake_workers_for(node.queued());
    handed
}

/// Operation `id` (the node's `token`, to `peer`) is in flight from now; `driver`: the
/// progress thread submitted it.
fn keep_open(sh: &Shared, id: OpId, token: Token, peer: titus_core::Rank, driver: bool) {
    let since = Instant::now();
    crate::lock(&sh.progress.open).insert(
        id,
        Open {
            token,
            since,
            peer,
            driver,
        },
    );
}

/// Moves the operations of `open` that completed into `done`, testing each — all of them,
/// or (`others`) those the progress thread did not submit (its drain collects its own).
fn test_open(
    f: &dyn Fabric,
    open: &mut OpenOps,
    others: bool,
    done: &mut Vec<(Open, Result<u64, FabricError>)>,
) {
    open.retain(|&id, o| {
        if others && o.driver {
            return true;
        }
        match f.test(id) {
            Some(r) => {
                done.push((*o, r));
                false
            }
            None => true,
        }
    });
}

/// Feeds `node` the operations in [`crate::shared::ProgressSide::open`] that completed (a worker's turn: it
/// tests each; the progress thread drains its own).
fn collect_open(sh: &Shared, node: &mut titus_core::Node, mem: &SegMem<'_>) {
    let f = &*sh.fabric;
    let mut done = Vec::new();
    test_open(f, &mut crate::lock(&sh.progress.open), false, &mut done);
    for (o, r) in done {
        let now = sh.now();
        sh.progress.contacts.completed(o.peer, now.0);
        node.handle_completion(now, o.token, r.map_err(|e| failure_to(f, o.peer, e)), mem);
    }
}

/// Hands arrived `signals` to the node, then fires its timers if due: what every thread
/// that drives the node does with what came in.
pub(crate) fn feed(
    node: &mut titus_core::Node,
    now: titus_core::Time,
    signals: impl IntoIterator<Item = titus_fabric::Signal>,
    mem: &SegMem<'_>,
) {
    for s in signals {
        node.handle_signal(now, s.from, s.value, mem);
    }
    if node.poll_timeout().is_some_and(|t| t <= now) {
        node.handle_timeout(now, mem);
    }
}

/// The rank an operation goes to.
fn peer_of(op: &Op) -> titus_core::Rank {
    match op {
        Op::Read { peer, .. }
        | Op::Write { peer, .. }
        | Op::Cas { peer, .. }
        | Op::FetchAdd { peer, .. } => *peer,
    }
}

fn failure(e: FabricError) -> OpFailure {
    OpFailure {
        peer_gone: matches!(
            e,
            FabricError::PeerDead { .. } | FabricError::Timeout { .. }
        ),
        detail: e.to_string(),
    }
}

/// A failed operation to `peer`: when its process is gone, say so in words (providers
/// often report a bare EAGAIN, ENOENT or connection reset).
fn failure_to(f: &dyn Fabric, peer: titus_core::Rank, e: FabricError) -> OpFailure {
    // The provider's own "peer gone" (ENOTCONN, ECONNRESET) too: its words name no
    // process. An exiting process closes its connections before the kernel marks it
    // exited: an operation failed by that close may ask a moment too early. Ask again for
    // a little while (this chooses the words, and whether the core may give a peer that
    // had DONE and exited its grace: `Node::gone_tolerated`).
    let mut gone = f.peer_gone(peer);
    let until = Instant::now() + GONE_GRACE;
    while gone.is_none() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
        gone = f.peer_gone(peer);
    }
    match gone {
        None => failure(e),
        Some(why) => OpFailure {
            peer_gone: true,
            detail: format!("{why} ({e})"),
        },
    }
}

/// Performs `op`: Ok(Some(value)) when it completed at once (a coherent atomic on this
/// rank's own word), Ok(None) with the fabric operation to wait for otherwise.
fn submit(f: &dyn Fabric, op: &Op) -> Result<Result<u64, OpId>, FabricError> {
    let me = f.rank();
    let coherent = f.caps().coherent_atomics;
    match op {
        Op::Read {
            peer,
            remote,
            local,
            len,
        } => f.read(*peer, *remote, *local, *len).map(Err),
        Op::Write {
            peer,
            remote,
            pieces,
            signal,
        } => {
            let pieces: Vec<Piece> = pieces
                .iter()
                .map(|&(l, len)| Piece { local: l, len })
                .collect();
            let op = f.write_gather(*peer, *remote, &pieces, *signal)?;
            if signal.is_some_and(titus_core::layout::signal::urgent) {
                f.urge(*peer);
            }
            Ok(Err(op))
        }
        Op::Cas {
            peer,
            remote,
            expected,
            desired,
        } if *peer == me && coherent => f
            .segment(remote.segment)?
            .compare_exchange(remote.offset, *expected, *desired)
            .map(Ok),
        Op::FetchAdd {
            peer,
            remote,
            delta,
        } if *peer == me && coherent => f
            .segment(remote.segment)?
            .fetch_add(remote.offset, *delta)
            .map(Ok),
        Op::Cas {
            peer,
            remote,
            expected,
            desired,
        } => f.compare_swap(*peer, *remote, *expected, *desired).map(Err),
        Op::FetchAdd {
            peer,
            remote,
            delta,
        } => f.fetch_add(*peer, *remote, *delta).map(Err),
    }
}

/// A sweep's finding: the first peer whose process is gone, and why — every gone peer's
/// why, so that a rank that outlived two dead peers names the first to die too (asked of
/// the fabric outside the node's lock: on one node it is a look at the kernel's view of
/// each peer, and a read of its beat).
fn gone_peer(sh: &Shared) -> Option<(titus_core::Rank, String)> {
    let gone = gone_peers(sh);
    let first = gone.first()?.0;
    let why: Vec<String> = gone.into_iter().map(|g| g.1).collect();
    Some((first, why.join("; ")))
}

/// Every peer whose process is gone or frozen, and why.
pub(crate) fn gone_peers(sh: &Shared) -> Vec<(titus_core::Rank, String)> {
    let f = &*sh.fabric;
    sh.peers
        .iter()
        .filter_map(|&p| f.peer_gone(p).map(|w| (p, w)))
        .collect()
}

/// Acts on a sweep's finding under the node's lock: the signals that arrived first, then
/// the node's verdict (`Node::peers_swept`).
fn sweep_peers(
    sh: &Shared,
    node: &mut titus_core::Node,
    mem: &SegMem<'_>,
    gone: Option<(titus_core::Rank, String)>,
) {
    if gone.is_some() {
        let mut late = Vec::new();
        if sh.fabric.progress(Duration::ZERO, &mut late).is_ok() {
            sh.fabric.take_signals(&mut late);
            feed(node, sh.now(), late, mem);
        }
    }
    node.peers_swept(sh.now(), gone);
}

pub(crate) fn run(sh: &Shared) {
    let _ = sh
        .figures
        .progress_cpu
        .set(crate::thread_cpu::ThreadCpu::current());
    let fabric = sh.fabric.clone();
    let mem = SegMem(&*fabric);
    let op_timeout = sh.cfg.op_timeout;
    // When each peer's liveness was last asked.
    let mut asked: std::collections::HashMap<titus_core::Rank, Instant> = Default::default();
    let mut commands: Vec<Command> = Vec::new();
    let mut done: Vec<(OpId, Result<u64, FabricError>)> = Vec::new();
    let mut results: Vec<(Token, Result<u64, OpFailure>)> = Vec::new();
    let mut signals = Vec::new();
    // The nap last set (the fabric starts at its own, TITUS_PROGRESS_MAX_SLEEP_US for libfabric).
    let mut nap_set = Duration::from_nanos(titus_core::IDLE_NAP_NS);
    // When the peers' liveness was last swept.
    let mut swept = Instant::now();
    let polled = fabric.caps().polled_progress;
    while !sh.closing() {
        // 1. Commands out.
        {
            let mut node = sh.lock_node();
            while let Some(c) = node.poll_command() {
                commands.push(c);
            }
        }
        for c in commands.drain(..) {
            let peer = peer_of(&c.op);
            sh.progress.contacts.submitted(peer, sh.now().0);
            sh.progress.submitting_peer.store(peer, Ordering::Release);
            sh.progress
                .submitting
                .store(sh.now().0 + 1, Ordering::Release);
            let posted = submit(&*fabric, &c.op);
            sh.progress.submitting.store(0, Ordering::Release);
            match posted {
                Ok(Ok(v)) => results.push((c.token, Ok(v))),
                Ok(Err(id)) => {
                    keep_open(sh, id, c.token, peer, true);
                    continue;
                }
                Err(e) => results.push((c.token, Err(failure_to(&*fabric, peer, e)))),
            }
            sh.progress.contacts.completed(peer, sh.now().0);
        }
        // 2. Completions in; operations past their timeout fail. (Under the open map's
        // lock: a worker collecting at the same time never tests an operation whose
        // completion this thread drained.)
        let mut completed = Vec::new();
        let mut slow: Vec<titus_core::Rank> = Vec::new();
        let now_i = Instant::now();
        {
            let mut open = crate::lock(&sh.progress.open);
            fabric.drain_completions(&mut done);
            for (id, r) in done.drain(..) {
                if let Some(o) = open.remove(&id) {
                    completed.push((o, r));
                }
            }
            // Others' operations (submitted by workers): one by one.
            test_open(&*fabric, &mut open, true, &mut completed);
            for o in open.values() {
                if now_i.duration_since(o.since) >= LIVENESS_AFTER && !slow.contains(&o.peer) {
                    slow.push(o.peer);
                }
            }
        };
        for (o, r) in completed {
            sh.progress.contacts.completed(o.peer, sh.now().0);
            // A failed operation to a process that is gone: say so in words (the
            // provider's error is often a bare EAGAIN or connection reset).
            results.push((o.token, r.map_err(|e| failure_to(&*fabric, o.peer, e))));
        }
        // Peers of slow operations whose process is gone (asked at most every
        // LIVENESS_EVERY per peer).
        let mut gone: Vec<(titus_core::Rank, String)> = Vec::new();
        for peer in slow {
            if asked
                .get(&peer)
                .is_some_and(|a| now_i.duration_since(*a) < LIVENESS_EVERY)
            {
                continue;
            }
            asked.insert(peer, now_i);
            if let Some(why) = fabric.peer_gone(peer) {
                gone.push((peer, why));
            }
        }
        let open_now = {
            let mut open = crate::lock(&sh.progress.open);
            open.retain(|_, o| {
                if let Some((_, why)) = gone.iter().find(|(p, _)| *p == o.peer) {
                    results.push((
                        o.token,
                        Err(OpFailure {
                            peer_gone: true,
                            detail: why.clone(),
                        }),
                    ));
                    return false;
                }
                if now_i.duration_since(o.since) > op_timeout {
                    results.push((
                        o.token,
                        Err(OpFailure {
                            peer_gone: true,
                            detail: format!(
                                "no completion within {op_timeout:?} (peer dead or not progressing)"
                            ),
                        }),
                    ));
                    false
                } else {
                    true
                }
            });
            open.len()
        };
        // Every rank in an epoch asks whether its peers' processes still exist: an idle
        // one waiting on others (no task here, no operation in flight to time out) every
        // LIVENESS_EVERY — a peer that died after its last operation with this rank
        // completed would otherwise be waited for forever — a busy one every
        // LIVENESS_BUSY_EVERY, so that a dead peer is named within seconds whatever this
        // rank is doing.
        let idle = open_now == 0 && sh.node.idle_workers() >= sh.cfg.workers;
        let sweep = now_i.duration_since(swept)
            >= if idle {
                LIVENESS_EVERY
            } else {
                LIVENESS_BUSY_EVERY
            }
            && (sh.epoch_running.load(Ordering::Acquire) || sh.starting.load(Ordering::Acquire));
        if sweep {
            swept = now_i;
        }
        let gone = if sweep { gone_peer(sh) } else { None };
        // 3. Feed the node; fire timers; decide how long to wait.
        let (wait, done, queued) = {
            let mut node = sh.lock_node();
            let now = sh.now();
            for (t, r) in results.drain(..) {
                node.handle_completion(now, t, r, &mem);
            }
            // (While the workers serve, a progress call leaves arrivals queued for them:
            // this turn takes what they have not.)
            fabric.take_signals(&mut signals);
            feed(&mut node, now, signals.drain(..), &mem);
            if sweep && (!node.is_done() || node.starting()) {
                sweep_peers(sh, &mut node, &mem, gone);
            }
            // The policy's wait (`WorkerPolicy::progress_wait_ns`): the node's deadline,
            // a busy nap while the workers serve, none with commands, short with
            // operations of its own in flight.
            let serve = sh.workers_serving();
            let wait = Duration::from_nanos(
                sh.policy.progress_wait_ns(
                    node.poll_timeout()
                        .map(|t| t.since(now).as_nanos().min(u128::from(u64::MAX)) as u64),
                    serve,
                    node.has_commands(),
                    open_now > 0,
                ),
            );
            sh.progress
                .deadline
                .store(now.plus(wait).0, Ordering::Release);
            // Where the fabric must poll (shm), the policy's nap
            // (`WorkerPolicy::progress_nap`). Busy by the busy count, which a worker
            // lowers before it wakes this thread on going idle or starting a costly
            // task: counted by the idle ones, a worker going idle still looked busy here
            // and the nap was the long one — 10 ms tails at the ends of shm epochs.
            let busy = sh.workers.busy.load(Ordering::Acquire);
            let hints = node.hints();
            let view = titus_core::NapView {
                polling_epoch: polled && sh.epoch_running.load(Ordering::Acquire),
                all_workers_busy: busy >= sh.cfg.workers,
                no_worker_busy: busy == 0,
                workers_serve: serve,
                expects_remote_ops: hints.expects_remote_ops,
                awaits_remote: hints.awaits_remote,
                starting: node.starting(),
                own_ops_in_flight: open_now > 0,
            };
            let nap = match sh.policy.progress_nap(&view) {
                titus_core::ProgressNap::Short => sh.cfg.epoch_nap,
                titus_core::ProgressNap::Busy => Duration::from_nanos(titus_core::BUSY_NAP_NS),
                titus_core::ProgressNap::Idle => Duration::from_nanos(titus_core::IDLE_NAP_NS),
            };
            if nap != nap_set {
                nap_set = nap;
                fabric.set_progress_nap(nap);
            }
            // While every worker runs tasks, they serve signals, timers and completions
            // between tasks; this thread need not be woken for each.
            // Every turn (a worker may have turned it off meanwhile: going idle, or
            // starting a costly task).
            fabric.set_workers_serve(serve);
            // A start that ended wakes the epoch's caller as an epoch's end does.
            let start_over = sh.starting.load(Ordering::Acquire) && !node.starting();
            (wait, node.is_done() || start_over, node.queued())
        };
        sh.wake_workers_for(queued);
        if done {
            sh.node.notify_end();
        }
        // 4. Block until anything happens.
        if let Err(e) = fabric.progress(wait, &mut signals) {
            let mut node = sh.lock_node();
            node.fail_from_driver(format!("fabric progress failed: {e}"));
            drop(node);
            sh.node.wake_everyone();
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}
