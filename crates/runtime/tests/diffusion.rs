//! Time steps in the runtime: keyed tasks over several epochs, their measured costs
//! returned and kept per key, and diffusion pushing work from the loaded rank to its
//! neighbours before stealing — every result exactly once and right, under every steal
//! protocol and work sharing; duplicate keys fail every rank before anything runs.

mod common;

use common::checksum;
use std::time::Duration;
use titus_fabric::mem::MemOptions;
use titus_runtime::{Balancing, CoreError, Protocol, Runtime, RuntimeConfig, RuntimeError, TaskIn};

fn config(balancing: Balancing, protocol: Protocol, ranks: u32) -> RuntimeConfig {
    let mut cfg = RuntimeConfig {
        workers: 2,
        op_timeout: Duration::from_secs(10),
        epoch_timeout: Some(Duration::from_secs(60)),
        ..RuntimeConfig::default()
    };
    cfg.core.protocol = protocol;
    cfg.core.shared_capacity = 16;
    cfg.core.max_payload = 64;
    cfg.core.max_result = 16;
    cfg.overlay.shortcuts = 2;
    cfg.balance(balancing, ranks, None).unwrap();
    cfg
}

/// Epoch `e`'s tasks of rank `r`: rank 0 owns most, and the heavy ones; keys stay across epochs, a few vanish
/// and a few are new each epoch.
fn tasks(r: u32, e: u64) -> Vec<TaskIn> {
    let n = if r == 0 { 300 } else { 4 };
    (e..n + e)
        .map(|k| {
            let key = u64::from(r) << 32 | k;
            // Rank 0's tasks are heavy (tens of ms in all) so that a preempted small task
            // on another rank (a few ms on a busy 2-core machine) cannot make that rank
            // the loaded one in the measured costs.
            let rounds = if r == 0 {
                8_000 + (k % 5) as u32 * 2_000
            } else {
                40 + (k % 5) as u32 * 30
            };
            let mut payload = rounds.to_le_bytes().to_vec();
            payload.extend_from_slice(format!("{r}/{k}/{e}").as_bytes());
            TaskIn {
                key,
                kind: 0,
                payload,
                priority: 0,
                cost_hint_ns: 0,
            }
        })
        .collect()
}

/// Runs `epochs` epochs on 4 in-process ranks; returns per rank and epoch (tasks pushed,
/// tasks pushed in).
fn run(cfg: RuntimeConfig, epochs: u64) -> Vec<Vec<(u64, u64)>> {
    run_on(4, cfg, epochs, false)
        .into_iter()
        .map(|r| r.into_iter().map(|(p, i, _)| (p, i)).collect())
        .collect()
}

/// [`run`] on `ranks` ranks, with the tasks each rank passed on (the string plan); where
/// `hinted`, the hints say rank 1's tasks cost 10 ms each and every other task 1 µs.
fn run_on(ranks: u32, cfg: RuntimeConfig, epochs: u64, hinted: bool) -> Vec<Vec<(u64, u64, u64)>> {
    let rts = Runtime::local(ranks, cfg, MemOptions::default()).unwrap();
    for rt in &rts {
        rt.register(0, checksum);
    }
    std::thread::scope(|s| {
        let hs: Vec<_> = rts
            .iter()
            .map(|rt| {
                s.spawn(move || {
                    let r = rt.rank();
                    (0..epochs)
                        .map(|e| {
                            let mut t = tasks(r, e);
                            if hinted {
                                let hint = if r == 1 { 10_000_000 } else { 1_000 };
                                t.iter_mut().for_each(|task| task.cost_hint_ns = hint);
                            }
                            let out = rt
                                .run_epoch_keyed(t.clone())
                                .unwrap_or_else(|err| panic!("rank {r} epoch {e}: {err}"));
                            assert_eq!(out.results.len(), t.len(), "rank {r}: result count");
                            assert_eq!(out.costs_ns.len(), t.len(), "rank {r}: cost count");
                            for (i, (res, task)) in out.results.iter().zip(&t).enumerate() {
                                assert_eq!(*res, checksum(&task.payload), "rank {r} task {i}");
                            }
                            assert!(
                                out.costs_ns.iter().all(|&c| c > 0),
                                "rank {r} epoch {e}: a task came home without its cost"
                            );
                            let st = &out.stats.core;
                            (st.tasks_pushed, st.tasks_pushed_in, st.tasks_forwarded)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("rank thread panicked"))
            .collect()
    })
}

#[test]
fn diffusion_pushes_from_the_second_epoch_under_every_protocol() {
    for (balancing, protocol) in [
        (Balancing::Smallworld, Protocol::Claim),
        (Balancing::Smallworld, Protocol::Lock),
        (Balancing::Smallworld, Protocol::Request),
        (Balancing::Random, Protocol::Claim),
        (Balancing::Master, Protocol::Request),
    ] {
        let what = format!("{balancing}/{}", protocol.name());
        let per_rank = run(config(balancing, protocol, 4), 4);
        for e in 0..4 {
            let pushed: u64 = per_rank.iter().map(|v| v[e].0).sum();
            let arrived: u64 = per_rank.iter().map(|v| v[e].1).sum();
            assert_eq!(pushed, arrived, "{what} epoch {e}: pushed tasks lost");
            if e == 0 {
                assert_eq!(pushed, 0, "{what}: no history, no diffusion");
            } else {
                assert!(
                    per_rank[0][e].0 > 0,
                    "{what} epoch {e}: rank 0 pushed nothing"
                );
            }
        }
    }
}

#[test]
fn the_plan_follows_the_hints_over_the_history() {
    // The measured costs say rank 0 is the heavy one; the hints say rank 1.
    let cfg = config(Balancing::Smallworld, Protocol::Claim, 4);
    let per_rank = run_on(4, cfg, 2, true);
    let pushed: u64 = per_rank.iter().map(|v| v[1].0).sum();
    let arrived: u64 = per_rank.iter().map(|v| v[1].1).sum();
    assert_eq!(pushed, arrived, "pushed tasks lost");
    assert!(per_rank[1][1].0 > 0, "rank 1 pushed nothing: {per_rank:?}");
    assert_eq!(per_rank[0][1].0, 0, "rank 0 pushed: {per_rank:?}");
    assert!(
        per_rank.iter().all(|v| v[0].0 == 0),
        "a first epoch plans nothing, hints or not: {per_rank:?}"
    );
}

#[test]
fn the_string_plan_routes_pushes_to_ranks_that_are_not_neighbours() {
    // 12 ranks, one shortcut each: most of rank 0's receivers are reached through others.
    for protocol in [Protocol::Claim, Protocol::Lock, Protocol::Request] {
        let mut cfg = config(Balancing::Smallworld, protocol, 12);
        cfg.overlay.shortcuts = 1;
        cfg.workers = 1;
        cfg.core.diffusion_plan = titus_runtime::DiffusionPlan::String;
        let what = protocol.name();
        let per_rank = run_on(12, cfg, 3, false);
        for e in 0..3 {
            let pushed: u64 = per_rank.iter().map(|v| v[e].0).sum();
            let arrived: u64 = per_rank.iter().map(|v| v[e].1).sum();
            assert_eq!(pushed, arrived, "{what} epoch {e}: pushed tasks lost");
            if e == 0 {
                assert_eq!(pushed, 0, "{what}: no history, no diffusion");
                continue;
            }
            assert!(
                per_rank[0][e].0 > 0,
                "{what} epoch {e}: rank 0 pushed nothing"
            );
            let receivers = per_rank.iter().filter(|v| v[e].1 > 0).count();
            assert!(
                receivers >= 6,
                "{what} epoch {e}: only {receivers} ranks got pushed work"
            );
            let forwarded: u64 = per_rank.iter().map(|v| v[e].2).sum();
            assert!(
                forwarded > 0,
                "{what} epoch {e}: nothing went further than one hop"
            );
        }
    }
}

#[test]
fn diffusion_off_pushes_nothing() {
    let mut cfg = config(Balancing::Smallworld, Protocol::Claim, 4);
    cfg.core.diffusion = false;
    let per_rank = run(cfg, 3);
    assert!(per_rank.iter().flatten().all(|&(p, i)| p == 0 && i == 0));
    // And no balancing at all: no diffusion either.
    let cfg = config(Balancing::None, Protocol::Claim, 4);
    let per_rank = run(cfg, 2);
    assert!(per_rank.iter().flatten().all(|&(p, i)| p == 0 && i == 0));
}

#[test]
fn duplicate_keys_fail_every_rank_before_anything_runs() {
    let rts = Runtime::local(
        2,
        config(Balancing::Smallworld, Protocol::Claim, 2),
        MemOptions::default(),
    )
    .unwrap();
    for rt in &rts {
        rt.register(0, checksum);
    }
    let task = |key| TaskIn {
        key,
        kind: 0,
        payload: 1u32.to_le_bytes().to_vec(),
        priority: 0,
        cost_hint_ns: 0,
    };
    std::thread::scope(|s| {
        let hs: Vec<_> = rts
            .iter()
            .map(|rt| {
                s.spawn(move || {
                    let bad = if rt.rank() == 1 {
                        vec![task(7), task(9), task(7)]
                    } else {
                        vec![task(7)]
                    };
                    let err = rt.run_epoch_keyed(bad).unwrap_err();
                    // The next epoch runs normally.
                    let out = rt.run_epoch_keyed(vec![task(1), task(2)]).unwrap();
                    assert_eq!(out.results.len(), 2);
                    err
                })
            })
            .collect();
        let errs: Vec<RuntimeError> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        assert_eq!(
            errs[1],
            RuntimeError::Core(CoreError::DuplicateKey {
                key: 7,
                first: 0,
                second: 2
            })
        );
        assert!(errs[1].to_string().contains("key 7"), "{}", errs[1]);
        assert!(
            matches!(
                errs[0],
                RuntimeError::Core(CoreError::Aborted { rank: 1, .. })
            ),
            "{:?}",
            errs[0]
        );
    });
}

/// A repartition plan after one epoch: only this rank's tasks, each once, only to a rank
/// string neighbour; the loaded rank gives, the plan balances the predicted loads better
/// than before; asked before any epoch, or with a key twice, it fails on every rank.
#[test]
fn a_repartition_plan_moves_own_tasks_to_string_neighbours() {
    let cfg = config(Balancing::Smallworld, Protocol::Claim, 3);
    let rts = Runtime::local(3, cfg, MemOptions::default()).unwrap();
    for rt in &rts {
        rt.register(0, checksum);
    }
    let keys = |r: u32| -> Vec<u64> { tasks(r, 0).iter().map(|t| t.key).collect() };
    std::thread::scope(|s| {
        let hs: Vec<_> = rts
            .iter()
            .enumerate()
            .map(|(r, rt)| {
                s.spawn(move || {
                    let r = r as u32;
                    // Before any epoch: no costs to plan with.
                    let e = rt.repartition_plan(&keys(r)).unwrap_err().to_string();
                    assert!(
                        e.contains("one epoch first") || e.contains("could not take part"),
                        "{e}"
                    );
                    let out = rt.run_epoch_keyed(tasks(r, 0)).unwrap();
                    let mine = keys(r);
                    let plan = rt.repartition_plan(&mine).unwrap();
                    let mut seen = std::collections::HashSet::new();
                    for m in &plan {
                        assert!(
                            mine.contains(&m.key),
                            "rank {r} moves a key it does not own"
                        );
                        assert!(seen.insert(m.key), "rank {r} moves key {} twice", m.key);
                        assert!(m.to.abs_diff(r) == 1, "rank {r} moves to {}", m.to);
                    }
                    // A key given twice fails every rank.
                    let mut dup = mine.clone();
                    if dup.len() > 1 {
                        dup[1] = dup[0];
                    }
                    let e = rt.repartition_plan(&dup);
                    (plan, out.costs_ns, e.is_err())
                })
            })
            .collect();
        let res: Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        // Rank 0 owns 300 tasks against 4 and 4: it gives, to rank 1 only.
        assert!(!res[0].0.is_empty(), "the loaded rank gives nothing");
        assert!(res[0].0.iter().all(|m| m.to == 1));
        // Predicted loads before and after the plan (the costs just measured).
        let load = |r: usize, keep: &dyn Fn(u64) -> bool| -> u64 {
            keys(r as u32)
                .iter()
                .zip(&res[r].1)
                .filter(|(k, _)| keep(**k))
                .map(|(_, c)| *c)
                .sum()
        };
        let before: Vec<u64> = (0..3).map(|r| load(r, &|_| true)).collect();
        let mut after: Vec<u64> = (0..3)
            .map(|r| load(r, &|k| !res[r].0.iter().any(|m| m.key == k)))
            .collect();
        for (r, (plan, costs, _)) in res.iter().enumerate() {
            for m in plan {
                let i = keys(r as u32).iter().position(|&k| k == m.key).unwrap();
                after[m.to as usize] += costs[i];
            }
        }
        assert!(
            after.iter().max() < before.iter().max(),
            "{before:?} -> {after:?}"
        );
        assert!(
            res.iter().all(|x| x.2),
            "a duplicate key did not fail every rank"
        );
    });
}
