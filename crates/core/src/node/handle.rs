//! The node's inputs: completions, signals, timers, a worker's result, the driver's
//! liveness sweeps and failures; and failing, flooding and taking an ABORT.

use super::*;

impl Node {
    /// A liveness sweep's finding at `now` (`gone`: a peer whose process is gone, and
    /// why; `None`: every peer alive), after the signals that arrived were fed (a peer
    /// that sent the end and exited is not a failure). A rank that has DONE, or the root
    /// that decided it, ignores it: what is left is forwarding DONE. One that waits only
    /// for DONE gives it [`crate::DONE_GRACE`]: the peer may have had DONE already (it
    /// travels down the tree, to other subtrees first). Any other fails the epoch now.
    pub fn peers_swept(&mut self, now: Time, gone: Option<(Rank, String)>) {
        if self.start.is_running() {
            // Every peer takes part in a start: one gone fails it.
            if let Some((peer, why)) = gone {
                self.fail_peer_gone(peer, why);
            }
            return;
        }
        if self.is_done() || self.termination_detected() {
            return;
        }
        if let Some((peer, why)) = self.term.gone_verdict(now, gone) {
            self.fail_peer_gone(peer, why);
        }
    }

    /// The driver failed (its fabric broke): fail the epoch with `detail`.
    pub fn fail_from_driver(&mut self, detail: String) {
        self.fail(CoreError::Remote {
            op: "progress",
            peer: self.cx.rank,
            detail,
        });
    }

    /// The driver's user stopped the epoch here (`why`: a signal, Ctrl-C): it fails on
    /// every rank, as interrupted, not as a lost peer.
    pub fn interrupt(&mut self, why: String) {
        self.fail(CoreError::Interrupted {
            rank: self.cx.rank,
            why,
        });
    }

    /// The driver learnt that `peer`'s process is gone (in words: `detail`) while this rank
    /// waited: the epoch fails, naming it.
    pub fn fail_peer_gone(&mut self, peer: Rank, detail: String) {
        self.fail(CoreError::Remote {
            op: "liveness",
            peer,
            detail,
        });
    }

    /// A worker finished `task` with `result` (or failed it with a
    /// message); it ran for `cost_ns` (measured by the driver; it travels home with the
    /// result, and the mapper hears of it).
    pub fn task_done(
        &mut self,
        now: Time,
        id: TaskId,
        result: Result<Vec<u8>, String>,
        cost_ns: u64,
        mem: &dyn Memory,
    ) {
        self.tasks_done(now, [(id, result, cost_ns)], mem);
    }

    /// Workers finished these tasks, as [`Node::task_done`] each, and the node is driven
    /// once after them: a worker reports its grain's results together, and driving the
    /// node after each one cost small tasks about as much as storing their results.
    pub fn tasks_done(
        &mut self,
        now: Time,
        done: impl IntoIterator<Item = (TaskId, Result<Vec<u8>, String>, u64)>,
        mem: &dyn Memory,
    ) {
        self.cx.now = now;
        if self.failed.is_some() {
            return;
        }
        for (id, result, cost_ns) in done {
            self.record_done(id, result, cost_ns);
            if self.failed.is_some() {
                break;
            }
        }
        self.drive(mem);
    }

    /// Takes one finished task's result: the mapper hears of it, and it goes home.
    fn record_done(
        &mut self,
        id @ TaskId {
            owner,
            index,
            kind,
            key,
        }: TaskId,
        result: Result<Vec<u8>, String>,
        cost_ns: u64,
    ) {
        let rank = self.cx.rank;
        self.queue.mapper.task_finished(&Profile {
            kind,
            owner,
            index,
            rank,
            duration_ns: cost_ns,
        });
        self.cx.stats.tasks_run += 1;
        if owner != rank {
            self.cx.stats.tasks_run_for_others += 1;
        }
        if let Some(spawning) = &self.cx.cfg.spawning
            && index == crate::spawn::SPAWNED_INDEX
        {
            if !spawning.routes_home() {
                self.spawned_reduced(id, result);
                return;
            }
            // Going home like an epoch task's result (below). Counted before it leaves:
            // the waves' "completed" is also "sent home".
            self.spawn.completed += 1;
        }
        match result {
            Err(detail) => self.fail(CoreError::TaskFailed {
                owner,
                index,
                ran_on: rank,
                detail,
            }),
            Ok(data) if data.len() > self.cx.cfg.max_result as usize => {
                self.fail(CoreError::ResultTooLarge {
                    index,
                    len: data.len(),
                    limit: self.cx.cfg.max_result,
                })
            }
            Ok(data) => {
                let rec = layout::ResultRecord {
                    owner,
                    index,
                    cost_ns,
                    data,
                    key,
                };
                if let Err(e) = self
                    .results
                    .route(&mut self.cx, &mut self.router, rec, 0, rank)
                {
                    self.fail(e);
                }
            }
        }
    }

    /// A command completed: `Ok(value)` (an atomic's previous value, else 0) or a failure.
    pub fn handle_completion(
        &mut self,
        now: Time,
        token: Token,
        result: Result<u64, OpFailure>,
        mem: &dyn Memory,
    ) {
        self.cx.now = now;
        let Some(p) = self.cx.complete(token) else {
            return;
        };
        if self.failed.is_some() {
            return;
        }
        let value = match result {
            Ok(v) => v,
            Err(f) if f.peer_gone && self.gone_tolerated(&p, &f.detail, mem) => {
                self.drive(mem);
                return;
            }
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
        if let Pending::Start(p) = p {
            let mut out = Vec::new();
            self.start.on_complete(now, p, mem, &mut out);
            self.issue_start(out);
            return;
        }
        let closed = self.closed();
        let cx = &mut self.cx;
        let r = match p {
            Pending::Thief(t) => match self.thief.complete(cx, t, value, mem) {
                Ok(Some(stolen)) => {
                    self.take_stolen(stolen);
                    Ok(())
                }
                other => other.map(drop),
            },
            Pending::Owner(o) => self
                .owner
                .complete(cx, o, value, &mut self.queue, mem, closed),
            Pending::Out(o) => {
                self.results
                    .out
                    .complete(cx, &self.router.victims, o, value, mem);
                Ok(())
            }
            Pending::Inbox(i) => {
                self.results.inbox.complete(cx, i, value);
                Ok(())
            }
            // Signals: nothing to do once they are delivered.
            Pending::Share(_) | Pending::Term(_) | Pending::Abort => Ok(()),
            Pending::Start(_) => unreachable!("handled above"),
        };
        if let Err(e) = r {
            self.fail(e);
        }
        self.drive(mem);
    }

    /// A signal from `from` arrived.
    pub fn handle_signal(&mut self, now: Time, from: Rank, value: u64, mem: &dyn Memory) {
        self.cx.now = now;
        if from >= self.cx.size {
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
        if let Ok(Signal::Start {
            start,
            step,
            round,
            len,
        }) = sig
        {
            let mut out = Vec::new();
            let r = self
                .start
                .on_signal(now, from, start, step, round, len, mem, &mut out);
            self.issue_start(out);
            if let Err(e) = r {
                self.fail(e);
            }
            return;
        }
        if !self.running {
            self.early.push((from, value));
            return;
        }
        let r = sig.and_then(|sig| self.dispatch_signal(from, sig, mem));
        if let Err(e) = r {
            self.fail(e);
        }
        self.drive(mem);
    }

    /// Timers: call when [`Node::poll_timeout`] has passed.
    pub fn handle_timeout(&mut self, now: Time, mem: &dyn Memory) {
        self.cx.now = now;
        if self.start.is_running() && self.failed.is_none() {
            let mut out = Vec::new();
            self.start.on_timeout(now, mem, &mut out);
            self.issue_start(out);
            return;
        }
        if self.failed.is_none()
            && let Some((peer, why)) = self.term.grace_over(now)
        {
            self.fail_peer_gone(peer, why);
        }
        self.drive(mem);
    }

    /// Hands a decoded signal to the part it concerns.
    pub(super) fn dispatch_signal(
        &mut self,
        from: Rank,
        sig: Signal,
        mem: &dyn Memory,
    ) -> Result<(), CoreError> {
        let closed = self.closed();
        let cx = &mut self.cx;
        match sig {
            Signal::Start { .. } => unreachable!("the start's signals are handled first"),
            Signal::Chunk { .. } | Signal::Overflow { .. } | Signal::Reset => {
                let (pushed, last) =
                    self.results
                        .on_signal(cx, &mut self.router, from, sig, mem)?;
                if !pushed.is_empty() {
                    if self.term.is_done() {
                        // Termination needs every result home: a task cannot still travel.
                        return Err(CoreError::Malformed {
                            from,
                            what: format!("{} tasks pushed after the epoch ended", pushed.len()),
                        });
                    }
                    // The neighbours' plan holds its givers until their last chunk; under
                    // the string plan `from` may be a rank passing tasks on (below).
                    if cx.cfg.diffusion_plan == DiffusionPlan::Neighbours {
                        self.thief.push_arrived(from, last, cx.now, &cx.cfg);
                    }
                    // Tasks for other ranks (the string plan) go on towards them.
                    let (mine, on): (Vec<PushedTask>, Vec<PushedTask>) =
                        pushed.into_iter().partition(|p| p.dest == cx.rank);
                    for p in on {
                        let Some(hop) = self.router.next_hop(cx.cfg.routing, cx.rank, p.dest)
                        else {
                            return Err(ConfigError::NoRoute {
                                from: cx.rank,
                                to: p.dest,
                            }
                            .into());
                        };
                        cx.stats.tasks_forwarded += 1;
                        self.results.out.push_tasks(hop, std::slice::from_ref(&p));
                    }
                    if !mine.is_empty() {
                        if cx.stats.tasks_pushed_in == 0 {
                            cx.stats.pushed_in_at_ns = cx.now.since(cx.started).as_nanos() as u64;
                        }
                        cx.stats.tasks_pushed_in += mine.len() as u64;
                        // Estimates read from another rank: summed without trusting them.
                        let ns = mine
                            .iter()
                            .fold(0u64, |s, p| s.saturating_add(p.predicted_ns));
                        self.thief.pushed_here(ns, cx.now, &cx.cfg);
                        self.take_stolen(mine.into_iter().map(|p| p.task).collect());
                    }
                }
                Ok(())
            }
            Signal::Request {
                epoch,
                seq,
                workers_idle,
                rtype,
            } => {
                let stale = epoch != cx.epoch & EPOCH_MASK;
                if cx.cfg.sharing.is_some() && !stale {
                    if !self.share.is_master(cx) {
                        return Err(CoreError::Malformed {
                            from,
                            what: "a steal request to a rank that is not its group's master".into(),
                        });
                    }
                    if self.share.broker(cx, from, seq, &self.queue) == Decision::Forwarded {
                        return Ok(());
                    }
                }
                self.owner.on_request(
                    cx,
                    crate::steal::owner::Request {
                        thief: from,
                        stale,
                        seq,
                        workers_idle,
                        rtype,
                    },
                    &mut self.queue,
                    mem,
                    closed,
                );
                Ok(())
            }
            Signal::Reply {
                tasks,
                seq,
                unsupported,
            } => {
                if let Some(stolen) = self
                    .thief
                    .on_reply(cx, from, tasks, seq, unsupported, mem)?
                {
                    self.take_stolen(stolen);
                }
                Ok(())
            }
            Signal::Load { .. } | Signal::Forward { .. } => {
                if let Some(r) = self.share.on_signal(cx, from, sig)? {
                    self.owner.on_request(cx, r, &mut self.queue, mem, closed);
                }
                Ok(())
            }
            Signal::Refill => {
                self.owner.on_refill(cx);
                Ok(())
            }
            Signal::Wait {
                epoch,
                workers_idle,
            } => {
                self.owner.on_wait(cx, from, epoch, workers_idle);
                Ok(())
            }
            Signal::Advert { epoch, .. } => {
                self.thief.on_advert(cx, from, epoch);
                Ok(())
            }
            Signal::Up { wave } => self.term.on_up(cx, from, wave, mem),
            Signal::Done { again, wave } => {
                if self.term.on_done(cx, from, again, wave, mem)? {
                    self.queue.workers_idle = false;
                }
                Ok(())
            }
            Signal::Abort { .. } => Ok(()), // Handled in `handle_signal`.
        }
    }

    /// Stolen tasks join the queue; the owner side will share half of them on.
    pub(super) fn take_stolen(&mut self, tasks: Vec<Task>) {
        self.queue.extend(tasks);
        self.queue.workers_idle = false;
        self.owner.work_arrived(self.cx.now);
    }

    /// An operation's name and target, for an error.
    pub(super) fn describe(&self, p: &Pending) -> (&'static str, Rank) {
        let me = self.cx.rank;
        match p {
            Pending::Thief(t) => (t.name(), self.thief.peer(t)),
            Pending::Owner(o) => (o.name(), o.peer(me)),
            Pending::Share(s) => (s.name(), me),
            Pending::Out(o) => (o.name(), o.peer(&self.router.victims, me)),
            Pending::Inbox(i) => (i.name(), me),
            Pending::Term(t) => (t.name(), me),
            Pending::Start(s) => (s.name(), s.peer()),
            Pending::Abort => ("abort", me),
        }
    }

    /// Whether an operation that failed because its peer's process is gone (`detail`)
    /// may leave the epoch standing. Once this rank learned the end (DONE, or the root's
    /// decision: every result is home) nothing of the epoch needs the peer. While it
    /// waits only for DONE, the thief it stole from, answered or advertised to, or the
    /// rank of work sharing it reported to, may have had DONE already and exited (DONE
    /// travels down the tree, other subtrees first; a program may return without a
    /// collective end): a steal ends empty and its victim is asked no more, and DONE gets
    /// [`crate::DONE_GRACE`] — if it does not come the epoch fails naming the peer. A
    /// peer that died holding tasks or results never lets DONE come, so nothing is lost.
    /// Any other failure (results on their way, UP to the parent: that peer cannot have
    /// had DONE) fails the epoch now.
    pub(super) fn gone_tolerated(&mut self, p: &Pending, detail: &str, mem: &dyn Memory) -> bool {
        if self.term.is_done() {
            self.cx.stats.gone_tolerated += 1;
            return true;
        }
        if !self.term.awaits_done() {
            return false;
        }
        let (op, peer) = self.describe(p);
        match p {
            Pending::Thief(t) => self.thief.abandon(&mut self.cx, t),
            Pending::Owner(owner::Pending::Reply { thief }) => {
                // Its tasks, if any, are lost with the thief (then DONE cannot come):
                // on to the next request.
                let closed = self.closed();
                let o = owner::Pending::Reply { thief: *thief };
                if let Err(e) =
                    self.owner
                        .complete(&mut self.cx, o, 0, &mut self.queue, mem, closed)
                {
                    self.fail(e);
                }
            }
            Pending::Owner(owner::Pending::Advert { .. }) | Pending::Share(_) => {}
            _ => return false,
        }
        self.term
            .op_gone(self.cx.now, peer, format!("{op} failed: {detail}"));
        self.cx.stats.gone_tolerated += 1;
        true
    }

    /// Stops the epoch with `e` and tells the other ranks.
    pub(super) fn fail(&mut self, e: CoreError) {
        if self.failed.is_some() {
            return;
        }
        let code = e.code();
        let origin = match &e {
            CoreError::Aborted { rank, .. } => *rank,
            _ => self.cx.rank,
        };
        self.start.fail(e.clone());
        self.failed = Some(e);
        self.flood_abort(origin, code, None);
    }

    pub(super) fn flood_abort(&mut self, origin: Rank, code: u32, except: Option<Rank>) {
        if self.aborted {
            return;
        }
        self.aborted = true;
        let (rank, size) = (self.cx.rank, self.cx.size);
        self.cx.drop_commands();
        let mut to: Vec<Rank> = tree_children(rank, size)
            .chain(tree_parent(rank))
            .chain(self.router.victims.flood_targets())
            .collect();
        to.sort_unstable();
        to.dedup();
        let sig = Signal::Abort {
            origin,
            code: (code & 0xffff) as u16,
        };
        for r in to {
            if Some(r) != except && r != rank {
                self.cx.signal(r, sig, Pending::Abort);
            }
        }
    }

    pub(super) fn on_abort(&mut self, from: Rank, origin: Rank, code: u16) {
        // A rank outside the job is not trusted, but the epoch fails all the same.
        let origin = origin.min(self.cx.size.saturating_sub(1));
        let code = u32::from(code);
        if self.failed.is_none() {
            let e = CoreError::Aborted { rank: origin, code };
            self.start.fail(e.clone());
            self.failed = Some(e);
        }
        self.flood_abort(origin, code, Some(from));
    }
}
