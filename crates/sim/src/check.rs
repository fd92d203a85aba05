//! Deterministic simulation testing: one seed draws a small job (ranks, balancer,
//! protocol, sizes tight enough to force inbox overflows and empty steals, workload,
//! fabric preset) and faults (jitter that reorders operations, slow ranks, a rank whose
//! progress stalls), runs it, and checks every invariant of [`crate::simulate`].

use crate::{Faults, Job, Model, SimTask, Violation, simulate};
use std::time::Duration;
use titus_core::{Balancing, Config, Protocol, Routing};
use titus_overlay::rng::Rng;
use titus_overlay::{LatticeKind, OverlayParams};

/// The result of a task in checks: a hash of its payload.
pub fn check_result(payload: &[u8]) -> Vec<u8> {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for &b in payload {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    h.to_le_bytes().to_vec()
}

/// What a seed drew, in words.
#[derive(Debug, Clone)]
pub struct Drawn {
    /// One line describing the job.
    pub what: String,
    /// Events the run took.
    pub events: u64,
    /// The trace hash.
    pub trace: u64,
}

/// Draws and runs the job of `seed`.
pub fn check_seed(seed: u64) -> Result<Drawn, (String, Violation)> {
    let mut rng = Rng::from_keys(&[seed, 0x4348_4543_4b00]);
    let mut ranks = 1 + rng.below(40) as u32;
    let scheme = rng.below(7);
    if (3..=4).contains(&scheme) && rng.chance(0.4) {
        // The complete graph past a row's size: thieves pace themselves, victims are drawn
        // by rejection, OUTBOX slots are pooled, a master has a backlog.
        ranks = 41 + rng.below(160) as u32;
    }
    let protocol = [Protocol::Claim, Protocol::Lock, Protocol::Request][rng.below(3) as usize];
    let mut overlay = OverlayParams {
        ranks,
        lattice: if rng.chance(0.5) {
            LatticeKind::Ring
        } else {
            LatticeKind::Torus2
        },
        shortcuts: 1 + rng.below(6) as u32,
        seed,
        ..OverlayParams::default()
    };
    let mut core = Config {
        protocol,
        routing: if rng.chance(0.5) {
            Routing::Non
        } else {
            Routing::Greedy
        },
        max_payload: 24,
        max_result: 8,
        shared_capacity: 2 + rng.below(8) as u32,
        min_private: rng.below(3) as u32,
        steal_below: 1 + rng.below(3) as u32,
        inbox_bytes: 256 + rng.below(512),
        chunk_bytes: 64 + rng.below(128),
        // Few slots: chunks wait for one often (the pool runs dry).
        outbox_slots: if rng.chance(0.5) {
            1 + rng.below(3) as u32
        } else {
            64
        },
        flush_delay: Duration::from_micros(rng.below(50)),
        backoff_base: Duration::from_micros(5),
        backoff_max: Duration::from_micros(200),
        check_interval: Duration::from_micros(10 + rng.below(40)),
        seed,
        sharing: None,
    };
    // Tasks: skewed or not, costs from 1 µs to a few ms.
    let skew = rng.chance(0.6);
    let tasks: Vec<Vec<SimTask>> = (0..ranks)
        .map(|r| {
            let count = if skew {
                if r == ranks / 2 {
                    20 + rng.below(200)
                } else {
                    rng.below(3)
                }
            } else {
                rng.below(30)
            };
            (0..count)
                .map(|i| {
                    let mut payload = (u64::from(r) << 32 | i).to_le_bytes().to_vec();
                    payload.extend((0..rng.below(16)).map(|_| rng.below(256) as u8));
                    SimTask {
                        cost_ns: 1_000 + (-(1.0 - rng.unit()).ln() * 300_000.0) as u64,
                        payload,
                    }
                })
                .collect()
        })
        .collect();
    // The scheme's balancer, applied as every front end applies it. Work sharing keeps
    // the drawn overlay and routing, though (real runs share over the complete graph):
    // results of shared tasks then travel hop by hop, a path the core supports, and every
    // seed's trace stays what it was before the balancers had one home.
    let balancing = match scheme {
        0..=2 => Balancing::Smallworld,
        3 => Balancing::Random,
        4 => Balancing::Master,
        5 => Balancing::Hierarchical {
            group_size: Some(1 + rng.below(u64::from(ranks)) as u32),
        },
        _ => Balancing::None,
    };
    let (drawn_overlay, drawn_routing) = (overlay.clone(), core.routing);
    let loads: Vec<u64> = tasks.iter().map(|t| t.len() as u64).collect();
    balancing
        .apply(&mut core, &mut overlay, ranks, Some(&loads))
        .map_err(|e| (format!("seed {seed}"), Violation(e.to_string())))?;
    if core.sharing.is_some() {
        overlay = drawn_overlay;
        core.routing = drawn_routing;
    }
    let name = match balancing {
        b if b.steals() => format!("{b}/{}", core.protocol.name()),
        b @ Balancing::Hierarchical { .. } => format!("{b} (groups of {})", b.group_size(ranks)),
        b => b.to_string(),
    };
    let preset = crate::model::PRESETS[rng.below(4) as usize];
    let model = Model::preset(preset).map_err(|e| (format!("seed {seed}"), Violation(e)))?;
    let mut faults = Faults {
        jitter: if rng.chance(0.7) {
            rng.unit() * 3.0
        } else {
            0.0
        },
        ..Faults::default()
    };
    for r in 0..ranks {
        if rng.chance(0.1) {
            faults.slow.push((r, 2.0 + rng.unit() * 3.0));
        }
    }
    if rng.chance(0.3) {
        faults.stall = Some((
            rng.below(u64::from(ranks)) as u32,
            rng.below(1_000_000),
            100_000 + rng.below(5_000_000),
        ));
    }
    let workers = 1 + rng.below(3) as usize;
    let what = format!(
        "{ranks} ranks, {name}, {workers} workers, {} tasks, preset {preset}, jitter {:.2}, {} slow ranks, stall {:?}",
        tasks.iter().map(Vec::len).sum::<usize>(),
        faults.jitter,
        faults.slow.len(),
        faults.stall
    );
    let job = Job {
        core,
        overlay,
        workers,
        model,
        faults,
        seed,
        tasks,
        result: &check_result,
        task_bytes_scale: 1.0,
        max_events: 20_000_000,
    };
    match simulate(&job) {
        Ok(o) => Ok(Drawn {
            what,
            events: o.events,
            trace: o.trace,
        }),
        Err(v) => Err((what, v)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// CI's share of deterministic simulation testing (`titus sim --check --seeds N` runs
    /// more): 200 seeds, every invariant.
    #[test]
    fn two_hundred_seeds_hold_every_invariant() {
        let first: u64 = std::env::var("TITUS_SIM_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let seeds: u64 = std::env::var("TITUS_SIM_SEEDS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(200);
        let mut events = 0;
        for seed in first..first + seeds {
            match check_seed(seed) {
                Ok(d) => events += d.events,
                Err((what, v)) => panic!(
                    "seed {seed} ({what}): {v}\nreproduce: titus sim --check --seed {seed} --seeds 1"
                ),
            }
        }
        assert!(events > 0);
    }

    #[test]
    fn the_same_seed_gives_the_same_trace() {
        for seed in [3, 17, 40] {
            let a = check_seed(seed).map_err(|e| e.1).unwrap();
            let b = check_seed(seed).map_err(|e| e.1).unwrap();
            assert_eq!((a.trace, a.events), (b.trace, b.events), "seed {seed}");
        }
        // And different seeds differ.
        let (a, b) = (check_seed(1).unwrap(), check_seed(2).unwrap());
        assert_ne!(a.trace, b.trace);
    }
}
