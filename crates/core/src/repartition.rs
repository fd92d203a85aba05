//! A repartition plan for the solver (RankDLB's step 4): which of this rank's tasks should
//! move *permanently* to which neighbour in the rank string so that the predicted loads
//! even out — for a solver that owns cells and can hand some to the next rank between
//! time steps (diffusion and stealing only lend tasks for one epoch).
//!
//! Steps, on every rank with the same inputs (so the plans agree without talking):
//! 1. The target is the mean load T = Σ L_j / N.
//! 2. Along the string, S[i] = Σ_{j ≤ i} (L_j − T) is what must cross the border between
//!    ranks i and i + 1: S[i] > 0 flows right (i gives to i + 1), S[i] < 0 flows left.
//! 3. This rank gives its right neighbour S[me] (if positive) and its left neighbour
//!    −S[me − 1] (if positive): its last tasks in string order go right, its first go
//!    left, by predicted cost, a task taken while the sum stays below the amount minus
//!    half the task's cost; the two ends never overlap.
//! 4. A rank gives only its own tasks, so where S[i] exceeds what rank i owns the plan
//!    balances partly, and applying it again (after the next step's measurements)
//!    continues — as RankDLB does, which does not require balance in one step. Tasks do
//!    not split and the plans are made without talking, so a border may carry a task
//!    less than its share: a rank may end up to one task above the largest load.
//!    Tasks only ever move between string neighbours, and each task at most once.
//!
//! The re-cut ([`recut`], `RepartitionPlan::Recut`) instead cuts the string anew: every
//! rank's tasks are laid end to end in string order by predicted cost (rank i's from
//! Σ_{j<i} L_j on, scaled into its own L_i), and each goes to the rank whose share
//! [k·T, (k+1)·T) holds the middle of its cost. Ownership stays contiguous along the string
//! (neighbours in the string stay neighbours: a space-filling-curve decomposition stays
//! one), but a task may move far: a pile over a third of the ranks spreads over all of
//! them in one plan, where the neighbours' plan widens it by one rank a side.
//!
//! Both plans need of the other ranks only where this rank stands in the string
//! ([`StringPosition`]): the loads before it and the job's total. A job gets those by
//! a scan and a reduction over its fabric (`crate::start`, a repartition start), never
//! by gathering every load; [`plan`] and [`recut`] compute the same from every rank's
//! load, as the reference the tests hold the collectives to.
//!
//! With the job's front (`JobFront`, `front.rs`), the loads and the tasks' costs are
//! those predicted for the next epoch — the last epoch's moved once more by the front's
//! shift (a repartition start's window, `crate::start`) — so that the plan balances the
//! step it is applied to, not the one before.

use crate::diffuse::filled;
use crate::{CoreError, CostHistory, Rank};

/// How a repartition plan moves tasks (`Config::repartition_plan`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RepartitionPlan {
    /// Only to string neighbours, by the flows across each border ([`plan`]).
    #[default]
    Neighbours,
    /// The string cut anew by predicted cost ([`recut`]): contiguous ownership, any rank.
    Recut,
}

impl RepartitionPlan {
    /// Its name in options and reports: `neighbours`, `recut`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Neighbours => "neighbours",
            Self::Recut => "recut",
        }
    }

    /// This plan of the rank at `at`, for its `tasks` in string order as (key, predicted
    /// cost ns).
    pub fn at(self, at: &StringPosition, tasks: &[(u64, u64)]) -> Result<Vec<Move>, CoreError> {
        if at.rank >= at.ranks || at.before.saturating_add(u128::from(at.load)) > at.total {
            return Err(crate::ConfigError::ImpossiblePosition(format!("{at:?}")).into());
        }
        let keys: Vec<u64> = tasks.iter().map(|t| t.0).collect();
        CostHistory::check_keys(&keys)?;
        Ok(match self {
            Self::Neighbours => plan_at(at, tasks),
            Self::Recut => recut_at(at, tasks),
        })
    }

    /// This plan of rank `me` from every rank's load ([`plan`] or [`recut`]).
    pub fn of(self, loads: &[u64], me: Rank, tasks: &[(u64, u64)]) -> Result<Vec<Move>, CoreError> {
        self.at(&StringPosition::of(loads, me)?, tasks)
    }
}

/// Where a rank stands in the rank string for a plan: all a plan needs of the others.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StringPosition {
    /// The rank.
    pub rank: Rank,
    /// The job's ranks.
    pub ranks: u32,
    /// The predicted loads of the ranks before it, summed (ns).
    pub before: u128,
    /// Its own predicted load (ns).
    pub load: u64,
    /// Every rank's, summed (ns).
    pub total: u128,
}

impl StringPosition {
    /// Rank `me`'s position given every rank's predicted load (ns, string order).
    pub fn of(loads: &[u64], me: Rank) -> Result<Self, CoreError> {
        let n = loads.len();
        let Some(&load) = loads.get(me as usize) else {
            return Err(crate::ConfigError::RankOutsideString { rank: me, loads: n }.into());
        };
        let sum = |l: &[u64]| l.iter().map(|&x| u128::from(x)).sum::<u128>();
        Ok(Self {
            rank: me,
            ranks: n as u32,
            before: sum(&loads[..me as usize]),
            load,
            total: sum(loads),
        })
    }

    /// What must cross the border after rank `i` (`i + 1` ranks' loads summed to `upto`):
    /// positive flows right, negative left.
    fn border(&self, i: u32, upto: u128) -> i128 {
        let total = self.total as i128;
        upto as i128 - total * (i128::from(i) + 1) / i128::from(self.ranks)
    }
}

impl std::str::FromStr for RepartitionPlan {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "neighbours" | "neighbors" => Ok(Self::Neighbours),
            "recut" => Ok(Self::Recut),
            _ => Err(format!(
                "repartition plan '{s}': expected neighbours or recut"
            )),
        }
    }
}

/// One task to hand over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Move {
    /// The task's key.
    pub key: u64,
    /// The rank that should own it from now on (this rank ± 1 under
    /// [`RepartitionPlan::Neighbours`]).
    pub to: Rank,
}

/// This rank's side of a plan: each of its tasks (`keys`, string order) with its predicted
/// cost from the measured costs in `history` — a task without one at the mean of those
/// with one, 0 when none has one — and their sum, its predicted load (what every rank
/// shares before [`plan`]), as a repartition start predicts them where the costs stayed.
pub fn predicted_tasks(history: &CostHistory, keys: &[u64]) -> (Vec<(u64, u64)>, u64) {
    let tasks = filled_tasks(keys, history.predict(keys));
    let load: u128 = tasks.iter().map(|&(_, c)| u128::from(c)).sum();
    (tasks, load.min(u128::from(u64::MAX)) as u64)
}

/// `keys` with their `predicted` costs (ns; 0: unknown), an unknown one at the mean of
/// the known, 0 when none is known.
pub fn filled_tasks(keys: &[u64], predicted: Vec<u64>) -> Vec<(u64, u64)> {
    let costs = filled(&predicted).unwrap_or(predicted);
    keys.iter().copied().zip(costs).collect()
}

/// The plan of rank `me` given every rank's predicted load (`loads`, ns, string order)
/// and this rank's tasks in string order as (key, predicted cost ns).
pub fn plan(loads: &[u64], me: Rank, tasks: &[(u64, u64)]) -> Result<Vec<Move>, CoreError> {
    RepartitionPlan::Neighbours.of(loads, me, tasks)
}

/// The neighbours' plan of the rank at `at` (module docs, steps 1–3).
fn plan_at(at: &StringPosition, tasks: &[(u64, u64)]) -> Vec<Move> {
    // 1–2. The flows across this rank's two borders, in i128: the total is below
    // 2^64 · N, and its product with a rank's place below 2^64 · N², which fits for any
    // job of fewer than 2^31 ranks (a rank is a u32 below that in practice).
    let me = at.rank;
    let mine = at.before + u128::from(at.load);
    let right = match me + 1 < at.ranks {
        true => at.border(me, mine).max(0),
        false => 0,
    };
    let left = match me > 0 {
        true => (-at.border(me - 1, at.before)).max(0),
        false => 0,
    };
    // 3. Take from the ends.
    let take = |order: &mut dyn Iterator<Item = usize>, amount: i128, used: &[bool]| {
        let mut sum: i128 = 0;
        let mut picked = Vec::new();
        if amount <= 0 {
            return picked;
        }
        for i in order {
            if used[i] {
                break;
            }
            let c = i128::from(tasks[i].1);
            if sum + c - c / 2 > amount {
                break;
            }
            sum += c;
            picked.push(i);
        }
        picked
    };
    let mut used = vec![false; tasks.len()];
    let mut moves = Vec::new();
    for i in take(&mut (0..tasks.len()).rev(), right, &used) {
        used[i] = true;
        moves.push(Move {
            key: tasks[i].0,
            to: me + 1,
        });
    }
    for i in take(&mut (0..tasks.len()), left, &used) {
        used[i] = true;
        moves.push(Move {
            key: tasks[i].0,
            to: me - 1,
        });
    }
    moves
}

/// The re-cut of rank `me` (module docs): given every rank's predicted load (`loads`,
/// ns, string order) and this rank's tasks in string order as (key, predicted cost ns),
/// the tasks whose cost's middle falls in another rank's share, each to that rank.
pub fn recut(loads: &[u64], me: Rank, tasks: &[(u64, u64)]) -> Result<Vec<Move>, CoreError> {
    RepartitionPlan::Recut.of(loads, me, tasks)
}

/// The re-cut of the rank at `at`.
fn recut_at(at: &StringPosition, tasks: &[(u64, u64)]) -> Vec<Move> {
    let (n, me, total, before) = (at.ranks, at.rank, at.total, at.before);
    let mine = u128::from(at.load);
    if total == 0 {
        return Vec::new();
    }
    // Costs scaled below 2^63 in sum, so that (2·cum + c)·mine fits in u128 (the loads
    // may come from another rank's profile: nothing bounds them but u64).
    let own: u128 = tasks.iter().map(|t| u128::from(t.1)).sum();
    let bits = (128 - own.leading_zeros()).saturating_sub(63);
    let own = own >> bits;
    let mut moves = Vec::new();
    let mut cum: u128 = 0;
    for &(key, c) in tasks {
        let c = u128::from(c) >> bits;
        // The middle of this task's cost, scaled into this rank's part of the string (a
        // rank whose tasks predict nothing keeps them at its part's start: in order).
        let mid = match own {
            0 => before,
            _ => before + (2 * cum + c) * mine / (2 * own),
        };
        cum += c;
        let to = ((mid * u128::from(n)) / total).min(u128::from(n) - 1) as Rank;
        if to != me {
            moves.push(Move { key, to });
        }
    }
    moves
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_recut_spreads_a_pile_over_every_rank_in_one_plan() {
        // Rank 1 of 4 owns 40 tasks of 10; the others nothing.
        let tasks: Vec<(u64, u64)> = (0..40).map(|k| (k, 10)).collect();
        let p = recut(&[0, 400, 0, 0], 1, &tasks).unwrap();
        let to = |k: u64| p.iter().find(|m| m.key == k).map_or(1, |m| m.to);
        let counts: Vec<usize> = (0..4)
            .map(|r| (0..40).filter(|&k| to(k) == r).count())
            .collect();
        assert_eq!(counts, [10, 10, 10, 10]);
        // In string order: keys 0..10 to rank 0, 30..40 to rank 3.
        assert!((0..10).all(|k| to(k) == 0) && (30..40).all(|k| to(k) == 3));
        assert!(recut(&[0, 400, 0, 0], 0, &[]).unwrap().is_empty());
        // A rank whose tasks predict nothing keeps the string's order: its task goes where
        // its part starts (rank 1's share), after rank 0's second and before its third.
        let p0 = recut(&[300, 0, 0], 0, &[(0, 100), (1, 100), (2, 100)]).unwrap();
        let p1 = recut(&[300, 0, 0], 1, &[(3, 0)]).unwrap();
        assert_eq!(p0, [Move { key: 1, to: 1 }, Move { key: 2, to: 2 }]);
        assert_eq!(p1, [Move { key: 3, to: 2 }]);
        // Loads and costs at u64's end do not overflow: rank 1's tasks fill its share.
        let big = [u64::MAX, u64::MAX];
        assert!(
            recut(&big, 1, &[(0, u64::MAX), (1, u64::MAX)])
                .unwrap()
                .is_empty()
        );
        let p = recut(&[0, u64::MAX], 1, &[(0, u64::MAX), (1, u64::MAX)]).unwrap();
        assert_eq!(p, [Move { key: 0, to: 0 }]);
        assert!(recut(&[1, 2], 2, &[]).is_err());
    }

    #[test]
    fn two_ranks_meet_in_the_middle() {
        // Rank 0 owns 8 tasks of 10, rank 1 none: rank 0 gives its last 4 to rank 1.
        let tasks: Vec<(u64, u64)> = (0..8).map(|k| (k, 10)).collect();
        let p = plan(&[80, 0], 0, &tasks).unwrap();
        assert_eq!(
            p.iter().map(|m| (m.key, m.to)).collect::<Vec<_>>(),
            vec![(7, 1), (6, 1), (5, 1), (4, 1)]
        );
        assert!(plan(&[80, 0], 1, &[]).unwrap().is_empty());
    }

    #[test]
    fn unmeasured_tasks_count_at_the_mean_of_the_measured() {
        let mut h = CostHistory::default();
        assert_eq!(predicted_tasks(&h, &[1, 2]), (vec![(1, 0), (2, 0)], 0));
        h.record(&[1, 2, 9], &[10, 30, 5]);
        // Key 3 was never measured: the mean of keys 1 and 2 (key 9 is not this rank's).
        assert_eq!(
            predicted_tasks(&h, &[2, 3, 1]),
            (vec![(2, 30), (3, 20), (1, 10)], 60)
        );
    }

    #[test]
    fn bad_input_is_named() {
        let e = plan(&[1, 2], 2, &[]).unwrap_err().to_string();
        assert!(e.contains("rank 2 outside a string of 2"), "{e}");
        let e = plan(&[1, 2], 0, &[(5, 1), (5, 1)]).unwrap_err().to_string();
        assert!(e.contains('5'), "{e}");
        // A place another rank's sums could make: refused, not planned from.
        for at in [
            StringPosition {
                rank: 3,
                ranks: 3,
                before: 0,
                load: 0,
                total: 0,
            },
            StringPosition {
                rank: 0,
                ranks: 0,
                before: 0,
                load: 0,
                total: 9,
            },
            StringPosition {
                rank: 1,
                ranks: 3,
                before: 5,
                load: 5,
                total: 9,
            },
        ] {
            for p in [RepartitionPlan::Neighbours, RepartitionPlan::Recut] {
                let e = p.at(&at, &[(1, 1)]).unwrap_err().to_string();
                assert!(e.contains("cannot be"), "{e}");
            }
        }
    }

    /// Each rank's tasks (keys rank·100 + i, in string order) with `costs`, and its load.
    fn job(costs: &[Vec<u64>]) -> (Vec<Vec<(u64, u64)>>, Vec<u64>) {
        let tasks: Vec<Vec<(u64, u64)>> = costs
            .iter()
            .enumerate()
            .map(|(r, cs)| {
                cs.iter()
                    .enumerate()
                    .map(|(i, &c)| ((r * 100 + i) as u64, c))
                    .collect()
            })
            .collect();
        let loads = tasks.iter().map(|t| t.iter().map(|x| x.1).sum()).collect();
        (tasks, loads)
    }

    proptest! {
        #![proptest_config(crate::ctx::testing::proptest_config())]

        /// Every rank's plan, from the same loads: each task moves at most once, only to a
        /// string neighbour, nothing is created, and applying the plans leaves no rank
        /// above the largest load by more than one task (plans are made without talking,
        /// and tasks do not split: a border may carry a task less than its share).
        #[test]
        fn plans_conserve_tasks_and_move_only_to_neighbours(
            costs in prop::collection::vec(prop::collection::vec(0u64..1000, 0..20), 1..8)
        ) {
            let n = costs.len();
            let (tasks, loads) = job(&costs);
            let mut after = loads.clone();
            for r in 0..n {
                let p = plan(&loads, r as Rank, &tasks[r]).unwrap();
                let mut seen = std::collections::HashSet::new();
                for m in &p {
                    prop_assert!(seen.insert(m.key), "key {} moved twice", m.key);
                    prop_assert!((m.to as i64 - r as i64).abs() == 1, "rank {r} to {}", m.to);
                    let cost = tasks[r].iter().find(|t| t.0 == m.key).expect("own task").1;
                    after[r] -= cost;
                    after[m.to as usize] += cost;
                }
            }
            prop_assert_eq!(after.iter().sum::<u64>(), loads.iter().sum::<u64>());
            let biggest = costs.iter().flatten().copied().max().unwrap_or(0);
            let before = loads.iter().copied().max().unwrap_or(0);
            prop_assert!(
                after.iter().all(|&a| a <= before + biggest),
                "{loads:?} -> {after:?}"
            );
        }

        /// Every rank's re-cut, from the same loads: each task moves at most once,
        /// nothing is created, ownership stays in string order (a rank's tasks all come
        /// before the next rank's), and no rank ends above the mean by more than a task.
        #[test]
        fn recuts_conserve_tasks_keep_the_string_and_even_out(
            costs in prop::collection::vec(prop::collection::vec(0u64..1000, 0..20), 1..8)
        ) {
            let n = costs.len();
            let (tasks, loads) = job(&costs);
            let mut owner: Vec<(u64, usize, u64)> = Vec::new();
            for (r, mine) in tasks.iter().enumerate() {
                let p = recut(&loads, r as Rank, mine).unwrap();
                let mut seen = std::collections::HashSet::new();
                for m in &p {
                    prop_assert!(seen.insert(m.key), "key {} moved twice", m.key);
                    prop_assert!((m.to as usize) < n && m.to as usize != r);
                }
                for &(k, c) in mine {
                    let to = p.iter().find(|m| m.key == k).map_or(r, |m| m.to as usize);
                    owner.push((k, to, c));
                }
            }
            prop_assert!(owner.windows(2).all(|w| w[0].1 <= w[1].1), "string order: {owner:?}");
            let mut after = vec![0u64; n];
            for &(_, to, c) in &owner {
                after[to] += c;
            }
            prop_assert_eq!(after.iter().sum::<u64>(), loads.iter().sum::<u64>());
            let mean = loads.iter().sum::<u64>() / n as u64;
            let biggest = costs.iter().flatten().copied().max().unwrap_or(0);
            prop_assert!(
                after.iter().all(|&a| a <= mean + biggest + 1),
                "{loads:?} -> {after:?}"
            );
        }
    }
}
