//! Hostile input, as a new user would type it: every case of the table ends in one line
//! on stderr that names the input, and exit status 2, before any run starts. (A run that
//! fails for a real reason exits 1, and `titus launch --timeout` 124: their own tests.)

use std::process::Command;
use titus_tests::bin;

/// One case: environment variables, the program, its arguments, and what the line says.
struct Case {
    env: &'static [(&'static str, &'static str)],
    program: &'static str,
    args: &'static [&'static str],
    says: &'static str,
}

const fn case(
    env: &'static [(&'static str, &'static str)],
    program: &'static str,
    args: &'static [&'static str],
    says: &'static str,
) -> Case {
    Case {
        env,
        program,
        args,
        says,
    }
}

/// The table (docs/results.md lists where each case came from).
const CASES: &[Case] = &[
    // Numbers past virtual time's range.
    case(
        &[],
        "titus",
        &["sim", "--ranks", "4", "--slow", "0:1e300"],
        "--slow",
    ),
    case(
        &[],
        "titus",
        &[
            "sim",
            "--ranks",
            "4",
            "--tasks",
            "40",
            "--slow",
            "0:1e6",
            "--task-time",
            "86400",
        ],
        "virtual time",
    ),
    case(
        &[],
        "titus",
        &[
            "sim",
            "--ranks",
            "4",
            "--resources",
            "ranks=0-3:accel=1:speed=1e-300",
        ],
        "speed",
    ),
    case(
        &[],
        "titus",
        &[
            "sim",
            "--ranks",
            "4",
            "--tasks",
            "40",
            "--task-time",
            "86400",
            "--resources",
            "ranks=0-3:accel=1:speed=1e-6",
        ],
        "virtual time",
    ),
    case(
        &[],
        "titus",
        &["sim", "--ranks", "4", "--stall", "0:1e300:1"],
        "--stall",
    ),
    case(
        &[],
        "titus",
        &["sim", "--ranks", "4", "--task-time", "1e300"],
        "--task-time",
    ),
    // Sizes that allocate.
    case(
        &[],
        "dlb-bench",
        &["--ranks", "2", "--resources", "ranks=0-1:accel=1000000000"],
        "accelerators",
    ),
    case(
        &[],
        "titus",
        &["launch", "-n", "4294967295", "--", "true"],
        "-n 4294967295",
    ),
    case(
        &[],
        "titus",
        &["sim", "--ranks", "4", "--epochs", "4294967295"],
        "--epochs",
    ),
    case(&[], "dlb-bench", &["--epochs", "4294967295"], "--epochs"),
    case(&[], "dlb-bench", &["--ranks", "4294967295"], "tasks"),
    case(&[], "dlb-bench", &["--payload", "4294967296"], "--payload"),
    case(&[], "dlb-bench", &["--workers", "1000000"], "--workers"),
    case(
        &[],
        "dlb-bench",
        &["--shortcuts", "4294967295"],
        "--shortcuts",
    ),
    case(
        &[],
        "titus",
        &["overlay", "--ranks", "10", "--shortcuts", "99999999"],
        "--shortcuts",
    ),
    case(&[], "runtime-bench", &["--ranks", "100000"], "--ranks"),
    case(
        &[],
        "titus",
        &["sim", "--ranks", "100000", "--shortcuts", "65536"],
        "GiB of memory",
    ),
    // Runs that would never end, or check nothing.
    case(
        &[],
        "titus",
        &["sim", "--check", "--seeds", "4294967296"],
        "--seeds",
    ),
    case(&[], "titus", &["sim", "--check", "--seeds", "0"], "--seeds"),
    // Values accepted silently before.
    case(
        &[("TITUS_LOCAL_SIZE", "abc")],
        "dlb-bench",
        &["--ranks", "1", "--tasks", "10"],
        "TITUS_LOCAL_SIZE",
    ),
    case(
        &[],
        "dlb-bench",
        &["--resources", "ranks=0-1:accel=1:capacity=4294967295"],
        "capacity",
    ),
    case(
        &[],
        "titus",
        &["sim", "--ranks", "4", "--slow", "99:2"],
        "rank 99",
    ),
    case(
        &[],
        "runtime-bench",
        &["--ranks", "1", "--kill-rank", "5"],
        "--kill-rank",
    ),
    case(
        &[],
        "dlb-bench",
        &[
            "--tasks",
            "40",
            "--group-size",
            "99",
            "--balancer",
            "hierarchical",
        ],
        "group size 99",
    ),
    // The environment.
    case(
        &[("TITUS_RANK", "0")],
        "dlb-bench",
        &["--tasks", "10"],
        "TITUS_SIZE",
    ),
    case(
        &[("TITUS_RANK", "5"), ("TITUS_SIZE", "2")],
        "dlb-bench",
        &["--tasks", "10"],
        "rank 5",
    ),
    case(
        &[("TITUS_LOG", "[[[")],
        "dlb-bench",
        &["--tasks", "10"],
        "TITUS_LOG",
    ),
    case(
        &[
            ("TITUS_BOOTSTRAP_TIMEOUT", "1e300"),
            ("TITUS_RANK", "0"),
            ("TITUS_SIZE", "2"),
            ("TITUS_BOOTSTRAP", "127.0.0.1:1"),
            ("TITUS_JOB_SECRET", "s"),
        ],
        "dlb-bench",
        &["--tasks", "10"],
        "TITUS_BOOTSTRAP_TIMEOUT",
    ),
    // Command lines clap refuses, in one line too.
    case(
        &[],
        "runtime-bench",
        &["--tasks", "18446744073709551616"],
        "--tasks",
    ),
    case(&[], "parity-bench", &["--bogus"], "--bogus"),
    case(&[], "dlb-bench", &["--seed", "-1"], "--seed"),
];

#[test]
fn every_hostile_input_ends_in_one_line_and_exit_2() {
    let dir = std::env::temp_dir().join(format!("titus-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // A preset whose latencies are past any fabric's.
    let preset = dir.join("slow-preset.json");
    let shipped: serde_json::Value =
        serde_json::from_str(include_str!("../crates/sim/presets/tcp-loopback.json")).unwrap();
    let mut huge = shipped.clone();
    for row in huge["rows"].as_array_mut().unwrap() {
        row["p50_us"] = 1e300.into();
    }
    std::fs::write(&preset, huge.to_string()).unwrap();
    let preset_arg = preset.display().to_string();
    let file_case = Case {
        env: &[],
        program: "titus",
        args: &[],
        says: "p50_us",
    };
    let mut failures = Vec::new();
    let mut run = |c: &Case, extra: &[&str]| {
        let mut cmd = Command::new(bin(c.program));
        cmd.args(c.args).args(extra).current_dir(&dir);
        // The ranks' own variables would turn a case into a launched rank.
        for v in [
            "TITUS_RANK",
            "TITUS_SIZE",
            "TITUS_BOOTSTRAP",
            "TITUS_LAUNCHER",
            "TITUS_OPTIONS",
        ] {
            cmd.env_remove(v);
        }
        cmd.envs(c.env.iter().copied());
        let out = cmd.output().expect("run the program");
        let err = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
        let line = lines.first().copied().unwrap_or("");
        if out.status.code() != Some(2) || lines.len() != 1 || !line.contains(c.says) {
            failures.push(format!(
                "{:?} {} {} {}: exit {:?}, stderr {err:?}",
                c.env,
                c.program,
                c.args.join(" "),
                extra.join(" "),
                out.status.code()
            ));
        }
    };
    for c in CASES {
        run(c, &[]);
    }
    run(
        &file_case,
        &["sim", "--ranks", "4", "--preset-file", &preset_arg],
    );
    let _ = std::fs::remove_dir_all(&dir);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
