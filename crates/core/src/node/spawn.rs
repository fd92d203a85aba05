//! Tasks that create tasks (`crate::spawn`): children join this rank's queue, and a
//! spawned task's result travels home with its key or joins this rank's partial of the
//! job's reduction.

use super::*;
use crate::spawn::{Counts, SPAWNED_INDEX, SpawnError};
use crate::termination::Report;

impl Node {
    /// The task `parent`, running here, spawned `tasks`: they join the front of this
    /// rank's queue, where they run or are stolen like any other, and belong to the owner
    /// of `parent` (where their results go home). Call it before that task's
    /// [`Node::task_done`] (its children must count as created before it counts as
    /// done: the waves' argument rests on it). Refused when the job declared no
    /// spawning, outside an epoch, with a payload over the limit, or with a parent whose
    /// owner is outside the job; a spawn that takes
    /// the queue past [`crate::spawn::Spawning::queued_max`] fails the epoch on every
    /// rank.
    pub fn spawned(
        &mut self,
        now: Time,
        parent: TaskId,
        tasks: Vec<NewTask>,
        mem: &dyn Memory,
    ) -> Result<(), SpawnError> {
        self.cx.now = now;
        let Some(spawning) = &self.cx.cfg.spawning else {
            return Err(SpawnError::NotSpawning);
        };
        if let Some(e) = &self.failed {
            return Err(SpawnError::Failed(e.clone()));
        }
        if !self.running || self.term.is_done() {
            return Err(SpawnError::NoEpoch);
        }
        let limit = self.cx.cfg.max_payload;
        if let Some(t) = tasks.iter().find(|t| t.payload.len() > limit as usize) {
            return Err(SpawnError::PayloadTooLarge {
                len: t.payload.len(),
                limit,
            });
        }
        let queued = (self.queue.len() + tasks.len()) as u64;
        if queued > spawning.queued_max {
            let e = CoreError::SpawnBound {
                rank: self.cx.rank,
                queued,
                bound: spawning.queued_max,
            };
            self.fail(e.clone());
            return Err(SpawnError::Failed(e));
        }
        if parent.owner >= self.cx.size {
            return Err(SpawnError::NoParent(parent.owner));
        }
        // (The waves count what was created here from the epoch's figures.)
        self.cx.stats.tasks_spawned += tasks.len() as u64;
        self.queue.push_front(
            tasks
                .into_iter()
                .map(|t| Task {
                    owner: parent.owner,
                    index: SPAWNED_INDEX,
                    kind: t.kind,
                    priority: t.priority,
                    cost_ns: t.cost_hint_ns.min(layout::COST_HINT_MAX_NS),
                    payload: t.payload,
                    key: t.key,
                })
                .collect(),
        );
        self.queue.workers_idle = false;
        self.owner.work_arrived(now);
        self.drive(mem);
        Ok(())
    }

    /// A spawned task `id` of a reducing job ended here with `result`: it joins this
    /// rank's partial. (Where results go home, `task_done` routes them as it routes an
    /// epoch task's.)
    pub(super) fn spawned_reduced(&mut self, id: TaskId, result: Result<Vec<u8>, String>) {
        let spawning = self
            .cx
            .cfg
            .spawning
            .as_ref()
            .expect("only a spawning job has spawned tasks");
        let (rank, kind) = (self.cx.rank, id.kind);
        let failed = |detail: String| CoreError::TaskFailed {
            owner: id.owner,
            index: SPAWNED_INDEX,
            ran_on: rank,
            detail: format!("a spawned task of kind {kind}, key {}: {detail}", id.key),
        };
        let e = match result.map(|data| (spawning.decode(&data), data.len())) {
            Err(detail) => failed(detail),
            Ok((Some(v), _)) => match spawning.combine(&mut self.spawn.partial, &v) {
                Ok(()) => {
                    self.spawn.completed += 1;
                    return;
                }
                Err(detail) => failed(detail),
            },
            Ok((None, len)) => CoreError::SpawnedResult {
                kind,
                len,
                expected: spawning.result_bytes(),
                ran_on: rank,
            },
        };
        self.fail(e);
    }

    /// Gives the job's combine for its custom lanes ([`crate::spawn::ReduceOp::Custom`]),
    /// between epochs: for a driver whose combine comes after the job's configuration (a
    /// C callback). Refused when the job declared no custom lanes, or with an identity of
    /// another length.
    pub fn set_combine(&mut self, combine: crate::spawn::Combine) -> Result<(), CoreError> {
        if self.running {
            return Err(CoreError::Usage("set_combine while an epoch is running"));
        }
        let Some(sp) = self.cx.cfg.spawning.as_mut().filter(|s| s.is_custom()) else {
            return Err(ConfigError::Reduction(
                "a combine was given, but the job declared no custom lanes".into(),
            )
            .into());
        };
        if combine.identity.len() != sp.lanes.len() {
            return Err(ConfigError::Reduction(format!(
                "a combine of {} lanes for the job's {} custom lanes",
                combine.identity.len(),
                sp.lanes.len()
            ))
            .into());
        }
        sp.combine = Some(combine);
        Ok(())
    }

    /// A new epoch's spawn counts and termination: waves when the job spawns.
    pub(super) fn start_termination(&mut self) {
        let waves = self.cx.cfg.spawning.clone().map(|s| {
            self.spawn = Counts {
                partial: s.identity(),
                ..Counts::default()
            };
            crate::termination::Waves::new(s, self.start.bytes())
        });
        self.term.start(waves);
    }

    /// Termination's step after every input: one pass up the tree for a fixed bag,
    /// waves when the job spawns.
    pub(super) fn termination_step(&mut self, mem: &dyn Memory) {
        let complete = self.results.home.complete();
        let ended = if self.term.has_waves() {
            // (Results still buffered here would fail the wave: report once they left.)
            let ready = complete
                && self.queue.is_empty()
                && self.queue.workers_idle
                && self.results.out.is_empty();
            let (spawn, created) = (&self.spawn, self.cx.stats.tasks_spawned);
            let delivered = self.results.home.spawned_delivered();
            let own = || Report {
                created,
                completed: spawn.completed,
                delivered,
                lanes: spawn.partial.clone(),
            };
            match self.term.step_wave(&mut self.cx, mem, ready, own) {
                Ok(ended) => ended,
                Err(e) => {
                    self.fail(e);
                    return;
                }
            }
        } else {
            self.term.step(&mut self.cx, complete)
        };
        if ended {
            self.queue.workers_idle = false;
        }
    }
}
