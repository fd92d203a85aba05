//! The node model's workers: grains taken, tasks run, results held and reported, naps.

use super::*;

/// A result a worker holds: the task, its result, its cost (ns).
pub(super) type Unreported = (titus_core::TaskId, Result<Vec<u8>, String>, u64);

impl<'a> Sim<'a> {
    /// After `node` handled an input at `now`: workers, commands, timer, checks.
    pub(super) fn after(&mut self, n: u32, now: u64) -> Result<(), Violation> {
        let i = n as usize;
        if self.own[i].is_some()
            && let Some(outcome) = self.nodes[i].poll_start()
        {
            match self.plan_keys.is_some() {
                true => {
                    let own = self.own[i].take().expect("checked");
                    self.planned[i] = Some(Box::new((outcome, own)));
                    self.done_count += 1;
                }
                false => {
                    // Its planning CPU first: the epoch begins after it.
                    let plan = StartCpu::of(self.job.start_cpu.plan_ns, self.keys[i].len());
                    match outcome {
                        Ok(out) if plan > 0 => {
                            self.beginning[i] = Some(Box::new(out));
                            self.at(now + plan, Ev::Begin { node: n });
                        }
                        outcome => self.begin_epoch(n, now, outcome)?,
                    }
                }
            }
        }
        // The bytes the handler moved through the rank's segments: the thread that drove
        // it did that first.
        let lag = self.byte_cpu(i);
        // Idle workers take tasks (a grain from the node when their rank's grains are used
        // up, as the runtime's workers do); on a rank with resources, every resource with
        // room does, one task at a time (the runtime's workers and its resource thread),
        // and a task none of its capable resources has room for waits.
        loop {
            let room = match self.res(i) {
                None => self.per[i].idle > 0,
                Some(t) => t.any_room(),
            };
            if !room {
                break;
            }
            // `local`: the next task of the worker's grain, taken from its own deque (the
            // runtime starts its clock at the last task's end: no time between them);
            // `took`: the tasks of the take from the node that gave it (1 where none).
            let mut took = 1;
            let (task, local) = match self.per[i].held.take() {
                Some(t) => (t, false),
                None if self.res(i).is_none() => {
                    match self.per[i].grain.pop_front() {
                        Some(t) => (t, true),
                        None => {
                            // What the workers hold is reported with their take from the node.
                            self.flush(i, now);
                            let take = self.policy.take();
                            let mut got = self.nodes[i]
                                .take_grain(Time(now), take, &self.mems[i])
                                .into_iter();
                            let Some(first) = got.next() else {
                                break;
                            };
                            took = 1 + got.len();
                            self.per[i].grain.extend(got);
                            (first, false)
                        }
                    }
                }
                None => {
                    // A task some resource with room can run; the others stay queued (for
                    // thieves that can run them).
                    let set = self.res(i).and_then(|t| t.room_kinds(0));
                    let got = self.nodes[i].take_tasks_for(Time(now), 1, &set, &self.mems[i]);
                    let Some(task) = got.into_iter().next() else {
                        break;
                    };
                    (task, false)
                }
            };
            if let Some(t) = self.res(i)
                && t.select(task.kind).is_none()
            {
                if !t.can_run(task.kind) {
                    return Err(Violation::Broken(format!(
                        "rank {n}: task kind {} has no variant on its resources",
                        task.kind
                    )));
                }
                self.per[i].held = Some(task);
                break;
            }
            let (o, x) = (task.owner as usize, task.index as usize);
            let spawned = task.index == titus_core::spawn::SPAWNED_INDEX;
            self.activity += 1;
            // A spawning job's task: what it spawns, and a spawned task's cost and result
            // (its exactly-once is checked by the job's driver).
            let queued = self.nodes[i].queued();
            let mut model = self.job.spawn.map(|m| m(&task.payload, queued));
            let (drawn, mut result) = match (&mut model, spawned) {
                (Some(m), true) => (m.cost_ns, Ok(std::mem::take(&mut m.result))),
                (None, true) => {
                    return Err(Violation::Broken(format!(
                        "rank {n} got a spawned task in a job without a spawn model"
                    )));
                }
                (_, false) => {
                    let count =
                        self.runs
                            .get_mut(o)
                            .and_then(|r| r.get_mut(x))
                            .ok_or_else(|| {
                                Violation::Broken(format!(
                                    "rank {n} got task {x} of rank {o}, which does not exist"
                                ))
                            })?;
                    *count += 1;
                    if *count > 1 {
                        return Err(Violation::Broken(format!(
                            "task {x} of rank {o} ran twice (second time on rank {n})"
                        )));
                    }
                    (
                        self.tasks()[o][x].cost_ns,
                        Ok((self.job.result)(&task.payload)),
                    )
                }
            };
            let (children, early) = model.map_or((Vec::new(), None), |m| (m.children, m.early));
            // A rank with resources dispatches through the core's policy (the CPU workers,
            // resource 0, have room: a worker is idle); one without runs it on the worker.
            let (res, f) = match self.res_mut(i) {
                None => (0, self.slow[i]),
                Some(table) => {
                    let id = table.dispatch_task(task.kind).expect("selected above");
                    let speed = table.specs()[id].speed(task.kind).unwrap_or(1.0);
                    (id, if id == 0 { self.slow[i] } else { 1.0 / speed })
                }
            };
            // The node's cores: a CPU task runs slower while its node's other cores run
            // tasks or its ranks' progress threads want them; a worker that did not just
            // finish a task sleeps and wakes first.
            let (f, delay) = match (&self.job.model.cpu, res) {
                (Some(cpu), 0) => {
                    let k = i / self.cpu_ranks as usize;
                    self.node_busy[k] += 1;
                    let on_node = (self.nodes.len() - k * self.cpu_ranks as usize)
                        .min(self.cpu_ranks as usize) as u32;
                    let awake = self.per[i].freed.0 == now && self.per[i].freed.1 > 0;
                    if awake {
                        self.per[i].freed.1 -= 1;
                    }
                    // The worker's own time around the task delays its end, not its cost;
                    // it is CPU work like the task, so time-sharing stretches it alike.
                    let wake = if awake { 0 } else { cpu.wake_ns as u64 };
                    let shared = cpu.factor(self.node_busy[k], on_node);
                    // A take from the node: the worker's time around a task (another rank's
                    // costs more: its result goes home), and its grain's other tasks' share
                    // of it; a task of its grain: none.
                    let own = match (local, task.owner != n) {
                        (true, _) => 0.0,
                        (false, foreign) => {
                            cpu.task_overhead_ns
                                + if foreign { cpu.foreign_task_ns } else { 0.0 }
                                + if self.job.core.balances() {
                                    cpu.balanced_take_ns
                                } else {
                                    0.0
                                }
                                + (took - 1) as f64 * cpu.grain_task_ns
                        }
                    };
                    // (What its handlers moved while it ran its last task, where workers
                    // serve the node: done before this one.)
                    let served = std::mem::take(&mut self.per[i].serve_debt);
                    let around = lag + served + (own * shared) as u64;
                    if awake {
                        let b = &mut self.per[i].between;
                        *b = (b.0 + around, b.1 + 1);
                    }
                    (f * shared, wake + around)
                }
                _ => (f, 0),
            };
            // What its progress thread took from the core while every worker ran tasks —
            // at most as much again as the task (the scheduler shares a core between
            // the two: what the progress thread wants beyond that waits, unmodelled).
            // (Below the longest delay [`time::check`] let the job make: a backstop.)
            let cost = ((drawn as f64 * f) as u64).min(time::DELAY_MAX_NS);
            let owed = if res == 0 {
                std::mem::take(&mut self.per[i].op_debt).min(cost)
            } else {
                0
            };
            let cost = cost + owed;
            if !spawned {
                self.ran_for[o][x] = cost;
            }
            if let Some((fr, fres, nth)) = self.job.resources.fail
                && fr == n
                && fres == res
            {
                self.fail_count += 1;
                if self.fail_count == nth {
                    result = Err(format!(
                        "resource {res} of rank {n} failed its submission {nth} (injected)"
                    ));
                }
            }
            if res == 0 {
                self.per[i].idle -= 1;
                self.per[i].busy += cost;
            } else {
                self.accel_busy[i] += cost;
            }
            if self.res(i).is_some() {
                *self.busy_by_owner[i].entry((res, task.owner)).or_insert(0) += cost;
                if self.job.resources.log_dispatches {
                    let t0 = self.per[i].start.unwrap_or(now);
                    self.dispatches[i].push((now.saturating_sub(t0), res, task.owner, cost));
                }
            }
            if res == 0
                && let Some(spans) = self.spans.get_mut(i)
            {
                // The first lane free by the task's start is its worker's (a freed worker
                // took it: at most `workers` run at once).
                let (start, lanes) = (now + delay, &mut self.lanes[i]);
                let lane = match lanes.iter().position(|&free| free <= start) {
                    Some(l) => l,
                    None => {
                        lanes.push(0);
                        lanes.len() - 1
                    }
                };
                lanes[lane] = start + cost;
                let (o, x, k) = (task.owner, task.index, task.kind);
                spans.push([start, cost, o.into(), x.into(), k.into(), lane as u64]);
            }
            if res == 0
                && let Some(ends) = self.task_ends.get_mut(i)
            {
                ends.push((now + delay + cost, task.owner, task.index));
                debug_assert!(ends.len() <= self.job.workers, "rank {n}: {ends:?}");
            }
            if let Some((at, early)) = early {
                // As far into the task as into its drawn cost.
                let at = (at as f64 * cost as f64 / drawn.max(1) as f64) as u64;
                self.at(
                    now + delay + at.min(cost),
                    Ev::Spawn {
                        node: n,
                        parent: task.id(),
                        children: early,
                    },
                );
            }
            self.at(
                now + delay + cost,
                Ev::TaskDone {
                    node: n,
                    task: task.id(),
                    result,
                    cost,
                    res,
                    children,
                },
            );
        }
        if self.per[i].types_mine != 0 {
            // Which of its types have an idle instance: the node asks for their work when
            // its queue holds none they can run.
            let idle = match self.res(i) {
                None if self.per[i].idle > 0 => self.per[i].types_mine,
                None => 0,
                Some(t) => t.room_types(&self.types_of[i], 0),
            };
            self.nodes[i].set_resource_types(
                Time(now),
                self.per[i].types_mine,
                idle,
                &self.mems[i],
            );
        }
        let lag = lag + self.byte_cpu(i);
        let issue_at = now + lag + self.job.model.event_ns as u64;
        while let Some(c) = self.nodes[i].poll_command() {
            self.issue(n, issue_at, c.token, c.op)?;
        }
        self.per[i].cpu_free = issue_at;
        if let Some(d) = self.nodes[i].poll_timeout() {
            let d = d.0.max(now);
            if self.per[i].timer_at.is_none_or(|t| d < t) {
                self.per[i].timer_at = Some(d);
                self.at(d, Ev::Timer { node: n });
            }
        }
        if let Some(e) = self.nodes[i].error() {
            if !self.failed[i] {
                self.failed[i] = true;
                self.failed_count += 1;
                match &self.first_failure {
                    None => {
                        self.first_failure = Some((n, e.code(), format!("rank {n} failed: {e}")))
                    }
                    // Every other rank stops with the first failure, passed on by ABORT:
                    // anything else is a second failure of its own.
                    Some((origin, code, first)) => {
                        let told = titus_core::CoreError::Aborted {
                            rank: *origin,
                            code: *code,
                        };
                        if *e != told {
                            return Err(Violation::Broken(format!(
                                "{first}; then rank {n} failed otherwise: {e}"
                            )));
                        }
                    }
                }
            }
            if self.failed_count == self.nodes.len() {
                return Err(Violation::FailedEverywhere {
                    first: self
                        .first_failure
                        .as_ref()
                        .map_or(String::new(), |f| f.2.clone()),
                    at_ms: now as f64 / 1e6,
                    events: self.events,
                    trace: self.trace,
                });
            }
            return Ok(());
        }
        if self.per[i].start.is_none() {
            // Not in this epoch yet (a request of the next epoch's early starter, or one
            // left over from the last): nothing of the epoch to check.
            return Ok(());
        }
        let (home, _) = self.nodes[i].results_home();
        self.home_total += u64::from(home - self.per[i].home_seen);
        self.per[i].home_seen = home;
        if self.nodes[i].termination_detected() && self.home_total != self.own_total {
            return Err(Violation::Broken(format!(
                "rank {n} declared the end with {} of {} results home",
                self.home_total, self.own_total
            )));
        }
        if self.per[i].end.is_none() && self.nodes[i].is_done() {
            // As the runtime does: the epoch ends here now; later signals wait for the
            // next epoch.
            self.per[i].end = Some(now);
            self.done_count += 1;
            self.stats[i] = self.nodes[i].take_stats();
            let out = self.nodes[i]
                .take_epoch_results()
                .map_err(|e| Violation::Broken(format!("rank {n}: {e}")))?;
            // The measured costs, as they came home, are the next epoch's predictions;
            // recording them delays the rank's next call.
            self.history[i].record(&self.keys[i], &out.costs_ns);
            self.history_owed[i] = StartCpu::of(self.job.start_cpu.history_ns, self.keys[i].len());
            self.results[i] = out.results;
            self.reduced[i] = out.reduced;
            self.spawned[i] = out.spawned;
            self.costs[i] = out.costs_ns;
        }
        Ok(())
    }

    /// Reports every result rank `i`'s workers hold.
    pub(super) fn flush(&mut self, i: usize, now: u64) {
        for (task, result, cost) in self.per[i].unreported.drain() {
            self.nodes[i].task_done(Time(now), task, result, cost, &self.mems[i]);
        }
    }
}
