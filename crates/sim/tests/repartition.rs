//! The repartition plan on the simulator, applied between epochs as `dlb-bench
//! --repartition 1` applies the runtime's ([`titus_sim::simulate_with`],
//! [`titus_sim::Between::repartition_plan`]): DLB_Bench's gaussian ownership under no
//! balancing, a moving bimodal front. Every epoch must verify (the simulator checks that
//! every task ran once and every result came home right), every task must be owned
//! exactly once in every epoch with its number and drifted cost, tasks move only between
//! string neighbours, and the largest per-rank owned work must shrink (to at most half).

mod common;

use titus_core::{Balancing, Config};
use titus_sim::{Between, Job, Model, SimTask, simulate, simulate_with};
use titus_workload::{Cost, Distribution, Spec, TaskSpec, apply_plans, epoch_tasks, generate};

const RANKS: u32 = 32;
const TASKS: u64 = 3200;
const EPOCHS: u32 = 6;
const DRIFT: f64 = 0.02;

fn cost_ns(t: &TaskSpec) -> u64 {
    (t.cost * 1e9) as u64
}

/// An epoch's simulated tasks, keyed by their numbers (as `titus sim` keys them).
fn sim_tasks(all: &[Vec<TaskSpec>]) -> Vec<Vec<SimTask>> {
    all.iter()
        .map(|ts| {
            ts.iter()
                .map(|t| SimTask {
                    kind: 0,
                    key: t.global,
                    cost_ns: cost_ns(t),
                    payload: t.global.to_le_bytes().to_vec(),
                    hint_ns: 0,
                    priority: 0,
                })
                .collect()
        })
        .collect()
}

fn largest_owned(all: &[Vec<TaskSpec>]) -> u64 {
    all.iter()
        .map(|ts| ts.iter().map(cost_ns).sum())
        .max()
        .unwrap_or(0)
}

fn job(base: &[Vec<TaskSpec>]) -> Job<'static> {
    let (core, overlay) = common::balanced(Balancing::None, Config::default(), RANKS);
    Job {
        later_epochs: (1..EPOCHS)
            .map(|e| sim_tasks(&epoch_tasks(base, e, DRIFT)))
            .collect(),
        max_events: 10_000_000,
        // Each rank's repartition start held to the whole job's plan.
        check_start: true,
        ..Job::new(
            core,
            overlay,
            Model::preset("ib-hdr").unwrap(),
            sim_tasks(&epoch_tasks(base, 0, DRIFT)),
        )
    }
}

#[test]
fn repartitioning_every_epoch_evens_out_gaussian_ownership_without_balancing() {
    let base = generate(&Spec {
        ranks: RANKS,
        tasks: TASKS,
        task_time: 1e-4,
        cost: Cost::Bimodal,
        distribution: Distribution::Gaussian,
        seed: 7,
    })
    .unwrap();
    let job = job(&base);
    let mut owned = base.clone();
    // Each epoch's ownership, as run.
    let mut ran = vec![epoch_tasks(&base, 0, DRIFT)];
    let mut moved = 0;
    let out = simulate_with(&job, &mut |b: &Between<'_>| {
        assert_eq!(
            b.epoch + 1,
            ran.len(),
            "called once after each epoch but the last"
        );
        let keys: Vec<Vec<u64>> = owned
            .iter()
            .map(|ts| ts.iter().map(|t| t.global).collect())
            .collect();
        let moves = b.repartition_plan(&keys).map_err(|e| e.to_string())?;
        for (from, ms) in moves.iter().enumerate() {
            for m in ms {
                assert_eq!(m.to.abs_diff(from as u32), 1, "rank {from}: {m:?}");
            }
        }
        moved += moves.iter().map(Vec::len).sum::<usize>();
        apply_plans(
            &mut owned,
            &moves,
            titus_core::repartition::RepartitionPlan::Neighbours,
        )
        .map_err(|e| e.to_string())?;
        let all = epoch_tasks(&owned, b.epoch as u32 + 1, DRIFT);
        let tasks = sim_tasks(&all);
        ran.push(all);
        Ok(Some(tasks))
    })
    .expect("every epoch verifies");
    assert_eq!(ran.len(), EPOCHS as usize);
    assert!(moved > 0);
    let outcomes: Vec<_> = out.earlier.iter().chain([&out.ranks]).collect();
    assert_eq!(outcomes.len(), EPOCHS as usize);
    let mut largest = Vec::new();
    for (e, (all, ranks)) in ran.iter().zip(&outcomes).enumerate() {
        // Every task exactly once, with its number and this epoch's drifted cost.
        let want: Vec<(u64, u64)> = epoch_tasks(&base, e as u32, DRIFT)
            .iter()
            .flatten()
            .map(|t| (t.global, cost_ns(t)))
            .collect();
        let mut got: Vec<(u64, u64)> = all
            .iter()
            .flatten()
            .map(|t| (t.global, cost_ns(t)))
            .collect();
        got.sort_unstable();
        assert_eq!(got, want, "epoch {e}");
        for (r, ts) in all.iter().enumerate() {
            // Owners and indices say where a task is; the simulator brought every result
            // of every task home to it, and under no balancing each rank ran its own.
            assert!(
                ts.iter()
                    .enumerate()
                    .all(|(i, t)| (t.owner, t.index) == (r as u32, i as u32))
            );
            assert_eq!(ranks[r].results.len(), ts.len(), "epoch {e}, rank {r}");
            assert_eq!(
                ranks[r].stats.busy.as_nanos() as u64,
                ts.iter().map(cost_ns).sum::<u64>()
            );
        }
        largest.push(largest_owned(all));
    }
    // It shrinks: the front drifts (2% of the tasks per epoch) after the plan was made
    // from the last epoch's costs, so one epoch may undo a little of the previous one's
    // gain, but never back to the start, and the last is at most half the first.
    assert!(
        largest[1..].iter().all(|&l| l < largest[0])
            && 2 * largest[EPOCHS as usize - 1] <= largest[0],
        "the largest owned work per rank shrinks: {largest:?}"
    );
    // And so does the epoch's makespan.
    let makespan: Vec<u64> = outcomes
        .iter()
        .map(|rs| {
            rs.iter()
                .map(|r| r.stats.session.as_nanos() as u64)
                .max()
                .unwrap_or(0)
        })
        .collect();
    eprintln!("largest owned work per epoch {largest:?} ns, makespan {makespan:?} ns");
    assert!(makespan.last() < makespan.first(), "{makespan:?}");
}

#[test]
fn without_changes_between_epochs_the_run_is_the_plain_one() {
    let base = generate(&Spec {
        ranks: RANKS,
        tasks: 640,
        task_time: 1e-4,
        cost: Cost::Bimodal,
        distribution: Distribution::Gaussian,
        seed: 7,
    })
    .unwrap();
    let job = job(&base);
    let plain = simulate(&job).unwrap();
    let mut calls = 0;
    let hooked = simulate_with(&job, &mut |_: &Between<'_>| {
        calls += 1;
        Ok(None)
    })
    .unwrap();
    assert_eq!(calls, EPOCHS - 1);
    assert_eq!((plain.trace, plain.events), (hooked.trace, hooked.events));
    // A driver that fails, or gives tasks for the wrong number of ranks, ends the run.
    let e = simulate_with(&job, &mut |_: &Between<'_>| Err("no plan".into())).unwrap_err();
    assert!(
        e.to_string().contains("between epochs 1 and 2: no plan"),
        "{e}"
    );
    let e = simulate_with(&job, &mut |_: &Between<'_>| Ok(Some(vec![Vec::new()]))).unwrap_err();
    assert!(e.to_string().contains("1 task lists for 32 ranks"), "{e}");
    let e = simulate_with(&job, &mut |b: &Between<'_>| {
        b.repartition_plan(&[vec![1, 1]])
            .map(|_| None)
            .map_err(|e| e.to_string())
    })
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("1 key lists for a repartition plan of 32 ranks"),
        "{e}"
    );
}
