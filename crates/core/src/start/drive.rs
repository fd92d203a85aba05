//! What a driver hands the start and takes from it: one rank's input from its keys, its
//! caller's cost hints and its cost history, and the epoch's prediction from the outcome.
//! The runtime and the simulator both call these; neither predicts on its own.

use super::{StartInput, StartOutcome};
use crate::repartition::{Move, RepartitionPlan};
use crate::{
    CoreError, CostHistory, DiffusionPlan, KeySpan, LoadClasses, Node, Prediction, RankProfile,
};
use std::time::Duration;

/// A rank's own prediction, before the start: its tasks' predicted costs (0: unknown).
#[derive(Debug, Clone, Default)]
pub struct OwnPrediction {
    /// Each task's predicted cost, ns, in task order.
    pub costs_ns: Vec<u64>,
    /// Why the rank refuses its tasks (a key given twice), if it does.
    pub refused: Option<CoreError>,
}

/// A rank's own predicted cost of each task of `keys`, ns (0: unknown), and whether a
/// hint counted: the caller's hint where `hints` (in task order; none or 0: no hint) gives
/// one, else `history`'s prediction. A hint wins, as it does in the queue's order and sharing:
/// the caller knows its tasks, and only it can know where the costs went before any
/// epoch shows it (a reaction front's first move). Without a history no hint counts: a
/// first epoch is balanced by stealing alone, as a job of one epoch is.
pub fn own_costs(
    keys: &[u64],
    hints: impl IntoIterator<Item = u64>,
    history: &CostHistory,
) -> (Vec<u64>, bool) {
    let mut costs = history.predict(keys);
    if history.is_empty() {
        return (costs, false);
    }
    let mut hinted = false;
    for (c, h) in costs.iter_mut().zip(hints) {
        if h > 0 {
            *c = h.min(crate::layout::COST_HINT_MAX_NS);
            hinted = true;
        }
    }
    (costs, hinted)
}

impl StartInput {
    /// Rank `node`'s input for an epoch of tasks with `keys`, predicted from their cost
    /// `hints` (in task order; none or 0: no hint) and `history` ([`own_costs`]);
    /// `timeout`: how long the start may wait for its peers (`None`: while they live).
    /// A rank whose hints counted plans from its own costs even where the job's costs
    /// moved: it does not search the front's window.
    pub fn of(
        node: &Node,
        keys: &[u64],
        hints: impl IntoIterator<Item = u64>,
        history: &CostHistory,
        timeout: Option<Duration>,
    ) -> (Self, OwnPrediction) {
        let refused = CostHistory::check_keys(keys).err();
        let (costs_ns, hinted) = own_costs(keys, hints, history);
        let string_plan =
            node.diffusion_enabled() && node.config().diffusion_plan == DiffusionPlan::String;
        let input = Self {
            tasks: keys.len(),
            refused: refused.is_some(),
            load: crate::predicted_load(&costs_ns),
            classes: LoadClasses::of(&costs_ns),
            profile: RankProfile {
                now: KeySpan::of(keys),
                last: history.measured(),
            },
            string_plan,
            neighbours: match string_plan {
                true => Vec::new(),
                false => node.diffusion_neighbours(),
            },
            timeout,
            repartition: false,
            hinted,
        };
        (input, OwnPrediction { costs_ns, refused })
    }

    /// Rank `node`'s input for a repartition plan of the tasks with `keys` it owns
    /// (string order), predicted from `history`; `measured`: whether it has measured an
    /// epoch yet (a plan needs one: it refuses otherwise, as with a key given twice).
    pub fn for_repartition(
        node: &Node,
        keys: &[u64],
        history: &CostHistory,
        measured: bool,
        timeout: Option<Duration>,
    ) -> (Self, OwnPrediction) {
        let (mut input, mut own) = Self::of(node, keys, [], history, timeout);
        if own.refused.is_none() && !measured {
            own.refused = Some(crate::ConfigError::RepartitionWithoutCosts.into());
        }
        input.refused = own.refused.is_some();
        input.string_plan = false;
        input.neighbours.clear();
        input.repartition = true;
        (input, own)
    }
}

impl StartOutcome {
    /// The prediction the epoch starts from (`None`: this rank predicted nothing): its
    /// tasks' costs — the front's where the job's costs moved, its own otherwise — its
    /// neighbours' loads, its part of the string plan, and which tasks count costly.
    pub fn prediction(
        &self,
        keys: &[u64],
        own: OwnPrediction,
        history: &CostHistory,
    ) -> Option<Prediction> {
        self.load?;
        let view = self.window.as_ref().map(|w| w.view(self.movement));
        let costs_ns = self.costs(keys, own.costs_ns, history);
        let class = self.string.as_ref().and_then(|s| s.split_class());
        Some(Prediction {
            costs_ns,
            neighbour_loads: self.neighbour_loads.clone(),
            string: self.string.clone(),
            costly: view.map(|v| v.costly_keys(keys, class)).unwrap_or_default(),
        })
    }

    /// A repartition start's plan for this rank's tasks with `keys` (string order), their
    /// costs those the front predicts where the job's costs moved, its own otherwise (an
    /// unknown cost at the mean of the known). Fails naming this rank's refusal, or the
    /// lowest rank that refused.
    pub fn repartition_plan(
        &self,
        keys: &[u64],
        own: OwnPrediction,
        history: &CostHistory,
        plan: RepartitionPlan,
    ) -> Result<Vec<Move>, CoreError> {
        if let Some(e) = own.refused {
            return Err(e);
        }
        if let Some(r) = self.facts.refused_by {
            return Err(crate::ConfigError::RepartitionRefused(r).into());
        }
        let Some(at) = self.position else {
            return Ok(Vec::new()); // Every rank is empty.
        };
        let costs = match self.load {
            Some(_) => self.costs(keys, own.costs_ns, history),
            None => vec![0; keys.len()], // Nothing predicted here: at the mean of nothing.
        };
        plan.at(&at, &crate::repartition::filled_tasks(keys, costs))
    }

    /// The tasks' predicted costs: the front's where the job's costs moved, `own` (the
    /// rank's from its own history) otherwise.
    fn costs(&self, keys: &[u64], own: Vec<u64>, history: &CostHistory) -> Vec<u64> {
        self.window
            .as_ref()
            .and_then(|w| {
                w.view(self.movement)
                    .predict(keys, |k| history.last_cost(k))
            })
            .unwrap_or(own)
    }

    /// Whether the epoch runs: no rank refused its tasks, and (with `skip_if_none`) some
    /// rank has one. The error names this rank's refusal, or the lowest rank that
    /// refused.
    pub fn runs(&self, own: &OwnPrediction, skip_if_none: bool) -> Result<bool, CoreError> {
        if let Some(e) = &own.refused {
            return Err(e.clone());
        }
        if let Some(r) = self.facts.refused_by {
            return Err(CoreError::Aborted {
                rank: r,
                code: crate::error_code::DUPLICATE_KEY,
            });
        }
        Ok(!(skip_if_none && self.facts.tasks == 0))
    }
}

#[cfg(test)]
mod tests {
    use super::own_costs;
    use crate::CostHistory;
    use crate::layout::COST_HINT_MAX_NS;

    #[test]
    fn a_hint_wins_over_the_history_and_is_bounded() {
        let mut history = CostHistory::default();
        history.record(&[1, 2, 3], &[100, 200, 300]);
        let (costs, hinted) = own_costs(&[1, 2, 3, 4], [0, 5, u64::MAX, 0], &history);
        assert_eq!(costs, [100, 5, COST_HINT_MAX_NS, 0]);
        assert!(hinted);
        assert_eq!(own_costs(&[1, 2], [], &history).0, [100, 200], "no hints");
        let first = own_costs(&[1, 2], [5, 5], &CostHistory::default());
        assert_eq!(first, (vec![0, 0], false), "no history: no hint counts");
    }
}
