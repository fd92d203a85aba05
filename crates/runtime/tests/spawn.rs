//! Tasks that spawn tasks, over the in-process fabric: a random tree of spawns (children
//! handed over while their parent runs, or when it returns) reduces to exactly its size
//! (computed apart) under every steal protocol and over a delayed fabric, epoch after
//! epoch (with the built-in lanes or a closure's combine), or, where results travel
//! home, brings each spawned result home once with its key to the owner of its root; a
//! runaway tree fails every rank naming the bound; a spawn where the job declared none,
//! and a spawned result the reduction cannot take, are refused.

mod common;

use common::delayed;
use std::time::Duration;
use titus_fabric::mem::MemOptions;
use titus_runtime::{Protocol, ReduceOp, Runtime, RuntimeConfig, RuntimeError, Spawning, TaskCtx};

/// A node of the test tree: its seed and depth, 12 bytes.
fn node(seed: u64, depth: u32) -> Vec<u8> {
    let mut v = seed.to_le_bytes().to_vec();
    v.extend_from_slice(&depth.to_le_bytes());
    v
}

/// Children of a node: 0 to 3, drawn from its seed, none below depth 9.
fn children(seed: u64, depth: u32) -> u64 {
    if depth >= 9 {
        return 0;
    }
    mix(seed) % 4
}

fn mix(mut x: u64) -> u64 {
    x ^= x >> 31;
    x = x.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^ (x >> 29)
}

fn child_seed(seed: u64, i: u64) -> u64 {
    mix(seed ^ (i + 1).wrapping_mul(0xa24b_aed4_963e_e407))
}

/// The subtree below (seed, depth), counted apart: nodes and the greatest depth.
fn subtree(seed: u64, depth: u32) -> (u64, u64) {
    let (mut n, mut d) = (1, u64::from(depth));
    for i in 0..children(seed, depth) {
        let (cn, cd) = subtree(child_seed(seed, i), depth + 1);
        n += cn;
        d = d.max(cd);
    }
    (n, d)
}

/// The seeds of every node below (seed, depth), counted apart.
fn descendants(seed: u64, depth: u32, out: &mut Vec<u64>) {
    for i in 0..children(seed, depth) {
        let c = child_seed(seed, i);
        out.push(c);
        descendants(c, depth + 1, out);
    }
}

/// Spawns the node's children, each under its seed as its key; returns (seed, depth).
fn spawn_children(ctx: &mut TaskCtx<'_>, p: &[u8]) -> Result<(u64, u32), String> {
    let seed = u64::from_le_bytes(p[..8].try_into().unwrap());
    let depth = u32::from_le_bytes(p[8..12].try_into().unwrap());
    // Some work, so that queues build up and thieves find something.
    std::hint::black_box((0..200).fold(seed, |a, b| mix(a ^ b)));
    for i in 0..children(seed, depth) {
        let c = child_seed(seed, i);
        ctx.spawn(c, 0, node(c, depth + 1))
            .map_err(|e| e.to_string())?;
        // Half the levels hand their children over while the task goes on.
        if depth % 2 == 0 {
            ctx.hand_over();
        }
    }
    std::hint::black_box((0..200).fold(seed, |a, b| mix(a ^ b)));
    Ok((seed, depth))
}

/// The task of a reducing job: spawns its node's children; its lanes are (1 node, its
/// depth).
fn expand(ctx: &mut TaskCtx<'_>, p: &[u8]) -> Result<Vec<u8>, String> {
    let (_, depth) = spawn_children(ctx, p)?;
    Ok([1u64, u64::from(depth)]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect())
}

/// The task of a job whose results travel home: spawns its node's children; its result
/// is its node.
fn expand_home(ctx: &mut TaskCtx<'_>, p: &[u8]) -> Result<Vec<u8>, String> {
    let (seed, depth) = spawn_children(ctx, p)?;
    Ok(node(seed, depth))
}

fn config(protocol: Protocol, seed: u64) -> RuntimeConfig {
    let mut cfg = RuntimeConfig {
        workers: 2,
        op_timeout: Duration::from_secs(10),
        epoch_timeout: Some(Duration::from_secs(60)),
        ..RuntimeConfig::default()
    };
    cfg.core.protocol = protocol;
    cfg.core.seed = seed;
    cfg.core.shared_capacity = 16;
    cfg.core.spawning = Some(Spawning::reduced(vec![ReduceOp::Sum, ReduceOp::Max]));
    cfg.overlay.seed = seed;
    cfg
}

/// One epoch on one rank: the job's reduction, and this rank's epoch results.
#[derive(Debug)]
struct EpochRun {
    reduced: Vec<u64>,
    results: Vec<Vec<u8>>,
    spawned: Vec<titus_runtime::SpawnedResult>,
}

/// A rank's epochs, or its error.
type RankRun = Result<Vec<EpochRun>, RuntimeError>;

/// Runs `epochs` epochs of `roots` trees per rank (rank 0 owns them all when `skewed`) on
/// `ranks` ranks; each rank's outcome: per epoch, the job's reduction and this rank's
/// epoch results.
fn run(
    ranks: u32,
    cfg: RuntimeConfig,
    options: MemOptions,
    epochs: u32,
    roots: u32,
    skewed: bool,
    f: fn(&mut TaskCtx<'_>, &[u8]) -> Result<Vec<u8>, String>,
) -> Vec<RankRun> {
    let rts = Runtime::local(ranks, cfg, options).unwrap();
    for rt in &rts {
        rt.register_spawning(0, f);
    }
    std::thread::scope(|s| {
        let hs: Vec<_> = rts
            .iter()
            .map(|rt| {
                s.spawn(move || {
                    let mut out = Vec::new();
                    for e in 0..epochs {
                        let r = rt.rank();
                        let mine = if skewed && r > 0 { 0 } else { roots };
                        let tasks = (0..mine)
                            .map(|i| (0, node(root_seed(e, r, i), 0)))
                            .collect();
                        let o = rt.run_epoch(tasks)?;
                        out.push(EpochRun {
                            reduced: o.reduced,
                            results: o.results,
                            spawned: o.spawned,
                        });
                    }
                    Ok(out)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn root_seed(epoch: u32, rank: u32, i: u32) -> u64 {
    mix(u64::from(epoch) << 40 | u64::from(rank) << 20 | u64::from(i))
}

/// Checks every rank's outcome against the trees counted apart.
fn check(what: &str, ranks: u32, roots: u32, skewed: bool, outcomes: Vec<RankRun>) {
    let epochs: Vec<_> = outcomes
        .into_iter()
        .enumerate()
        .map(|(r, o)| o.unwrap_or_else(|e| panic!("{what}: rank {r}: {e}")))
        .collect();
    for e in 0..epochs[0].len() {
        let (mut nodes, mut depth, mut spawned) = (0, 0, 0);
        for r in 0..ranks {
            let mine = if skewed && r > 0 { 0 } else { roots };
            let results = &epochs[r as usize][e].results;
            assert_eq!(results.len(), mine as usize, "{what}");
            for i in 0..mine {
                let (n, d) = subtree(root_seed(e as u32, r, i), 0);
                nodes += n;
                depth = depth.max(d);
                spawned += n - 1;
                // The epoch task's own result came home: its one node at depth 0.
                let got = &results[i as usize];
                assert_eq!(got[..8], 1u64.to_le_bytes(), "{what}");
            }
        }
        for (r, per) in epochs.iter().enumerate() {
            assert_eq!(
                per[e].reduced,
                [spawned, depth],
                "{what}: epoch {e}, rank {r}: the job's reduction (trees of {nodes} nodes)"
            );
        }
    }
}

/// Checks that each rank got home, once each, the results of the spawned tasks below its
/// own roots, with their keys, and its roots' own results.
fn check_home(what: &str, roots: u32, skewed: bool, outcomes: Vec<RankRun>) {
    for (r, o) in outcomes.into_iter().enumerate() {
        let per = o.unwrap_or_else(|e| panic!("{what}: rank {r}: {e}"));
        for (e, run) in per.iter().enumerate() {
            let mine = if skewed && r > 0 { 0 } else { roots };
            let mut want = Vec::new();
            for i in 0..mine {
                let seed = root_seed(e as u32, r as u32, i);
                assert_eq!(run.results[i as usize], node(seed, 0), "{what}");
                descendants(seed, 0, &mut want);
            }
            want.sort_unstable();
            let got: Vec<u64> = run.spawned.iter().map(|s| s.key).collect();
            assert_eq!(
                got, want,
                "{what}: epoch {e}, rank {r}: the spawned results' keys"
            );
            for s in &run.spawned {
                assert_eq!(
                    s.data[..8],
                    s.key.to_le_bytes(),
                    "{what}: a result under another key"
                );
            }
            assert!(run.reduced.is_empty(), "{what}");
        }
    }
}

#[test]
fn spawned_results_come_home_with_their_keys_under_every_protocol() {
    for protocol in [Protocol::Claim, Protocol::Lock, Protocol::Request] {
        for (seed, skewed) in [(11, true), (12, false)] {
            let options = delayed(seed);
            let what = format!("{protocol:?}, seed {seed}, skewed {skewed}, results home");
            let mut cfg = config(protocol, seed);
            cfg.core.spawning = Some(Spawning::home());
            let out = run(3, cfg, options, 2, 4, skewed, expand_home);
            check_home(&what, 4, skewed, out);
        }
    }
}

#[test]
fn a_random_tree_of_spawns_reduces_to_its_size_under_every_protocol() {
    for protocol in [Protocol::Claim, Protocol::Lock, Protocol::Request] {
        for (seed, skewed) in [(1, true), (2, false)] {
            let options = delayed(seed);
            let what = format!("{protocol:?}, seed {seed}, skewed {skewed}");
            let out = run(3, config(protocol, seed), options, 2, 4, skewed, expand);
            check(&what, 3, 4, skewed, out);
        }
    }
}

#[test]
fn a_combine_given_as_a_closure_reduces_like_the_built_in_lanes() {
    let combine = titus_runtime::spawn::Combine::new(vec![0, 0], |acc, v| {
        acc[0] = acc[0].wrapping_add(v[0]);
        acc[1] = acc[1].max(v[1]);
    });
    for protocol in [Protocol::Claim, Protocol::Request] {
        let mut cfg = config(protocol, 21);
        cfg.core.spawning = Some(Spawning::combined(combine.clone()));
        let what = format!("{protocol:?}, a closure's combine");
        let out = run(3, cfg, MemOptions::default(), 2, 4, false, expand);
        check(&what, 3, 4, false, out);
    }
    // Custom lanes whose combine one rank lacks: every rank fails, none waits for it.
    let mut cfg = config(Protocol::Claim, 23);
    cfg.core.spawning = Some(Spawning::reduced(vec![ReduceOp::Custom; 2]));
    cfg.epoch_timeout = Some(Duration::from_secs(20));
    let rts = Runtime::local(2, cfg, MemOptions::default()).unwrap();
    rts[0].set_combine(combine.clone()).unwrap();
    let errors: Vec<String> = std::thread::scope(|s| {
        let hs: Vec<_> = rts
            .iter()
            .map(|rt| {
                rt.register_spawning(0, expand);
                s.spawn(move || rt.run_epoch(vec![(0, node(rt.rank().into(), 0))]))
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap().expect_err("the epoch fails").to_string())
            .collect()
    });
    assert!(errors[1].contains("no combine"), "{errors:?}");
    assert!(!errors[0].contains("timed out"), "{errors:?}");
    // Given later (libtitus's path): refused where the job declared no custom lanes.
    let rt = Runtime::local(1, config(Protocol::Claim, 22), MemOptions::default())
        .unwrap()
        .pop()
        .unwrap();
    let e = rt.set_combine(combine).unwrap_err().to_string();
    assert!(e.contains("no custom lanes"), "{e}");
}

#[test]
fn one_rank_and_an_epoch_without_tasks_end() {
    let out = run(
        1,
        config(Protocol::Claim, 3),
        MemOptions::default(),
        2,
        3,
        false,
        expand,
    );
    check("one rank", 1, 3, false, out);
    let out = run(
        2,
        config(Protocol::Claim, 4),
        MemOptions::default(),
        1,
        0,
        false,
        expand,
    );
    check("no tasks anywhere", 2, 0, false, out);
}

#[test]
fn a_runaway_tree_fails_every_rank_naming_the_bound() {
    fn runaway(ctx: &mut TaskCtx<'_>, _: &[u8]) -> Result<Vec<u8>, String> {
        for _ in 0..4 {
            ctx.spawn(0, 0, node(0, 0)).map_err(|e| e.to_string())?;
        }
        Ok(vec![0; 16])
    }
    let mut cfg = config(Protocol::Claim, 5);
    cfg.core.spawning.as_mut().unwrap().queued_max = 500;
    let out = run(3, cfg, MemOptions::default(), 1, 1, true, runaway);
    for (r, o) in out.iter().enumerate() {
        let e = o.as_ref().expect_err("a runaway tree fails").to_string();
        assert!(
            e.contains("bound of 500") || e.contains("queue bound (Spawning::queued_max)"),
            "rank {r}: {e}"
        );
    }
}

#[test]
fn a_spawned_result_the_reduction_cannot_take_fails_the_epoch() {
    fn short(ctx: &mut TaskCtx<'_>, p: &[u8]) -> Result<Vec<u8>, String> {
        if p[8] == 0 {
            ctx.spawn(0, 0, node(1, 1)).map_err(|e| e.to_string())?;
        }
        Ok(vec![7; 9])
    }
    let out = run(
        2,
        config(Protocol::Claim, 6),
        MemOptions::default(),
        1,
        1,
        true,
        short,
    );
    // The rank that ran the spawned task names the lengths; the other hears its abort.
    let errors: Vec<String> = out
        .iter()
        .map(|o| o.as_ref().expect_err("every rank fails").to_string())
        .collect();
    assert!(
        errors
            .iter()
            .any(|e| e.contains("returned 9 bytes") && e.contains("takes 16")),
        "{errors:?}"
    );
    assert!(
        errors
            .iter()
            .all(|e| e.contains("takes 16") || e.contains("did not fit the reduction")),
        "{errors:?}"
    );
}

#[test]
fn a_spawn_is_refused_where_the_job_declared_none() {
    let mut cfg = config(Protocol::Claim, 7);
    cfg.core.spawning = None;
    let rt = Runtime::local(1, cfg, MemOptions::default())
        .unwrap()
        .pop()
        .unwrap();
    rt.register_spawning(0, |ctx, _| {
        let e = ctx.spawn(0, 0, vec![1]).expect_err("no spawning declared");
        Ok(e.to_string().into_bytes())
    });
    let out = rt.run_epoch(vec![(0, vec![])]).unwrap();
    let text = String::from_utf8(out.results[0].clone()).unwrap();
    assert!(text.contains("may not spawn"), "{text}");
    assert!(out.reduced.is_empty());
}
