//! Custom mappers on the simulator (the same core the runtime drives): a mapper that
//! refuses every steal still ends the epoch, each owner running its own tasks; one that
//! caps what goes bounds every steal, and work still moves; the profiling feed hears of
//! every task. Every run verifies (each task
//! ran once, each result came home right).

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use titus_core::mapper::{Profile, TaskInfo};
use titus_core::{Balancing, Config, Mapper, Protocol};
use titus_sim::{Job, MapperFactory, Model, SimTask, simulate};

const RANKS: u32 = 16;

/// Everything on rank 0: 400 tasks of 50 µs.
fn tasks() -> Vec<Vec<SimTask>> {
    (0..RANKS)
        .map(|r| {
            if r > 0 {
                return Vec::new();
            }
            (0..400u64)
                .map(|i| SimTask {
                    kind: 0,
                    key: i,
                    cost_ns: 50_000,
                    payload: i.to_le_bytes().to_vec(),
                    hint_ns: 0,
                    priority: 0,
                })
                .collect()
        })
        .collect()
}

fn job(protocol: Protocol, advertise: bool, mapper: Option<&MapperFactory>) -> Job<'_> {
    let (core, overlay) = common::balanced(
        Balancing::Smallworld,
        Config {
            protocol,
            advertise,
            ..Config::default()
        },
        RANKS,
    );
    Job {
        seed: 7,
        max_events: 10_000_000,
        mapper,
        ..Job::new(core, overlay, Model::preset("ib-hdr").unwrap(), tasks())
    }
}

#[derive(Debug)]
struct Refuse;
impl Mapper for Refuse {
    fn permit_steal(&mut self, _: Option<u32>, _: &[TaskInfo], permit: &mut [bool]) {
        permit.fill(false);
    }
}

#[derive(Debug)]
struct CapOne;
impl Mapper for CapOne {
    fn permit_steal(&mut self, _: Option<u32>, _: &[TaskInfo], permit: &mut [bool]) {
        permit.iter_mut().skip(1).for_each(|p| *p = false);
    }
}

/// Counts what the profiling feed reports, over every rank.
static PROFILED: AtomicU64 = AtomicU64::new(0);

#[derive(Debug)]
struct Counting;
impl Mapper for Counting {
    fn task_finished(&mut self, p: &Profile) {
        assert_eq!(p.duration_ns, 50_000, "the measured duration");
        PROFILED.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn a_mapper_that_refuses_every_steal_still_terminates() {
    let refuse = |_: u32| -> Box<dyn Mapper> { Box::new(Refuse) };
    for protocol in [Protocol::Claim, Protocol::Lock, Protocol::Request] {
        for advertise in [false, true] {
            let o = simulate(&job(protocol, advertise, Some(&refuse))).unwrap_or_else(|v| {
                panic!("{protocol:?} advertise {advertise}: {v}");
            });
            let ran: Vec<u64> = o.ranks.iter().map(|r| r.stats.core.tasks_run).collect();
            assert_eq!(ran[0], 400, "{protocol:?} {advertise}: rank 0 ran its own");
            assert!(ran[1..].iter().all(|&n| n == 0), "{ran:?}");
            // Nothing moved, so no advertisement either.
            assert!(o.ranks.iter().all(|r| r.stats.core.adverts_sent == 0));
        }
    }
}

#[test]
fn a_cap_bounds_each_steal_and_work_still_moves() {
    let cap = |_: u32| -> Box<dyn Mapper> { Box::new(CapOne) };
    for protocol in [Protocol::Claim, Protocol::Request] {
        let default = simulate(&job(protocol, true, None)).unwrap();
        let capped = simulate(&job(protocol, true, Some(&cap))).unwrap();
        let stolen = |o: &titus_sim::Outcome| -> Vec<u64> {
            o.ranks.iter().map(|r| r.stats.core.tasks_stolen).collect()
        };
        let (d, c) = (stolen(&default), stolen(&capped));
        assert!(d.iter().sum::<u64>() > 0, "{protocol:?}: {d:?}");
        // A steal under the cap brings one task at most.
        for r in &capped.ranks {
            assert!(
                r.stats.core.tasks_stolen <= r.stats.core.steals_ok,
                "{protocol:?}: {:?}",
                r.stats
            );
        }
        assert!(
            c.iter().sum::<u64>() > 0,
            "{protocol:?}: work still moves: {c:?}"
        );
    }
}

#[test]
fn every_finished_task_reaches_the_profiling_feed() {
    let counting = |_: u32| -> Box<dyn Mapper> { Box::new(Counting) };
    PROFILED.store(0, Ordering::Relaxed);
    simulate(&job(Protocol::Claim, true, Some(&counting))).unwrap();
    assert_eq!(PROFILED.load(Ordering::Relaxed), 400);
}
