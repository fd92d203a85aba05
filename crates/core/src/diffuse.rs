//! Diffusion before stealing: at the start of an epoch a rank predicts its load from the
//! costs its tasks had last time, and pushes batches downhill to its neighbours before
//! its workers start; stealing then repairs what the prediction missed.
//!
//! 1. **History** ([`crate::CostHistory`], kept by the driver across epochs): each task's
//!    measured cost comes home with its result (`layout::ResultRecord::cost_ns`); the
//!    owner remembers the last cost per task key (a caller-given 64-bit identity, or the
//!    task's index). Keys that vanish drop out; new keys have no history (prediction 0).
//! 2. **Prediction** ([`predicted_load`]): a rank's load is the sum of its tasks'
//!    predictions, unknown tasks counted at the mean of the known ones; a rank with tasks
//!    but no known one predicts nothing and takes no part (it neither gives nor
//!    receives). A rank without tasks knows its load exactly: 0 — it takes part as a
//!    receiver (under a skewed ownership the idle ranks are the ones that need work;
//!    leaving them out would leave the heavy ranks nobody to give to). In an epoch
//!    without history nobody gives, so nothing moves.
//! 3. **Exchange** (the driver): every rank's predicted load travels in the barrier that
//!    starts the epoch; each node is handed only its diffusion neighbours' loads
//!    ([`crate::Node::diffusion_neighbours`]: its overlay row, or the rank-string
//!    neighbours i±1 under the complete graph, so implicit neighbours stay O(1)).
//! 4. **Flows** ([`flows`]): first-order diffusion, one round: to each neighbour j with a
//!    smaller load, α·(L_i − L_j) with α = 1/(deg + 1), deg the number of diffusion
//!    neighbours. Σ flows ≤ deg/(deg+1)·(L_i − min L_j) < L_i, so a rank never gives away
//!    more than its excess; with two ranks one round halves the difference.
//! 5. **Push** ([`pick`]): the giver takes tasks spread over its whole list whose
//!    predicted costs add up to about the flow — the same fraction of every region, so a
//!    cost field that moved since it was measured is still split fairly — and sends them as a chunk of tasks through the results channel (the receiver's INBOX:
//!    reservation, gathered write, CHUNK signal, the same backpressure). The receiver
//!    decodes it (bounds-checked) and appends the tasks to its queue, from where its
//!    workers run them or it shares them on. A task is at every moment in exactly one
//!    queue, shared set, outgoing buffer or chunk in flight; its result goes home to its
//!    owner as any other. Termination needs every result home, so no chunk of tasks
//!    outlives its epoch.
//!
//! Diffusion is off when `Config::diffusion` is false and under `balancer=none`
//! (`steal_below` = 0: no balancing at all). An epoch without predictions (every first
//! epoch) pushes nothing: single-epoch traces carry no diffusion traffic.

use crate::Rank;
use crate::layout::{self, PushedTask, Task};
use crate::neighbours::Neighbours;

/// The mean of the known (non-zero) predictions, if any is known.
fn known_mean(predicted: &[u64]) -> Option<u64> {
    let (sum, n) = predicted
        .iter()
        .filter(|&&c| c > 0)
        .fold((0u128, 0u128), |(s, n), &c| (s + u128::from(c), n + 1));
    (n > 0).then(|| (sum / n).max(1) as u64)
}

/// Each prediction, unknown ones (0) at the mean of the known ones; `None` when none is
/// known. Diffusion, the queue's order and the repartition plan all count unknown tasks so.
pub(crate) fn filled(predicted: &[u64]) -> Option<Vec<u64>> {
    let mean = known_mean(predicted)?;
    Some(
        predicted
            .iter()
            .map(|&c| if c > 0 { c } else { mean })
            .collect(),
    )
}

/// A rank's predicted load from its tasks' predictions (0: unknown), ns: unknown tasks
/// count at the mean of the known ones; 0 without tasks; `None` when it has tasks but
/// none is known (step 2).
pub fn predicted_load(predicted: &[u64]) -> Option<u64> {
    if predicted.is_empty() {
        return Some(0);
    }
    let mean = known_mean(predicted)?;
    let sum: u128 = predicted
        .iter()
        .map(|&c| u128::from(if c > 0 { c } else { mean }))
        .sum();
    Some(sum.min(u128::from(u64::MAX)) as u64)
}

/// The diffusion neighbours of `rank`: its overlay row, or under the complete graph the
/// rank-string neighbours i±1 (step 3). Ascending, without `rank`.
pub(crate) fn neighbours(victims: &Neighbours, rank: Rank, size: u32) -> Vec<Rank> {
    if !victims.is_all() {
        return victims.to_vec();
    }
    if size < 2 {
        return Vec::new();
    }
    let mut v = vec![(rank + size - 1) % size, (rank + 1) % size];
    v.sort_unstable();
    v.dedup();
    v
}

/// The flow to each neighbour with a smaller load (step 4): α·(L_i − L_j), α = 1/(deg +
/// 1). `loads`: the neighbours that predicted a load; `deg`: every diffusion neighbour.
/// Largest flow first (ties by rank).
pub(crate) fn flows(mine: u64, loads: &[(Rank, u64)], deg: usize) -> Vec<(Rank, u64)> {
    let d = deg as u64 + 1;
    let mut f: Vec<(Rank, u64)> = loads
        .iter()
        .filter(|&&(_, l)| l < mine)
        .map(|&(r, l)| (r, (mine - l) / d))
        .filter(|&(_, x)| x > 0)
        .collect();
    f.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    f
}

/// Takes tasks spread over the whole of `tasks` (with their predictions in `costs`,
/// unknown ones already at the mean) whose costs add up to about `flow` (step 5): walking
/// from the back, each task adds its share of the flow (flow × cost / the tasks' total) to
/// what is owed, and a task is taken once the owed amount reaches half its cost. Where
/// predictions are right the sum is the flow within half a task; where they are locally
/// even — a cost field that moved since it was measured, as a flame front does between
/// steps — the same fraction of every region is taken, so the pushed work is that
/// fraction of the real load wherever the dear tasks now are (taking the back of the list
/// would push the region the front moved into, predicted cheap, or none of it). Skips
/// tasks whose record would not fit a chunk (`max_record` bytes), and always leaves one
/// task.
pub(crate) fn pick(
    tasks: &mut Vec<Task>,
    costs: &mut Vec<u64>,
    flow: u64,
    max_record: usize,
) -> Vec<PushedTask> {
    let fits = |t: &Task| layout::record_len(t.payload.len()) <= max_record;
    let total: u128 = tasks
        .iter()
        .zip(costs.iter())
        .filter(|(t, _)| fits(t))
        .map(|(_, &c)| u128::from(c))
        .sum();
    if flow == 0 || total == 0 || tasks.len() <= 1 {
        return Vec::new();
    }
    let (flow, total) = (u128::from(flow) as i128, total as i128);
    let max_out = tasks.len() - 1;
    // Owed work, scaled by `total` (no rounding): + flow × c per task, − total × c per take.
    let mut owed: i128 = 0;
    let mut take = vec![false; tasks.len()];
    let mut taken = 0usize;
    for i in (0..tasks.len()).rev() {
        if taken == max_out {
            break;
        }
        if !fits(&tasks[i]) {
            continue;
        }
        let c = i128::from(costs[i]);
        owed += flow * c;
        if 2 * owed >= total * c {
            owed -= total * c;
            take[i] = true;
            taken += 1;
        }
    }
    let mut out = Vec::with_capacity(taken);
    let mut keep_tasks = Vec::with_capacity(tasks.len() - taken);
    let mut keep_costs = Vec::with_capacity(tasks.len() - taken);
    for ((task, c), t) in tasks.drain(..).zip(costs.drain(..)).zip(take) {
        if t {
            // In queue order (the receiver runs them front first).
            out.push(PushedTask {
                task,
                predicted_ns: c,
            });
        } else {
            keep_tasks.push(task);
            keep_costs.push(c);
        }
    }
    *tasks = keep_tasks;
    *costs = keep_costs;
    out
}

/// The whole plan of one rank (steps 2, 4, 5): the tasks to push to each neighbour, taken
/// off `tasks`. `predicted`: each task's prediction (0: unknown), in task order;
/// `loads`: the diffusion neighbours' predicted loads; `deg`: the number of diffusion
/// neighbours.
pub(crate) fn plan(
    tasks: &mut Vec<Task>,
    predicted: &[u64],
    loads: &[(Rank, u64)],
    deg: usize,
    max_record: usize,
) -> Vec<(Rank, Vec<PushedTask>)> {
    let (Some(mine), Some(mut costs)) = (predicted_load(predicted), filled(predicted)) else {
        return Vec::new();
    };
    flows(mine, loads, deg)
        .into_iter()
        .map(|(r, f)| {
            let mut b = pick(tasks, &mut costs, f, max_record);
            // Dear first: the receiver runs them in this order, after its own.
            b.sort_by_key(|t| std::cmp::Reverse(t.predicted_ns));
            (r, b)
        })
        .filter(|(_, b)| !b.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tasks(n: u32) -> Vec<Task> {
        (0..n)
            .map(|index| Task {
                owner: 0,
                index,
                kind: 0,
                priority: 0,
                cost_ns: 0,
                payload: vec![0; 8],
            })
            .collect()
    }

    #[test]
    fn predicts_unknown_tasks_at_the_mean_of_the_known() {
        assert_eq!(
            predicted_load(&[]),
            Some(0),
            "no tasks: exactly nothing to do"
        );
        assert_eq!(predicted_load(&[0, 0]), None, "nothing known: no part");
        assert_eq!(predicted_load(&[10, 30, 0]), Some(60));
    }

    #[test]
    fn two_ranks_halve_the_difference() {
        // Rank 0: 10 tasks of 100; rank 1 predicts 200.
        let mut t = tasks(10);
        let p = plan(&mut t, &[100; 10], &[(1, 200)], 1, 1 << 10);
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].0, 1);
        // (1000 − 200) / 2 = 400: four tasks spread over the list, in queue order.
        let idx: Vec<u32> = p[0].1.iter().map(|x| x.task.index).collect();
        assert_eq!(idx, [1, 3, 6, 8]);
        assert_eq!(t.len(), 6);
        assert!(p[0].1.iter().all(|x| x.predicted_ns == 100));
    }

    #[test]
    fn never_gives_more_than_the_excess_and_not_uphill() {
        // Rank 5 with load 1000 and neighbours at 0, 900 and 2000 (deg 3, α = 1/4).
        let f = flows(1000, &[(1, 0), (2, 900), (3, 2000)], 3);
        assert_eq!(f, [(1, 250), (2, 25)]);
        assert!(f.iter().map(|x| x.1).sum::<u64>() < 1000);
        // A neighbour without a prediction is not in `loads` and gets nothing, but counts
        // in the degree.
        assert_eq!(flows(1000, &[(1, 0)], 3), [(1, 250)]);
        // Nothing known here: no plan.
        let mut t = tasks(4);
        assert!(plan(&mut t, &[0; 4], &[(1, 0)], 1, 1 << 10).is_empty());
        assert_eq!(t.len(), 4);
    }

    #[test]
    fn pick_stops_at_big_records_and_keeps_one_task() {
        let mut t = tasks(3);
        let mut c = vec![10; 3];
        let got = pick(&mut t, &mut c, 1_000, 1 << 10);
        assert_eq!(got.len(), 2, "one task stays");
        let mut t = tasks(3);
        let mut c = vec![10; 3];
        assert!(pick(&mut t, &mut c, 1_000, 8).is_empty(), "records too big");
    }

    #[test]
    fn pick_is_exact_where_predictions_are_right() {
        // Bimodal costs, known exactly: the pushed sum is the flow within half a task.
        let costs: Vec<u64> = (0..200u64)
            .map(|i| if i % 7 == 3 { 500 } else { 10 })
            .collect();
        let total: u64 = costs.iter().sum();
        let mut t = tasks(200);
        let mut c = costs.clone();
        let got = pick(&mut t, &mut c, total / 3, 1 << 10);
        let sum: u64 = got.iter().map(|x| x.predicted_ns).sum();
        assert!(sum.abs_diff(total / 3) <= 250, "{sum} vs {}", total / 3);
        assert_eq!(t.len() + got.len(), 200);
        assert_eq!(c.len(), t.len());
        let mut seen: Vec<u32> = t
            .iter()
            .chain(got.iter().map(|x| &x.task))
            .map(|x| x.index)
            .collect();
        seen.sort_unstable();
        assert!(seen.iter().copied().eq(0..200), "every task once");
    }

    #[test]
    fn pick_splits_a_front_that_moved_since_it_was_measured() {
        // Predicted: tasks 10..20 dear (last step's front); now: tasks 30..40 are. Half the
        // predicted load is asked for; the real pushed work must be about half the real
        // load, wherever the front went.
        let dear = |r: std::ops::Range<u64>| -> Vec<u64> {
            (0..100u64)
                .map(|i| if r.contains(&i) { 1_000 } else { 10 })
                .collect()
        };
        let (pred, real) = (dear(10..20), dear(30..40));
        let mut t = tasks(100);
        let mut c = pred.clone();
        let got = pick(&mut t, &mut c, pred.iter().sum::<u64>() / 2, 1 << 10);
        let pushed: u64 = got.iter().map(|x| real[x.task.index as usize]).sum();
        let all: u64 = real.iter().sum();
        assert!(
            (pushed as f64 / all as f64 - 0.5).abs() < 0.1,
            "pushed {pushed} of {all}"
        );
    }

    #[test]
    fn complete_graph_uses_the_rank_string() {
        let all = Neighbours::All { size: 10, me: 0 };
        assert_eq!(neighbours(&all, 0, 10), [1, 9]);
        let two = Neighbours::All { size: 2, me: 1 };
        assert_eq!(neighbours(&two, 1, 2), [0]);
        let row = Neighbours::List(vec![1, 4, 9]);
        assert_eq!(neighbours(&row, 0, 10), [1, 4, 9]);
    }
}
