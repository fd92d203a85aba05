//! A repartition start between epochs, run over the simulated fabric.

use super::*;
use crate::RepartitionError;

/// A rank's repartition start's outcome, with its own prediction.
pub(super) type PlanOutcome = (
    Result<titus_core::start::StartOutcome, titus_core::CoreError>,
    titus_core::start::OwnPrediction,
);

/// What the driver of a time-stepping job sees between two epochs of [`simulate_with`],
/// as an application between two of its runtime's epochs: which epoch ended, and every
/// rank's repartition plan from the costs measured so far.
pub struct Between<'s> {
    /// The epoch that just ended (0: the first).
    pub epoch: usize,
    pub(super) sim: std::cell::RefCell<&'s mut dyn RepartitionStart>,
}

impl std::fmt::Debug for Between<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Between")
            .field("epoch", &self.epoch)
            .finish()
    }
}

/// What [`Between`] drives: the simulated job between two epochs.
pub(super) trait RepartitionStart {
    fn repartition_plan(&mut self, keys: &[Vec<u64>]) -> Result<Vec<Vec<Move>>, RepartitionError>;
}

impl Between<'_> {
    /// Every rank's repartition plan (RankDLB's step 4), as each rank's
    /// `Runtime::repartition_plan(&keys[r])` gives it: every rank runs a repartition
    /// start (`titus_core::start`) over the simulated fabric, charged in virtual time
    /// before the next epoch, and plans from its place in the string as the job's
    /// `repartition_plan` says. `keys[r]`: the tasks rank r owns, in string order. A key
    /// given twice, or a list per rank missing, fails naming why.
    pub fn repartition_plan(&self, keys: &[Vec<u64>]) -> Result<Vec<Vec<Move>>, RepartitionError> {
        self.sim.borrow_mut().repartition_plan(keys)
    }
}

impl RepartitionStart for Sim<'_> {
    fn repartition_plan(&mut self, keys: &[Vec<u64>]) -> Result<Vec<Vec<Move>>, RepartitionError> {
        let n = self.nodes.len();
        if keys.len() != n {
            return Err(RepartitionError::KeyLists {
                lists: keys.len(),
                ranks: n,
            });
        }
        let reference = self.job.check_start.then(|| self.whole_job_positions(keys));
        self.plan_keys = Some(keys.to_vec());
        self.done_count = 0;
        for r in 0..n as u32 {
            let skew = match self.job.start_skew_ns {
                0 => 0,
                s => self.rng.below(s + 1),
            };
            self.began[r as usize] = self.clock + skew;
            self.at(self.clock + skew, Ev::Start { node: r });
        }
        let ended = self.run_epoch(self.job.faults.stall);
        self.plan_keys = None;
        self.clock = self.clock.max(ended.map_err(RepartitionError::Run)?);
        let mut plans = Vec::with_capacity(n);
        for (r, k) in keys.iter().enumerate() {
            let (outcome, own) = *self.planned[r].take().expect("every rank's start ended");
            let out = outcome.map_err(|error| RepartitionError::Start { rank: r, error })?;
            if let Some((movement, positions)) = &reference
                && out.movement == *movement
            {
                if out.position != positions[r] {
                    return Err(RepartitionError::Position {
                        rank: r,
                        start: Box::new(out.position),
                        whole: Box::new(positions[r]),
                    });
                }
                self.plans_checked += 1;
            }
            let plan = out
                .repartition_plan(k, own, &self.history[r], self.job.core.repartition_plan)
                .map_err(|error| RepartitionError::Plan { rank: r, error })?;
            plans.push(plan);
        }
        Ok(plans)
    }
}

impl Sim<'_> {
    /// The whole job's places in the string for a repartition plan of `keys`, from every
    /// rank's load and profile as the runtime computed them from an all-gather: the
    /// reference [`Job::check_start`] holds each rank's repartition start to.
    fn whole_job_positions(
        &mut self,
        keys: &[Vec<u64>],
    ) -> (
        titus_core::Movement,
        Vec<Option<titus_core::repartition::StringPosition>>,
    ) {
        let job = WholeJob::of(keys, &[], &self.history, &mut self.reference_plan_front);
        let loads: Vec<u64> = self
            .reference_plan_front
            .plan_loads(&job.profiles, &job.own, &job.alone)
            .into_iter()
            .map(|l| l.unwrap_or(0))
            .collect();
        let empty = keys.iter().all(Vec::is_empty);
        let positions = (0..keys.len() as u32)
            .map(|r| {
                (!empty).then(|| {
                    titus_core::repartition::StringPosition::of(&loads, r).expect("in the job")
                })
            })
            .collect();
        (job.movement, positions)
    }
}

/// What the whole job brings a start, as an all-gather of every rank's record would have
/// it: each rank's profile, own load and cost classes, the front (`front`, updated with
/// them) and its movement, and the ranks that predict alone by design.
pub(super) struct WholeJob {
    pub(super) profiles: Vec<titus_core::RankProfile>,
    pub(super) own: Vec<Option<u64>>,
    pub(super) classes: Vec<titus_core::LoadClasses>,
    pub(super) movement: titus_core::Movement,
    pub(super) alone: Vec<bool>,
}

impl WholeJob {
    /// `tasks`: each rank's tasks, whose cost hints count (empty: none, as a repartition
    /// has).
    pub(super) fn of(
        keys: &[Vec<u64>],
        tasks: &[Vec<crate::SimTask>],
        history: &[CostHistory],
        front: &mut titus_core::JobFront,
    ) -> Self {
        let profiles: Vec<titus_core::RankProfile> = keys
            .iter()
            .zip(history)
            .map(|(k, h)| titus_core::RankProfile {
                now: titus_core::KeySpan::of(k),
                last: h.measured(),
            })
            .collect();
        let predicted: Vec<(Vec<u64>, bool)> = keys
            .iter()
            .zip(history)
            .enumerate()
            .map(|(r, (k, h))| {
                let hints = tasks.get(r).into_iter().flatten().map(|t| t.hint_ns);
                titus_core::start::own_costs(k, hints, h)
            })
            .collect();
        front.update(&profiles);
        let movement = front.movement();
        let hinted: Vec<bool> = predicted.iter().map(|(_, hinted)| *hinted).collect();
        let alone = titus_core::start::front::predicting_alone(&profiles, movement, &hinted);
        Self {
            own: predicted
                .iter()
                .map(|(p, _)| titus_core::predicted_load(p))
                .collect(),
            classes: predicted
                .iter()
                .map(|(p, _)| titus_core::LoadClasses::of(p))
                .collect(),
            alone,
            profiles,
            movement,
        }
    }
}
