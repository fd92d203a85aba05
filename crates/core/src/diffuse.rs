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
    dest: Rank,
) -> Vec<PushedTask> {
    let fits = |t: &Task| layout::task_record_len(t.payload.len()) <= max_record;
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
                dest,
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
            let mut b = pick(tasks, &mut costs, f, max_record, r);
            // Dear first: the receiver runs them in this order, after its own.
            b.sort_by_key(|t| std::cmp::Reverse(t.predicted_ns));
            (r, b)
        })
        .filter(|(_, b)| !b.is_empty())
        .collect()
}

/// The string plan ([`crate::DiffusionPlan::String`], RankDLB's S[i] along the rank
/// string): every rank that predicted a load is given the mean; the ranks' excesses over
/// it, and their deficits under it, are laid end to end in rank order; each rank's excess
/// interval goes to the ranks whose deficit intervals it overlaps. Only excess moves
/// (Σ max(0, L_i − mean) in all), each excess to as few ranks as its interval spans, and
/// every rank computes its part from the same loads (the epoch-start all-gather) without
/// another message. The tasks travel routed through the overlay: a receiver need not be a
/// neighbour.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StringLoads {
    /// Prefix sums of the excesses: rank r's interval is `[excess[r], excess[r + 1])`.
    excess: Vec<u128>,
    /// Prefix sums of the deficits.
    deficit: Vec<u128>,
    mean: u64,
}

impl StringLoads {
    /// From every rank's predicted load, ns (`None`: it predicted nothing and takes no
    /// part: it neither gives nor receives, and does not count in the mean).
    pub fn new(loads: &[Option<u64>]) -> Self {
        let (sum, n) = loads
            .iter()
            .flatten()
            .fold((0u128, 0u128), |(s, n), &l| (s + u128::from(l), n + 1));
        let mean = sum.checked_div(n).map_or(0, |m| m as u64);
        let mut excess = Vec::with_capacity(loads.len() + 1);
        let mut deficit = Vec::with_capacity(loads.len() + 1);
        let (mut e, mut d) = (0u128, 0u128);
        excess.push(0);
        deficit.push(0);
        for l in loads {
            if let Some(l) = *l {
                e += u128::from(l.saturating_sub(mean));
                d += u128::from(mean.saturating_sub(l));
            }
            excess.push(e);
            deficit.push(d);
        }
        Self {
            excess,
            deficit,
            mean,
        }
    }

    /// The ranks the loads describe.
    pub fn ranks(&self) -> u32 {
        (self.excess.len() - 1) as u32
    }

    /// The mean predicted load, ns.
    pub fn mean(&self) -> u64 {
        self.mean
    }

    /// What `rank` sends, ns of predicted work per receiving rank, in rank order.
    pub fn sends(&self, rank: Rank) -> Vec<(Rank, u64)> {
        let r = rank as usize;
        if r >= self.ranks() as usize {
            return Vec::new();
        }
        let (a, b) = (self.excess[r], self.excess[r + 1]);
        if a == b {
            return Vec::new();
        }
        // The first receiver whose interval ends after a.
        let mut j = self.deficit[1..].partition_point(|&x| x <= a);
        let mut out = Vec::new();
        while j < self.ranks() as usize && self.deficit[j] < b {
            let x = b.min(self.deficit[j + 1]) - a.max(self.deficit[j]);
            if x > 0 {
                out.push((j as Rank, x.min(u128::from(u64::MAX)) as u64));
            }
            j += 1;
        }
        out
    }

    /// What `rank` receives, ns of predicted work (its deficit, as far as the excesses
    /// cover it).
    pub fn receives(&self, rank: Rank) -> u64 {
        let r = rank as usize;
        if r >= self.ranks() as usize {
            return 0;
        }
        let all = *self.excess.last().expect("one entry at least");
        let (a, b) = (self.deficit[r], self.deficit[r + 1].min(all));
        b.saturating_sub(a).min(u128::from(u64::MAX)) as u64
    }
}

/// The string plan of one rank: tasks spread over its list (as [`pick`] takes them)
/// adding up to the sum of `sends`, dealt dearest first to the receiver with the most
/// still owed, so each gets about its part and a mix of the list. `predicted`: each
/// task's prediction (0: unknown).
pub(crate) fn string_plan(
    tasks: &mut Vec<Task>,
    predicted: &[u64],
    sends: &[(Rank, u64)],
    max_record: usize,
) -> Vec<(Rank, Vec<PushedTask>)> {
    let Some(mut costs) = filled(predicted) else {
        return Vec::new();
    };
    let total = sends
        .iter()
        .map(|&(_, x)| u128::from(x))
        .sum::<u128>()
        .min(u128::from(u64::MAX)) as u64;
    let mut taken = pick(tasks, &mut costs, total, max_record, 0);
    taken.sort_by_key(|t| std::cmp::Reverse(t.predicted_ns));
    let mut owed: std::collections::BinaryHeap<(i128, std::cmp::Reverse<usize>)> = sends
        .iter()
        .enumerate()
        .map(|(i, &(_, x))| (i128::from(x), std::cmp::Reverse(i)))
        .collect();
    let mut out: Vec<Vec<PushedTask>> = vec![Vec::new(); sends.len()];
    let mut kept = Vec::new();
    for mut t in taken {
        let c = i128::from(t.predicted_ns);
        match owed.peek() {
            // A task goes only where it fits whole: the task stays otherwise (an
            // overshoot there cannot be undone while the task runs; one here is what
            // stealing repairs). Measured: letting half of it fit gave 0.943 at 3,584
            // ranks against 0.974, a second pass of half-fits 0.933 on 256 against 0.972.
            Some(&(left, std::cmp::Reverse(i))) if left >= c => {
                owed.pop();
                t.dest = sends[i].0;
                owed.push((left - c, std::cmp::Reverse(i)));
                out[i].push(t);
            }
            _ => kept.push(t.task),
        }
    }
    // What stays goes back to the queue's end, as it came.
    tasks.extend(kept);
    sends
        .iter()
        .zip(out)
        .map(|(&(r, _), b)| (r, b))
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
        let got = pick(&mut t, &mut c, 1_000, 1 << 10, 1);
        assert_eq!(got.len(), 2, "one task stays");
        let mut t = tasks(3);
        let mut c = vec![10; 3];
        assert!(
            pick(&mut t, &mut c, 1_000, 8, 1).is_empty(),
            "records too big"
        );
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
        let got = pick(&mut t, &mut c, total / 3, 1 << 10, 1);
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
        let got = pick(&mut t, &mut c, pred.iter().sum::<u64>() / 2, 1 << 10, 1);
        let pushed: u64 = got.iter().map(|x| real[x.task.index as usize]).sum();
        let all: u64 = real.iter().sum();
        assert!(
            (pushed as f64 / all as f64 - 0.5).abs() < 0.1,
            "pushed {pushed} of {all}"
        );
    }

    #[test]
    fn the_string_matches_every_excess_to_deficits_in_rank_order() {
        // Mean 100 over the ranks that predicted (rank 4 did not).
        let s = StringLoads::new(&[Some(0), Some(350), Some(50), Some(0), None, Some(100)]);
        assert_eq!(s.mean(), 100);
        // Excess: rank 1, 250. Deficits: rank 0 100, rank 2 50, rank 3 100.
        assert_eq!(s.sends(1), [(0, 100), (2, 50), (3, 100)]);
        assert!(s.sends(0).is_empty() && s.sends(4).is_empty() && s.sends(5).is_empty());
        assert_eq!(
            [0, 1, 2, 3, 4, 5].map(|r| s.receives(r)),
            [100, 0, 50, 100, 0, 0]
        );
        assert!(
            s.sends(6).is_empty() && s.receives(6) == 0,
            "outside the job"
        );
        // Two givers, one taker: each gives its excess, the taker gets it all.
        let s = StringLoads::new(&[Some(300), Some(0), Some(300)]);
        assert_eq!(s.sends(0), [(1, 100)]);
        assert_eq!(s.sends(2), [(1, 100)]);
        assert_eq!(s.receives(1), 200);
    }

    #[test]
    fn the_string_conserves_work_on_random_loads() {
        let mut rng = titus_overlay::rng::Rng::from_keys(&[7]);
        for round in 0..200 {
            let n = 1 + (rng.below(40) as usize);
            let loads: Vec<Option<u64>> = (0..n)
                .map(|_| (rng.below(10) > 0).then(|| rng.below(1_000)))
                .collect();
            let s = StringLoads::new(&loads);
            let mut got = vec![0u64; n];
            for r in 0..n as u32 {
                let sends = s.sends(r);
                let sent: u64 = sends.iter().map(|x| x.1).sum();
                let own = loads[r as usize].unwrap_or(0);
                assert!(
                    sent <= own.saturating_sub(s.mean()),
                    "round {round} rank {r}"
                );
                for (to, x) in sends {
                    assert!(
                        loads[to as usize].is_some(),
                        "round {round}: to one that took no part"
                    );
                    got[to as usize] += x;
                }
            }
            for r in 0..n as u32 {
                assert_eq!(got[r as usize], s.receives(r), "round {round} rank {r}");
                let l = loads[r as usize].unwrap_or(0);
                assert!(
                    l + got[r as usize] <= s.mean().max(l),
                    "round {round}: over the mean"
                );
            }
        }
    }

    #[test]
    fn the_string_plan_deals_each_receiver_its_part() {
        let costs: Vec<u64> = (0..300u64)
            .map(|i| if i % 5 == 0 { 90 } else { 10 })
            .collect();
        let total: u64 = costs.iter().sum();
        let mut t = tasks(300);
        let sends = [(3, total / 4), (7, total / 8), (9, total / 8)];
        let p = string_plan(&mut t, &costs, &sends, 1 << 10);
        assert_eq!(p.len(), 3);
        for ((r, b), &(want_r, want)) in p.iter().zip(&sends) {
            assert_eq!(*r, want_r);
            assert!(b.iter().all(|x| x.dest == want_r));
            let sum: u64 = b.iter().map(|x| x.predicted_ns).sum();
            assert!(sum.abs_diff(want) <= 100, "to {r}: {sum} of {want}");
        }
        let n: usize = p.iter().map(|(_, b)| b.len()).sum();
        assert_eq!(t.len() + n, 300, "every task once");
        // Nothing known: nothing moves.
        let mut t = tasks(4);
        assert!(string_plan(&mut t, &[0; 4], &[(1, 10)], 1 << 10).is_empty());
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
