//! Resources beside the CPU workers in the runtime over the in-process
//! fabric: with an emulated accelerator and an out-of-order executor on some ranks, every
//! result arrives once and right, and the per-resource counts add up; an executor that
//! fails fails the epoch on every rank naming the resource; bad resources are refused.

mod common;

use common::checksum;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use titus_fabric::mem::MemOptions;
use titus_runtime::{
    Completions, CoreError, Dispatch, Executor, Runtime, RuntimeConfig, RuntimeError, Variants,
};

fn config() -> RuntimeConfig {
    let mut cfg = RuntimeConfig {
        workers: 2,
        op_timeout: Duration::from_secs(10),
        epoch_timeout: Some(Duration::from_secs(60)),
        ..RuntimeConfig::default()
    };
    cfg.core.shared_capacity = 16;
    cfg.core.max_payload = 64;
    cfg.core.max_result = 16;
    cfg.overlay.shortcuts = 2;
    cfg
}

fn task(owner: u32, i: u32, kind: u16) -> (u16, Vec<u8>) {
    let mut p = (20 + (i % 7) * 40).to_le_bytes().to_vec();
    p.extend_from_slice(format!("task {owner}/{i}").as_bytes());
    (kind, p)
}

/// Completes what it holds at each poll in reverse order of submission (kind 1 only);
/// fails its `fail_at`-th submission's completion if set.
struct Reversing {
    held: VecDeque<(u64, Vec<u8>)>,
    next: u64,
    fail_at: Option<u64>,
    runs: Arc<AtomicU64>,
}

impl Executor for Reversing {
    fn submit(&mut self, kind: u16, payload: &[u8]) -> Result<u64, String> {
        assert_eq!(kind, 1, "only kind 1 has a variant here");
        self.next += 1;
        self.held.push_back((self.next, payload.to_vec()));
        Ok(self.next)
    }
    fn poll(&mut self, done: &mut Completions) {
        while let Some((h, p)) = self.held.pop_back() {
            self.runs.fetch_add(1, Ordering::Relaxed);
            let r = if self.fail_at == Some(h) {
                Err("device lost".into())
            } else {
                Ok(checksum(&p))
            };
            done.push((h, r));
        }
    }
}

/// With `typed`: per-type work requests (`request`; types: every kind — the workers and
/// the emulated accelerators — and kind 1, the reversing executor's).
fn run(
    ranks: u32,
    fail_at: Option<u64>,
    dispatch: Dispatch,
    typed: bool,
) -> (Vec<Result<Vec<u64>, RuntimeError>>, u64) {
    let mut cfg = config();
    if typed {
        cfg.core.protocol = titus_runtime::Protocol::Request;
        cfg.core.resource_types = vec![None, Some(vec![1])];
    }
    let rts = Runtime::local(ranks, cfg, MemOptions::default()).unwrap();
    let runs = Arc::new(AtomicU64::new(0));
    for rt in &rts {
        rt.register(0, checksum);
        rt.register(1, checksum);
        let r = rt.rank();
        if r % 2 == 0 {
            rt.add_emulated("emu", 2, 0.5, dispatch).unwrap();
        }
        if r == 1 || (fail_at.is_some() && r == 0) {
            rt.add_resource(
                "rev",
                3,
                Variants::Kinds(vec![(1, 4.0)]),
                dispatch,
                Box::new(Reversing {
                    held: VecDeque::new(),
                    next: 0,
                    fail_at,
                    runs: runs.clone(),
                }),
            )
            .unwrap();
        }
    }
    let out = std::thread::scope(|s| {
        let hs: Vec<_> = rts
            .iter()
            .map(|rt| {
                s.spawn(move || -> Result<Vec<u64>, RuntimeError> {
                    let mut counts = Vec::new();
                    for e in 0..2u32 {
                        let r = rt.rank();
                        let n = if r == 0 { 120 } else { 10 };
                        let tasks: Vec<_> = (0..n)
                            .map(|i| task(r, i + 1000 * e, (i % 2) as u16))
                            .collect();
                        let out = rt.run_epoch(tasks.clone())?;
                        assert_eq!(out.results.len(), tasks.len());
                        for (i, (res, (_, p))) in out.results.iter().zip(&tasks).enumerate() {
                            assert_eq!(*res, checksum(p), "rank {r} epoch {e} task {i}");
                        }
                        let c = &out.stats.resources;
                        for x in c {
                            assert_eq!(x.submitted, x.completed, "rank {r}: {x:?}");
                        }
                        counts.push(c.iter().skip(1).map(|x| x.completed).sum::<u64>());
                        if r % 2 == 0 || r == 1 {
                            assert!(!c.is_empty() && c[0].name == "cpu", "rank {r}: {c:?}");
                        } else {
                            assert!(c.is_empty());
                        }
                    }
                    Ok(counts)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("rank panicked"))
            .collect()
    });
    (out, runs.load(Ordering::Relaxed))
}

#[test]
fn every_result_once_with_an_emulated_accelerator_and_an_out_of_order_executor() {
    for (dispatch, typed) in [
        (Dispatch::LeastLoaded, false),
        (Dispatch::RoundRobin, false),
        (Dispatch::Fixed, false),
        (Dispatch::LeastLoaded, true),
        (Dispatch::Fixed, true),
    ] {
        let (out, runs) = run(4, None, dispatch, typed);
        let mut accel = 0;
        for (r, o) in out.into_iter().enumerate() {
            accel += o
                .unwrap_or_else(|e| panic!("{dispatch:?} rank {r}: {e}"))
                .iter()
                .sum::<u64>();
        }
        // Fixed offloads whenever the accelerator has room: rank 0's first task goes to its
        // emulated one (the other policies may, by timing, leave everything to the workers).
        if dispatch == Dispatch::Fixed {
            assert!(accel > 0, "{dispatch:?}: nothing ran beside the workers");
        }
        assert!(
            runs <= accel,
            "{dispatch:?}: the executor ran {runs} > {accel}"
        );
    }
}

#[test]
fn a_failing_executor_fails_the_epoch_on_every_rank() {
    let (out, _) = run(4, Some(2), Dispatch::Fixed, false);
    for (r, o) in out.into_iter().enumerate() {
        match o {
            Err(RuntimeError::Core(CoreError::TaskFailed { detail, .. })) => {
                assert!(
                    detail.contains("\"rev\"") && detail.contains("device lost"),
                    "rank {r}: {detail}"
                )
            }
            Err(RuntimeError::Core(CoreError::Aborted { .. })) => {}
            other => panic!("rank {r}: {other:?}"),
        }
    }
}

#[test]
fn bad_resources_are_refused() {
    let rts = Runtime::local(1, config(), MemOptions::default()).unwrap();
    let rt = &rts[0];
    let e = rt
        .add_emulated("gpu", 0, 2.0, Dispatch::LeastLoaded)
        .unwrap_err();
    assert!(
        e.is_usage() && e.to_string().contains("\"gpu\" has capacity 0"),
        "{e}"
    );
    let e = rt
        .add_emulated("gpu", 1, 0.0, Dispatch::LeastLoaded)
        .unwrap_err();
    assert!(e.to_string().contains("speed 0"), "{e}");
    // With per-type requests a resource's kinds must be one of the job's types.
    let mut cfg = config();
    cfg.core.resource_types = vec![None, Some(vec![1])];
    let rts = Runtime::local(1, cfg, MemOptions::default()).unwrap();
    let e = rts[0]
        .add_resource(
            "rev",
            1,
            Variants::Kinds(vec![(2, 1.0)]),
            Dispatch::LeastLoaded,
            Box::new(Reversing {
                held: VecDeque::new(),
                next: 0,
                fail_at: None,
                runs: Arc::new(AtomicU64::new(0)),
            }),
        )
        .unwrap_err();
    assert!(
        e.is_usage() && e.to_string().contains("none of the job's resource types"),
        "{e}"
    );
    // The types must include the CPU workers' (every kind).
    let mut cfg = config();
    cfg.core.resource_types = vec![Some(vec![1])];
    let rts = Runtime::local(1, cfg, MemOptions::default()).unwrap();
    let e = rts[0]
        .add_emulated("gpu", 1, 1.0, Dispatch::LeastLoaded)
        .unwrap_err();
    assert!(e.to_string().contains("leave out the CPU workers'"), "{e}");
}
