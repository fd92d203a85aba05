//! `titus sim --uts 'FLAGS'`: a UTS tree (UTS's own flags in one string, as `uts-bench`
//! takes them) traversed by tasks that spawn tasks, with `uts-bench`'s policy
//! (`titus_workload::uts_task`), simulated through the same core at any rank count. The
//! generator runs for real (the tree is the published one); a node costs `--uts-node-ns`
//! of virtual time. Rank 0's one epoch task is the root.
//!
//! The efficiency is the sequential traversal's virtual time (nodes × node cost) over the
//! job's time (from the first rank's epoch call to the last rank's end) × ranks × workers.

use crate::UsageError;
use crate::sim_cmd::{SimArgs, model, parse_faults};
use titus_core::Config;
use titus_sim::{Job, SimTask, Spawned};
use titus_workload::dlb;
use titus_workload::uts::{Counts, TreeArgs};
use titus_workload::uts_task;

/// One simulated traversal's figures.
struct Figures {
    counts: Counts,
    tasks: u64,
    seconds: f64,
    sequential_s: f64,
    events: u64,
    wall_s: f64,
}

pub(crate) fn run(a: &SimArgs, spec: &str) -> Result<u8, UsageError> {
    let tree = TreeArgs::parse_tree(spec).map_err(UsageError)?;
    if a.uts_node_ns == 0 || a.uts_node_ns > 1_000_000_000 {
        return Err(UsageError(format!(
            "--uts-node-ns {}: 1 to 1,000,000,000",
            a.uts_node_ns
        )));
    }
    if !(1..=uts_task::CHUNK_MAX).contains(&a.uts_chunk) {
        return Err(UsageError(format!(
            "--uts-chunk {}: 1 to {}",
            a.uts_chunk,
            uts_task::CHUNK_MAX
        )));
    }
    let model = model(a)?;
    let faults = parse_faults(a)?;
    let (node_ns, chunk) = (a.uts_node_ns, a.uts_chunk);
    let spawn = move |payload: &[u8], queued: usize| -> Spawned {
        // (Payloads are the core's: a bad one is a bug; no nodes, no work.)
        let nodes = uts_task::decode_nodes(payload).unwrap_or_default();
        let mut early = None;
        let e = uts_task::expand(&tree, nodes, chunk, queued, &mut |visited, given| {
            early = Some((u64::from(visited) * node_ns, given));
        });
        Spawned {
            cost_ns: e.counts.nodes.saturating_mul(node_ns).max(1),
            children: e.spawn,
            lanes: uts_task::lane_values(&e.counts).to_vec(),
            early,
        }
    };
    let result = move |payload: &[u8]| -> Vec<u8> {
        // (The root alone: rank 0's queue is empty when it starts.)
        let Spawned { lanes, .. } = spawn(payload, 0);
        lanes.iter().flat_map(|v| v.to_le_bytes()).collect()
    };
    for run in dlb::runs(&a.bench)? {
        let ranks = run.args.ranks;
        if ranks == 0 {
            return Err(UsageError("--ranks must be at least 1".into()));
        }
        let mut core = Config {
            seed: run.args.seed,
            spawning: Some(titus_core::spawn::Spawning::reduced(uts_task::lanes())),
            ..Config::default()
        };
        let mut overlay = titus_overlay::OverlayParams {
            seed: run.args.seed,
            ..titus_overlay::OverlayParams::default()
        };
        core.protocol = match run.protocol {
            dlb::ProtocolArg::Lock => titus_core::Protocol::Lock,
            dlb::ProtocolArg::Claim | dlb::ProtocolArg::All => titus_core::Protocol::Claim,
            dlb::ProtocolArg::Request => titus_core::Protocol::Request,
        };
        if let Some(b) = run.args.backoff_max_ms {
            core.backoff_max = std::time::Duration::from_secs_f64(b / 1e3).max(core.backoff_base);
        }
        run.balancer
            .apply(&mut core, &mut overlay, ranks, None)
            .map_err(|e| UsageError(e.to_string()))?;
        overlay.ranks = ranks;
        let root = uts_task::encode_nodes(&[tree.root()]);
        let root_cost = spawn(&root, 0).cost_ns;
        let mut tasks = vec![Vec::new(); ranks as usize];
        tasks[0].push(SimTask {
            key: 0,
            kind: 0,
            cost_ns: root_cost,
            payload: root,
            hint_ns: 0,
            priority: 0,
        });
        let job = Job {
            workers: run.args.workers,
            faults: faults.clone(),
            seed: run.args.seed,
            result: &result,
            max_events: u64::MAX,
            spawn: Some(&spawn),
            ..Job::new(core, overlay, model.clone(), tasks)
        };
        let t0 = std::time::Instant::now();
        let out = titus_sim::simulate(&job).map_err(|e| UsageError(e.to_string()))?;
        let wall_s = t0.elapsed().as_secs_f64();
        let r0 = &out.ranks[0];
        let (mut counts, mut tasks) = uts_task::counts_of(&r0.reduced).map_err(UsageError)?;
        for r in &r0.results {
            let lanes: Vec<u64> = r
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
                .collect();
            let (c, t) = uts_task::counts_of(&lanes).map_err(UsageError)?;
            counts.add(&c);
            tasks += t;
        }
        let first = out.ranks.iter().map(|r| r.called_ns).min().unwrap_or(0);
        let last = out
            .ranks
            .iter()
            .map(|r| r.called_ns + r.stats.session.as_nanos() as u64)
            .max()
            .unwrap_or(0);
        let f = Figures {
            counts,
            tasks,
            seconds: last.saturating_sub(first) as f64 / 1e9,
            sequential_s: (counts.nodes * node_ns) as f64 / 1e9,
            events: out.events,
            wall_s,
        };
        report(a, &run, &model.name, &f);
    }
    Ok(0)
}

fn report(a: &SimArgs, run: &dlb::Run, preset: &str, f: &Figures) {
    let ranks = run.args.ranks;
    let t = uts_task::Traversal {
        counts: f.counts,
        tasks: f.tasks,
        seconds: f.seconds,
        sequential_s: f.sequential_s,
        ranks,
        workers: run.args.workers,
    };
    let (nodes_per_s, efficiency) = (t.nodes_per_s(), t.efficiency());
    if a.bench.json {
        let mut v = t.json();
        for (k, x) in [
            ("balancer", run.balancer.to_string().into()),
            ("preset", preset.into()),
            ("uts_node_ns", a.uts_node_ns.into()),
            ("uts_chunk", a.uts_chunk.into()),
            ("sim_events", f.events.into()),
            ("sim_wall_s", f.wall_s.into()),
        ] {
            v.insert(k.into(), x);
        }
        println!("{}", serde_json::Value::Object(v));
        return;
    }
    println!(
        "titus sim --uts: {ranks} ranks × {} workers, {}, {preset}: {} nodes, {} leaves, max depth {}, {} tasks",
        run.args.workers,
        run.balancer,
        f.counts.nodes,
        f.counts.leaves,
        f.counts.max_depth,
        f.tasks
    );
    println!(
        "{:.4} s virtual, {:.3e} nodes/s; sequential {:.3} s; efficiency {:.4} ({} events in {:.1} s)",
        f.seconds, nodes_per_s, f.sequential_s, efficiency, f.events, f.wall_s
    );
}
