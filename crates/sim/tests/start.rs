//! The epoch start's failures, end to end over the simulated fabric: a message that
//! arrives malformed stops every rank, the receiver naming its sender and the field, and
//! nothing of the epoch runs twice.

mod common;

use titus_core::{Balancing, Config};
use titus_sim::{
    FAILED_EVERYWHERE, Faults, Job, Model, SimTask, StartCpu, failed_everywhere, simulate,
};

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
            v.to_string().contains(&format!(
                "rank {culprit} sent a malformed start message (version)"
            )),
            "{ranks} ranks: the sender and the field are not named: {v}"
        );
        assert!(
            v.to_string().contains(FAILED_EVERYWHERE) && failed_everywhere(&v).is_some(),
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
        assert!(out.ranks.iter().all(|r| r.stats.start_figures.messages > 0));
    }
}

/// The runtime's serial work around a start is charged on each rank: its start (from the
/// epoch call to its first task) grows by its input and its planning, and its next call
/// waits for its history, by its own tasks.
#[test]
fn a_ranks_planning_cpu_is_charged_in_its_start() {
    let ranks = 3;
    let run = |cpu: StartCpu| {
        let (core, overlay) = common::balanced(Balancing::Smallworld, Config::default(), ranks);
        let job = Job {
            later_epochs: vec![tasks(ranks)],
            check_start: true,
            start_cpu: cpu,
            spawn: None,
            ..Job::new(
                core,
                overlay,
                Model::preset("ib-hdr").unwrap(),
                tasks(ranks),
            )
        };
        simulate(&job).unwrap_or_else(|v| panic!("{cpu:?}: {v}"))
    };
    let bare = run(StartCpu::NONE);
    let cpu = StartCpu {
        input_ns: 1_000.0,
        plan_ns: 2_000.0,
        history_ns: 5_000.0,
    };
    let charged = run(cpu);
    // 20 tasks a rank: 20 µs of input, 40 µs of planning in every start; the second
    // epoch's call comes 100 µs later for the history.
    for (epoch, (b, c)) in [
        (&bare.earlier[0], &charged.earlier[0]),
        (&bare.ranks, &charged.ranks),
    ]
    .into_iter()
    .enumerate()
    {
        for (r, (b, c)) in b.iter().zip(c).enumerate() {
            let grown =
                c.stats.start.as_nanos() as u64 as i64 - b.stats.start.as_nanos() as u64 as i64;
            assert!(
                (55_000..=70_000).contains(&grown),
                "epoch {epoch}, rank {r}: the start grew {grown} ns, not the 60 µs charged"
            );
        }
    }
    assert!(
        charged.end_ns >= bare.end_ns + 2 * 60_000 + 100_000,
        "the job's end moved {} ns",
        charged.end_ns as i64 - bare.end_ns as i64
    );
}
