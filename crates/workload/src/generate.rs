//! DLB_Bench workloads: who owns which task, and what each task costs.
//!
//! - Ownership (`Distribution`): `gaussian` (TITUS's DLB_Bench: each task's owner is drawn
//!   from a normal distribution centred on the middle rank, with σ such that the densest
//!   10% of ranks hold ~70% of the tasks: P(|X − μ| < 0.05 N) = 0.7 ⇒ σ = 0.05 N / 1.0364),
//!   `uniform`, `one` (every task on rank 0), `file` (task counts per rank).
//! - Cost (`Cost`), all with mean `task_time`: `constant` (TITUS), `exponential`,
//!   `lognormal` (σ = 1), `bimodal` (chemistry-like: a contiguous band of 10% of the tasks —
//!   a reaction zone, placed in space by task number — costs 30× the others).
//!
//! - Time steps (`epoch_tasks`): a job of several epochs keeps every task (same owner,
//!   same index, same number) and moves the cost pattern along the global task list by
//!   the drift D per epoch: epoch e's cost of task g is epoch 0's cost of task
//!   (g − round(e·D·T)) mod T over T tasks, so a bimodal reaction zone moves like a flame
//!   front across the ranks that own its cells.
//! - Repartitioning (`apply_plans`): ownership changes only when the ranks' repartition
//!   plans (`titus_core::repartition`) hand tasks to string neighbours for good.
//!
//! Every draw comes from the seeded generator through `rand_distr`'s distributions
//! (normal, exponential, lognormal), so a workload is reproducible from its parameters.

use crate::PlansError;
use rand::RngExt as _;
use rand_distr::{Exp, LogNormal, Normal};
use titus_core::fasthash::IntMap;
use titus_core::repartition::Move;
#[cfg(test)]
use titus_core::repartition::RepartitionPlan;
use titus_overlay::rng::Rng;

/// How task ownership is spread over the ranks.
#[derive(Debug, Clone, PartialEq)]
pub enum Distribution {
    /// Normal over ranks: 10% of the ranks hold ~70% of the tasks.
    Gaussian,
    /// Every rank alike (up to rounding).
    Uniform,
    /// Every task on rank 0.
    One,
    /// Given counts per rank.
    File(Vec<u64>),
}

/// How task costs are drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cost {
    /// Every task the mean.
    Constant,
    /// Exponential with the mean.
    Exponential,
    /// Log-normal, σ = 1, with the mean.
    Lognormal,
    /// 90% cheap tasks and a contiguous 10% band 30× costlier, with the mean overall.
    Bimodal,
}

/// σ of the gaussian placement, as a fraction of the ranks (module doc).
pub const GAUSSIAN_SIGMA: f64 = 0.05 / 1.0364;
/// Fraction of tasks in the bimodal reaction zone, and how much costlier they are.
pub const ZONE_FRACTION: f64 = 0.1;
/// See [`ZONE_FRACTION`].
pub const ZONE_FACTOR: f64 = 30.0;

/// A workload's parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    /// Ranks.
    pub ranks: u32,
    /// Tasks over all ranks (ignored by `File`, which gives the counts).
    pub tasks: u64,
    /// Mean task cost, seconds.
    pub task_time: f64,
    /// Cost model.
    pub cost: Cost,
    /// Ownership.
    pub distribution: Distribution,
    /// Seed of every draw.
    pub seed: u64,
}

/// One task: its number in the whole workload, its owner and index there, its cost.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskSpec {
    /// Number over the whole workload (placement of the reaction zone).
    pub global: u64,
    /// Owner rank.
    pub owner: u32,
    /// Index in the owner's task list.
    pub index: u32,
    /// Cost, seconds.
    pub cost: f64,
}

/// A workload that cannot be made: its ranks, its counts file, or its task time.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WorkloadError {
    /// No rank to hold the tasks.
    #[error("a workload needs at least one rank")]
    NoRanks,
    /// The gaussian ownership cannot be drawn over this many ranks.
    #[error("a gaussian over {ranks} ranks: {detail}")]
    Gaussian {
        /// The ranks.
        ranks: usize,
        /// The distribution's words.
        detail: String,
    },
    /// A counts file for another number of ranks.
    #[error("the counts file has {file} ranks, the job {job}")]
    CountsRanks {
        /// Ranks in the file.
        file: usize,
        /// Ranks in the job.
        job: usize,
    },
    /// A counts file's line that cannot be read.
    #[error("counts file line {line}: {what}: '{text}'")]
    CountsLine {
        /// Its number, from 1.
        line: usize,
        /// What is wrong.
        what: String,
        /// The line, comments stripped.
        text: String,
    },
    /// A rank the counts file gives no count for.
    #[error("counts file gives no count for rank {0}")]
    CountsMissing(usize),
    /// A task time that is not a non-negative number of seconds.
    #[error("task time {0} is not a non-negative number of seconds")]
    TaskTime(f64),
    /// A cost law that cannot be drawn at this mean.
    #[error("task time {mean} s: {detail}")]
    CostLaw {
        /// The mean task time, s.
        mean: f64,
        /// The distribution's words.
        detail: String,
    },
}

/// Task counts per rank.
pub fn counts(spec: &Spec) -> Result<Vec<u64>, WorkloadError> {
    let n = spec.ranks as usize;
    if n == 0 {
        return Err(WorkloadError::NoRanks);
    }
    let mut rng = Rng::from_keys(&[spec.seed, 0x4f57_4e45]); // "OWNE"
    let mut c = vec![0u64; n];
    match &spec.distribution {
        Distribution::One => c[0] = spec.tasks,
        Distribution::Uniform => {
            for (r, slot) in c.iter_mut().enumerate() {
                *slot = spec.tasks / n as u64 + u64::from((r as u64) < spec.tasks % n as u64);
            }
        }
        Distribution::Gaussian => {
            // Centred on the middle of the middle rank: at small N (where 10% of the ranks
            // is less than one) the tasks pile onto that rank, the closest shape N allows.
            let mid = (n / 2) as f64 + 0.5;
            let normal = Normal::new(mid, GAUSSIAN_SIGMA * n as f64).map_err(|e| {
                WorkloadError::Gaussian {
                    ranks: n,
                    detail: e.to_string(),
                }
            })?;
            for _ in 0..spec.tasks {
                // Wrapped round the ring of ranks, so no rank outside the job is drawn.
                let x = rng.sample(normal).floor().rem_euclid(n as f64);
                c[x as usize % n] += 1;
            }
        }
        Distribution::File(v) => {
            if v.len() != n {
                return Err(WorkloadError::CountsRanks {
                    file: v.len(),
                    job: n,
                });
            }
            c.clone_from(v);
        }
    }
    Ok(c)
}

/// Reads task counts per rank: one count per line, or `RANK COUNT` lines; `#` comments.
pub fn parse_counts(text: &str, ranks: u32) -> Result<Vec<u64>, WorkloadError> {
    let mut c = vec![None; ranks as usize];
    let mut next = 0usize;
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        let bad = |what: &str| WorkloadError::CountsLine {
            line: i + 1,
            what: what.into(),
            text: line.into(),
        };
        let (rank, count) = match words.as_slice() {
            [count] => (next, *count),
            [rank, count] => (
                rank.parse::<usize>()
                    .map_err(|_| bad("not a rank number"))?,
                *count,
            ),
            _ => return Err(bad("expected COUNT or RANK COUNT")),
        };
        let count = count.parse::<u64>().map_err(|_| bad("not a task count"))?;
        if rank >= c.len() {
            return Err(bad(&format!("rank outside the job of {ranks}")));
        }
        if c[rank].replace(count).is_some() {
            return Err(bad("rank given twice"));
        }
        next = rank + 1;
    }
    c.into_iter()
        .enumerate()
        .map(|(r, x)| x.ok_or(WorkloadError::CountsMissing(r)))
        .collect()
}

/// Every rank's tasks, in index order.
pub fn generate(spec: &Spec) -> Result<Vec<Vec<TaskSpec>>, WorkloadError> {
    if !(spec.task_time.is_finite() && spec.task_time >= 0.0) {
        return Err(WorkloadError::TaskTime(spec.task_time));
    }
    let counts = counts(spec)?;
    let total: u64 = counts.iter().sum();
    let mut rng = Rng::from_keys(&[spec.seed, 0x434f_5354]); // "COST"
    let mean = spec.task_time;
    let exponential = Exp::new(1.0 / mean).map_err(|e| WorkloadError::CostLaw {
        mean,
        detail: e.to_string(),
    })?;
    // mean = exp(μ + σ²/2) with σ = 1.
    let lognormal = LogNormal::new(mean.ln() - 0.5, 1.0).map_err(|e| WorkloadError::CostLaw {
        mean,
        detail: e.to_string(),
    })?;
    // Bimodal: base cost c with 0.9c + 0.1·30c = mean.
    let base = mean / (1.0 - ZONE_FRACTION + ZONE_FRACTION * ZONE_FACTOR);
    let zone_start = (total as f64 * 0.45) as u64;
    let zone_end = zone_start + (total as f64 * ZONE_FRACTION).round() as u64;
    let mut global = 0u64;
    let mut out = Vec::with_capacity(counts.len());
    for (owner, &count) in counts.iter().enumerate() {
        let mut tasks = Vec::with_capacity(count as usize);
        for index in 0..count {
            let cost = match spec.cost {
                Cost::Constant => mean,
                Cost::Exponential => rng.sample(exponential),
                Cost::Lognormal => rng.sample(lognormal),
                Cost::Bimodal => {
                    if (zone_start..zone_end).contains(&global) {
                        base * ZONE_FACTOR
                    } else {
                        base
                    }
                }
            };
            tasks.push(TaskSpec {
                global,
                owner: owner as u32,
                index: index as u32,
                cost,
            });
            global += 1;
        }
        out.push(tasks);
    }
    Ok(out)
}

/// Tasks by which the cost pattern has moved at `epoch` with `drift` (a fraction of the
/// `total` tasks per epoch): round(epoch · drift · total) mod total.
pub fn drift_shift(total: u64, epoch: u32, drift: f64) -> u64 {
    if total == 0 {
        return 0;
    }
    let s = (f64::from(epoch) * drift * total as f64).round();
    (s.max(0.0) as u64) % total
}

/// The tasks of epoch `epoch` from epoch 0's (`base`, as [`generate`] made them): every
/// task keeps its owner, index and number; its cost is epoch 0's cost of task
/// (g − [`drift_shift`]) mod T, T the number of tasks.
pub fn epoch_tasks(base: &[Vec<TaskSpec>], epoch: u32, drift: f64) -> Vec<Vec<TaskSpec>> {
    let costs = EpochCosts::new(base, epoch, drift);
    base.iter()
        .map(|ts| ts.iter().map(|t| costs.task(t)).collect())
        .collect()
}

/// Each task's cost in one epoch, as [`epoch_tasks`] gives it, without a copy of every
/// task: a driver that turns them into its own tasks at once (the simulator, at 100,000
/// ranks) needs the copy no more than the costs.
#[derive(Debug, Clone)]
pub struct EpochCosts {
    /// Epoch 0's cost by task number, where the costs moved (empty: they did not).
    by_number: Vec<f64>,
    total: u64,
    shift: u64,
}

impl EpochCosts {
    /// The costs of epoch `epoch` of `base` (epoch 0's tasks) under `drift`.
    pub fn new(base: &[Vec<TaskSpec>], epoch: u32, drift: f64) -> Self {
        let total: u64 = base.iter().map(|t| t.len() as u64).sum();
        let shift = drift_shift(total, epoch, drift);
        let mut by_number = Vec::new();
        if shift != 0 {
            by_number = vec![0.0; total as usize];
            for t in base.iter().flatten() {
                by_number[t.global as usize] = t.cost;
            }
        }
        Self {
            by_number,
            total,
            shift,
        }
    }

    /// `t` (a task of the base) in this epoch: its cost moved.
    pub fn task(&self, t: &TaskSpec) -> TaskSpec {
        if self.shift == 0 {
            return t.clone();
        }
        TaskSpec {
            cost: self.by_number[((t.global + self.total - self.shift) % self.total) as usize],
            ..t.clone()
        }
    }
}

/// Applies every rank's repartition plan (`moves[r]`: rank r's, from
/// `titus_core::repartition::plan`, keys = the tasks' global numbers) to the ownership
/// `owned`, as a solver hands cells to its neighbours: a moved task keeps its number and
/// cost and gets its new owner; each rank's list is then in number order (string order)
/// and every task's owner and index say where it is. Every rank that applies the same
/// plans gets the same ownership. A plan naming a task its rank does not own, the same
/// task twice, a move to itself or outside the job, or (under `plan` = neighbours) to
/// anything but a string neighbour fails, naming it.
pub fn apply_plans(
    owned: &mut [Vec<TaskSpec>],
    moves: &[Vec<Move>],
    plan: titus_core::repartition::RepartitionPlan,
) -> Result<(), PlansError> {
    let neighbours_only = plan == titus_core::repartition::RepartitionPlan::Neighbours;
    let n = owned.len();
    if moves.len() != n {
        return Err(PlansError::Count {
            plans: moves.len(),
            ranks: n,
        });
    }
    // Every plan is checked before anything moves (a bad one leaves `owned` as it was).
    let mut dest: Vec<IntMap<u64, usize>> = Vec::with_capacity(n);
    for (from, plan) in moves.iter().enumerate() {
        let mut to_of: IntMap<u64, usize> = IntMap::default();
        for m in plan {
            let to = m.to as usize;
            if to >= n || to == from || (neighbours_only && to.abs_diff(from) != 1) {
                return Err(PlansError::MoveTo { from, to: m.to });
            }
            if to_of.insert(m.key, to).is_some() {
                return Err(PlansError::Twice { from, key: m.key });
            }
        }
        let found = owned[from]
            .iter()
            .filter(|t| to_of.contains_key(&t.global))
            .count();
        if found < to_of.len()
            && let Some(m) = plan
                .iter()
                .find(|m| !owned[from].iter().any(|t| t.global == m.key))
        {
            return Err(PlansError::NotOwned { from, key: m.key });
        }
        dest.push(to_of);
    }
    let mut arriving: Vec<Vec<TaskSpec>> = vec![Vec::new(); n];
    for (list, to_of) in owned.iter_mut().zip(&dest) {
        if to_of.is_empty() {
            continue;
        }
        let mut kept = Vec::with_capacity(list.len() - to_of.len());
        for t in list.drain(..) {
            match to_of.get(&t.global) {
                Some(&to) => arriving[to].push(t),
                None => kept.push(t),
            }
        }
        *list = kept;
    }
    for (r, (list, extra)) in owned.iter_mut().zip(arriving).enumerate() {
        list.extend(extra);
        list.sort_by_key(|t| t.global);
        for (i, t) in list.iter_mut().enumerate() {
            t.owner = r as u32;
            t.index = i as u32;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(ranks: u32, tasks: u64, cost: Cost, distribution: Distribution) -> Spec {
        Spec {
            ranks,
            tasks,
            task_time: 0.001,
            cost,
            distribution,
            seed: 5,
        }
    }

    #[test]
    fn gaussian_puts_about_70_percent_on_10_percent_of_ranks() {
        let c = counts(&spec(1000, 200_000, Cost::Constant, Distribution::Gaussian)).unwrap();
        assert_eq!(c.iter().sum::<u64>(), 200_000);
        let mut sorted = c.clone();
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        let top: u64 = sorted[..100].iter().sum();
        let share = top as f64 / 200_000.0;
        eprintln!("gaussian: the densest 10% of 1000 ranks hold {share:.3} of the tasks");
        assert!((0.66..0.74).contains(&share), "densest 10% hold {share:.3}");
    }

    #[test]
    fn other_distributions_and_files() {
        assert_eq!(
            counts(&spec(3, 10, Cost::Constant, Distribution::Uniform)).unwrap(),
            vec![4, 3, 3]
        );
        assert_eq!(
            counts(&spec(3, 10, Cost::Constant, Distribution::One)).unwrap(),
            vec![10, 0, 0]
        );
        assert_eq!(
            parse_counts("5\n# comment\n7\n0 # rank 2\n", 3).unwrap(),
            vec![5, 7, 0]
        );
        assert_eq!(parse_counts("2 9\n0 1\n1 4\n", 3).unwrap(), vec![1, 4, 9]);
        for (text, err) in [
            ("1\n2\n", "no count for rank 2"),
            ("1\nx\n3\n", "line 2: not a task count"),
            ("0 1\n0 2\n2 3\n", "rank given twice"),
            ("7 1\n", "rank outside the job"),
            ("1 2 3\n", "expected COUNT or RANK COUNT"),
        ] {
            let e = parse_counts(text, 3).unwrap_err().to_string();
            assert!(e.contains(err), "{text:?}: {e}");
        }
        assert!(
            counts(&spec(
                2,
                1,
                Cost::Constant,
                Distribution::File(vec![1, 2, 3])
            ))
            .is_err()
        );
    }

    #[test]
    fn every_cost_model_has_the_mean_and_its_shape() {
        for cost in [
            Cost::Constant,
            Cost::Exponential,
            Cost::Lognormal,
            Cost::Bimodal,
        ] {
            let tasks: Vec<TaskSpec> = generate(&spec(4, 100_000, cost, Distribution::Uniform))
                .unwrap()
                .concat();
            let mean = tasks.iter().map(|t| t.cost).sum::<f64>() / tasks.len() as f64;
            assert!((mean / 0.001 - 1.0).abs() < 0.03, "{cost:?}: mean {mean}");
            let max = tasks.iter().map(|t| t.cost).fold(0.0, f64::max);
            match cost {
                Cost::Constant => assert_eq!(max, 0.001),
                Cost::Bimodal => {
                    let costly = tasks.iter().filter(|t| t.cost > 0.001).count();
                    assert_eq!(costly, 10_000, "a 10% band");
                    // The band is contiguous in task numbers.
                    let first = tasks.iter().position(|t| t.cost > 0.001).unwrap();
                    assert!(tasks[first..first + 10_000].iter().all(|t| t.cost > 0.001));
                }
                _ => assert!(max > 0.005, "{cost:?}: no tail ({max})"),
            }
        }
        assert!(
            generate(&Spec {
                task_time: f64::NAN,
                ..spec(2, 1, Cost::Constant, Distribution::One)
            })
            .is_err()
        );
    }

    #[test]
    fn the_cost_pattern_drifts_and_tasks_keep_their_identity() {
        let base = generate(&spec(4, 1000, Cost::Bimodal, Distribution::Uniform)).unwrap();
        assert_eq!(epoch_tasks(&base, 0, 0.05), base, "epoch 0 is the base");
        assert_eq!(epoch_tasks(&base, 7, 0.0), base, "no drift, no change");
        assert_eq!(drift_shift(1000, 3, 0.05), 150);
        assert_eq!(drift_shift(1000, 30, 0.05), 500, "wraps round");
        let zone = |ts: &[Vec<TaskSpec>]| {
            let flat: Vec<&TaskSpec> = ts.iter().flatten().collect();
            let costly: Vec<u64> = flat
                .iter()
                .filter(|t| t.cost > 0.001)
                .map(|t| t.global)
                .collect();
            (costly[0], costly.len())
        };
        let (start, len) = zone(&base);
        assert_eq!((start, len), (450, 100));
        for e in 1..4u32 {
            let ts = epoch_tasks(&base, e, 0.05);
            // Same owners, indices and numbers; the same total cost; the zone 50 further.
            for (a, b) in ts.iter().flatten().zip(base.iter().flatten()) {
                assert_eq!((a.owner, a.index, a.global), (b.owner, b.index, b.global));
            }
            let sum = |ts: &[Vec<TaskSpec>]| ts.iter().flatten().map(|t| t.cost).sum::<f64>();
            assert!((sum(&ts) - sum(&base)).abs() < 1e-9);
            assert_eq!(zone(&ts), (450 + 50 * u64::from(e), 100), "epoch {e}");
        }
        // The front crosses from rank 1 (tasks 250..500) into rank 2 (500..750).
        let owners = |ts: &[Vec<TaskSpec>]| -> Vec<usize> {
            ts.iter()
                .map(|r| r.iter().filter(|t| t.cost > 0.001).count())
                .collect()
        };
        assert_eq!(owners(&base), vec![0, 50, 50, 0]);
        assert_eq!(owners(&epoch_tasks(&base, 2, 0.05)), vec![0, 0, 100, 0]);
    }

    #[test]
    fn plans_move_tasks_for_good_and_conserve_them() {
        // Gaussian ownership, known costs: every rank plans from the same loads; after
        // the plans every task is owned exactly once, with its number and cost, owners
        // and indices say where it is, and the largest load shrank.
        let mut owned = generate(&spec(16, 1600, Cost::Bimodal, Distribution::Gaussian)).unwrap();
        let cost = |t: &TaskSpec| (t.cost * 1e9) as u64;
        let loads = |o: &[Vec<TaskSpec>]| -> Vec<u64> {
            o.iter().map(|ts| ts.iter().map(cost).sum()).collect()
        };
        let before_max = *loads(&owned).iter().max().unwrap();
        let mut all: Vec<(u64, u64)> = owned
            .iter()
            .flatten()
            .map(|t| (t.global, cost(t)))
            .collect();
        for _ in 0..3 {
            let l = loads(&owned);
            let moves: Vec<Vec<Move>> = owned
                .iter()
                .enumerate()
                .map(|(r, ts)| {
                    let tasks: Vec<(u64, u64)> = ts.iter().map(|t| (t.global, cost(t))).collect();
                    titus_core::repartition::plan(&l, r as u32, &tasks).unwrap()
                })
                .collect();
            assert!(moves.iter().any(|m| !m.is_empty()));
            apply_plans(&mut owned, &moves, RepartitionPlan::Neighbours).unwrap();
            let mut now: Vec<(u64, u64)> = owned
                .iter()
                .flatten()
                .map(|t| (t.global, cost(t)))
                .collect();
            now.sort_unstable();
            all.sort_unstable();
            assert_eq!(now, all, "every task exactly once, same cost");
            for (r, ts) in owned.iter().enumerate() {
                for (i, t) in ts.iter().enumerate() {
                    assert_eq!((t.owner, t.index), (r as u32, i as u32));
                    assert!(i == 0 || ts[i - 1].global < t.global, "string order");
                }
            }
        }
        assert!(*loads(&owned).iter().max().unwrap() < before_max);
    }

    #[test]
    fn bad_plans_are_named() {
        let base = generate(&spec(3, 30, Cost::Constant, Distribution::Uniform)).unwrap();
        let mv = |key, to| Move { key, to };
        for (plans, needle) in [
            (vec![vec![]], "1 repartition plans for 3 ranks"),
            (
                vec![vec![mv(0, 2)], vec![], vec![]],
                "rank 0 planned a move to rank 2",
            ),
            (
                vec![vec![], vec![], vec![mv(25, 3)]],
                "rank 2 planned a move to rank 3",
            ),
            (
                vec![vec![mv(1, 1), mv(1, 1)], vec![], vec![]],
                "task 1 twice",
            ),
            (
                vec![vec![mv(15, 1)], vec![], vec![]],
                "rank 0 planned to move task 15 it does not own",
            ),
        ] {
            let mut owned = base.clone();
            let e = apply_plans(&mut owned, &plans, RepartitionPlan::Neighbours)
                .unwrap_err()
                .to_string();
            assert!(e.contains(needle), "{e}");
            assert_eq!(owned, base, "nothing moved");
        }
    }

    #[test]
    fn workloads_are_reproducible() {
        let s = spec(50, 5000, Cost::Lognormal, Distribution::Gaussian);
        assert_eq!(generate(&s).unwrap(), generate(&s).unwrap());
        let other = Spec {
            seed: 6,
            ..s.clone()
        };
        assert_ne!(generate(&s).unwrap(), generate(&other).unwrap());
    }
}
