//! An epoch: its start over the fabric, the run, and its figures; the repartition plan.

use super::*;

impl Runtime {
    /// Runs one epoch: this rank's tasks (kind, payload) go in, this rank's results come
    /// out in task order once every rank's results are home. Collective: every rank calls
    /// it (with its own tasks, possibly none). A task's key is its index in this list
    /// (see [`Runtime::run_epoch_keyed`]).
    pub fn run_epoch(&self, tasks: Vec<(u16, Vec<u8>)>) -> Result<EpochOutput, RuntimeError> {
        self.epoch(indexed(tasks), false)
            .map(|out| out.expect("an epoch always runs"))
    }

    /// [`Runtime::run_epoch`] with a caller-given identity per task: a task's measured cost
    /// is remembered under its key until the next epoch, which predicts its cost from it
    /// and pushes work to less-loaded neighbours before the workers start (diffusion,
    /// `Config::diffusion`). Keys that vanish drop out of the history; new keys have none.
    /// Two tasks with one key fail the epoch on every rank before anything runs
    /// ([`CoreError::DuplicateKey`] here, [`CoreError::Aborted`] elsewhere).
    pub fn run_epoch_keyed(&self, tasks: Vec<TaskIn>) -> Result<EpochOutput, RuntimeError> {
        self.epoch(tasks, false)
            .map(|out| out.expect("an epoch always runs"))
    }

    /// [`Runtime::run_epoch`], unless no rank has any task: then `None` on every rank, and
    /// nothing ran (the same one barrier decides it).
    pub fn run_epoch_if_any(
        &self,
        tasks: Vec<(u16, Vec<u8>)>,
    ) -> Result<Option<EpochOutput>, RuntimeError> {
        self.epoch(indexed(tasks), true)
    }

    /// [`Runtime::run_epoch_keyed`], unless no rank has any task (as
    /// [`Runtime::run_epoch_if_any`]).
    pub fn run_epoch_if_any_keyed(
        &self,
        tasks: Vec<TaskIn>,
    ) -> Result<Option<EpochOutput>, RuntimeError> {
        self.epoch(tasks, true)
    }

    /// A repartition plan (RankDLB's step 4; `titus_core::repartition`): which of this
    /// rank's tasks should move permanently to which neighbour in the rank string so that
    /// the loads predicted from the last epoch's measured costs even out. `keys` are the
    /// tasks this rank will own, in string order (a task without a measured cost counts at
    /// the mean of those with one). Collective: every rank calls it, after at least one
    /// epoch (before, or with a key given twice, it fails naming why).
    pub fn repartition_plan(
        &self,
        keys: &[u64],
    ) -> Result<Vec<titus_core::repartition::Move>, RuntimeError> {
        // A repartition start (`titus_core::start`): the facts, the front and a scan of
        // the loads over the job's own fabric, as the epoch's start.
        let sh = &self.shared;
        let own = {
            let h = self.history.lock();
            let measured = self.measured.load(Ordering::Acquire);
            let node = sh.lock_node();
            let (input, own) = titus_core::start::StartInput::for_repartition(
                &node,
                keys,
                &h,
                measured,
                sh.cfg.epoch_timeout,
            );
            self.begin_start(node, input)?;
            own
        };
        let outcome = self.finish_start()?;
        let h = self.history.lock();
        // What fails here is the plan's input, on this rank or another (a refusal).
        outcome
            .repartition_plan(keys, own, &h, sh.cfg.core.repartition_plan)
            .map_err(|e| RuntimeError::Config(e.to_string()))
    }

    /// Begins a start (an epoch's or a repartition's) with `input` on the locked `node`.
    pub(crate) fn begin_start(
        &self,
        mut node: crate::sync::MutexGuard<'_, Node>,
        input: titus_core::start::StartInput,
    ) -> Result<(), RuntimeError> {
        let sh = &self.shared;
        sh.starting.store(true, Ordering::Release);
        if let Err(e) = node.begin_start(sh.now(), input, &SegMem(&*sh.fabric)) {
            sh.starting.store(false, Ordering::Release);
            return Err(e.into());
        }
        drop(node);
        sh.fabric.wake();
        Ok(())
    }

    /// Waits for the start under way, driven by the progress thread, to end: its
    /// outcome, or why it failed (a peer gone names it).
    pub(crate) fn finish_start(&self) -> Result<titus_core::start::StartOutcome, RuntimeError> {
        let sh = &self.shared;
        let mut node = sh.lock_node();
        let outcome = loop {
            if let Some(o) = node.poll_start() {
                break o;
            }
            if sh.fail_if_stuck(&mut node) {
                continue;
            }
            node = sh.node.wait_for_end(node, Duration::from_millis(50));
        };
        sh.starting.store(false, Ordering::Release);
        // (Its own look may wait for a frozen peer: not under the node's lock, which the
        // progress thread needs to pass the ABORT on.)
        drop(node);
        outcome.map_err(|e| sh.with_own_look(e).into())
    }

    /// Forgets every measured cost: the next epoch has no history (no diffusion).
    pub fn clear_history(&self) {
        *self.history.lock() = CostHistory::default();
    }

    pub(crate) fn epoch(
        &self,
        tasks: Vec<TaskIn>,
        skip_if_none: bool,
    ) -> Result<Option<EpochOutput>, RuntimeError> {
        let call = Instant::now();
        if let Some(tr) = &self.shared.trace {
            tr.begin_epoch();
        }
        // One pass over the tasks for their keys, whether any has a hint, and the core's
        // type (in the same buffer).
        let mut keys: Vec<u64> = Vec::with_capacity(tasks.len());
        let mut any_hint = false;
        let tasks: Vec<NewTask> = tasks
            .into_iter()
            .map(|t| {
                keys.push(t.key);
                any_hint |= t.cost_hint_ns > 0;
                NewTask {
                    key: t.key,
                    kind: t.kind,
                    payload: t.payload,
                    priority: t.priority,
                    cost_hint_ns: t.cost_hint_ns,
                }
            })
            .collect();
        let sh = &self.shared;
        // The epoch start (`titus_core::start`): collectives over the job's own fabric,
        // driven by the progress thread like every other operation.
        let own = {
            let h = self.history.lock();
            let node = sh.lock_node();
            // (Without a hint, no pass over the tasks for them.)
            let hinted: &[NewTask] = if any_hint { &tasks } else { &[] };
            let hints = hinted.iter().map(|t| t.cost_hint_ns);
            let (input, own) =
                titus_core::start::StartInput::of(&node, &keys, hints, &h, sh.cfg.epoch_timeout);
            self.begin_start(node, input)?;
            own
        };
        let prepare_time = call.elapsed();
        let outcome = self.finish_start()?;
        let gather_time = call.elapsed() - prepare_time;
        let t_plan = Instant::now();
        if !outcome.runs(&own, skip_if_none)? {
            return Ok(None);
        }
        let prediction = {
            let h = self.history.lock();
            outcome.prediction(&keys, own, &h)
        };
        let plan_time = t_plan.elapsed();
        sh.figures.busy_ns.store(0, Ordering::Relaxed);
        sh.figures.between_ns.store(0, Ordering::Relaxed);
        sh.figures.betweens.store(0, Ordering::Relaxed);
        sh.res.epoch.fetch_add(1, Ordering::AcqRel);
        if let Some(st) = lock(&sh.res.state).as_mut() {
            // What a failed epoch left behind is void.
            st.ready.clear();
            st.table.reset_counts();
        }
        let start = Instant::now();
        let start_now = sh.now();
        let read_progress_cpu = || {
            sh.figures
                .progress_cpu
                .get()
                .and_then(thread_cpu::ThreadCpu::ns)
        };
        let cpu_start = read_progress_cpu();
        let locked;
        let tasks_from;
        {
            let mut node = sh.lock_node();
            locked = start.elapsed();
            let started = sh.now();
            tasks_from = started.0;
            node.start_epoch_predicted(started, tasks, prediction.as_ref(), &SegMem(&*sh.fabric))?;
            sh.epoch_running.store(true, Ordering::Release);
        }
        let start_time = start.elapsed();
        let start_total = call.elapsed();
        sh.wake_workers();
        sh.fabric.wake();
        let deadline = sh.cfg.epoch_timeout.map(|t| start + t);
        let mut node = sh.lock_node();
        while !node.is_done() {
            if deadline.is_some_and(|d| Instant::now() > d) {
                sh.epoch_running.store(false, Ordering::Release);
                tracing::debug!("epoch timeout: {}", node.debug_summary());
                return Err(RuntimeError::EpochTimeout(
                    sh.cfg.epoch_timeout.unwrap_or_default(),
                    node.stall(),
                ));
            }
            node = sh.node.wait_for_end(node, Duration::from_millis(50));
            sh.fail_if_stuck(&mut node);
        }
        sh.epoch_running.store(false, Ordering::Release);
        // From the epoch call: the start is part of the epoch's time.
        let session = call.elapsed();
        let progress_cpu = Duration::from_nanos(
            cpu_start
                .zip(read_progress_cpu())
                .map_or(0, |(a, b)| b.saturating_sub(a)),
        );
        let core = node.take_stats();
        let steal = Duration::from_nanos(core.steal_ns);
        let out = node.take_epoch_results();
        drop(node);
        let out = out.map_err(|e| RuntimeError::from(sh.with_own_look(e)))?;
        let t_record = Instant::now();
        let n_tasks = keys.len();
        // (The keys go to the history; a trace writes them below.)
        let traced_keys = sh.trace.as_ref().map(|_| keys.clone());
        self.history.record(keys, out.costs_ns.clone());
        let last_end = Duration::from_nanos(
            sh.figures
                .last_task_end
                .load(Ordering::Relaxed)
                .saturating_sub(start_now.0),
        );
        let (idle_note, steal_note) = if sh.figures.timings {
            let spans = std::mem::take(&mut *lock(&sh.figures.idle_spans));
            (idle_summary(spans, start_now.0), steal_summary(&core))
        } else {
            Default::default()
        };
        tracing::debug!(
            "epoch: {} tasks; progress thread CPU {progress_cpu:?}; idle {idle_note}; steal timeline {steal_note}; start: input {:?}, collectives {:?} ({}), prediction {:?}, pushes {:?} (node lock {:?}); run {:?} (last task ended at {:?}), results {:?}, history {:?}; steals {} ok {} empty ({} tasks), pushed {} ({} ms of predicted {} ms, out at {:.2} ms), pushed in {} (at {:.2} ms), busy {:?} in {} grains, ran {} for others; {} operations, result chunks {} sent {} received",
            n_tasks,
            prepare_time,
            gather_time,
            phases_note(&outcome.figures),
            plan_time,
            start_time,
            locked,
            session,
            last_end,
            start.elapsed().saturating_sub(session + t_record.elapsed()),
            t_record.elapsed(),
            core.steals_ok,
            core.steals_empty,
            core.tasks_stolen,
            core.tasks_pushed,
            core.pushed_ns / 1_000_000,
            core.predicted_ns / 1_000_000,
            core.pushed_out_at_ns as f64 / 1e6,
            core.tasks_pushed_in,
            core.pushed_in_at_ns as f64 / 1e6,
            Duration::from_nanos(sh.figures.busy_ns.load(Ordering::Relaxed)),
            core.grains,
            core.tasks_run_for_others,
            core.ops,
            core.chunks_sent,
            core.chunks_received,
        );
        self.measured.store(true, Ordering::Release);
        let busy = Duration::from_nanos(sh.figures.busy_ns.load(Ordering::Relaxed));
        let resources = lock(&sh.res.state)
            .as_ref()
            .map(|st| st.table.counts())
            .unwrap_or_default();
        let workers = sh.cfg.workers;
        let stats = EpochStats {
            core,
            busy,
            idle: EpochStats::idle_of(session, workers, busy),
            between: Duration::from_nanos(sh.figures.between_ns.load(Ordering::Relaxed)),
            betweens: sh.figures.betweens.load(Ordering::Relaxed),
            session,
            start: start_total,
            start_figures: outcome.figures,
            steal,
            progress_cpu,
            protocol: sh.cfg.core.protocol.name(),
            workers,
            resources,
        };
        if let Some(tr) = &sh.trace {
            let call_ns = sh.time_of(call).0;
            let phases = crate::trace::PhasesRecord {
                input: prepare_time.as_nanos() as u64,
                collectives: gather_time.as_nanos() as u64,
                collective_phases: outcome.figures.phase_ns,
                prediction: plan_time.as_nanos() as u64,
                pushes: start_time.as_nanos() as u64,
            };
            let end_ns = call_ns + session.as_nanos() as u64;
            let keys = traced_keys.unwrap_or_default();
            tr.write_epoch(&keys, call_ns, phases, tasks_from, end_ns, &stats)
                .map_err(|e| RuntimeError::Config(e.to_string()))?;
        }
        Ok(Some(EpochOutput {
            results: out.results,
            costs_ns: out.costs_ns,
            reduced: out.reduced,
            spawned: out.spawned,
            stats,
            start_view: outcome,
        }))
    }
}

/// The debug log's account of the start's collectives: the time in each of its phases
/// that took any, in order.
fn phases_note(f: &titus_core::start::StartFigures) -> String {
    titus_core::start::phases_named(&f.phase_ns)
        .map(|(name, ns)| format!("{name} {:?}", Duration::from_nanos(ns)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The debug log's account of the workers' idle time in an epoch that started at
/// `start` (`now()` ns): the spans that ended in a task (clipped to the start), their sum,
/// and the longest four with when each began (ms from the start).
pub(crate) fn idle_summary(spans: Vec<(u64, u64)>, start: u64) -> String {
    let mut spans: Vec<(u64, u64)> = spans
        .into_iter()
        .filter(|&(s, l)| s + l > start)
        .map(|(s, l)| {
            let from = s.max(start);
            (from - start, l - (from - s))
        })
        .collect();
    let total: u64 = spans.iter().map(|s| s.1).sum();
    spans.sort_by_key(|s| std::cmp::Reverse(s.1));
    let longest: Vec<String> = spans
        .iter()
        .take(4)
        .map(|(s, l)| format!("{:.2} ms at {:.2}", *l as f64 / 1e6, *s as f64 / 1e6))
        .collect();
    format!(
        "{} spans, {:.2} ms ({})",
        spans.len(),
        total as f64 / 1e6,
        longest.join(", ")
    )
}

/// The debug log's account of an epoch's first steals: each attempt's latency and each
/// success's end, victim and tasks (ms from the epoch's start).
pub(crate) fn steal_summary(core: &titus_core::Stats) -> String {
    let ms = |ns: u64| format!("{:.2}", ns as f64 / 1e6);
    let latency: Vec<String> = core
        .steal_latency_ns
        .iter()
        .take(4)
        .map(|&l| ms(l))
        .collect();
    let got: Vec<String> = core
        .steals_got()
        .take(4)
        .map(|e| format!("{} tasks from {} at {}", e.tasks, e.victim, ms(e.at_ns)))
        .collect();
    format!(
        "first latencies [{}] ms, first successes [{}], adverts {} sent {} received",
        latency.join(", "),
        got.join("; "),
        core.adverts_sent,
        core.adverts_received
    )
}

/// Tasks keyed by their index.
pub(crate) fn indexed(tasks: Vec<(u16, Vec<u8>)>) -> Vec<TaskIn> {
    tasks
        .into_iter()
        .enumerate()
        .map(|(i, (kind, payload))| TaskIn {
            key: i as u64,
            kind,
            payload,
            priority: 0,
            cost_hint_ns: 0,
        })
        .collect()
}
