//! `titus launch`: environment, output prefixes, failure propagation.

use std::process::Command;
use std::time::{Duration, Instant};

fn titus(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_titus"))
        .args(args)
        .output()
        .expect("run titus")
}

#[test]
fn ranks_get_their_environment_and_prefixed_output() {
    let out = titus(&[
        "launch",
        "-n",
        "3",
        "--provider",
        "sockets",
        "--",
        "sh",
        "-c",
        "echo rank=$TITUS_RANK size=$TITUS_SIZE boot=${TITUS_BOOTSTRAP:+set} secret=${#TITUS_JOB_SECRET} prov=$TITUS_PROVIDER wait=$FI_SOCKETS_PE_WAITTIME local=$TITUS_LOCAL_RANK/$TITUS_LOCAL_SIZE",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    for r in 0..3 {
        let want =
            format!("[{r}] rank={r} size=3 boot=set secret=32 prov=sockets wait=0 local={r}/3");
        assert!(
            text.lines().any(|l| l == want),
            "missing '{want}' in:\n{text}"
        );
    }
}

#[test]
fn a_failing_rank_stops_the_others() {
    let t = Instant::now();
    let out = titus(&[
        "launch",
        "-n",
        "4",
        "--",
        "sh",
        "-c",
        "if [ $TITUS_RANK = 2 ]; then exit 7; fi; sleep 60",
    ]);
    assert!(
        t.elapsed() < Duration::from_secs(20),
        "the sleeping ranks were not stopped"
    );
    assert_eq!(out.status.code(), Some(7));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("rank 2 exited with status 7"), "{err}");
}

#[test]
fn a_killed_rank_is_named_with_its_signal() {
    let out = titus(&[
        "launch",
        "-n",
        "2",
        "--",
        "sh",
        "-c",
        "if [ $TITUS_RANK = 1 ]; then kill -9 $$; fi; sleep 60",
    ]);
    assert_eq!(out.status.code(), Some(128 + 9));
    assert!(String::from_utf8_lossy(&out.stderr).contains("rank 1 was killed by signal 9"));
}

#[test]
fn timeout_and_bad_input() {
    let out = titus(&["launch", "-n", "2", "--timeout", "0.5", "--", "sleep", "60"]);
    assert_eq!(out.status.code(), Some(124));
    for (args, needle) in [
        (
            &["launch", "-n", "0", "--", "true"][..],
            "-n must be at least 1",
        ),
        (
            &["launch", "-n", "2", "--", "/nonexistent/program"][..],
            "cannot start",
        ),
        (
            &["launch", "-n", "2", "--bootstrap", "nohost", "--", "true"][..],
            "not host:port",
        ),
        (&["launch", "-n", "2"][..], "required"),
    ] {
        let out = titus(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(needle) && err.trim_end().lines().count() == 1,
            "{args:?}: {err}"
        );
    }
}

#[test]
fn fabric_bench_on_mem_prints_every_figure() {
    let out = titus(&[
        "fabric-bench",
        "--backend",
        "mem",
        "--iters",
        "50",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let ops: Vec<&str> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["op"].as_str().unwrap())
        .collect();
    for op in [
        "compare-swap",
        "fetch-add",
        "read",
        "write",
        "write-signal round trip",
    ] {
        assert!(ops.contains(&op), "{op} missing: {ops:?}");
    }
    assert!(v["read_bandwidth_gbs"].as_f64().unwrap() > 0.0);
}
