//! Later epochs whose tasks the driver supplies as each begins
//! (`Job::later_epochs_supplied`), as `titus sim` does so that a long job holds one
//! epoch's tasks at a time: the same job as with every epoch held before the run, and a
//! driver that supplies nothing is named, not run on empty. A driver may take each
//! epoch's outcome as it ends (`simulate_each`) rather than hold them all.

mod common;

use titus_core::{Balancing, Config};
use titus_sim::{Job, Model, SimTask, simulate, simulate_each, simulate_with};

/// Every rank's tasks of epoch `e`: rank 0 holds the costly ones, more each epoch.
fn tasks(ranks: u32, e: u64) -> Vec<Vec<SimTask>> {
    (0..ranks)
        .map(|r| {
            (0..30u64)
                .map(|i| SimTask {
                    kind: 0,
                    key: u64::from(r) * 30 + i,
                    cost_ns: if r == 0 { 200_000 + 10_000 * e } else { 20_000 },
                    payload: (u64::from(r) << 32 | i).to_le_bytes().to_vec(),
                    hint_ns: 0,
                    priority: 0,
                })
                .collect()
        })
        .collect()
}

fn job(ranks: u32) -> Job<'static> {
    let (core, overlay) = common::balanced(Balancing::Smallworld, Config::default(), ranks);
    Job::new(
        core,
        overlay,
        Model::preset("ib-hdr").unwrap(),
        tasks(ranks, 0),
    )
}

#[test]
fn supplied_epochs_run_as_held_ones() {
    let ranks = 9;
    let held = Job {
        later_epochs: vec![tasks(ranks, 1), tasks(ranks, 2)],
        ..job(ranks)
    };
    let supplied = Job {
        later_epochs_supplied: 2,
        ..job(ranks)
    };
    let a = simulate(&held).expect("held epochs");
    let b = simulate_with(&supplied, &mut |between| {
        Ok(Some(tasks(ranks, between.epoch as u64 + 1)))
    })
    .expect("supplied epochs");
    assert_eq!(b.earlier.len(), 2, "three epochs ran");
    assert_eq!(
        (a.trace, a.events, a.end_ns),
        (b.trace, b.events, b.end_ns),
        "the same job, event for event"
    );
}

#[test]
fn each_epoch_is_handed_over_as_it_ends() {
    let ranks = 9;
    let supplied = || Job {
        later_epochs_supplied: 2,
        ..job(ranks)
    };
    let next = |b: &titus_sim::Between<'_>| Ok(Some(tasks(ranks, b.epoch as u64 + 1)));
    let kept = simulate_with(&supplied(), &mut next.clone()).expect("kept epochs");
    let mut handed = Vec::new();
    let out = simulate_each(supplied(), &mut next.clone(), &mut |e, ranks| {
        handed.push((e, ranks));
        Ok(())
    })
    .expect("handed epochs");
    assert!(out.ranks.is_empty() && out.earlier.is_empty(), "none kept");
    assert_eq!((out.trace, out.events), (kept.trace, kept.events));
    let kept: Vec<_> = kept.earlier.iter().chain([&kept.ranks]).collect();
    assert_eq!(handed.len(), kept.len(), "each epoch once");
    for ((e, ranks), want) in handed.iter().zip(kept) {
        let results = |rs: &[titus_sim::RankOutcome]| -> Vec<Vec<Vec<u8>>> {
            rs.iter().map(|r| r.results.clone()).collect()
        };
        assert_eq!(results(ranks), results(want), "epoch {e}'s results");
    }
    // The driver's error ends the run, naming the epoch.
    let v = simulate_each(supplied(), &mut next.clone(), &mut |e, _| match e {
        1 => Err("no room for the report".into()),
        _ => Ok(()),
    })
    .expect_err("the driver refused epoch 2");
    assert!(v.to_string().contains("after epoch 2: no room"), "{v}");
}

#[test]
fn a_supplied_epoch_without_tasks_is_named() {
    let job = Job {
        later_epochs_supplied: 1,
        ..job(3)
    };
    let v = simulate(&job).expect_err("no tasks for epoch 2");
    assert!(
        v.to_string()
            .contains("epoch 2: the driver supplied no tasks"),
        "{v}"
    );
}
