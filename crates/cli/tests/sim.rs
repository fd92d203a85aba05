//! `titus sim` with time steps: a row per epoch and run, every epoch checked by the
//! simulator, the report's keys, and bad input.

use std::process::{Command, Output};

fn titus(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_titus"))
        .args(args)
        .output()
        .expect("run titus")
}

fn rows(out: &Output) -> Vec<serde_json::Value> {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn epochs_give_a_row_each_with_nominal_efficiency_and_speedup() {
    let out = titus(&[
        "sim",
        "--ranks",
        "16",
        "--tasks",
        "1600",
        "--task-time",
        "0.0001",
        "--cost",
        "bimodal",
        "--distribution",
        "uniform",
        "--epochs",
        "3",
        "--drift",
        "0.05",
        "--balancer",
        "smallworld,none",
        "--json",
    ]);
    let rows = rows(&out);
    assert_eq!(rows.len(), 6, "3 epochs x 2 runs");
    for (i, r) in rows.iter().enumerate() {
        // `none` first: the other run's speed-up is over it, epoch by epoch.
        let balancer = ["none", "smallworld"][i / 3];
        assert_eq!(r["balancer"], balancer);
        assert_eq!(r["epoch"], (i % 3) as u64);
        assert_eq!(r["verified"], true);
        assert_eq!(r["diffusion"], true);
        for key in ["preset", "sim_events", "tasks_stolen", "bytes_moved"] {
            assert!(r.get(key).is_some(), "{key} missing: {r}");
        }
        // The epoch start, simulated: some time, bytes, messages and rounds in every
        // epoch, the time inside the resolution.
        let start = r["start_s"].as_f64().expect("start_s");
        assert!(
            start > 0.0 && start < r["resolution_s"].as_f64().unwrap(),
            "{r}"
        );
        for key in ["start_bytes", "start_messages", "start_rounds"] {
            assert!(r[key].as_u64().is_some_and(|v| v > 0), "{key}: {r}");
        }
        // A simulated task runs for its drawn cost: both efficiencies are one figure.
        let (e, n) = (
            r["efficiency"].as_f64().unwrap(),
            r["nominal_efficiency"].as_f64().unwrap(),
        );
        assert!(e > 0.0 && (e - n).abs() < 1e-6, "{r}");
        if balancer == "none" {
            assert!(r["speedup"].is_null());
        } else {
            let want =
                rows[i - 3]["resolution_s"].as_f64().unwrap() / r["resolution_s"].as_f64().unwrap();
            assert!((r["speedup"].as_f64().unwrap() - want).abs() < 1e-9);
            // The front sits on 1.6 of 16 ranks: stealing beats no balancing every epoch.
            assert!(want > 2.0, "speed-up {want}: {r}");
        }
    }
    // The front moved: epoch 1's owned work is not epoch 0's.
    assert_ne!(rows[0]["owned_s"], rows[1]["owned_s"]);
}

/// The string plan on a gaussian pile: one epoch's prediction spreads the pile (pushes
/// reach ranks that are not neighbours), so stealing has far less to do than after the
/// neighbours' single hop; the rows name their plan.
#[test]
fn the_string_plan_spreads_a_pile_that_neighbours_cannot() {
    let out = titus(&[
        "sim",
        "--ranks",
        "128",
        "--tasks",
        "12800",
        "--task-time",
        "0.001",
        "--distribution",
        "gaussian",
        "--epochs",
        "3",
        "--balancer",
        "smallworld",
        "--protocol",
        "request",
        "--diffusion-plan",
        "neighbours,string",
        "--json",
    ]);
    let rows = rows(&out);
    assert_eq!(rows.len(), 6, "3 epochs x 2 plans");
    let steals = |r: &serde_json::Value| r["steals_ok"].as_u64().unwrap();
    // The last epoch: the first plan's searches paid their first contacts (each giver
    // reads its receivers' records; ib-hdr's 1 ms a connection), the next reuse them.
    let (nb, st) = (&rows[2], &rows[5]);
    assert_eq!(nb["diffusion_plan"], "neighbours");
    assert_eq!(st["diffusion_plan"], "string");
    assert!(st["verified"] == true && st["tasks_pushed"].as_u64().unwrap() > 0);
    // (Measured: 0 against 1,496; 0.998 against 0.989.)
    assert!(
        steals(st) * 5 < steals(nb),
        "string {} steals against neighbours' {}",
        steals(st),
        steals(nb)
    );
    let e = st["efficiency"].as_f64().unwrap();
    assert!(e > nb["efficiency"].as_f64().unwrap(), "{st}");
}

/// The job's front: a bimodal band moving 640 keys an epoch across a gaussian pile of
/// 128 ranks (each owns at most ~270 keys, so no rank sees the band move inside its own
/// keys). From the costs of the two epochs before, every rank sees the band's shift and
/// predicts its load and its tasks' costs where the band goes; the string plan pushes
/// there, and stealing has a fraction left to do.
#[test]
fn the_job_front_follows_a_band_across_ranks() {
    let out = titus(&[
        "sim",
        "--ranks",
        "128",
        "--tasks",
        "12800",
        "--task-time",
        "0.001",
        "--distribution",
        "gaussian",
        "--cost",
        "bimodal",
        "--epochs",
        "4",
        "--drift",
        "0.05",
        "--balancer",
        "smallworld",
        "--protocol",
        "request",
        "--diffusion-plan",
        "string",
        "--diffusion",
        "on,off",
        "--json",
    ]);
    let rows = rows(&out);
    assert_eq!(rows.len(), 8, "4 epochs x diffusion on, off");
    let (on, off) = (&rows[3], &rows[7]);
    assert_eq!(
        (on["diffusion"].as_bool(), off["diffusion"].as_bool()),
        (Some(true), Some(false))
    );
    assert_eq!(on["epoch"], 3);
    assert!(on["verified"] == true && off["verified"] == true);
    let steals = |r: &serde_json::Value| r["steals_ok"].as_u64().unwrap();
    // Measured: 699 against 5,902 (each rank predicting alone: 2,664).
    assert!(
        steals(on) * 3 < steals(off),
        "epoch 3: {} steals with diffusion, {} without",
        steals(on),
        steals(off)
    );
    let e = |r: &serde_json::Value| r["efficiency"].as_f64().unwrap();
    assert!(e(on) > e(off), "{on}\n{off}");
}

#[test]
fn a_slow_rank_lowers_the_nominal_efficiency_only() {
    // Rank 0's tasks take 3× their drawn cost: its busy time counts in the efficiency,
    // not in the nominal one.
    let out = titus(&[
        "sim",
        "--ranks",
        "4",
        "--tasks",
        "400",
        "--task-time",
        "0.0001",
        "--distribution",
        "uniform",
        "--balancer",
        "none",
        "--slow",
        "0:3",
        "--json",
    ]);
    let r = &rows(&out)[0];
    let (e, n) = (
        r["efficiency"].as_f64().unwrap(),
        r["nominal_efficiency"].as_f64().unwrap(),
    );
    assert!(n < 0.9 * e, "efficiency {e}, nominal {n}");
}

#[test]
fn repartitioning_moves_ownership_between_epochs() {
    // Gaussian ownership (every task on the middle ranks), no balancing, the plan applied
    // after every epoch: every epoch verifies, the same tasks run, and the largest owned
    // work shrinks epoch by epoch (the simulator is deterministic).
    let args = |k: Option<&'static str>| {
        let mut a = vec![
            "sim",
            "--ranks",
            "16",
            "--tasks",
            "1600",
            "--task-time",
            "0.0001",
            "--cost",
            "bimodal",
            "--distribution",
            "gaussian",
            "--balancer",
            "none",
            "--epochs",
            "5",
            "--drift",
            "0.02",
            "--json",
        ];
        if let Some(k) = k {
            a.extend(["--repartition", k]);
        }
        a
    };
    let largest = |r: &serde_json::Value| {
        r["owned_s"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .fold(0.0, f64::max)
    };
    let moved = rows(&titus(&args(Some("1"))));
    let fixed = rows(&titus(&args(None)));
    assert_eq!(moved.len(), 5);
    for (e, (m, f)) in moved.iter().zip(&fixed).enumerate() {
        assert_eq!(m["epoch"], e as u64);
        assert_eq!(m["verified"], true, "{m}");
        assert_eq!(
            (m["repartition"].as_u64(), f["repartition"].as_u64()),
            (Some(1), Some(0))
        );
        assert_eq!(m["tasks"], f["tasks"]);
        let total = |r: &serde_json::Value| -> f64 {
            r["owned_s"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap())
                .sum()
        };
        assert!(
            (total(m) - total(f)).abs() < 1e-9,
            "epoch {e}: the same work"
        );
        if e == 0 {
            assert_eq!(
                m["owned_s"], f["owned_s"],
                "no plan before the first epoch ends"
            );
        } else {
            assert!(largest(m) < largest(&moved[e - 1]), "epoch {e}: {m}");
            assert!(
                m["efficiency"].as_f64() > f["efficiency"].as_f64(),
                "epoch {e}"
            );
        }
    }
    // With one epoch there is nothing to repartition (as dlb-bench): the plain run.
    let one = |k: Option<&'static str>| {
        let mut a = args(k);
        let i = a.iter().position(|&x| x == "5").unwrap();
        a[i] = "1";
        rows(&titus(&a))
    };
    let (a, b) = (one(Some("1")), one(None));
    assert_eq!(
        (a.len(), a[0]["owned_s"].clone()),
        (1, b[0]["owned_s"].clone())
    );
    assert_eq!(a[0]["sim_events"], b[0]["sim_events"]);
}

#[test]
fn bad_epochs_and_drift_are_one_line_and_exit_code_2() {
    for (args, needle) in [
        (&["--epochs", "0"][..], "--epochs 0: expected 1..=1000000"),
        (&["--epochs", "-2"][..], "--epochs"),
        (&["--drift", "-1"][..], "--drift -1 is not a fraction"),
        (&["--drift", "abc"][..], "--drift"),
        (&["--drift", "NaN"][..], "--drift NaN is not a fraction"),
        (&["--diffusion", "sometimes"][..], "--diffusion"),
        (&["--cost-aware", "maybe"][..], "--cost-aware"),
        (&["--priorities", "2"][..], "--priorities"),
        (&["--advertise", "yes"][..], "--advertise"),
        (
            &["--repartition", "0"][..],
            "--repartition must be at least 1",
        ),
        (&["--worker-grain-us", "-1"][..], "--worker-grain-us -1"),
        (&["--worker-grain-us", "inf"][..], "--worker-grain-us inf"),
        // Resource descriptions: a missing rank, a speed ≤ 0, no capacity.
        (
            &["--ranks", "4", "--resources", "ranks=0-4:accel=1"][..],
            "names rank 4, but the job has 4 ranks",
        ),
        (
            &["--resources", "ranks=0:accel=1:speed=-2"][..],
            "has speed -2",
        ),
        (
            &["--resources", "ranks=0:accel=1:capacity=0"][..],
            "has capacity 0",
        ),
        // Sizes that allocated, or a speed that left virtual time's range.
        (
            &["--ranks", "2", "--resources", "ranks=0-1:accel=1000000000"][..],
            "accel=1000000000: at most 1024 accelerators a rank",
        ),
        (
            &["--resources", "ranks=0:accel=1:capacity=4294967295"][..],
            "has capacity 4294967295 (at most 1048576 tasks at once)",
        ),
        (
            &["--resources", "ranks=0:accel=1:capacity=2000000"][..],
            "has capacity 2000000 (at most 1048576",
        ),
        (
            &["--resources", "ranks=0:accel=1:speed=1e-300"][..],
            "has speed 1e-300 (must be in [1e-6, 1e6])",
        ),
        // Fault flags naming a rank the job lacks, numbers past virtual time's range, and
        // checks that would check nothing or never end.
        (
            &["--ranks", "4", "--slow", "99:2"][..],
            "--slow names rank 99, but the job has 4 ranks",
        ),
        (
            &["--ranks", "4", "--stall", "4:0:1"][..],
            "--stall names rank 4, but the job has 4 ranks",
        ),
        (
            &["--ranks", "4", "--slow", "0:1e300"][..],
            "FACTOR must be a number in (0, 1e6]",
        ),
        (&["--check", "--seeds", "0"][..], "--seeds 0: expected 1..="),
        (
            &["--check", "--seeds", "4294967296"][..],
            "--seeds 4294967296: expected 1..=1000000",
        ),
    ] {
        let mut all = vec!["sim"];
        all.extend_from_slice(args);
        let out = titus(&all);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(needle) && err.trim_end().lines().count() == 1,
            "{args:?}: {err}"
        );
    }
}

/// Each mechanism switch takes a list, like `--diffusion on,off`: every value of every
/// list, combined, gives a row per balancer beside the others; `none` runs once.
#[test]
fn switch_lists_run_each_value_side_by_side() {
    let job = |more: &[&str]| {
        let mut a = vec!["sim", "--ranks", "16", "--tasks", "800"];
        a.extend_from_slice(more);
        titus(&a)
    };
    let out = job(&[
        "--task-time",
        "0.0001",
        "--cost",
        "bimodal",
        "--balancer",
        "none,smallworld",
        "--advertise",
        "on,off",
        "--priorities",
        "off,on,off",
        "--json",
    ]);
    let rows = rows(&out);
    let seen: Vec<(String, bool, bool, bool)> = rows
        .iter()
        .map(|r| {
            (
                r["balancer"].as_str().unwrap().to_string(),
                r["advertise"].as_bool().unwrap(),
                r["priorities"].as_bool().unwrap(),
                r["cost_aware"].as_bool().unwrap(),
            )
        })
        .collect();
    let sw = |a, p| ("smallworld".to_string(), a, p, true);
    assert_eq!(
        seen,
        [
            ("none".to_string(), true, false, true),
            sw(true, false),
            sw(true, true),
            sw(false, false),
            sw(false, true),
        ],
        "{rows:?}"
    );
    assert!(rows.iter().all(|r| r["verified"] == true));
    // The table names each row by its switches.
    let out = job(&["--balancer", "smallworld", "--cost-aware", "on,off"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("smallworld/claim/cost-aware-on")
            && text.contains("smallworld/claim/cost-aware-off"),
        "{text}"
    );
}

/// `--shortcuts K` sets the smallworld overlay's shortcuts per rank: fewer bound the
/// peers every rank talks to; a negative count is refused.
#[test]
fn shortcuts_bound_the_peers() {
    let peers = |k: &str| {
        let out = titus(&[
            "sim",
            "--ranks",
            "256",
            "--balancer",
            "smallworld",
            "--shortcuts",
            k,
            "--json",
        ]);
        let r = &rows(&out)[0];
        assert_eq!(r["verified"], true);
        r["peers_max"].as_u64().unwrap()
    };
    let (few, many) = (peers("3"), peers("30"));
    // Out: 2 ring neighbours + 3 shortcuts; in: as many on average; and the epoch
    // start's partners, 2^i either side (16 at 256 ranks).
    assert!(
        few < many && few <= 24 + 16,
        "3 shortcuts: {few} peers, 30: {many}"
    );
    let out = titus(&["sim", "--shortcuts", "-1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--shortcuts"));
}

/// `--shortcut-draw paired` makes the smallworld overlay's shortcuts edges both ways: a
/// rank's peers are at most 2 ring neighbours, k shortcuts and its termination-tree
/// relatives; the JSON names the draw.
#[test]
fn paired_shortcuts_bound_every_ranks_peers() {
    let run = |draw: &str| {
        let out = titus(&[
            "sim",
            "--ranks",
            "512",
            "--balancer",
            "smallworld",
            "--shortcuts",
            "8",
            "--shortcut-draw",
            draw,
            "--json",
        ]);
        let r = rows(&out)[0].clone();
        assert_eq!(r["verified"], true);
        assert_eq!(r["shortcut_draw"], draw);
        r["peers_max"].as_u64().unwrap()
    };
    let (kleinberg, paired) = (run("kleinberg"), run("paired"));
    // Paired: 2 + 8 overlay peers, at most 3 of the termination tree, and the epoch
    // start's partners, 2^i either side (18 at 512 ranks, the tree's among them).
    assert!(paired <= 13 + 18, "paired: {paired} peers");
    assert!(paired < kleinberg, "paired {paired}, kleinberg {kleinberg}");
    let out = titus(&["sim", "--shortcut-draw", "none"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--shortcut-draw"));
}

/// `--worker-grain-us` sets the simulated workers' grain (the JSON says which ran; the
/// default is the runtime's, 25 µs per worker): grains of one task against 200 µs change
/// the run, never its results.
#[test]
fn the_worker_grain_is_a_flag_and_the_report_names_it() {
    let run = |more: &[&str]| {
        let mut a = vec![
            "sim",
            "--profile",
            "chem",
            "--ranks",
            "2",
            "--epochs",
            "3",
            "--preset",
            "tcp-loopback",
            "--json",
        ];
        a.extend_from_slice(more);
        rows(&titus(&a))
    };
    let (default, one, wide) = (
        run(&[]),
        run(&["--worker-grain-us", "0"]),
        run(&["--worker-grain-us", "200"]),
    );
    for (rows, grain) in [(&default, 25.0), (&one, 0.0), (&wide, 200.0)] {
        for r in rows {
            assert_eq!(r["worker_grain_us"], grain, "{r}");
            assert_eq!(r["verified"], true, "{r}");
            assert_eq!(r["results_digest"], default[0]["results_digest"], "{r}");
        }
    }
    assert_ne!(
        (&one[2]["efficiency"], &one[2]["steals_ok"]),
        (&wide[2]["efficiency"], &wide[2]["steals_ok"]),
        "a grain of one task and of 200 µs ran alike"
    );
}

/// Each rank's progress CPU in the report: the node model's (its share of a core over the
/// rank's session, and its cost per operation), where the preset has one; none without.
#[test]
fn the_progress_cpu_is_the_node_model_s_share() {
    let run = |model: &str| {
        let out = titus(&[
            "sim",
            "--ranks",
            "2",
            "--preset",
            "tcp-loopback",
            "--node-model",
            model,
            "--tasks",
            "400",
            "--task-time",
            "0.0001",
            "--json",
        ]);
        let r = rows(&out).remove(0);
        let per_rank = |key: &str| -> Vec<f64> {
            r[key]
                .as_array()
                .unwrap_or_else(|| panic!("{key}: {r}"))
                .iter()
                .map(|v| v.as_f64().unwrap())
                .collect()
        };
        let ops = r["ops"].as_array().map_or(0, Vec::len);
        (
            per_rank("progress_cpu_s"),
            r["resolution_s"].as_f64().unwrap(),
            ops,
            per_rank("between_tasks_us"),
        )
    };
    let (cpu, res, ops, between) = run("on");
    assert_eq!((cpu.len(), ops), (2, 2));
    // The preset's time around each task, between tasks run back to back (the rank's
    // CPU for what its node did meanwhile on top).
    let around = titus_sim::Model::preset("tcp-loopback")
        .unwrap()
        .cpu
        .unwrap()
        .task_overhead_ns
        * 1e-3;
    assert!(
        between.iter().all(|&b| b >= around * 0.999 && b < 1000.0),
        "{between:?} µs, the preset's {around} µs"
    );
    // Some of a core (the preset's measured share and its operations' cost), never more
    // than the session.
    assert!(
        cpu.iter().all(|&c| c > 0.0 && c < res),
        "{cpu:?} of {res} s"
    );
    let (cpu, _, _, between) = run("off");
    assert_eq!(cpu, [0.0, 0.0]);
    assert_eq!(between, [0.0, 0.0]);
}
