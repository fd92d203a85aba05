//! Cost-aware batches on the simulator: a bimodal workload (a contiguous 10% of the tasks
//! 30× costlier, all on a few ranks) with cost hints — exact, or hostile — under every steal
//! protocol, cost-aware batches on and off, one epoch and two: every run verifies (each
//! task ran exactly once, each result came home right) and terminates. And the end game:
//! work cheaper to finish than to move stays with its owner.

mod common;

use std::time::Duration;
use titus_core::{Balancing, Config, Protocol};
use titus_sim::{Faults, Job, Model, SimTask, simulate};

const RANKS: u32 = 24;

/// A task's hint from its number and cost.
type Hint<'a> = &'a dyn Fn(u64, u64) -> u64;

/// Ranks 0..4 own 100 tasks each; tasks 180..220 (of 400) are 30× costlier.
fn bimodal(hint: Hint<'_>, base_ns: u64) -> Vec<Vec<SimTask>> {
    (0..RANKS as u64)
        .map(|r| {
            if r >= 4 {
                return Vec::new();
            }
            (0..100u64)
                .map(|i| {
                    let g = r * 100 + i;
                    let cost_ns = if (180..220).contains(&g) {
                        30 * base_ns
                    } else {
                        base_ns
                    };
                    SimTask {
                        kind: 0,
                        key: i,
                        cost_ns,
                        payload: g.to_le_bytes().to_vec(),
                        hint_ns: hint(g, cost_ns),
                        priority: 0,
                    }
                })
                .collect()
        })
        .collect()
}

fn job(protocol: Protocol, cost_aware: bool, tasks: Vec<Vec<SimTask>>) -> Job<'static> {
    let (core, overlay) = common::balanced(
        Balancing::Smallworld,
        Config {
            protocol,
            cost_aware,
            ..Config::default()
        },
        RANKS,
    );
    // At 24 ranks the overlay is the complete graph, whose ranks connect on first
    // contact: free here, so the end game alone decides what moves.
    let model = Model {
        connect_ns: 0.0,
        ..Model::preset("ib-hdr").unwrap()
    };
    Job {
        faults: Faults {
            jitter: 0.5,
            ..Faults::default()
        },
        seed: 11,
        later_epochs: vec![tasks.clone()],
        max_events: 20_000_000,
        ..Job::new(core, overlay, model, tasks)
    }
}

#[test]
fn bimodal_with_cost_aware_batches_runs_each_task_once_and_ends() {
    let exact = |_: u64, c: u64| c;
    let hostile = |g: u64, _: u64| match g % 3 {
        0 => u64::MAX,
        1 => 1,
        _ => g.wrapping_mul(0x9e37_79b9_7f4a_7c15),
    };
    let hints: [(&str, Hint<'_>); 2] = [("exact", &exact), ("hostile", &hostile)];
    for protocol in [Protocol::Claim, Protocol::Lock, Protocol::Request] {
        for cost_aware in [true, false] {
            for (name, hint) in hints {
                let o = simulate(&job(protocol, cost_aware, bimodal(hint, 20_000))).unwrap_or_else(
                    |v| panic!("{protocol:?}, cost-aware {cost_aware}, {name}: {v}"),
                );
                // Stolen in the first epoch (no prediction yet); in the second the string
                // plan may push everything where it goes.
                let stolen: u64 = o.earlier[0].iter().map(|r| r.stats.core.tasks_stolen).sum();
                assert!(stolen > 0, "{protocol:?} {cost_aware} {name}: work moved");
                let moved: u64 = o
                    .ranks
                    .iter()
                    .map(|r| r.stats.core.tasks_stolen + r.stats.core.tasks_pushed)
                    .sum();
                assert!(moved > 0, "{protocol:?} {cost_aware} {name}: moved again");
                let ran: usize = o.ranks.iter().map(|r| r.results.len()).sum();
                assert_eq!(ran, 400);
            }
        }
    }
}

#[test]
fn the_end_game_keeps_work_cheaper_to_finish_than_to_move() {
    // Each owner's 100 tasks of 100 ns, hinted exactly: 10 µs of work per rank, less than
    // a share is worth moving (1 ms, set high); with the count rule they travel.
    let tiny = |_: u64, c: u64| c;
    for protocol in [Protocol::Claim, Protocol::Lock, Protocol::Request] {
        let stolen = |cost_aware: bool| {
            let mut j = job(protocol, cost_aware, bimodal(&tiny, 100));
            j.core.move_cost = Duration::from_millis(1);
            j.later_epochs.clear();
            let o = simulate(&j).unwrap_or_else(|v| panic!("{protocol:?}: {v}"));
            o.ranks
                .iter()
                .map(|r| r.stats.core.tasks_stolen)
                .sum::<u64>()
        };
        assert_eq!(stolen(true), 0, "{protocol:?}: nothing worth moving");
        assert!(
            stolen(false) > 0,
            "{protocol:?}: the count rule moves tasks"
        );
    }
}
