//! Hostile input, as a new user would type it: every case of the table ends in one line
//! on stderr that names the input, and exit status 2, before any run starts. (A run that
//! fails for a real reason exits 1, and `titus launch --timeout` 124: their own tests.)

use std::process::Command;
use titus_tests::bin;

/// The table (docs/results.md, "Hostile input", says what it covers): a command line, as
/// a shell would split it (`NAME=value` words first set the environment), and what its
/// one line must say.
const CASES: &[(&str, &str)] = &[
    // Numbers past virtual time's range.
    ("titus sim --ranks 4 --slow 0:1e300", "--slow"),
    (
        "titus sim --ranks 4 --tasks 40 --slow 0:1e6 --task-time 86400",
        "virtual time",
    ),
    (
        "titus sim --ranks 4 --resources ranks=0-3:accel=1:speed=1e-300",
        "speed",
    ),
    (
        "titus sim --ranks 4 --tasks 40 --task-time 86400 --resources ranks=0-3:accel=1:speed=1e-6",
        "virtual time",
    ),
    ("titus sim --ranks 4 --stall 0:1e300:1", "--stall"),
    ("titus sim --ranks 4 --task-time 1e300", "--task-time"),
    // A fault that could never strike.
    (
        "runtime-bench --tasks 5 --kill-rank 1 --kill-after 6",
        "--kill-after 6: the job has 5 tasks",
    ),
    // Sizes that allocate.
    (
        "dlb-bench --ranks 1000 --workers 3 --resources ranks=0-499:accel=1",
        "4500 threads",
    ),
    (
        "titus launch -n 2 --bootstrap 127.0.0.1:0 -- true",
        "--bootstrap",
    ),
    ("titus launch -n 2 --bootstrap :5000 -- true", "--bootstrap"),
    (
        "dlb-bench --ranks 2 --resources ranks=0:accel=1024;ranks=0-1:accel=1",
        "rank 0 would have 1025 accelerators",
    ),
    (
        "titus sim --ranks 5000 --resources ranks=0-4999:accel=1024",
        "at most 4194304",
    ),
    (
        "dlb-bench --ranks 4 --resources ranks=0-3:accel=1024",
        "emulated accelerators",
    ),
    (
        "titus sim --ranks 4294967295 --distribution file --counts /dev/null",
        "simulating 4294967295 ranks",
    ),
    (
        "dlb-bench --ranks 2 --resources ranks=0-1:accel=1000000000",
        "accelerators",
    ),
    ("titus launch -n 4294967295 -- true", "-n 4294967295"),
    ("titus sim --ranks 4 --epochs 4294967295", "--epochs"),
    ("dlb-bench --epochs 4294967295", "--epochs"),
    // UTS trees that are none of the benchmark's, and sizes past their bounds.
    ("uts-bench -q 1.5", "-q 1.5"),
    ("uts-bench -m 101", "-m 101"),
    ("uts-bench -t 3", "-t"),
    ("uts-bench --frontier 16777217", "--frontier 16777217"),
    ("uts-bench --ranks 100000", "--ranks 100000"),
    ("uts-bench --chunk 0", "--chunk 0"),
    ("uts-bench --mode dynamic", "--mode"),
    ("uts-bench --results nowhere", "--results"),
    (
        "titus sim --uts -t=1 --uts-results nowhere",
        "--uts-results",
    ),
    ("titus sim --uts -q=1.5", "-q 1.5"),
    ("titus sim --uts -t=7", "-t"),
    ("titus sim --uts -t=1 --uts-chunk 0", "--uts-chunk 0"),
    (
        "dlb-bench --ranks 4294967295",
        "--ranks 4294967295: at most 2048",
    ),
    ("dlb-bench --payload 4294967296", "--payload"),
    ("dlb-bench --workers 1000000", "--workers"),
    ("dlb-bench --shortcuts 4294967295", "--shortcuts"),
    (
        "titus overlay --ranks 10 --shortcuts 99999999",
        "--shortcuts",
    ),
    ("runtime-bench --ranks 100000", "--ranks"),
    (
        "titus overlay --lattice torus3 --ranks 1073741824 --reach 65536",
        "GiB of memory",
    ),
    (
        "titus sim --ranks 100000 --shortcuts 65536",
        "GiB of memory",
    ),
    ("overlay-bench --scale-ranks 0", "--scale-ranks 0"),
    ("overlay-bench --scale-ranks 1073741825", "--scale-ranks"),
    ("overlay-bench --scale-ranks 1073741824", "GiB of memory"),
    ("titus fabric-bench --iters 10000001", "--iters 10000001"),
    ("runtime-bench --tasks 4294967295", "GiB of memory"),
    ("bootstrap-bench --blob 67108865", "--blob 67108865"),
    // Runs that would never end, or check nothing.
    ("titus sim --check --seeds 4294967296", "--seeds"),
    ("titus sim --check --seeds 0", "--seeds"),
    (
        "titus sim --check --seed 18446744073709551615 --seeds 2",
        "--seeds 2",
    ),
    ("runtime-bench --epoch-nap-us 1000001", "--epoch-nap-us"),
    (
        "titus overlay --reach 65537",
        "--reach 65537: expected 1..=65536",
    ),
    (
        "titus overlay --threads 1025",
        "--threads 1025: expected 1..=1024",
    ),
    ("titus overlay --pairs 1000000001", "--pairs 1000000001"),
    // Sweep points get the checks of the flags they replace, before any run.
    (
        "titus sim --ranks 4 --tasks 40 --sweep workers=1,5000",
        "--workers must be in 1..=1024 (got 5000)",
    ),
    (
        "titus sim --ranks 4 --tasks 40 --sweep workers=0",
        "--workers must be in 1..=1024 (got 0)",
    ),
    // Values accepted silently before.
    (
        "titus overlay --lattice torus3 --ranks 8 --shape 3340214413x2761311370x4",
        "does not hold 8 ranks",
    ),
    ("parity-bench --ranks 2,0", "--ranks 0: expected 1..=65536"),
    ("parity-bench --ranks 70000", "--ranks 70000"),
    (
        "parity-bench --balancer none,smallwrld",
        "--balancer 'smallwrld'",
    ),
    (
        "TITUS_RANK=0 TITUS_SIZE=1 dlb-bench --ranks 4 --tasks 10",
        "--ranks 4, but the launcher started 1 rank (drop --ranks",
    ),
    (
        "TITUS_RANK=0 TITUS_SIZE=1 runtime-bench --ranks 2 --tasks 10",
        "--ranks 2, but the launcher started 1 rank (drop --ranks",
    ),
    (
        "TITUS_LOCAL_SIZE=abc dlb-bench --ranks 1 --tasks 10",
        "TITUS_LOCAL_SIZE",
    ),
    (
        "dlb-bench --resources ranks=0-1:accel=1:capacity=4294967295",
        "capacity",
    ),
    ("titus sim --ranks 4 --slow 99:2", "rank 99"),
    ("runtime-bench --ranks 1 --kill-rank 5", "--kill-rank"),
    (
        "runtime-bench --kill-rank 1 --freeze-rank 1",
        "name the same rank",
    ),
    (
        "dlb-bench --tasks 40 --group-size 99 --balancer hierarchical",
        "group size 99",
    ),
    // The environment.
    ("TITUS_RANK=0 dlb-bench --tasks 10", "TITUS_SIZE"),
    ("TITUS_RANK=5 TITUS_SIZE=2 dlb-bench --tasks 10", "rank 5"),
    ("TITUS_LOG=[[[ dlb-bench --tasks 10", "TITUS_LOG"),
    (
        "TITUS_LOG=verbose dlb-bench --ranks 1 --tasks 4",
        "TITUS_LOG='verbose': 'verbose' is neither a level",
    ),
    (
        "TITUS_LOG=verbose runtime-bench --ranks 1 --tasks 4",
        "TITUS_LOG='verbose'",
    ),
    (
        "TITUS_BOOTSTRAP_TIMEOUT=1e300 TITUS_RANK=0 TITUS_SIZE=2 TITUS_BOOTSTRAP=127.0.0.1:1 TITUS_JOB_SECRET=s dlb-bench --tasks 10",
        "TITUS_BOOTSTRAP_TIMEOUT",
    ),
    (
        "TITUS_RANK=0 TITUS_SIZE=2 TITUS_BOOTSTRAP=127.0.0.1:0 TITUS_JOB_SECRET=s dlb-bench --tasks 10",
        "TITUS_BOOTSTRAP='127.0.0.1:0'",
    ),
    (
        "TITUS_RANK=0 TITUS_SIZE=2 TITUS_BOOTSTRAP=:4000 TITUS_JOB_SECRET=s dlb-bench --tasks 10",
        "TITUS_BOOTSTRAP=':4000'",
    ),
    (
        "SLURM_PROCID=0 SLURM_NTASKS=2 SLURM_JOB_ID=7 SLURM_STEP_ID=x SLURM_JOB_NODELIST=n1 dlb-bench --tasks 10",
        "SLURM_STEP_ID='x'",
    ),
    // Command lines clap refuses, in one line too.
    ("runtime-bench --tasks 18446744073709551616", "--tasks"),
    ("parity-bench --bogus", "--bogus"),
    ("dlb-bench --seed -1", "--seed"),
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
    let preset_case = format!("titus sim --ranks 4 --preset-file {}", preset.display());
    // A job one rank past the overlay's bound, which the bootstrap bounds at its own copy.
    let max = titus_overlay::MAX_RANKS;
    let size_case = format!("TITUS_RANK=0 TITUS_SIZE={} dlb-bench --tasks 10", max + 1);
    let size_says = format!("TITUS_SIZE='{}': more than the {max} ranks", max + 1);
    let cases = CASES.iter().copied().chain([
        (preset_case.as_str(), "p50_us"),
        (size_case.as_str(), size_says.as_str()),
    ]);
    let mut failures = Vec::new();
    for (line, says) in cases {
        let words: Vec<&str> = line.split_whitespace().collect();
        let set = words
            .iter()
            .take_while(|w| w.starts_with(|c: char| c.is_ascii_uppercase()) && w.contains('='))
            .count();
        let (env, command) = words.split_at(set);
        let mut cmd = Command::new(bin(command[0]));
        cmd.args(&command[1..]).current_dir(&dir);
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
        cmd.envs(env.iter().filter_map(|w| w.split_once('=')));
        let out = cmd.output().expect("run the program");
        let err = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
        if out.status.code() != Some(2) || lines.len() != 1 || !lines[0].contains(says) {
            failures.push(format!(
                "{line}: exit {:?}, stderr {err:?}",
                out.status.code()
            ));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A variable of `titus launch` that is not UTF-8 is refused naming it, not taken for
/// unset (which made `TITUS_RANK` alone a single rank, or the timeout its default).
#[test]
fn a_titus_variable_that_is_not_utf8_is_refused() {
    use std::os::unix::ffi::OsStrExt;
    let not_text = std::ffi::OsStr::from_bytes(b"2\xff");
    let mut failures = Vec::new();
    for (var, others) in [
        ("TITUS_SIZE", &[("TITUS_RANK", "0")][..]),
        ("TITUS_BOOTSTRAP_TIMEOUT", &[]),
        ("TITUS_LOCAL_SIZE", &[]),
    ] {
        let mut cmd = Command::new(bin("dlb-bench"));
        cmd.args(["--tasks", "10"])
            .current_dir(std::env::temp_dir());
        for v in [
            "TITUS_RANK",
            "TITUS_SIZE",
            "TITUS_BOOTSTRAP",
            "TITUS_LAUNCHER",
        ] {
            cmd.env_remove(v);
        }
        cmd.envs(others.iter().copied()).env(var, not_text);
        let out = cmd.output().expect("run dlb-bench");
        let err = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
        if out.status.code() != Some(2)
            || lines.len() != 1
            || !lines[0].contains(var)
            || !lines[0].contains("UTF-8")
        {
            failures.push(format!(
                "{var}: exit {:?}, stderr {err:?}",
                out.status.code()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
