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
use titus_core::spawn::Spawning;
use titus_sim::{Job, SimTask, Spawned};
use titus_workload::dlb;
use titus_workload::uts::TreeArgs;
use titus_workload::uts_task;

/// One simulated traversal's figures, and what simulating it took.
struct Figures {
    traversal: uts_task::Traversal,
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
        let tasks = |payloads: Vec<Vec<u8>>| payloads.into_iter().map(|p| (0, p).into()).collect();
        let mut early = None;
        let e = uts_task::expand(&tree, nodes, chunk, queued, &mut |visited, given| {
            early = Some((u64::from(visited) * node_ns, tasks(given)));
        });
        Spawned {
            cost_ns: e.counts.nodes.saturating_mul(node_ns).max(1),
            children: tasks(e.spawn),
            result: Spawning::encode(&uts_task::lane_values(&e.counts, 1)),
            early,
        }
    };
    // The one epoch task, the root, expanded once: its cost, and its result (rank 0's
    // queue is empty when it starts, as the model then finds it).
    let root = uts_task::encode_nodes(&[tree.root()]);
    let at_root = spawn(&root, 0);
    let result = |payload: &[u8]| -> Vec<u8> {
        match payload == root.as_slice() {
            true => at_root.result.clone(),
            false => spawn(payload, 0).result,
        }
    };
    for run in dlb::runs(&a.bench)? {
        let ranks = run.args.ranks;
        if ranks == 0 {
            return Err(UsageError("--ranks must be at least 1".into()));
        }
        let mut core = Config {
            seed: run.args.seed,
            spawning: Some(a.uts_results.spawning()),
            ..Config::default()
        };
        let mut overlay = titus_overlay::OverlayParams {
            seed: run.args.seed,
            ..titus_overlay::OverlayParams::default()
        };
        core.protocol = run.protocol.protocol();
        if let Some(b) = run.args.backoff_max_ms {
            core.backoff_max = std::time::Duration::from_secs_f64(b / 1e3).max(core.backoff_base);
        }
        run.balancer
            .apply(&mut core, &mut overlay, ranks, None)
            .map_err(|e| UsageError(e.to_string()))?;
        overlay.ranks = ranks;
        let mut tasks = vec![Vec::new(); ranks as usize];
        tasks[0].push(SimTask {
            key: 0,
            kind: 0,
            cost_ns: at_root.cost_ns,
            payload: root.clone(),
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
        let (counts, tasks) =
            uts_task::totals(&r0.reduced, &r0.results, &r0.spawned).map_err(UsageError)?;
        let first = out.ranks.iter().map(|r| r.called_ns).min().unwrap_or(0);
        let last = out
            .ranks
            .iter()
            .map(|r| r.called_ns + r.stats.session.as_nanos() as u64)
            .max()
            .unwrap_or(0);
        let f = Figures {
            traversal: uts_task::Traversal {
                counts,
                tasks,
                seconds: last.saturating_sub(first) as f64 / 1e9,
                sequential_s: (counts.nodes * node_ns) as f64 / 1e9,
                ranks,
                workers: run.args.workers,
            },
            events: out.events,
            wall_s,
        };
        report(a, &run, &model.name, &f);
    }
    Ok(0)
}

fn report(a: &SimArgs, run: &dlb::Run, preset: &str, f: &Figures) {
    let t = &f.traversal;
    let ranks = t.ranks;
    let (nodes_per_s, efficiency) = (t.nodes_per_s(), t.efficiency());
    if a.bench.json {
        let mut v = t.json();
        for (k, x) in [
            ("balancer", run.balancer.to_string().into()),
            ("preset", preset.into()),
            ("uts_node_ns", a.uts_node_ns.into()),
            ("uts_chunk", a.uts_chunk.into()),
            (
                "uts_results",
                format!("{:?}", a.uts_results).to_lowercase().into(),
            ),
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
        t.counts.nodes,
        t.counts.leaves,
        t.counts.max_depth,
        t.tasks
    );
    println!(
        "{:.4} s virtual, {:.3e} nodes/s; sequential {:.3} s; efficiency {:.4} ({} events in {:.1} s)",
        t.seconds, nodes_per_s, t.sequential_s, efficiency, f.events, f.wall_s
    );
}
