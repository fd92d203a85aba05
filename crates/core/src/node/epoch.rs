//! An epoch's life on a node: its start over the fabric, its tasks queued (and pushed,
//! where diffusion planned it), and its results taken at the end.

use super::*;
use crate::spawn::Spawning;

impl Node {
    /// Begins the epoch start (`crate::start`): the collectives that tell this rank what
    /// it needs of the others before its tasks run. Every rank calls it, after the epoch
    /// before ended here; its operations leave through [`Node::poll_command`] and its
    /// inputs come in as every other (signals, completions, timeouts) until
    /// [`Node::poll_start`] has the outcome. Then the driver predicts and calls
    /// [`Node::start_epoch_predicted`].
    pub fn begin_start(
        &mut self,
        now: Time,
        input: crate::start::StartInput,
        mem: &dyn Memory,
    ) -> Result<(), CoreError> {
        if self.running {
            return Err(CoreError::Usage("an epoch start while an epoch is running"));
        }
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        self.cx.now = now;
        let mut out = Vec::new();
        let r = self
            .start
            .begin(now, self.cx.rank, self.cx.size, input, mem, &mut out);
        self.issue_start(out);
        r
    }

    /// The epoch start's outcome, once it ended (once): what the epoch is to start from,
    /// or why the start failed (here, or on the rank whose ABORT reached this one).
    pub fn poll_start(&mut self) -> Option<Result<crate::start::StartOutcome, CoreError>> {
        if let Some(e) = &self.failed
            && self.start.is_running()
        {
            self.start.fail(e.clone());
        }
        self.start.take_outcome()
    }

    pub(super) fn issue_start(&mut self, out: Vec<crate::start::part::Issue>) {
        for (op, p) in out {
            self.cx.issue(op, Pending::Start(p));
        }
        self.end_failed_start();
    }

    /// A start that failed here fails the node (its ABORT tells the others).
    pub(super) fn end_failed_start(&mut self) {
        if let Some(Err(e)) = self.start.peek_outcome() {
            let e = e.clone();
            if self.failed.is_none() {
                self.fail(e);
            }
        }
    }

    /// Writes the layout's version word; call once before the first epoch, on every rank,
    /// and let every rank finish before any starts (the driver's barrier).
    pub fn init_memory(&self, mem: &dyn Memory) {
        mem.write(
            Loc::new(seg::TASKS, tasks::MAGIC),
            &layout::LAYOUT_MAGIC.to_le_bytes(),
        );
    }

    /// Starts an epoch with this rank's tasks (kind, payload), without predictions (no
    /// diffusion). See [`Node::start_epoch_predicted`].
    pub fn start_epoch<T: Into<NewTask>>(
        &mut self,
        now: Time,
        tasks: Vec<T>,
        mem: &dyn Memory,
    ) -> Result<(), CoreError> {
        self.start_epoch_predicted(now, tasks, None, mem)
    }

    /// Starts an epoch with this rank's tasks ([`NewTask`]: kind, payload, priority; or
    /// `(kind, payload)`) and, for diffusion, their predicted costs and the neighbours'
    /// predicted loads: tasks pushed to neighbours leave before any worker takes one.
    /// Every rank calls it, after a barrier that follows the previous epoch's end on every
    /// rank. Signals that arrived since the previous epoch ended are handled now, in the
    /// new epoch.
    pub fn start_epoch_predicted<T: Into<NewTask>>(
        &mut self,
        now: Time,
        tasks: Vec<T>,
        prediction: Option<&Prediction>,
        mem: &dyn Memory,
    ) -> Result<(), CoreError> {
        if self.running {
            return Err(CoreError::Usage("start_epoch while an epoch is running"));
        }
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        // A rank without its combine fails the epoch on every rank (ABORT): the others
        // passed the start and would wait for its waves.
        if let Some(Err(why)) = self.cx.cfg.spawning.as_ref().map(Spawning::check) {
            let e = CoreError::from(ConfigError::Reduction(why));
            self.fail(e.clone());
            return Err(e);
        }
        let n = tasks.len();
        if let Some(p) = prediction
            && (p.costs_ns.len() != n || !(p.costly.is_empty() || p.costly.len() == n))
        {
            return Err(ConfigError::PredictionLength {
                costs: p.costs_ns.len(),
                costly: p.costly.len(),
                tasks: n,
            }
            .into());
        }
        // The tasks become the queue's in one pass, checked on the way (a step of 131,072
        // tasks took two more passes over 6 MB), into the last epoch's queue buffer, empty
        // now (fresh, it faulted in 7 MB a step). Nothing else has changed yet: a refusal
        // leaves the node as it was.
        let rank = self.cx.rank;
        let max_payload = self.cx.cfg.max_payload as usize;
        let mut too_large = None;
        let mut tasks_queued = self.queue.spare();
        tasks_queued.extend(tasks.into_iter().enumerate().map(|(i, t)| {
            let t: NewTask = t.into();
            if t.payload.len() > max_payload && too_large.is_none() {
                too_large = Some((i, t.payload.len()));
            }
            Task {
                key: 0,
                owner: rank,
                index: i as u32,
                kind: t.kind,
                priority: t.priority,
                cost_ns: if t.cost_hint_ns > 0 {
                    t.cost_hint_ns
                } else {
                    prediction.map_or(0, |p| p.costs_ns[i])
                },
                payload: t.payload,
            }
        }));
        if let Some((i, len)) = too_large {
            tasks_queued.clear();
            self.queue.give_back(tasks_queued);
            return Err(CoreError::PayloadTooLarge {
                index: i as u32,
                len,
                limit: self.cx.cfg.max_payload,
            });
        }
        let diffusion = self.diffusion_enabled();
        let neighbours = if diffusion && prediction.is_some() {
            self.diffusion_neighbours()
        } else {
            Vec::new()
        };
        self.start_termination();
        let cx = &mut self.cx;
        cx.now = now;
        cx.started = now;
        cx.epoch += 1;
        self.running = true;
        self.results.home.start(n);
        cx.stats = Stats {
            tasks_owned: n as u64,
            ..Stats::default()
        };
        self.thief
            .start_epoch(steal_rng(cx.cfg.seed, cx.rank, Some(cx.epoch)));
        self.owner.start_epoch();
        if let Some(targets) = self.share.start_epoch(cx) {
            self.thief.set_targets(targets);
        }
        self.balanced_start = false;
        let mut tasks = tasks_queued;
        // The predicted costs that order the queue, where diffusion predicted them.
        let mut order_by = None;
        if let Some(p) = prediction
            && diffusion
        {
            let predicted = diffuse::predicted_load(&p.costs_ns);
            let costs = diffuse::filled(&p.costs_ns);
            cx.stats.predicted_ns = predicted.unwrap_or(0);
            // A rank whose own tasks were predicted, or that gets pushes (an empty one
            // without either shares on what it steals, as before).
            self.balanced_start = costs.is_some();
            // Only loads of diffusion neighbours count (a driver's extra entries do not).
            let loads: Vec<(Rank, u64)> = p
                .neighbour_loads
                .iter()
                .copied()
                .filter(|(r, _)| neighbours.binary_search(r).is_ok())
                .collect();
            let string = p
                .string
                .as_ref()
                .filter(|_| cx.cfg.diffusion_plan == DiffusionPlan::String);
            // Neighbours that predicted more push here: leave them alone until then.
            if let Some(s) = string {
                let coming = s.receives;
                self.balanced_start |= coming > 0;
                self.thief.expect_push(coming, now, &cx.cfg);
            } else if let Some(mine) = predicted
                && cx.cfg.sharing.is_none()
            {
                let givers: Vec<Rank> = loads
                    .iter()
                    .filter(|&&(_, l)| l > mine)
                    .map(|&(r, _)| r)
                    .collect();
                self.balanced_start |= !givers.is_empty();
                self.thief
                    .hold_for_push(&givers, now, now.plus(cx.cfg.push_wait));
            }
            let max_record = outbound::max_record(&cx.cfg);
            let plan = match string {
                Some(s) => {
                    let (plan, costly) =
                        diffuse::string_plan(&mut tasks, &p.costs_ns, &p.costly, s, max_record);
                    cx.stats.tasks_pushed_costly = costly as u64;
                    plan
                }
                None => diffuse::plan(
                    &mut tasks,
                    &p.costs_ns,
                    &loads,
                    neighbours.len(),
                    max_record,
                ),
            };
            for (to, batch) in plan {
                // A diffusion neighbour is an out-neighbour; the string plan's receivers
                // are reached through the overlay, as results are.
                let Some(hop) = self.router.next_hop(cx.cfg.routing, rank, to) else {
                    return Err(ConfigError::NoRoute { from: rank, to }.into());
                };
                cx.stats.tasks_pushed += batch.len() as u64;
                cx.stats.pushed_ns = batch
                    .iter()
                    .fold(cx.stats.pushed_ns, |s, t| s.saturating_add(t.predicted_ns));
                self.results.out.push_tasks(hop, &batch);
            }
            order_by = costs;
        }
        // After a balanced start the queue (or the pushes it receives) is in predicted
        // order, costliest first (longest processing time first), by cost class: it
        // shares its cheap end. By the best estimate: the caller's hint where it gave
        // one, else the prediction.
        let queue = match order_by {
            Some(costs) => crate::predicted_order::costliest_first(
                tasks,
                |t| {
                    if t.cost_ns > 0 {
                        t.cost_ns
                    } else {
                        costs[t.index as usize]
                    }
                },
                self.queue.order_buckets(),
            ),
            None => tasks.into(),
        };
        self.queue.start(queue, self.balanced_start);
        for (from, value) in std::mem::take(&mut self.early) {
            self.handle_signal(now, from, value, mem);
        }
        self.drive(mem);
        Ok(())
    }

    /// Ends the epoch: this rank's results, in task order.
    pub fn take_results(&mut self) -> Result<Vec<Vec<u8>>, CoreError> {
        self.take_epoch_results().map(|r| r.results)
    }

    /// Ends the epoch: this rank's results and their tasks' measured costs, in task order.
    pub fn take_epoch_results(&mut self) -> Result<EpochResults, CoreError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if !self.is_done() {
            return Err(CoreError::Usage("take_results before the epoch ended"));
        }
        self.running = false;
        let (results, costs_ns) = self.results.home.take()?;
        Ok(EpochResults {
            results,
            costs_ns,
            reduced: self.term.reduced().map(<[u64]>::to_vec).unwrap_or_default(),
            spawned: self.results.home.take_spawned(),
        })
    }
}
