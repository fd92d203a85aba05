//! The conformance suite over the in-process backend: ranks are threads, with and without
//! seeded delays (reordering) and software progress.

use std::sync::Arc;
use std::time::Duration;
use titus_fabric::Fabric;
use titus_fabric::conformance;
use titus_fabric::mem::{self, DelayModel, MemOptions};

fn suite(size: u32, options: MemOptions, dead_peer: bool) {
    let configs = (0..size)
        .map(|_| conformance::config(size, Duration::from_secs(10)))
        .collect();
    let fabrics = mem::world(configs, options.clone()).unwrap();
    let results: Vec<Result<(), conformance::ConformanceFailure>> = std::thread::scope(|s| {
        let hs: Vec<_> = fabrics
            .iter()
            .map(|f| {
                let f = f.clone();
                s.spawn(move || {
                    let die = {
                        let f = f.clone();
                        move || f.kill()
                    };
                    conformance::run_rank(f as Arc<dyn Fabric>, &die, dead_peer)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("rank thread panicked"))
            .collect()
    });
    for (r, res) in results.into_iter().enumerate() {
        if let Err(e) = res {
            panic!(
                "mem, {size} ranks, {options:?}: rank {r} failed: {e}\n{}",
                fabrics[0].debug_state()
            );
        }
    }
}

#[test]
fn one_rank() {
    suite(1, MemOptions::default(), false);
}

#[test]
fn immediate() {
    for size in [2, 3, 8] {
        suite(size, MemOptions::default(), true);
    }
}

#[test]
fn software_progress() {
    suite(
        4,
        MemOptions {
            software_progress: true,
            ..MemOptions::default()
        },
        true,
    );
}

#[test]
fn seeded_delays_and_reordering() {
    // A failing seed is named in the panic message through `options`.
    for seed in titus_core::seed::seeds(0..3) {
        for software_progress in [false, true] {
            suite(
                3,
                MemOptions {
                    delay: Some(DelayModel {
                        seed,
                        max: Duration::from_micros(200),
                    }),
                    software_progress,
                    hang_posts_to: None,
                },
                false,
            );
        }
    }
}
