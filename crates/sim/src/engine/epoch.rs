//! Epochs: each rank's start over the simulated fabric, the run, and the checks at
//! each epoch's end.

use super::*;
use std::time::Duration;

impl<'a> Sim<'a> {
    /// Each rank calls the epoch at `now` plus its skew: its start (`titus_core::start`)
    /// then runs over the simulated fabric like any other operation. A rank given one key
    /// twice fails the run, as it fails the runtime's epoch.
    pub(super) fn start_epoch(&mut self, now: u64) -> Result<(), Violation> {
        if self.current.len() != self.nodes.len() {
            return Err(Violation::Broken(format!(
                "epoch {}: {} task lists for {} ranks",
                self.epoch + 1,
                self.current.len(),
                self.nodes.len()
            )));
        }
        for r in 0..self.nodes.len() {
            let keys: Vec<u64> = self.current[r].iter().map(|t| t.key).collect();
            CostHistory::check_keys(&keys).map_err(|e| {
                Violation::Broken(format!("epoch {}, rank {r}: {e}", self.epoch + 1))
            })?;
            self.keys[r] = keys;
        }
        if self.job.check_start {
            self.reference = Some(self.whole_job_plan());
        }
        for r in 0..self.nodes.len() as u32 {
            let skew = match self.job.start_skew_ns {
                0 => 0,
                s => self.rng.below(s + 1),
            };
            // The rank calls the epoch once its last epoch's history is recorded, and
            // sends its first message once its input is built.
            let i = r as usize;
            let call = now + skew + std::mem::take(&mut self.history_owed[i]);
            self.began[i] = call;
            let input = StartCpu::of(self.job.start_cpu.input_ns, self.keys[i].len());
            self.at(call + input, Ev::Start { node: r });
        }
        Ok(())
    }

    /// The whole job's plan from every rank's profile and prediction (the reference).
    pub(super) fn whole_job_plan(&mut self) -> WholeJobPlan {
        let keys = std::mem::take(&mut self.keys);
        let tasks = std::mem::take(&mut self.current);
        let job = WholeJob::of(&keys, &tasks, &self.history, &mut self.reference_front);
        (self.keys, self.current) = (keys, tasks);
        let front = &self.reference_front;
        WholeJobPlan {
            movement: job.movement,
            loads: front.plan_loads(&job.profiles, &job.own, &job.alone),
            string: front.string_loads(&job.profiles, &job.own, &job.classes, &job.alone),
        }
    }

    /// Rank `n`'s start ended at `now` with `outcome`: its tasks start from the
    /// prediction the outcome completes.
    pub(super) fn begin_epoch(
        &mut self,
        n: u32,
        now: u64,
        outcome: Result<titus_core::start::StartOutcome, titus_core::CoreError>,
    ) -> Result<(), Violation> {
        let i = n as usize;
        let own = self.own[i].take().expect("a start under way");
        // A failed start failed the node: `after` reports it.
        let Ok(out) = outcome else {
            return Ok(());
        };
        out.runs(&own, false)
            .map_err(|e| Violation::Broken(format!("epoch {}, rank {n}: {e}", self.epoch + 1)))?;
        let tasks: Vec<titus_core::NewTask> = self.tasks()[i]
            .iter()
            .map(|t| titus_core::NewTask {
                key: 0,
                kind: t.kind,
                payload: t.payload.clone(),
                priority: t.priority,
                cost_hint_ns: t.hint_ns,
            })
            .collect();
        let prediction = out.prediction(&self.keys[i], own, &self.history[i]);
        self.nodes[i]
            .start_epoch_predicted(Time(now), tasks, prediction.as_ref(), &self.mems[i])
            .map_err(|e| Violation::Broken(format!("rank {n}: start: {e}")))?;
        self.per[i].start = Some(now);
        self.per[i].home_seen = self.nodes[i].results_home().0;
        self.start_figures[i] = (now - self.began[i], out.figures);
        if let Some(r) = &self.reference {
            // The start's plan is the all-gather's wherever the root found the whole-job
            // front's movement (its summary may miss a shift under two sample steps).
            if out.movement == r.movement {
                let (load, string) = (&r.loads[i], r.string.rank_string(n));
                let string_used = out.string.is_some();
                if out.load != *load || (string_used && out.string.as_ref() != Some(&string)) {
                    return Err(Violation::Broken(format!(
                        "epoch {}, rank {n}: the start planned load {:?} and {:?}, the whole job's plan {load:?} and {string:?}",
                        self.epoch + 1,
                        out.load,
                        out.string
                    )));
                }
            }
        }
        Ok(())
    }

    /// Runs the epoch until every rank ended it; returns the time of its last event.
    pub(super) fn run_epoch(&mut self, stall: Option<(u32, u64, u64)>) -> Result<u64, Violation> {
        let n = self.nodes.len();
        let mut last = 0;
        while self.done_count < n {
            let Some((t, seq, slot)) = self.pop() else {
                if let Some((_, _, first)) = &self.first_failure {
                    return Err(Violation::Broken(format!(
                        "{first}; but {} of {n} ranks never stopped: {}",
                        n - self.failed_count,
                        self.unfailed()
                    )));
                }
                let stuck = self.stuck();
                return Err(Violation::Broken(format!(
                    "the run stalled: nothing left to happen with {} of {n} ranks done; {stuck}",
                    self.done_count
                )));
            };
            if t > time::HORIZON_NS {
                return Err(Violation::Broken(format!(
                    "virtual time passed {} s ({} ns) with {} of {n} ranks done",
                    time::HORIZON_NS / 1_000_000_000,
                    time::HORIZON_NS,
                    self.done_count
                )));
            }
            last = t;
            if let Some((slot, rank)) = self.queue.ahead(queue::AHEAD - 1) {
                self.touch(slot, rank);
            }
            // A marker: the rank's earliest waiting event, in that event's place in the order
            // (the same order as if the event itself had been queued again).
            let (seq, slot, marked) = if slot & MARKER != 0 {
                let r = (slot & !MARKER) as usize;
                if self.per[r].wake != Some((t, seq)) {
                    continue; // Superseded by a marker for an earlier waiting event.
                }
                self.per[r].wake = None;
                let Reverse((seq, slot)) =
                    *self.per[r].deferred.peek().expect("a marker has events");
                (seq, slot, true)
            } else {
                (seq, slot, false)
            };
            let (slot, parked) = (slot & !PARKED, slot & PARKED != 0);
            let node = self.slab[slot as usize].as_ref().and_then(Ev::node);
            if let Some(node) = node {
                if parked {
                    self.per[node as usize].parked = false;
                }
                // The rank's progress thread is busy, or stalled by a fault: later.
                let ready = self.ready(node, t, stall);
                if ready > t {
                    if let Some(Ev::Timer { node }) = self.slab[slot as usize] {
                        // At most one live timer per rank: it waits in the queue itself.
                        if self.per[node as usize].timer_at == Some(t) {
                            self.per[node as usize].timer_at = Some(ready);
                        }
                        self.queue.push(ready, seq, slot, node);
                    } else if !marked
                        && !self.per[node as usize].parked
                        && self.per[node as usize].deferred.is_empty()
                    {
                        self.per[node as usize].parked = true;
                        self.queue.push(ready, seq, slot | PARKED, node);
                    } else {
                        if !marked {
                            self.per[node as usize].deferred.push(Reverse((seq, slot)));
                        }
                        self.mark(node, ready);
                    }
                    continue;
                }
                if marked {
                    self.per[node as usize].deferred.pop();
                }
            }
            let ev = self.take(slot);
            self.handle(t, ev)?;
            if let Some(node) = node
                && self.per[node as usize].wake.is_none()
            {
                // Its earliest waiting event, when the progress thread is free for it (a
                // marker at `t` would only come back to be queued again there).
                let ready = self.ready(node, t, stall);
                self.mark(node, ready);
            }
            if self.events > self.job.max_events {
                if let Some((_, _, first)) = &self.first_failure {
                    return Err(Violation::Broken(format!(
                        "{first}; but {} of {n} ranks had not stopped after {} events: {}",
                        n - self.failed_count,
                        self.events,
                        self.unfailed()
                    )));
                }
                let stuck = self.stuck();
                return Err(Violation::Broken(format!(
                    "no end after {} events ({} of {n} ranks done); {stuck}",
                    self.events, self.done_count
                )));
            }
        }
        Ok(last)
    }

    /// Checks the epoch that just ended (`epoch`, from 0): every task ran exactly once,
    /// every result is home and right, and nothing of it still travels but what the next
    /// epoch must answer with nothing (module doc). Returns each rank's outcome. The
    /// epoch's tasks go once checked: the driver makes the next epoch's meanwhile.
    pub(super) fn finish_epoch(&mut self, epoch: usize) -> Result<Vec<RankOutcome>, Violation> {
        let tasks = std::mem::take(&mut self.current);
        self.check_epoch(epoch, &tasks)
    }

    pub(super) fn check_epoch(
        &mut self,
        epoch: usize,
        tasks: &[Vec<SimTask>],
    ) -> Result<Vec<RankOutcome>, Violation> {
        let n = self.nodes.len();
        for (o, r) in self.runs.iter().enumerate() {
            if let Some(x) = r.iter().position(|&c| c != 1) {
                return Err(Violation::Broken(format!(
                    "task {x} of rank {o} ran {} times",
                    r[x]
                )));
            }
        }
        let mut out = Vec::with_capacity(n);
        for (r, tasks) in tasks.iter().enumerate() {
            let stats = std::mem::take(&mut self.stats[r]);
            let results = std::mem::take(&mut self.results[r]);
            let reduced = std::mem::take(&mut self.reduced[r]);
            let spawned = std::mem::take(&mut self.spawned[r]);
            let costs_ns = std::mem::take(&mut self.costs[r]);
            if costs_ns.len() != tasks.len() {
                return Err(Violation::Broken(format!(
                    "rank {r} got {} costs for {} tasks",
                    costs_ns.len(),
                    tasks.len()
                )));
            }
            for (x, &c) in costs_ns.iter().enumerate() {
                // The cost that came home is the one the task ran for where it ran.
                let ran = self.ran_for[r][x];
                if c != ran {
                    return Err(Violation::Broken(format!(
                        "task {x} of rank {r} came home with cost {c} ns, ran for {ran} ns \
                         (drawn {} ns)",
                        tasks[x].cost_ns
                    )));
                }
            }
            if results.len() != tasks.len() {
                return Err(Violation::Broken(format!(
                    "rank {r} got {} results for {} tasks",
                    results.len(),
                    tasks.len()
                )));
            }
            for (x, res) in results.iter().enumerate() {
                if *res != (self.job.result)(&tasks[x].payload) {
                    return Err(Violation::Broken(format!(
                        "task {x} of rank {r} came home wrong"
                    )));
                }
            }
            let max_hops = stats.result_hops.len().saturating_sub(1);
            if max_hops > n {
                return Err(Violation::Broken(format!(
                    "a result of rank {r} took {max_hops} hops in a job of {n}"
                )));
            }
            // Connections held (and their bytes), ranks exchanged operations with.
            let ((connections, connection_bytes), contacts) = match &self.peers {
                Some(p) => (self.held(r, p.of(r as u32)), p.used(r as u32)),
                None => (
                    self.held(r, self.contacts[r].iter().copied()),
                    self.contacts[r].len() as u32,
                ),
            };
            let session = Duration::from_nanos(self.per[r].end.unwrap_or(0) - self.began[r]);
            let busy = Duration::from_nanos(self.per[r].busy);
            let share = self
                .job
                .model
                .cpu
                .as_ref()
                .map_or(0.0, |c| c.progress_share);
            let stats = titus_core::EpochStats {
                busy,
                idle: titus_core::EpochStats::idle_of(session, self.job.workers, busy),
                between: Duration::from_nanos(self.per[r].between.0),
                betweens: self.per[r].between.1,
                session,
                start: Duration::from_nanos(self.start_figures[r].0),
                start_figures: self.start_figures[r].1,
                steal: Duration::from_nanos(stats.steal_ns),
                progress_cpu: session.mul_f64(share) + Duration::from_nanos(self.per[r].op_cpu),
                protocol: self.job.core.protocol.name(),
                workers: self.job.workers,
                resources: self.res(r).map(Resources::counts).unwrap_or_default(),
                core: stats,
            };
            out.push(RankOutcome {
                stats,
                called_ns: self.began[r],
                spans: self
                    .spans
                    .get_mut(r)
                    .map(std::mem::take)
                    .unwrap_or_default(),
                keys: match self.job.trace {
                    true => self.keys[r].clone(),
                    false => Vec::new(),
                },
                results,
                reduced,
                spawned,
                costs_ns,
                peers: contacts,
                connections,
                connect_ns: self.connect_ns[r],
                connection_bytes,
                accel_busy_ns: self.accel_busy[r],
                busy_by_owner: std::mem::take(&mut self.busy_by_owner[r]),
                dispatches: std::mem::take(&mut self.dispatches[r]),
            });
            if let Some(t) = self.res_mut(r) {
                t.reset_counts();
            }
        }
        for ev in self.slab.iter().flatten() {
            let leftover = match ev {
                Ev::Timer { .. } => true,
                // Requests, load reports, refill hints and advertisement's WAIT and ADVERT
                // may outlive the epoch (they are dropped as stale in the next one), and so
                // may an empty answer.
                Ev::Signal { value, from, .. } => matches!(
                    Signal::unpack(*value, *from),
                    Ok(Signal::Request { .. }
                        | Signal::Load { .. }
                        | Signal::Forward { .. }
                        | Signal::Refill
                        | Signal::Wait { .. }
                        | Signal::Advert { .. }
                        | Signal::Reply { tasks: 0, .. })
                ),
                _ => false,
            };
            if !leftover {
                return Err(Violation::Broken(format!(
                    "epoch {}: {ev:?} still in flight after every rank ended it",
                    epoch + 1
                )));
            }
        }
        Ok(out)
    }

    /// Makes ready for the next epoch (every rank ended this one): its tasks are the job's
    /// unless the driver gave others (`tasks`).
    pub(super) fn next_epoch(&mut self, tasks: Option<Vec<Vec<SimTask>>>) {
        self.epoch += 1;
        self.current = match tasks {
            Some(t) => Cow::Owned(t),
            None => Cow::Borrowed(&self.job.later_epochs[self.epoch - 1]),
        };
        let tasks = &self.current;
        self.runs = tasks.iter().map(|t| vec![0; t.len()]).collect();
        self.ran_for = tasks.iter().map(|t| vec![0; t.len()]).collect();
        self.own_total = tasks.iter().map(|t| t.len() as u64).sum();
        self.home_total = 0;
        self.done_count = 0;
        self.per.iter_mut().for_each(|p| p.start = None);
        self.per.iter_mut().for_each(|p| p.end = None);
        self.per.iter_mut().for_each(|p| {
            p.busy = 0;
            p.op_cpu = 0;
            p.op_debt = 0;
            p.serve_debt = 0;
            p.between = (0, 0);
        });
        self.accel_busy.iter_mut().for_each(|b| *b = 0);
        self.busy_by_owner.iter_mut().for_each(BTreeMap::clear);
        self.dispatches.iter_mut().for_each(Vec::clear);
        // Timers of the last epoch are void (the nodes arm new ones).
        self.per.iter_mut().for_each(|p| p.timer_at = None);
    }
}

/// The whole job's plan of an epoch's start, as the runtime computed it from an all-gather
/// of every rank's record: the reference [`Job::check_start`] holds each rank's start to.
#[derive(Debug)]
pub(super) struct WholeJobPlan {
    movement: titus_core::Movement,
    loads: Vec<Option<u64>>,
    string: titus_core::StringLoads,
}

/// Whether `op` reads or writes a START segment (the epoch start's, `titus_core::start`).
pub(super) fn on_start_segment(op: &Op) -> bool {
    match op {
        Op::Read { remote, .. } | Op::Write { remote, .. } => remote.segment == seg::START,
        _ => false,
    }
}

pub(super) fn layout_loc(offset: u64) -> titus_core::Loc {
    titus_core::Loc::new(seg::TASKS, offset)
}
