//! The runtime over the in-process fabric: every result arrives once, at its owner, at its
//! index (checked against an independent computation), for each steal protocol, over a
//! plain, a delayed (seeded) and a software-progress fabric; failures surface on every
//! rank.

mod common;

use common::checksum;
use std::time::Duration;
use titus_fabric::mem::{DelayModel, MemOptions};
use titus_runtime::{Balancing, Protocol, Runtime, RuntimeConfig, RuntimeError};

fn task(owner: u32, i: u32, rounds: u32) -> (u16, Vec<u8>) {
    let mut p = rounds.to_le_bytes().to_vec();
    p.extend_from_slice(format!("task {owner}/{i}").as_bytes());
    (0, p)
}

fn config(protocol: Protocol, seed: u64) -> RuntimeConfig {
    let mut cfg = RuntimeConfig {
        workers: 2,
        op_timeout: Duration::from_secs(10),
        epoch_timeout: Some(Duration::from_secs(
            std::env::var("EPOCH_TIMEOUT")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(60),
        )),
        ..RuntimeConfig::default()
    };
    cfg.core.protocol = protocol;
    cfg.core.seed = seed;
    cfg.core.shared_capacity = 16;
    cfg.core.max_payload = 64;
    cfg.core.max_result = 16;
    cfg.overlay.shortcuts = 2;
    cfg.overlay.seed = seed;
    cfg
}

/// Runs `epochs` epochs on `ranks` in-process ranks; rank 0 owns most tasks.
fn job(
    ranks: u32,
    cfg: RuntimeConfig,
    options: MemOptions,
    epochs: u32,
    per_rank: impl Fn(u32) -> u32 + Sync,
) -> Vec<Result<(), RuntimeError>> {
    let rts = Runtime::local(ranks, cfg, options).unwrap();
    for rt in &rts {
        rt.register(0, checksum);
    }
    std::thread::scope(|s| {
        let hs: Vec<_> = rts
            .iter()
            .map(|rt| {
                let per_rank = &per_rank;
                s.spawn(move || -> Result<(), RuntimeError> {
                    for e in 0..epochs {
                        let r = rt.rank();
                        let tasks: Vec<_> = (0..per_rank(r))
                            .map(|i| task(r, i + 1000 * e, 20 + (i % 7) * 40))
                            .collect();
                        let out = rt.run_epoch(tasks.clone())?;
                        assert_eq!(out.results.len(), tasks.len(), "rank {r}: result count");
                        for (i, (res, (_, p))) in out.results.iter().zip(&tasks).enumerate() {
                            assert_eq!(
                                *res,
                                checksum(p),
                                "rank {r} epoch {e} task {i}: wrong result"
                            );
                        }
                        assert_eq!(out.stats.core.tasks_owned, tasks.len() as u64);
                    }
                    Ok(())
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("rank thread panicked"))
            .collect()
    })
}

fn all_ok(results: Vec<Result<(), RuntimeError>>, what: &str) {
    for (r, res) in results.into_iter().enumerate() {
        if let Err(e) = res {
            panic!("{what}: rank {r}: {e}");
        }
    }
}

#[test]
fn every_protocol_delivers_every_result_once() {
    for protocol in [Protocol::Claim, Protocol::Lock, Protocol::Request] {
        let what = format!("{protocol:?}");
        all_ok(
            job(4, config(protocol, 1), MemOptions::default(), 2, |r| {
                if r == 0 { 400 } else { 5 }
            }),
            &what,
        );
    }
}

/// The implicit complete graph (random stealing) in the runtime: 80 ranks have 79 victims
/// and next hops each, more than the 64 OUTBOX slots (the default), then a single slot.
/// (Chunks waiting for a slot are exercised by the simulator's checks, `titus sim
/// --check` and titus-sim's epochs test, which draw 1–3 slots; here a thief's results
/// mostly go to one owner.)
#[test]
fn the_complete_graph_past_the_outbox_pool() {
    for (protocol, slots) in [
        (Protocol::Claim, 64),
        (Protocol::Request, 1),
        (Protocol::Claim, 1),
    ] {
        let mut cfg = config(protocol, 5);
        cfg.workers = 1;
        cfg.balance(Balancing::Random, 80, None).unwrap();
        cfg.core.chunk_bytes = 256;
        cfg.core.outbox_slots = slots;
        all_ok(
            job(
                80,
                cfg,
                MemOptions {
                    // Operations stay in flight a while: chunks queue for slots.
                    delay: Some(DelayModel {
                        seed: u64::from(slots),
                        max: Duration::from_micros(300),
                    }),
                    software_progress: false,
                    hang_posts_to: None,
                },
                2,
                |r| if r % 10 == 0 { 150 } else { 2 },
            ),
            &format!("random, 80 ranks, {protocol:?}, {slots} OUTBOX slots"),
        );
    }
}

#[test]
fn delays_reordering_and_software_progress() {
    for seed in titus_core::seed::seeds(0..3) {
        for protocol in [Protocol::Claim, Protocol::Lock, Protocol::Request] {
            let options = common::delayed(seed);
            let what = format!(
                "{protocol:?}, seed {seed} (repeat: {})",
                titus_core::seed::repeat(seed)
            );
            all_ok(
                job(5, config(protocol, seed), options, 1, |r| {
                    if r == 1 { 300 } else { 10 }
                }),
                &what,
            );
        }
    }
}

#[test]
fn a_single_rank_and_empty_epochs() {
    all_ok(
        job(
            1,
            config(Protocol::Claim, 1),
            MemOptions::default(),
            2,
            |_| 50,
        ),
        "one rank",
    );
    all_ok(
        job(
            3,
            config(Protocol::Claim, 1),
            MemOptions::default(),
            2,
            |_| 0,
        ),
        "no tasks anywhere",
    );
}

#[test]
fn finalize_is_collective_and_ends_each_rank() {
    let rts = Runtime::local(3, config(Protocol::Claim, 4), MemOptions::default()).unwrap();
    // Rank 2 comes late to finalize: nobody's returns before it came.
    let late = std::time::Duration::from_millis(300);
    let came: std::sync::Mutex<Option<std::time::Instant>> = std::sync::Mutex::new(None);
    let ended: Vec<Result<(u32, std::time::Instant), RuntimeError>> = std::thread::scope(|s| {
        let hs: Vec<_> = rts
            .into_iter()
            .map(|rt| {
                let came = &came;
                s.spawn(move || {
                    rt.register(0, checksum);
                    let r = rt.rank();
                    let tasks: Vec<_> = (0..40 * (r == 0) as u32).map(|i| task(r, i, 30)).collect();
                    let out = rt.run_epoch(tasks.clone())?;
                    assert_eq!(out.results.len(), tasks.len());
                    if r == 2 {
                        std::thread::sleep(late);
                        *came.lock().unwrap() = Some(std::time::Instant::now());
                    }
                    rt.finalize().map(|()| (r, std::time::Instant::now()))
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("rank thread panicked"))
            .collect()
    });
    let ended: Vec<(u32, std::time::Instant)> = ended
        .into_iter()
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("finalize: {e}"));
    let came = came.lock().unwrap().expect("rank 2 came");
    for (r, at) in ended {
        assert!(
            at >= came,
            "rank {r}'s finalize returned before rank 2 called it"
        );
    }
}

#[test]
fn failures_surface_on_every_rank() {
    // A panicking task on whichever rank runs it: every rank gets an error.
    let rts = Runtime::local(3, config(Protocol::Claim, 2), MemOptions::default()).unwrap();
    for rt in &rts {
        rt.register(0, |p: &[u8]| {
            if p == b"boom" {
                panic!("task exploded");
            }
            p.to_vec()
        });
    }
    let errors: Vec<String> = std::thread::scope(|s| {
        let hs: Vec<_> = rts
            .iter()
            .map(|rt| {
                s.spawn(move || {
                    let tasks = if rt.rank() == 0 {
                        vec![(0, b"fine".to_vec()), (0, b"boom".to_vec())]
                    } else {
                        vec![]
                    };
                    rt.run_epoch(tasks)
                        .expect_err("the epoch must fail")
                        .to_string()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(
        errors.iter().any(|e| e.contains("task exploded")),
        "{errors:?}"
    );
    assert!(
        errors
            .iter()
            .all(|e| e.contains("task exploded") || e.contains("aborted")),
        "{errors:?}"
    );

    // An oversized result and an unregistered kind are errors too.
    let rts = Runtime::local(1, config(Protocol::Claim, 3), MemOptions::default()).unwrap();
    rts[0].register(0, |_: &[u8]| vec![0u8; 1000]);
    let e = rts[0]
        .run_epoch(vec![(0, vec![1])])
        .unwrap_err()
        .to_string();
    assert!(e.contains("over the 16-byte result limit"), "{e}");
    let rts = Runtime::local(1, config(Protocol::Claim, 3), MemOptions::default()).unwrap();
    let e = rts[0]
        .run_epoch(vec![(7, vec![1])])
        .unwrap_err()
        .to_string();
    assert!(e.contains("no function registered for task kind 7"), "{e}");
    let rts = Runtime::local(1, config(Protocol::Claim, 3), MemOptions::default()).unwrap();
    let e = rts[0]
        .run_epoch(vec![(0, vec![0u8; 65])])
        .unwrap_err()
        .to_string();
    assert!(e.contains("over the 64-byte limit"), "{e}");
}

/// A fabric call that never returns (libfabric's shm spins on a lock a dead peer held):
/// the rank whose progress thread is stuck posting to rank 1 fails its epoch after the
/// operation timeout, naming rank 1 — no hang — and dropping the runtime returns.
#[test]
fn a_provider_call_that_never_returns_fails_the_epoch_naming_the_peer() {
    let mut cfg = config(Protocol::Claim, 1);
    cfg.op_timeout = Duration::from_secs(1);
    cfg.epoch_timeout = Some(Duration::from_secs(8));
    let options = MemOptions {
        hang_posts_to: Some((1, 0)),
        ..MemOptions::default()
    };
    let start = std::time::Instant::now();
    let results = job(2, cfg, options, 1, |r| if r == 0 { 200 } else { 0 });
    let e = results[0]
        .as_ref()
        .expect_err("rank 0 must fail")
        .to_string();
    assert!(
        e.contains("rank 1") && e.contains("has not returned"),
        "rank 0: {e}"
    );
    assert!(results[1].is_err(), "rank 1 cannot finish without rank 0");
    // The epoch timeout (8 s) bounds rank 1; rank 0 fails after ~1 s; the drops return.
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "{:?}",
        start.elapsed()
    );
}

/// A rank whose runtime is gone (its thread returned an error, or panicked) has left the
/// in-process job: the others' all-gathers (and so their epochs) fail naming it, at once,
/// instead of waiting for it forever. A round that it completed before it left still
/// returns to the ranks that wait on it.
#[test]
fn a_rank_that_leaves_fails_the_others_gathers_instead_of_hanging_them() {
    let mut rts = Runtime::local(3, config(Protocol::Claim, 3), MemOptions::default()).unwrap();
    // A full round first, rank 2 leaving right after its part of it.
    let r2 = rts.pop().unwrap();
    let mut waiting = Vec::new();
    for rt in rts {
        waiting.push(std::thread::spawn(move || {
            let first = rt.all_gather(&[rt.rank() as u8]);
            let second = rt.all_gather(b"again");
            (first, second)
        }));
    }
    assert_eq!(
        r2.all_gather(&[2]).unwrap(),
        [vec![0u8], vec![1], vec![2]],
        "rank 2's round"
    );
    drop(r2);
    let (tx, rx) = std::sync::mpsc::channel();
    for w in waiting {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let _ = tx.send(w.join().unwrap());
        });
    }
    for _ in 0..2 {
        let (first, second) = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("a gather waited for a rank that left the job");
        assert_eq!(first.unwrap(), [vec![0u8], vec![1], vec![2]]);
        let e = second.unwrap_err().to_string();
        assert!(e.contains("rank 2") && e.contains("left"), "{e}");
    }
}

#[test]
fn measured_costs_hold_what_the_tasks_took() {
    // Tasks that sleep 0, 0.3 and 3 ms, over epochs that start before the task clock's
    // calibration (the first millisecond) and after, spanning its anchors: each measured
    // cost holds at least the sleep (no clock runs slow), and the tiny tasks are not
    // charged a sleep of their neighbours.
    let rts = Runtime::local(1, config(Protocol::Claim, 5), MemOptions::default()).unwrap();
    let rt = &rts[0];
    rt.register(0, |p: &[u8]| {
        std::thread::sleep(Duration::from_micros(u64::from(p[0]) * 100));
        p.to_vec()
    });
    let sleeps = [0u8, 3, 0, 30, 0, 0, 3, 30, 0];
    for epoch in 0..3 {
        let tasks = sleeps
            .iter()
            .zip(0..)
            .map(|(&s, key)| titus_runtime::TaskIn {
                key,
                kind: 0,
                payload: vec![s],
                priority: 0,
                cost_hint_ns: 0,
            })
            .collect();
        let out = rt.run_epoch_keyed(tasks).unwrap();
        for (&s, &cost) in sleeps.iter().zip(&out.costs_ns) {
            let slept = u64::from(s) * 100_000;
            assert!(
                cost >= slept,
                "epoch {epoch}: slept {slept} ns, measured {cost}"
            );
            if s == 0 {
                assert!(
                    cost < 100_000,
                    "epoch {epoch}: a tiny task measured {cost} ns"
                );
            }
        }
    }
}

#[test]
fn a_payload_over_the_limit_is_refused_naming_it() {
    // max_payload is 64 here: the third task's 65 bytes are refused, named by index and
    // length, before any task runs.
    let rts = Runtime::local(1, config(Protocol::Claim, 6), MemOptions::default()).unwrap();
    let rt = &rts[0];
    rt.register(0, |p: &[u8]| p.to_vec());
    let tasks: Vec<(u16, Vec<u8>)> = [1usize, 64, 65, 2]
        .iter()
        .map(|&n| (0, vec![7; n]))
        .collect();
    let err = rt.run_epoch(tasks).unwrap_err().to_string();
    assert!(
        err.contains("task 2 has a 65-byte payload"),
        "names the task and its length: {err}"
    );
}
