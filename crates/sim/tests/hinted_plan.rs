//! A caller's cost hints plan a time step's start: where it gives them, the ranks push
//! from what it says its tasks cost, even where the costs moved since the last epoch;
//! without them, from the history alone. A first epoch plans nothing either way.

mod common;

use titus_core::{Balancing, Config};
use titus_sim::{Job, Model, SimTask, simulate};

const RANKS: u32 = 8;

/// Every rank's 16 tasks of 100 µs, but `heavy`'s of 2 ms, each hinted at its cost where
/// `hinted`.
fn tasks(heavy: u32, hinted: bool) -> Vec<Vec<SimTask>> {
    (0..RANKS)
        .map(|r| {
            (0..16u64)
                .map(|i| {
                    let cost_ns = if r == heavy { 2_000_000 } else { 100_000 };
                    SimTask {
                        kind: 0,
                        key: u64::from(r) * 16 + i,
                        cost_ns,
                        payload: (u64::from(r) << 32 | i).to_le_bytes().to_vec(),
                        hint_ns: if hinted { cost_ns } else { 0 },
                        priority: 0,
                    }
                })
                .collect()
        })
        .collect()
}

/// Tasks each rank pushed at the start of each epoch, for epochs whose heavy rank is
/// each of `heavy` in turn.
fn pushed(heavy: &[u32], hinted: bool) -> Vec<Vec<u64>> {
    let (core, overlay) = common::balanced(Balancing::Smallworld, Config::default(), RANKS);
    let job = Job {
        later_epochs: heavy[1..].iter().map(|&h| tasks(h, hinted)).collect(),
        check_start: true,
        ..Job::new(
            core,
            overlay,
            Model::preset("ib-hdr").unwrap(),
            tasks(heavy[0], hinted),
        )
    };
    let out = simulate(&job).unwrap_or_else(|v| panic!("hinted {hinted}: {v}"));
    out.earlier
        .iter()
        .chain([&out.ranks])
        .map(|e| e.iter().map(|r| r.stats.core.tasks_pushed).collect())
        .collect()
}

#[test]
fn a_first_epoch_plans_nothing_even_with_hints() {
    // No history yet: stealing alone balances it, as a job of one epoch.
    for hinted in [true, false] {
        let p = pushed(&[0], hinted);
        assert!(
            p[0].iter().all(|&x| x == 0),
            "hinted {hinted}: a rank pushed: {p:?}"
        );
    }
}

#[test]
fn a_hint_outweighs_the_history_where_the_costs_moved() {
    // The heavy rank moves from 0 to 5: the history still says 0.
    let with = pushed(&[0, 5], true);
    assert!(
        with[1][5] > 0,
        "the hinted heavy rank pushed nothing: {with:?}"
    );
    assert_eq!(with[1][0], 0, "the rank that was heavy pushed: {with:?}");
    let without = pushed(&[0, 5], false);
    assert!(
        without[1][0] > 0 && without[1][5] == 0,
        "without hints the plan follows the history: {without:?}"
    );
}
