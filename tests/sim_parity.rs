//! The simulator against the real runtime: the same small DLB_Bench job (4 ranks, in
//! process over `mem`) on both, with the same tasks (pinned calibration) — same task
//! counts, same results (digest of every result in order). Efficiencies are printed, not
//! asserted: timings belong in benchmarks (the real run's efficiency on a shared 2-core
//! machine is partly the scheduler's; under a parallel build it fell to 0.57 where the
//! simulator said 0.996). Also `titus sim`'s interface: its JSON keys and one-line errors.

use std::process::Command;

fn json_lines(out: &std::process::Output, what: &str) -> Vec<serde_json::Value> {
    assert!(
        out.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

const JOB: [&str; 10] = [
    "--ranks",
    "4",
    "--tasks",
    "200",
    "--task-time",
    "0.001",
    "--balancer",
    "none,smallworld",
    "--seed",
    "5",
];

#[test]
fn simulator_and_runtime_agree_on_a_small_job() {
    let real = json_lines(
        &Command::new(titus_tests::bin("dlb-bench"))
            .args(JOB)
            .args(["--json", "--no-progress"])
            .output()
            .unwrap(),
        "dlb-bench",
    );
    assert_eq!(real.len(), 2);
    let calibration = real[0]["calibration_s"].as_f64().unwrap();
    assert!(calibration > 0.0);
    let sim = json_lines(
        &Command::new(titus_tests::bin("titus"))
            .arg("sim")
            .args(JOB)
            .args([
                "--preset",
                "mem",
                "--real-tasks",
                "--calibration",
                &calibration.to_string(),
                "--json",
            ])
            .output()
            .unwrap(),
        "titus sim",
    );
    assert_eq!(sim.len(), 2);
    for (r, s) in real.iter().zip(&sim) {
        for key in [
            "balancer",
            "protocol",
            "ranks",
            "tasks",
            "seed",
            "results_digest",
            "verified",
        ] {
            assert_eq!(r[key], s[key], "{key}: real {r}\nsim {s}");
        }
        let eff = |v: &serde_json::Value| v["efficiency"].as_f64();
        assert!(eff(r).is_some_and(|e| e > 0.0 && e <= 1.0), "real {r}");
        assert!(eff(s).is_some_and(|e| e > 0.0 && e <= 1.0), "sim {s}");
        println!(
            "{}: efficiency real {:.3}, simulated {:.3}",
            r["balancer"],
            eff(r).unwrap_or(0.0),
            eff(s).unwrap_or(0.0)
        );
        for key in ["preset", "sim_events", "events_per_s", "peak_rss_mib"] {
            assert!(s.get(key).is_some(), "{key} missing from {s}");
        }
    }
}

#[test]
fn simulator_and_runtime_agree_on_every_epoch_of_a_time_stepping_job() {
    // Three epochs, the bimodal front moving 10% of the tasks per epoch: the same tasks
    // with the same drifted costs on both, epoch by epoch (same digests of the results).
    let job = [
        "--ranks",
        "3",
        "--tasks",
        "90",
        "--task-time",
        "0.0003",
        "--cost",
        "bimodal",
        "--distribution",
        "uniform",
        "--epochs",
        "3",
        "--drift",
        "0.1",
        "--balancer",
        "smallworld",
        "--seed",
        "3",
    ];
    let real = json_lines(
        &Command::new(titus_tests::bin("dlb-bench"))
            .args(job)
            .args(["--json", "--no-progress"])
            .output()
            .unwrap(),
        "dlb-bench",
    );
    assert_eq!(real.len(), 3);
    let calibration = real[0]["calibration_s"].as_f64().unwrap();
    let sim = json_lines(
        &Command::new(titus_tests::bin("titus"))
            .arg("sim")
            .args(job)
            .args([
                "--preset",
                "mem",
                "--real-tasks",
                "--calibration",
                &calibration.to_string(),
                "--json",
            ])
            .output()
            .unwrap(),
        "titus sim",
    );
    assert_eq!(sim.len(), 3);
    for (e, (r, s)) in real.iter().zip(&sim).enumerate() {
        for key in ["epoch", "tasks", "drift", "results_digest", "verified"] {
            assert_eq!(r[key], s[key], "epoch {e}, {key}: real {r}\nsim {s}");
        }
        assert_eq!(r["epoch"], e as u64);
        println!(
            "epoch {e}: efficiency real {:.3} (nominal {:.3}), simulated {:.3}",
            r["efficiency"].as_f64().unwrap_or(0.0),
            r["nominal_efficiency"].as_f64().unwrap_or(0.0),
            s["efficiency"].as_f64().unwrap_or(0.0)
        );
    }
    // The costs moved, so the results did: three different digests.
    assert_ne!(real[0]["results_digest"], real[1]["results_digest"]);
    assert_ne!(real[1]["results_digest"], real[2]["results_digest"]);
}

#[test]
fn titus_sim_bad_input_is_one_line_and_exit_code_2() {
    for (args, needle) in [
        (&["--preset", "carrier-pigeon"][..], "unknown preset"),
        (&["--real-tasks"][..], "needs --calibration"),
        (&["--slow", "3"][..], "expected RANK:FACTOR"),
        (&["--stall", "1:x:2"][..], "expected RANK:FROM_S:FOR_S"),
        (&["--jitter", "-1"][..], "non-negative"),
        (
            &["--preset-file", "/nonexistent"][..],
            "cannot read --preset-file",
        ),
        (&["--profile", "nope"][..], "unknown --profile"),
        (&["--ranks", "0"][..], "--ranks must be at least 1"),
        (
            &["--repartition", "0"][..],
            "--repartition must be at least 1",
        ),
        // Numbers that used to panic or run away: checked before anything starts.
        (&["--task-time", "1e11"][..], "--task-time 1e11"),
        (&["--stall", "1:0:1e300"][..], "[0, 1e6]"),
        (&["--backoff-max-ms", "1e300"][..], "--backoff-max-ms 1e300"),
        (&["--workers", "100000"][..], "1..=1024"),
        (&["--tasks", "100000000000"][..], "at most 4294967295"),
        (
            &["--ranks", "40000000", "--tasks", "1000"][..],
            "of memory; this process has",
        ),
        (&["--epochs", "0"][..], "--epochs 0: expected 1..=1000000"),
        (&["--drift", "-1"][..], "--drift -1 is not a fraction"),
        (&["--drift", "abc"][..], "--drift"),
        // Plots that could not be written: refused before the runs, not after them.
        (&["--plot", "/dev/null"][..], "is not a directory"),
        (
            &["--plot", "/nonexistent/x"][..],
            "parent directory '/nonexistent' does not exist",
        ),
        (&["--plot", "/proc/x"][..], "cannot write into '/proc'"),
        // The node model: only where a preset has one.
        (
            &["--node-cores", "28"][..],
            "preset ib-hdr has no node model",
        ),
        (
            &["--node-preset", "ib-hdr"][..],
            "--node-preset ib-hdr: it has no",
        ),
        (
            &["--node-preset", "node", "--node-cores", "0"][..],
            "--node-cores 0: expected 1..=65536",
        ),
        (&["--node-model", "maybe"][..], "--node-model"),
        (
            &["--node-ranks", "4"][..],
            "--node-ranks: preset ib-hdr has no node model",
        ),
        (
            &["--preset", "node", "--node-ranks", "0"][..],
            "--node-ranks 0: expected 1..=1048576",
        ),
        (
            &[
                "--preset",
                "node",
                "--node-ranks",
                "4",
                "--ranks-per-node",
                "2",
            ][..],
            "--node-ranks and --ranks-per-node both say which ranks share a node",
        ),
    ] {
        let out = Command::new(titus_tests::bin("titus"))
            .arg("sim")
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(needle) && err.trim_end().lines().count() == 1,
            "{args:?}: {err}"
        );
    }
    // --check runs seeds and says so; the CI test runs 200 (crates/sim).
    let out = Command::new(titus_tests::bin("titus"))
        .args(["sim", "--check", "--seeds", "20", "--seed", "100"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("20 seeds from 100, every invariant held")
    );
}

/// parity-bench's short version (what CI runs): a tiny two-epoch job over the node
/// backend, real processes under `titus launch` against the simulator on the same real
/// tasks — the same rows and the same results' digests (timings only printed). It
/// calibrates this machine first (`--calibrate`, what a parity run on another machine
/// needs) and simulates on that preset. Two real runs (`--repeat 2`): the simulator is
/// compared with their median, on the first run's calibration and results.
#[test]
fn parity_bench_agrees_on_results_over_real_processes() {
    if !titus_tests::libfabric_or_skip() {
        return;
    }
    let scratch = titus_tests::ScratchDir::new("titus-parity");
    let dir = &scratch.0;
    let out = Command::new(titus_tests::bin("parity-bench"))
        .arg("--calibrate")
        .arg(dir)
        .args([
            "--providers",
            "node",
            "--jobs",
            "tiny",
            "--balancer",
            "none,smallworld",
            "--real-tasks",
            "--task-speed",
            "sustained",
            "--repeat",
            "2",
            "--json",
        ])
        .output()
        .unwrap();
    let rows = json_lines(&out, "parity-bench");
    // 2 balancers × 2 epochs, then each balancer's job taken together.
    assert_eq!(rows.len(), 6, "2 balancers × 2 epochs + 2 jobs: {rows:?}");
    let epochs: Vec<_> = rows.iter().filter(|r| r["level"] == "epoch").collect();
    assert_eq!(epochs.len(), 4, "{rows:?}");
    for job in rows.iter().filter(|r| r["level"] == "job") {
        assert_eq!(job["epochs"], 2, "{job}");
        let mine: Vec<_> = epochs.iter().filter(|r| r["run"] == job["run"]).collect();
        assert_eq!(mine.len(), 2, "{job}");
        let sum = |key: &str| mine.iter().map(|r| r[key].as_f64().unwrap()).sum::<f64>();
        // Times summed, on both sides and in each real run.
        assert!((job["resolution_sim_s"].as_f64().unwrap() - sum("resolution_sim_s")).abs() < 1e-9);
        for k in 0..2 {
            let total: f64 = mine
                .iter()
                .map(|r| r["resolution_real_runs_s"][k].as_f64().unwrap())
                .sum();
            assert!((job["resolution_real_runs_s"][k].as_f64().unwrap() - total).abs() < 1e-9);
        }
    }
    for r in &rows {
        assert_eq!(r["digests_agree"], true, "{r}");
        for key in [
            "efficiency_real",
            "efficiency_sim",
            "resolution_real_s",
            "resolution_sim_s",
        ] {
            assert!(r[key].as_f64().is_some_and(|x| x > 0.0), "{key}: {r}");
        }
        // Both real runs' figures; the compared one is their median (of two: the mean).
        let real_runs = |key: &str| -> Vec<f64> {
            r[key]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap())
                .collect()
        };
        let runs = real_runs("efficiency_real_runs");
        assert_eq!(runs.len(), 2, "{r}");
        let median = (runs[0] + runs[1]) / 2.0;
        assert!(
            (r["efficiency_real"].as_f64().unwrap() - median).abs() < 1e-9,
            "{r}"
        );
        assert!(r["real_runs_agree"].is_boolean(), "{r}");
        // The simulated time against the real runs' own range, widened by 5% each way
        // (a job's row: against its runs' totals).
        let times = real_runs("resolution_real_runs_s");
        let (lo, hi) = (times[0].min(times[1]), times[0].max(times[1]));
        let sim = r["resolution_sim_s"].as_f64().unwrap();
        assert_eq!(
            r["time_in_real_spread"],
            sim >= 0.95 * lo && sim <= 1.05 * hi,
            "{r}"
        );
    }
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("digests agree in 4 of 4"), "{err}");
    assert!(err.contains("of the real runs' own range"), "{err}");
    assert!(err.contains("the 2 real runs of a job"), "{err}");
    // Each rank's tasks at the speed they ran in the real `none` run.
    assert!(
        err.contains("tasks at their sustained speed, --slow 0:"),
        "{err}"
    );
    // The simulator ran on this machine's calibration, not the built-in preset.
    let preset: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("node.json")).unwrap()).unwrap();
    let cores = std::thread::available_parallelism().unwrap().get();
    assert_eq!(
        preset["node"]["cores"].as_u64(),
        Some(cores as u64),
        "{preset}"
    );
    assert!(err.contains("calibrated node into"), "{err}");
}

#[test]
fn parity_bench_refuses_unknown_transports_and_jobs() {
    for (args, needle) in [
        (["--providers", "verbs"], "no simulator preset for 'verbs'"),
        (["--jobs", "huge"], "unknown job 'huge'"),
        (
            ["--calibrate", "/proc/x"],
            "--calibrate: cannot create '/proc/x'",
        ),
        (
            ["--worker-grain-us", "2e6"],
            "--worker-grain-us 2000000: expected microseconds",
        ),
    ] {
        let out = Command::new(titus_tests::bin("parity-bench"))
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(needle) && err.trim_end().lines().count() == 1,
            "{err}"
        );
    }
    let out = Command::new(titus_tests::bin("parity-bench"))
        .args(["--balancer", "smallworld", "--task-speed", "sustained"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--task-speed sustained needs none"), "{err}");
}

/// `titus sim --calibrate`: measures this machine over the node backend and writes a
/// preset whose `node` object (this machine's cores, its measured slowdowns) the
/// simulator then applies — and leaves out with `--node-model off`. A provider it does not
/// know is bad input.
#[test]
fn calibrate_writes_a_preset_the_simulator_reads() {
    let scratch = titus_tests::ScratchDir::new("titus-calibrate");
    let dir = &scratch.0;
    std::fs::create_dir_all(dir).unwrap();
    let file = dir.join("node.json");
    let out = Command::new(titus_tests::bin("titus"))
        .args(["sim", "--calibrate", "node", "--out"])
        .arg(&file)
        .output()
        .unwrap();
    let text = titus_tests::output_text(&out);
    assert!(out.status.success(), "{text}");
    let preset: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let node = &preset["node"];
    assert_eq!(node["cores"].as_u64(), Some(cores as u64), "{preset}");
    for k in [
        "busy_slowdown",
        "wake_us",
        "progress_share",
        "op_serve_us",
        "op_issue_us",
        "task_overhead_us",
        "balanced_take_us",
        "foreign_task_us",
        "grain_task_us",
        "byte_ns",
    ] {
        assert!(node[k].as_f64().is_some_and(|x| x >= 0.0), "{k}: {node}");
    }
    // The two real gaps the take terms were fitted to; the node backend's workers serve
    // their node (the simulator charges its byte work between tasks).
    let gaps = node["between_real_us"].as_array().expect("between_real_us");
    assert_eq!(gaps.len(), 2, "{node}");
    assert!(
        gaps.iter().all(|g| g.as_f64().is_some_and(|x| x > 0.0)),
        "{node}"
    );
    assert_eq!(preset["workers_serve"].as_bool(), Some(true), "{preset}");
    assert!(preset["rows"].as_array().is_some_and(|r| !r.is_empty()));
    for (flag, on) in [("on", true), ("off", false)] {
        let sim = json_lines(
            &Command::new(titus_tests::bin("titus"))
                .args(["sim", "--preset-file"])
                .arg(&file)
                .args(["--ranks", "2", "--tasks", "100", "--task-time", "0.001"])
                .args(["--balancer", "smallworld", "--json", "--node-model", flag])
                .output()
                .unwrap(),
            "titus sim --preset-file",
        );
        assert_eq!(sim[0]["node_model"].as_bool(), Some(on), "{}", sim[0]);
    }
    drop(scratch);
    let bad = Command::new(titus_tests::bin("titus"))
        .args(["sim", "--calibrate", "carrier-pigeon"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("expected one of node"));
}

/// The memory check counts the job's cgroup, not only the machine: `titus sim` run in a
/// memory cgroup limited to 1 GiB says 1.0 GiB (this machine has ~23 GiB free). Needs
/// root and a writable memory controller (v1's, or v2's with `memory` enabled for
/// children); elsewhere it says why it checked nothing.
#[test]
fn the_memory_check_counts_the_jobs_cgroup_limit() {
    let name = format!("titus-test-{}", std::process::id());
    let (dir, limit_file) = if std::path::Path::new("/sys/fs/cgroup/memory/cgroup.procs").exists() {
        (
            std::path::PathBuf::from("/sys/fs/cgroup/memory").join(&name),
            "memory.limit_in_bytes",
        )
    } else if std::fs::read_to_string("/sys/fs/cgroup/cgroup.subtree_control")
        .is_ok_and(|s| s.split_whitespace().any(|c| c == "memory"))
    {
        (
            std::path::PathBuf::from("/sys/fs/cgroup").join(&name),
            "memory.max",
        )
    } else {
        eprintln!("skipped: no memory cgroup controller to create a group under");
        return;
    };
    if std::fs::create_dir(&dir).is_err() {
        eprintln!("skipped: cannot create {} (needs root)", dir.display());
        return;
    }
    struct Remove(std::path::PathBuf);
    impl Drop for Remove {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir(&self.0);
        }
    }
    let _remove = Remove(dir.clone());
    std::fs::write(dir.join(limit_file), format!("{}", 1u64 << 30)).unwrap();
    // The shell joins the group, then becomes titus (the group empties when it exits).
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "echo $$ > {}/cgroup.procs && exec {} sim --ranks 40000000 --tasks 1000",
            dir.display(),
            titus_tests::bin("titus").display()
        ))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    let have: f64 = err
        .split("this process has ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|g| g.parse().ok())
        .unwrap_or_else(|| panic!("no figure in: {err}"));
    assert!(
        have <= 1.0,
        "the cgroup allows 1 GiB, the check said {have} GiB: {err}"
    );
}
