//! Work handed to the driver's workers and resources: a grain, tasks for a resource, and
//! which resource types are idle.

use super::*;
use crate::GrainTake;

impl Node {
    /// Replaces this rank's mapper (its stealing policy: [`crate::mapper`]); the default
    /// is [`crate::mapper::DefaultMapper`]. Between epochs.
    pub fn set_mapper(&mut self, mapper: Box<dyn Mapper>) {
        self.queue.mapper = mapper;
    }

    /// A worker's grain of tasks ([`crate::WorkerPolicy::take`]): `take.min` from the
    /// front, then more while their estimated costs sum within `take.budget_ns`, at most
    /// `take.max` (tasks of unknown cost one at a time beyond `min`: they may be long, and
    /// what a worker holds no other rank can steal).
    pub fn take_grain(&mut self, now: Time, take: GrainTake, mem: &dyn Memory) -> Vec<Task> {
        let out = self.take_with(now, true, mem, |q| {
            q.take_front_within(take.min, take.max, take.budget_ns)
        });
        if !out.is_empty() {
            self.cx.stats.grains += 1;
        }
        out
    }

    /// Up to `max` tasks of the kinds in `set` (a resource's variants; None: any) from the
    /// front of the queue; tasks of other kinds keep their places.
    pub fn take_tasks_for(
        &mut self,
        now: Time,
        max: usize,
        set: &crate::resources::KindSet,
        mem: &dyn Memory,
    ) -> Vec<Task> {
        self.take_with(now, set.is_none(), mem, |q| q.take_front_of(max, set))
    }

    /// Takes what `take` takes from the queue for this rank's workers or resources, then
    /// drives the node. Workers idle: the workers found nothing at all (`any`: they could run
    /// any kind) — not a resource that found nothing of its kinds while other work waits.
    pub(super) fn take_with(
        &mut self,
        now: Time,
        any: bool,
        mem: &dyn Memory,
        take: impl FnOnce(&mut Queue) -> Vec<Task>,
    ) -> Vec<Task> {
        self.cx.now = now;
        if !self.running || self.failed.is_some() {
            return Vec::new();
        }
        let out = take(&mut self.queue);
        self.queue.workers_idle =
            out.is_empty() && (any || self.queue.is_empty()) && !self.term.is_done();
        self.drive(mem);
        out
    }

    /// The resource types (bits of `Config::resource_types`) this rank has (`mine`) and
    /// those with an idle instance now (`idle`): the driver states them whenever they
    /// change. A type whose idle instances find no queued task of its kinds — or, once
    /// the queue runs dry, any type of this rank's — is short, and the thief asks for its
    /// work. Without a statement (`mine` 0) a thief asks for any work, as without types.
    pub fn set_resource_types(&mut self, now: Time, mine: u64, idle: u64, mem: &dyn Memory) {
        self.cx.now = now;
        if (mine, idle) == (self.types_mine, self.types_idle) {
            return;
        }
        self.types_mine = mine;
        self.types_idle = idle & mine;
        // What this rank's own resources run: the union of its types' kinds.
        let types = &self.cx.cfg.resource_types;
        let mut local = Some(Vec::new());
        // (At most TYPES_MAX types: `Node::new` checked.)
        for (t, set) in types.iter().enumerate() {
            if mine >> t & 1 == 1 {
                match (set, &mut local) {
                    (None, _) => local = None,
                    (Some(ks), Some(l)) => l.extend(ks),
                    _ => {}
                }
            }
        }
        self.queue.local = if mine == 0 { None } else { local };
        self.drive(mem);
    }

    /// The short resource types ([`Node::set_resource_types`]), as a mask.
    pub(super) fn starved_types(&self) -> u64 {
        let types = &self.cx.cfg.resource_types;
        if types.is_empty() || self.types_mine == 0 {
            return 0;
        }
        let dry = self.queue.len() < self.cx.cfg.steal_below as usize;
        let mut short = 0;
        for (t, set) in types.iter().enumerate() {
            let bit = 1u64 << t;
            let wants = self.types_idle & bit != 0 || (dry && self.types_mine & bit != 0);
            // A type that runs nothing (CPUs that run no kind here) never asks.
            let runs_something = set.as_ref().is_none_or(|k| !k.is_empty());
            if wants && runs_something && !self.queue.holds_any(set) {
                short |= bit;
            }
        }
        short
    }
}
