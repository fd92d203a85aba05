//! The fabric conformance suite over real libfabric providers, with 2–8 processes on
//! loopback started by `titus launch`; plus a foreign process refused by the rendezvous.

use std::process::Command;
use std::time::Duration;
use titus_fabric::bootstrap::Rendezvous;

fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

/// Runs the suite on `n` ranks of `provider`; returns the launcher's output.
fn suite(provider: &str, n: u32, dead_peer: bool, probe_foreign: bool) -> String {
    let addr = free_addr();
    let mut cmd = Command::new(titus_tests::bin("titus"));
    cmd.args([
        "launch",
        "-n",
        &n.to_string(),
        "--provider",
        provider,
        "--bootstrap",
        &addr,
        "--timeout",
        "120",
        "--",
    ])
    .arg(titus_tests::bin("fabric-conformance"));
    if dead_peer {
        cmd.arg("--dead-peer");
    }
    let child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    if probe_foreign {
        // A process of another job (wrong secret) knocks while the suite runs: it is refused
        // with a clear error, and the job goes on. Early (the connect retries until the
        // port listens): late, a short suite may have ended and the port closed.
        std::thread::sleep(Duration::from_millis(200));
        let err =
            Rendezvous::connect(&addr, 1, n, "not-the-secret", Duration::from_secs(5)).unwrap_err();
        assert!(
            err.to_string().contains("wrong job secret"),
            "foreign process got: {err}"
        );
    }
    let out = child.wait_with_output().unwrap();
    let text = titus_tests::output_text(&out);
    assert!(
        out.status.success(),
        "{provider}, {n} ranks: the suite failed:\n{text}"
    );
    let passed = if dead_peer { n - 1 } else { n };
    assert!(
        text.matches("conformance passed").count() as u32 >= passed,
        "{provider}, {n} ranks: not every rank passed:\n{text}"
    );
    text
}

#[test]
fn tcp_rxm() {
    if !titus_tests::libfabric_or_skip() {
        return;
    }
    suite("tcp;ofi_rxm", 2, true, true);
    suite("tcp;ofi_rxm", 4, false, false);
    suite("tcp;ofi_rxm", 8, false, false);
}

#[test]
fn shm() {
    if !titus_tests::libfabric_or_skip() {
        return;
    }
    suite("shm", 2, true, false);
    suite("shm", 4, false, false);
}

#[test]
fn sockets() {
    if !titus_tests::libfabric_or_skip() {
        return;
    }
    suite("sockets", 2, true, false);
    suite("sockets", 4, false, false);
}

/// The node backend (shared memory, CPU atomics) over 2, 4 and 8 processes; nothing is
/// left in /dev/shm, not even after the dead-peer case ends a rank abruptly.
#[test]
fn node() {
    suite("node", 2, true, true);
    suite("node", 4, false, false);
    suite("node", 8, false, false);
    assert!(
        titus_tests::node_objects().is_empty(),
        "{:?}",
        titus_tests::node_objects()
    );
}

/// The hybrid backend across two played nodes (`TITUS_NODE_ID`): shared memory inside
/// each, libfabric (tcp) between them, every atomic through libfabric; 4 ranks, and the
/// dead-peer case across the two.
#[test]
fn hybrid_across_two_nodes() {
    if !titus_tests::libfabric_or_skip() {
        return;
    }
    for (n, dead) in [(4, false), (2, true)] {
        let mut cmd = titus_tests::launch_two_nodes(
            Some("hybrid"),
            n,
            &titus_tests::bin("fabric-conformance"),
        );
        if dead {
            cmd.arg("--dead-peer");
        }
        let out = cmd.env("FI_PROVIDER", "tcp;ofi_rxm").output().unwrap();
        let text = titus_tests::output_text(&out);
        assert!(out.status.success(), "{n} ranks:\n{text}");
        let passed = if dead { n - 1 } else { n };
        assert_eq!(
            text.matches("conformance passed on node+tcp;ofi_rxm")
                .count() as u32,
            passed,
            "{text}"
        );
    }
    assert!(
        titus_tests::node_objects().is_empty(),
        "{:?}",
        titus_tests::node_objects()
    );
}

/// Ranks killed before they could unlink their objects: `titus launch` removes them.
#[test]
fn the_launcher_removes_what_killed_ranks_left() {
    let out = Command::new(titus_tests::bin("titus"))
        .args(["launch", "-n", "2", "--timeout", "1", "--"])
        .arg(titus_tests::bin("node-leftover"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(124), "{text}");
    let names: Vec<&str> = text
        .lines()
        .filter_map(|l| l.split("created ").nth(1))
        .collect();
    assert_eq!(names.len(), 2, "{text}");
    for n in names {
        assert!(
            !std::path::Path::new("/dev/shm").join(n).exists(),
            "{n} was left behind"
        );
    }
}

#[test]
fn refused_providers_say_why() {
    if !titus_tests::libfabric_or_skip() {
        return;
    }
    for (p, why) in [("udp;ofi_rxd", "crashes on atomics"), ("net", "no atomics")] {
        let out = Command::new(titus_tests::bin("titus"))
            .args(["launch", "-n", "1", "--provider", p, "--"])
            .arg(titus_tests::bin("fabric-conformance"))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{p} was accepted");
        assert!(text.contains(why), "{p}: {text}");
    }
    // verbs is built and selectable; without an RDMA device it is not offered, and the
    // error says so and lists what is.
    if !titus_fabric_ofi::providers()
        .unwrap()
        .iter()
        .any(|p| p.starts_with("verbs"))
    {
        let out = Command::new(titus_tests::bin("titus"))
            .args(["launch", "-n", "1", "--provider", "verbs", "--"])
            .arg(titus_tests::bin("fabric-conformance"))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(
            text.contains("'verbs;ofi_rxm' is not offered") && text.contains("tcp;ofi_rxm"),
            "{text}"
        );
    }
}

#[test]
fn fabric_bench_compares_with_raw_libfabric() {
    if !titus_tests::libfabric_or_skip() {
        return;
    }
    let out = Command::new(titus_tests::bin("titus"))
        .args([
            "launch",
            "-n",
            "2",
            "--provider",
            "tcp;ofi_rxm",
            "--no-prefix",
            "--",
        ])
        .arg(titus_tests::bin("titus"))
        .args(["fabric-bench", "--iters", "100", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with('{'))
        .expect("a JSON report from rank 0");
    for key in [
        "\"provider\":\"tcp;ofi_rxm\"",
        "\"raw_p50_us\":",
        "\"overhead\":",
        "\"raw_read_bandwidth_gbs\":",
        "\"op\":\"compare-swap (self)\"",
    ] {
        assert!(line.contains(key), "{key} missing: {line}");
    }
    // tcp's target serves every operation in software: its CPU per operation is measured.
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    let cpu = v["target_cpu_us_per_op"]
        .as_f64()
        .expect("target CPU measured");
    assert!(cpu > 0.0 && v["target_ops"].as_u64().unwrap() > 0, "{line}");
}
