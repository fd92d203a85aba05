//! Resources beside the CPU workers in the simulator: every task runs exactly
//! once and comes home right (the simulator's checker) with accelerators on some ranks,
//! kinds without an accelerator variant, tasks that complete out of order, every dispatch
//! policy; a failing resource fails the run naming it; bad resources are refused.

mod common;

use titus_core::resources::{Dispatch, ResourceSpec, Variants, parse_description};
use titus_core::{Balancing, Config, Protocol};
use titus_overlay::OverlayParams;
use titus_sim::{Faults, Job, Model, Outcome, SimResources, SimTask, Violation, simulate};

const RANKS: u32 = 32;

/// Skewed work: the first 4 ranks hold everything; kinds 0 and 1 alternate, costs vary
/// (so submissions to one accelerator complete out of order).
fn tasks() -> Vec<Vec<SimTask>> {
    (0..RANKS)
        .map(|r| {
            if r >= 4 {
                return Vec::new();
            }
            (0..300u64)
                .map(|i| SimTask {
                    key: i,
                    kind: (i % 2) as u16,
                    cost_ns: 20_000 + (i * 7919 % 13) * 15_000,
                    payload: (u64::from(r) << 32 | i).to_le_bytes().to_vec(),
                    hint_ns: 0,
                    priority: 0,
                })
                .collect()
        })
        .collect()
}

fn run(resources: SimResources, seed: u64) -> Result<Outcome, Violation> {
    let mut core = Config::default();
    let mut overlay = OverlayParams {
        ranks: RANKS,
        shortcuts: 4,
        ..OverlayParams::default()
    };
    Balancing::Smallworld
        .apply(&mut core, &mut overlay, RANKS, None)
        .unwrap();
    let job = Job {
        workers: 2,
        faults: Faults {
            jitter: 0.5,
            ..Faults::default()
        },
        seed,
        later_epochs: vec![tasks()],
        start_skew_ns: 10_000,
        check_start: false,
        resources,
        ..Job::new(core, overlay, Model::preset("ib-hdr").unwrap(), tasks())
    };
    simulate(&job)
}

/// Even ranks: one accelerator 8× a core holding 3 tasks, kind 0 only; rank 1: two
/// accelerators running every kind; the others none.
fn mixed(dispatch: Dispatch) -> SimResources {
    let mut per_rank = parse_description("ranks=1:accel=2:speed=3:capacity=2", RANKS).unwrap();
    for r in (0..RANKS as usize).step_by(2) {
        per_rank[r].push(ResourceSpec {
            name: "gpu".into(),
            capacity: 3,
            variants: Variants::Kinds(vec![(0, 8.0)]),
        });
    }
    SimResources {
        per_rank,
        dispatch,
        ..SimResources::default()
    }
}

#[test]
fn exactly_once_with_mixed_resources_under_every_policy() {
    for dispatch in [Dispatch::LeastLoaded, Dispatch::RoundRobin, Dispatch::Fixed] {
        for seed in 1..=3 {
            let out = run(mixed(dispatch), seed)
                .unwrap_or_else(|v| panic!("{dispatch:?} seed {seed}: {v}"));
            let (mut sub, mut done, mut accel) = (0, 0, 0);
            for (r, o) in out.ranks.iter().enumerate() {
                let want = if r == 1 {
                    3
                } else if r % 2 == 0 {
                    2
                } else {
                    0
                };
                assert_eq!(o.stats.resources.len(), want, "rank {r}");
                for (i, c) in o.stats.resources.iter().enumerate() {
                    assert_eq!(c.submitted, c.completed, "rank {r} resource {i}");
                    sub += c.submitted;
                    done += c.completed;
                    if i > 0 {
                        accel += c.submitted;
                    }
                }
            }
            assert_eq!(sub, done);
            assert!(accel > 0, "{dispatch:?}: no task ran on an accelerator");
            // Kind 1 has no variant on the even ranks' gpu: it ran on CPUs or rank 1.
        }
    }
}

#[test]
fn fast_accelerators_shorten_the_run() {
    let none = run(SimResources::default(), 5).unwrap();
    let res = SimResources {
        per_rank: parse_description("ranks=0-31:accel=1:speed=8:capacity=1", RANKS).unwrap(),
        ..SimResources::default()
    };
    let fast = run(res, 5).unwrap();
    assert!(
        fast.end_ns < none.end_ns,
        "with accelerators {} ns, without {} ns",
        fast.end_ns,
        none.end_ns
    );
    assert!(fast.ranks.iter().map(|o| o.accel_busy_ns).sum::<u64>() > 0);
}

#[test]
fn a_failing_resource_fails_the_run_naming_it() {
    let mut res = mixed(Dispatch::LeastLoaded);
    res.fail = Some((0, 1, 3));
    let e = run(res, 2).unwrap_err();
    assert!(
        e.to_string()
            .contains("resource 1 of rank 0 failed its submission 3"),
        "{e}"
    );
    // The ABORT flood reached every rank: each stopped with an error.
    assert!(e.to_string().contains(titus_sim::FAILED_EVERYWHERE), "{e}");
}

#[test]
fn bad_resources_are_refused() {
    let mut res = mixed(Dispatch::Fixed);
    res.per_rank[3].push(ResourceSpec {
        name: "broken".into(),
        capacity: 0,
        variants: Variants::All(2.0),
    });
    let e = run(res, 1).unwrap_err();
    assert!(
        e.to_string().contains("rank 3") && e.to_string().contains("\"broken\" has capacity 0"),
        "{e}"
    );
    let res = SimResources {
        per_rank: vec![Vec::new(); RANKS as usize + 1],
        ..SimResources::default()
    };
    assert!(run(res, 1).unwrap_err().to_string().contains("33 ranks"));
    // Resource types are sorted kind sets without repeats, as resources state them.
    let (core, overlay) = common::balanced(
        Balancing::Smallworld,
        Config {
            protocol: Protocol::Request,
            resource_types: vec![None, Some(vec![2, 1])],
            ..Config::default()
        },
        2,
    );
    let job = Job::new(
        core,
        overlay,
        Model::preset("ib-hdr").unwrap(),
        vec![Vec::new(); 2],
    );
    let e = simulate(&job).unwrap_err();
    assert!(
        e.to_string().contains("resource type 1 lists kinds [2, 1]")
            && e.to_string().contains("ascending"),
        "{e}"
    );
}

/// Seed 003's example (BOINC's work fetch with GPUs): owner A has only accelerator tasks,
/// owner B CPU tasks and accelerator tasks, equal shares, the accelerator twice a CPU →
/// the thief's CPU works 100% for B, its accelerator 75% for A and 25% for B (equal
/// processing for both). Rank 0 is the thief (one CPU worker for kind 0, an accelerator
/// 2× for kinds 1 and 2); ranks 1 (A: kind 1) and 2 (B: kinds 0 and 2) hold the work and
/// run none of it. The shares are taken over the first 40% of the run, while both owners
/// still hold work of every kind under any schedule; a fair one empties both at once.
#[test]
fn seed_003_shares_the_accelerator_by_debt() {
    let task = |owner: u64, i: u64, kind: u16| SimTask {
        key: i,
        kind,
        cost_ns: 1_000_000,
        payload: (owner << 32 | i).to_le_bytes().to_vec(),
        hint_ns: 1_000_000,
        priority: 0,
    };
    let a: Vec<SimTask> = (0..3000).map(|i| task(1, i, 1)).collect();
    let b: Vec<SimTask> = (0..3000)
        .map(|i| task(2, i, if i % 3 == 2 { 2 } else { 0 }))
        .collect();
    let (core, overlay) = common::balanced(
        Balancing::Smallworld,
        Config {
            protocol: Protocol::Request,
            // Small batches: the shares are decided steal by steal.
            shared_capacity: 2,
            ..Config::default()
        },
        3,
    );
    let mut per_rank = vec![Vec::new(); 3];
    per_rank[0].push(ResourceSpec {
        name: "gpu".into(),
        capacity: 1,
        variants: Variants::Kinds(vec![(1, 2.0), (2, 2.0)]),
    });
    let resources = SimResources {
        per_rank,
        cpu_kinds: vec![Some(vec![0]), Some(vec![]), Some(vec![])],
        log_dispatches: true,
        ..SimResources::default()
    };
    let job = Job {
        resources,
        ..Job::new(
            core,
            overlay,
            Model::preset("ib-hdr").unwrap(),
            vec![Vec::new(), a, b],
        )
    };
    let out = simulate(&job).unwrap();
    let log = &out.ranks[0].dispatches;
    assert_eq!(log.len(), 6000, "the thief ran every task");
    let cut = out.end_ns * 2 / 5;
    let busy = |res: usize, owner: u32| -> f64 {
        log.iter()
            .filter(|d| d.0 < cut && d.1 == res && d.2 == owner)
            .map(|d| d.3 as f64)
            .sum()
    };
    let cpu_b = busy(0, 2) / (busy(0, 1) + busy(0, 2));
    let gpu_a = busy(1, 1) / (busy(1, 1) + busy(1, 2));
    eprintln!(
        "end {:.3} s; first 40%: CPU {:.1}% for B, accelerator {:.1}% for A",
        out.end_ns as f64 / 1e9,
        100.0 * cpu_b,
        100.0 * gpu_a
    );
    assert!(cpu_b > 0.999, "CPU for B: {cpu_b}");
    assert!((gpu_a - 0.75).abs() <= 0.03, "accelerator for A: {gpu_a}");
    // Equal processing: both owners' work ran out together, at the fair schedule's end
    // (3,000 ms of CPU work each, at 3 CPU-equivalents a second).
    assert!(
        (1.9e9..2.2e9).contains(&(out.end_ns as f64)),
        "ended at {} ns",
        out.end_ns
    );
}
