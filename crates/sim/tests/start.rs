//! The epoch start's failures, end to end over the simulated fabric: a message that
//! arrives malformed stops every rank, the receiver naming its sender and the field, and
//! nothing of the epoch runs twice.

mod common;

use titus_core::{Balancing, Config};
use titus_sim::{FAILED_EVERYWHERE, Faults, Job, Model, SimTask, failed_everywhere, simulate};

/// 20 tasks of 50 µs on every rank of `ranks`, keyed by their global number.
fn tasks(ranks: u32) -> Vec<Vec<SimTask>> {
    (0..ranks)
        .map(|r| {
            (0..20u64)
                .map(|i| SimTask {
                    kind: 0,
                    key: u64::from(r) * 20 + i,
                    cost_ns: 50_000,
                    payload: (u64::from(r) << 32 | i).to_le_bytes().to_vec(),
                    hint_ns: 0,
                    priority: 0,
                })
                .collect()
        })
        .collect()
}

#[test]
fn a_malformed_start_message_stops_every_rank_naming_its_sender_and_the_field() {
    for (ranks, culprit) in [(2, 1), (5, 0), (17, 9)] {
        let (core, overlay) = common::balanced(Balancing::Smallworld, Config::default(), ranks);
        let job = Job {
            faults: Faults {
                corrupt_start: Some(culprit),
                ..Faults::default()
            },
            later_epochs: vec![tasks(ranks)],
            ..Job::new(
                core,
                overlay,
                Model::preset("ib-hdr").unwrap(),
                tasks(ranks),
            )
        };
        let v = simulate(&job).expect_err("a malformed message must fail the run");
        assert!(
            v.0.contains(&format!(
                "rank {culprit} sent a malformed start message (version)"
            )),
            "{ranks} ranks: the sender and the field are not named: {v}"
        );
        assert!(
            v.0.contains(FAILED_EVERYWHERE) && failed_everywhere(&v).is_some(),
            "{ranks} ranks: not every rank stopped: {v}"
        );
    }
}

#[test]
fn without_the_fault_the_same_jobs_run() {
    for ranks in [2, 5, 17] {
        let (core, overlay) = common::balanced(Balancing::Smallworld, Config::default(), ranks);
        let job = Job {
            later_epochs: vec![tasks(ranks)],
            check_start: true,
            ..Job::new(
                core,
                overlay,
                Model::preset("ib-hdr").unwrap(),
                tasks(ranks),
            )
        };
        let out = simulate(&job).unwrap_or_else(|v| panic!("{ranks} ranks: {v}"));
        assert!(out.ranks.iter().all(|r| r.start.messages > 0));
    }
}
