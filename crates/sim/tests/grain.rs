//! Workers' grains on the simulator, as in the runtime: a worker takes tasks of known cost
//! from its rank's queue a grain at a time (`worker_grain`, by default 25 µs per worker of
//! the rank, at most 200 µs), tasks of unknown cost one at a time, and reports a grain's
//! results together; every run still verifies (each task once, each result home and
//! right).

mod common;

use titus_core::{Balancing, Config, Protocol, Stats};
use titus_sim::{Job, Model, Outcome, SimTask, simulate};

const RANKS: u32 = 4;
const TASKS: u64 = 400;

/// Rank 0 owns every task: `cost_ns` each, hinted `hint_ns`.
fn tasks(cost_ns: u64, hint_ns: u64) -> Vec<Vec<SimTask>> {
    (0..RANKS as u64)
        .map(|r| {
            if r > 0 {
                return Vec::new();
            }
            (0..TASKS)
                .map(|i| SimTask {
                    kind: 0,
                    key: i,
                    cost_ns,
                    payload: i.to_le_bytes().to_vec(),
                    hint_ns,
                    priority: 0,
                })
                .collect()
        })
        .collect()
}

fn job(
    protocol: Protocol,
    workers: usize,
    grain: Option<u64>,
    tasks: Vec<Vec<SimTask>>,
) -> Job<'static> {
    let (core, overlay) = common::balanced(
        Balancing::Smallworld,
        Config {
            protocol,
            ..Config::default()
        },
        RANKS,
    );
    Job {
        workers,
        worker_grain_ns: grain,
        later_epochs: vec![tasks.clone()],
        ..Job::new(core, overlay, Model::preset("ib-hdr").unwrap(), tasks)
    }
}

fn sum(ranks: &[titus_sim::RankOutcome], f: impl Fn(&Stats) -> u64) -> u64 {
    ranks.iter().map(|r| f(&r.stats.core)).sum()
}

fn run(protocol: Protocol, workers: usize, grain: Option<u64>, t: Vec<Vec<SimTask>>) -> Outcome {
    simulate(&job(protocol, workers, grain, t))
        .unwrap_or_else(|v| panic!("{protocol:?}, {workers} workers, grain {grain:?}: {v}"))
}

#[test]
fn measured_costs_are_taken_a_grain_at_a_time() {
    for protocol in [Protocol::Claim, Protocol::Lock, Protocol::Request] {
        // 10 µs tasks, one worker: the default grain (25 µs) holds two of them.
        let o = run(protocol, 1, None, tasks(10_000, 0));
        // The second epoch predicts them from the first: two per take (a rank's last
        // may be one). (In the first, a rank estimates its tasks from the mean it
        // measured once some ran: not one at a time throughout.)
        let ran = sum(&o.ranks, |s| s.tasks_run);
        let grains = sum(&o.ranks, |s| s.grains);
        assert_eq!(ran, TASKS);
        assert!(
            grains <= ran / 2 + u64::from(RANKS),
            "{protocol:?}: {grains} grains for {ran} tasks"
        );
        assert!(grains >= ran / 2, "{protocol:?}: at most two per grain");
        // A zero grain takes one at a time.
        let o = run(protocol, 1, Some(0), tasks(10_000, 0));
        assert_eq!(
            sum(&o.ranks, |s| s.grains),
            TASKS,
            "{protocol:?}: zero grain"
        );
    }
}

#[test]
fn hinted_costs_fill_grains_up_to_the_task_limit() {
    // 1 µs tasks hinted exactly, a 1 ms grain: 64 tasks a take (the runtime's limit) from
    // the first epoch on; with four workers the grain budget is the default 100 µs.
    let o = run(Protocol::Request, 1, Some(1_000_000), tasks(1_000, 1_000));
    let grains = sum(&o.earlier[0], |s| s.grains);
    assert!(
        grains <= TASKS.div_ceil(titus_core::GRAIN_TASKS_MAX as u64) + 2 * u64::from(RANKS),
        "{grains} grains of 64 tasks"
    );
    let o = run(Protocol::Request, 4, None, tasks(1_000, 1_000));
    let grains = sum(&o.earlier[0], |s| s.grains);
    let ran = sum(&o.earlier[0], |s| s.tasks_run);
    assert_eq!(ran, TASKS);
    assert!(
        grains * 50 <= ran * 2,
        "{grains} grains for {ran} tasks of 1 µs in 100 µs"
    );
}

#[test]
fn costly_tasks_run_one_at_a_time() {
    // Predicted costlier than any grain: each its own take, whatever the grain.
    let o = run(Protocol::Claim, 2, Some(150_000), tasks(300_000, 300_000));
    assert_eq!(sum(&o.earlier[0], |s| s.grains), TASKS);
    assert_eq!(sum(&o.ranks, |s| s.grains), TASKS);
}
