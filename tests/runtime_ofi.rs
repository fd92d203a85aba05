//! The runtime over real libfabric providers, with real processes started by
//! `titus launch`: every protocol, 2–8 ranks and several seeds, every result verified (runtime-bench checks
//! that each result is present exactly once and recomputes a sample); and a rank that
//! dies mid-epoch makes the others fail with an error within a bounded time.

use std::process::Command;
use std::time::{Duration, Instant};

/// `titus launch` of the workspace binary `program`.
fn launch(provider: &str, ranks: u32, program: &str) -> Command {
    titus_tests::launch(provider, ranks, &titus_tests::bin(program))
}

fn bench(provider: &str, ranks: u32, protocol: &str, extra: &[&str]) -> (bool, String, Duration) {
    let t = Instant::now();
    let out = launch(provider, ranks, "runtime-bench")
        .args([
            "--tasks",
            "600",
            "--task-ms",
            "0.2",
            "--protocol",
            protocol,
            "--json",
        ])
        .args(extra)
        .output()
        .unwrap();
    let text = titus_tests::output_text(&out);
    (out.status.success(), text, t.elapsed())
}

/// A runtime-bench job of `ranks` that must fail within `within`, its output holding
/// every one of `needles`; its output.
fn fails_saying(
    provider: &str,
    ranks: u32,
    extra: &[&str],
    within: Duration,
    needles: &[&str],
) -> String {
    let (ok, text, took) = bench(provider, ranks, "claim", extra);
    assert!(!ok, "{provider}: the job succeeded:\n{text}");
    for n in needles {
        assert!(text.contains(n), "{provider}: no {n:?} in:\n{text}");
    }
    assert!(took < within, "{provider}: took {took:?}");
    text
}

#[test]
fn every_protocol_over_tcp_shm_and_sockets() {
    if !titus_tests::libfabric_or_skip() {
        return;
    }
    for (provider, ranks, seed) in [
        ("tcp;ofi_rxm", 3, "1"),
        ("shm", 2, "2"),
        ("sockets", 4, "3"),
        ("tcp;ofi_rxm", 8, "4"),
        ("node", 2, "5"),
        ("node", 4, "6"),
    ] {
        for protocol in ["claim", "lock", "request"] {
            let (ok, text, _) = bench(provider, ranks, protocol, &["--seed", seed]);
            assert!(ok, "{provider}, {ranks} ranks, {protocol}:\n{text}");
            assert!(
                text.contains("\"verified\":true"),
                "{provider} {protocol}: not verified:\n{text}"
            );
            assert!(text.contains(&format!("\"ranks\":{ranks}")), "{text}");
        }
    }
}

/// A job across two played nodes with nothing forced: `backend=auto` takes the hybrid
/// (shared memory inside a node, libfabric between), every protocol exactly once.
#[test]
fn every_protocol_across_two_nodes_by_default() {
    if !titus_tests::libfabric_or_skip() {
        return;
    }
    for protocol in ["claim", "lock", "request"] {
        let out = titus_tests::launch_two_nodes(None, 4, &titus_tests::bin("runtime-bench"))
            .args(["--tasks", "600", "--task-ms", "0.2", "--protocol", protocol])
            .args(["--seed", "7", "--json"])
            .env_remove("TITUS_PROVIDER")
            .env_remove("FI_PROVIDER")
            .output()
            .unwrap();
        let text = titus_tests::output_text(&out);
        assert!(out.status.success(), "{protocol}:\n{text}");
        assert!(text.contains("\"verified\":true"), "{protocol}:\n{text}");
        assert!(
            text.contains("\"backend\":\"node+"),
            "{protocol}: not hybrid:\n{text}"
        );
    }
}

#[test]
fn a_rank_that_dies_mid_epoch_fails_the_others_within_a_bounded_time() {
    if !titus_tests::libfabric_or_skip() {
        return;
    }
    for provider in ["tcp;ofi_rxm", "shm", "node"] {
        // Rank 1 steals, runs a task, and exits abruptly with the rest of its batch (one:
        // a starved rank 1 may steal only a few of rank 0's 600 tasks).
        let (ok, text, took) = bench(
            provider,
            2,
            "claim",
            &["--kill-rank", "1", "--kill-after", "1", "--op-timeout", "3"],
        );
        assert!(
            !ok,
            "{provider}: the job succeeded without rank 1's tasks:\n{text}"
        );
        assert!(
            text.contains("fault injection"),
            "{provider}: rank 1 did not die:\n{text}"
        );
        assert!(
            text.contains("[0] runtime-bench: rank 0:"),
            "{provider}: rank 0 reported no error:\n{text}"
        );
        assert!(
            text.contains("unreachable")
                || text.contains("no completion within")
                || text.contains("failed"),
            "{provider}: not a dead-peer error:\n{text}"
        );
        // 600 tasks of 0.2 ms on rank 0, then the 3 s operation timeout at most.
        assert!(took < Duration::from_secs(30), "{provider}: took {took:?}");
        // The killed rank could not remove its shared memory; the launcher did.
        let pid = text
            .split("fault injection: this rank (pid ")
            .nth(1)
            .and_then(|t| t.split(')').next())
            .expect("the killed rank names its pid");
        let left: Vec<_> = std::fs::read_dir("/dev/shm")
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with(&format!("{pid}:"))
            })
            .collect();
        assert!(left.is_empty(), "{provider}: rank 1 left {left:?}");
        // Nor does the node backend leave any object (unlinked once every rank mapped).
        assert!(
            titus_tests::node_objects().is_empty(),
            "{provider}: {:?}",
            titus_tests::node_objects()
        );
    }
}

/// A rank whose process vanishes is named in words long before the operation timeout
/// (30 s, the default here): on one node the survivor asks the kernel whether a slow
/// operation's peer still exists.
#[test]
fn a_vanished_rank_is_named_within_seconds() {
    if !titus_tests::libfabric_or_skip() {
        return;
    }
    for provider in ["tcp;ofi_rxm", "shm", "sockets", "node"] {
        // 600 tasks of 0.2 ms on rank 0, then about a second to notice; 30 s would be the
        // operation timeout.
        fails_saying(
            provider,
            2,
            &["--kill-rank", "1", "--kill-after", "1"],
            Duration::from_secs(15),
            &["rank 1's process (pid", "has exited"],
        );
    }
}

/// A rank that dies as the others begin an epoch's start (`titus_core::start`: they wait
/// for its messages) is named by every other rank within seconds, over every backend,
/// not after the operation timeout.
#[test]
fn a_rank_that_dies_before_its_start_is_named_by_every_other_within_seconds() {
    if !titus_tests::libfabric_or_skip() {
        return;
    }
    for provider in ["tcp;ofi_rxm", "shm", "node"] {
        // The liveness sweep's second or so, not the 30 s operation timeout.
        let text = fails_saying(
            provider,
            3,
            &["--kill-rank", "1", "--kill-after", "0"],
            Duration::from_secs(15),
            &["exits before its epoch starts"],
        );
        for r in [0, 2] {
            let line = text
                .lines()
                .find(|l| l.contains(&format!("[{r}] runtime-bench: rank {r}:")))
                .unwrap_or_else(|| panic!("{provider}: rank {r} reported no error:\n{text}"));
            assert!(
                line.contains("rank 1"),
                "{provider}: rank {r} does not name rank 1: {line}\n{text}"
            );
        }
    }
}

/// A rank that freezes (SIGSTOP: its pid lives, nothing of it runs) is named by the others
/// within seconds, with why it does not progress — on the node backend, where no
/// operation waits for it and so none would time out, and over libfabric, where one
/// would only after the 30 s operation timeout; the launcher then ends it.
#[test]
fn a_frozen_rank_is_named_within_seconds() {
    if !titus_tests::libfabric_or_skip() {
        return;
    }
    for provider in ["node", "tcp;ofi_rxm", "shm"] {
        // About 5 s of standing still, then the launcher's grace before it ends rank 1.
        fails_saying(
            provider,
            3,
            &["--freeze-rank", "1", "--freeze-after", "1"],
            Duration::from_secs(25),
            &[
                "stops itself now",
                "rank 1's process (pid",
                "has made no progress for",
                "it is stopped (SIGSTOP",
            ],
        );
    }
}

/// Ranks started by hand, without a launcher to end the job: a rank stopped with SIGSTOP
/// is named by the others, which exit non-zero within seconds, on every backend.
#[test]
fn a_frozen_rank_started_by_hand_is_named_within_seconds() {
    if !titus_tests::libfabric_or_skip() {
        return;
    }
    for provider in ["node", "tcp;ofi_rxm", "shm"] {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let secret = format!("frozen-by-hand-{}-{port}", std::process::id());
        // About 8 s of 10 ms tasks a rank: the job is still running when rank 1 stops.
        let mut ranks: Vec<std::process::Child> = (0..3)
            .map(|r| {
                Command::new(titus_tests::bin("dlb-bench"))
                    .args(["--tasks", "2400", "--task-time", "0.01", "--no-progress"])
                    .env("TITUS_RANK", r.to_string())
                    .env("TITUS_SIZE", "3")
                    .env("TITUS_BOOTSTRAP", format!("127.0.0.1:{port}"))
                    .env("TITUS_JOB_SECRET", &secret)
                    .env("TITUS_PROVIDER", provider)
                    .env_remove("TITUS_LAUNCHER")
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        std::thread::sleep(Duration::from_secs(2));
        let frozen = ranks[1].id().to_string();
        let signal = |sig: &str| {
            let _ = Command::new("kill").args([sig, &frozen]).status();
        };
        signal("-STOP");
        let stopped = Instant::now();
        let mut frozen_rank = ranks.remove(1);
        // Bounded: a hang here is the defect under test, so kill after 30 s.
        let deadline = stopped + Duration::from_secs(30);
        let others: Vec<_> = ranks
            .into_iter()
            .map(|mut child| {
                let status = loop {
                    if let Some(s) = child.try_wait().unwrap() {
                        break Some(s);
                    }
                    if Instant::now() > deadline {
                        let _ = child.kill();
                        break None;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                };
                let took = stopped.elapsed();
                let out = child.wait_with_output().unwrap();
                (status, took, titus_tests::output_text(&out))
            })
            .collect();
        signal("-KILL");
        let _ = frozen_rank.wait();
        // Killed, it could not close libfabric shm's files (`/dev/shm/<pid>:…`); with no
        // launcher to remove them, the test does.
        let prefix = format!("{frozen}:");
        for e in std::fs::read_dir("/dev/shm")
            .into_iter()
            .flatten()
            .flatten()
        {
            if e.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = std::fs::remove_file(e.path());
            }
        }
        for (status, took, text) in others {
            println!("{provider}: a rank exited {took:?} after rank 1 stopped");
            assert!(
                status.is_some_and(|s| !s.success()),
                "{provider}: {status:?} after {took:?}:\n{text}"
            );
            assert!(
                took < Duration::from_secs(15),
                "{provider}: {took:?}:\n{text}"
            );
            assert!(
                text.contains("rank 1") && text.contains("stopped"),
                "{provider}: {text}"
            );
        }
    }
}

/// A fault flag naming a rank the job does not have, or used without a launcher (its
/// ranks would be threads), is refused in one line, not ignored.
#[test]
fn fault_flags_name_ranks_of_the_job() {
    if !titus_tests::libfabric_or_skip() {
        return;
    }
    let out = launch("node", 2, "runtime-bench")
        .args(["--tasks", "10", "--task-ms", "0.1", "--protocol", "claim"])
        .args(["--kill-rank", "5"])
        .output()
        .unwrap();
    let text = titus_tests::output_text(&out);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("--kill-rank 5: the job has 2 ranks (0..=1)"),
        "{text}"
    );
    let out = std::process::Command::new(titus_tests::bin("runtime-bench"))
        .args(["--tasks", "10", "--freeze-rank", "1"])
        .env_remove("TITUS_RANK")
        .env_remove("TITUS_SIZE")
        .output()
        .unwrap();
    let text = titus_tests::output_text(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains("--freeze-rank needs ranks that are processes"),
        "{text}"
    );
}

/// A rank deep in a task longer than the frozen bound is not frozen: its beat goes on
/// beside its worker, and the idle rank that sweeps it all the while lets the job end.
#[test]
fn a_rank_in_a_long_task_is_not_named_frozen() {
    if !titus_tests::libfabric_or_skip() {
        return;
    }
    // On one node (the beat in its object) and across two played nodes (the listener's
    // beats on its liveness connections).
    let bench = titus_tests::bin("runtime-bench");
    for mut cmd in [
        launch("node", 2, "runtime-bench"),
        titus_tests::launch_two_nodes(Some("tcp;ofi_rxm"), 2, &bench),
    ] {
        let out = cmd
            .args([
                "--tasks",
                "3",
                "--task-ms",
                "6000",
                "--protocol",
                "claim",
                "--json",
            ])
            .output()
            .unwrap();
        let text = titus_tests::output_text(&out);
        assert!(
            out.status.success(),
            "a busy rank was taken for frozen:\n{text}"
        );
        assert!(
            !text.contains("no progress") && !text.contains("no sign of life"),
            "{text}"
        );
    }
}

/// A job across two played nodes in which `fault` strikes rank 1, over libfabric alone
/// and over the hybrid: it must fail within `within`, its output holding every one of
/// `needles`.
fn fails_across_two_nodes(fault: &[&str], needles: &[&str], within: Duration) {
    for (provider, fi) in [("tcp;ofi_rxm", None), ("hybrid", Some("tcp;ofi_rxm"))] {
        let t = Instant::now();
        let mut cmd =
            titus_tests::launch_two_nodes(Some(provider), 2, &titus_tests::bin("runtime-bench"));
        cmd.args(["--tasks", "600", "--task-ms", "0.2", "--protocol", "claim"])
            .args(fault);
        if let Some(f) = fi {
            cmd.env("FI_PROVIDER", f);
        }
        let out = cmd.output().unwrap();
        let took = t.elapsed();
        let text = titus_tests::output_text(&out);
        assert!(
            !out.status.success(),
            "{provider}: the job succeeded:\n{text}"
        );
        for n in needles {
            assert!(text.contains(n), "{provider}: no {n:?} in:\n{text}");
        }
        println!("{provider}: {fault:?}: the job ended {took:?} after its start");
        assert!(took < within, "{provider}: took {took:?}");
    }
}

/// A rank killed on another (played) node: its pid means nothing here, so its liveness
/// port tells (`crates/fabric-ofi/src/watch.rs`) — named within seconds, in words, not
/// after the 30 s operation timeout.
#[test]
fn a_vanished_rank_on_another_node_is_named_within_seconds() {
    if !titus_tests::libfabric_or_skip() {
        return;
    }
    fails_across_two_nodes(
        &["--kill-rank", "1", "--kill-after", "1"],
        &["rank 1's process on host", "has exited"],
        Duration::from_secs(15),
    );
}

/// A rank frozen on another (played) node: its kernel still answers the liveness port, but
/// its listener's beats stop, so it is named within seconds, not after the 30 s operation
/// timeout.
#[test]
fn a_frozen_rank_on_another_node_is_named_within_seconds() {
    if !titus_tests::libfabric_or_skip() {
        return;
    }
    fails_across_two_nodes(
        &["--freeze-rank", "1", "--freeze-after", "1"],
        &["rank 1's process on host", "no sign of life"],
        Duration::from_secs(25),
    );
}

/// A host that falls silent mid-job (`deploy/host-down.sh`: two played hosts in network
/// namespaces, everything the second sends dropped — no connection closed, no process
/// killed): both ranks name the other within seconds through their liveness connections'
/// keepalive, not after the 30 s operation timeout (the rank cut off may first hear the
/// other's abort). Needs root and iproute2; elsewhere the test says so and checks nothing.
#[test]
fn a_host_gone_silent_is_named_within_seconds() {
    if !titus_tests::libfabric_or_skip() {
        return;
    }
    let probe = Command::new("ip").args(["netns", "list"]).output();
    if !probe.is_ok_and(|o| o.status.success()) || !is_root() {
        eprintln!("skipped: needs root and iproute2 (network namespaces)");
        return;
    }
    let bin = titus_tests::bin("runtime-bench");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/host-down.sh");
    let out = Command::new("bash")
        .arg(script)
        .arg(bin.parent().unwrap())
        .output()
        .unwrap();
    let text = titus_tests::output_text(&out);
    assert!(out.status.success(), "the script failed:\n{text}");
    for r in 0..2 {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("rank {r}: exit 1, ")))
            .unwrap_or_else(|| panic!("rank {r} did not fail:\n{text}"));
        let other = 1 - r;
        // Rank 1 is the one cut off: it still hears rank 0, so rank 0's abort, or its
        // connections' close as it exits, can reach it before its own probes time out.
        // Either way it must say that it lost its peer.
        let told = r == 1
            && (line.contains("rank 0 aborted the epoch (a peer of it is gone")
                || line.contains("rank 0's process on host hosta has exited"));
        assert!(
            told || (line.contains(&format!("rank {other}'s host host"))
                && line.contains("stopped answering")),
            "rank {r} does not name rank {other} as silent:\n{text}"
        );
        let secs: f64 = line["rank 0: exit 1, ".len()..]
            .split_whitespace()
            .next()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no time in: {line}"));
        assert!(secs < 15.0, "rank {r} took {secs} s after the cut:\n{text}");
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// DLB_Bench under `titus launch`: every balancer in one job (a fresh runtime per
/// balancer in the same processes), on tcp and shm; rank 0 prints one verified JSON line
/// per balancer.
#[test]
fn dlb_bench_runs_every_balancer_across_processes() {
    if !titus_tests::libfabric_or_skip() {
        return;
    }
    for (provider, ranks) in [("tcp;ofi_rxm", 3), ("shm", 2), ("node", 2)] {
        let out = launch(provider, ranks, "dlb-bench")
            .args([
                "--tasks",
                "90",
                "--task-time",
                "0.0005",
                "--balancer",
                "all",
                "--json",
            ])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{provider}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("\"efficiency\""))
            .collect();
        assert_eq!(lines.len(), 5, "{provider}: one line per balancer:\n{text}");
        for (l, b) in lines
            .iter()
            .zip(["none", "smallworld", "random", "master", "hierarchical"])
        {
            assert!(l.starts_with("[0] {"), "{provider}: rank 0 prints: {l}");
            for key in [
                format!("\"balancer\":\"{b}\""),
                "\"verified\":true".into(),
                format!("\"ranks\":{ranks}"),
            ] {
                assert!(l.contains(&key), "{provider}: {key} missing: {l}");
            }
            // The price of connections: at most every other rank a peer; a rank that
            // exchanged operations holds memory for it, and connecting took time.
            let v: serde_json::Value = serde_json::from_str(&l[4..]).unwrap();
            let peers = v["peers_max"].as_u64().unwrap();
            let mean = v["peers_mean"].as_f64().unwrap();
            let (connect, mib) = (
                v["connect_s"].as_f64().unwrap(),
                v["connection_mib"].as_f64().unwrap(),
            );
            assert!(
                peers < u64::from(ranks) && mean <= peers as f64,
                "{provider}: {l}"
            );
            if peers > 0 {
                assert!(connect > 0.0 && mib > 0.0, "{provider}: {l}");
            }
        }
    }
}

/// Time steps across processes: keyed tasks over four epochs per protocol and diffusion
/// plan (rank 0 owns most tasks and pushes from the second epoch), every result checked, every
/// cost home, every pushed task arrived (`tests/bin/runtime_epochs.rs`); over the node
/// backend the workers drive steals and pushes inline.
#[test]
fn keyed_epochs_with_diffusion_over_tcp_and_node() {
    if !titus_tests::libfabric_or_skip() {
        return;
    }
    for (provider, ranks) in [("tcp;ofi_rxm", 2), ("tcp;ofi_rxm", 4), ("node", 3)] {
        let out = launch(provider, ranks, "runtime-epochs").output().unwrap();
        let text = titus_tests::output_text(&out);
        assert!(out.status.success(), "{provider}, {ranks} ranks:\n{text}");
        for p in ["claim", "lock", "request"] {
            for d in ["neighbours", "string"] {
                let ok = text
                    .lines()
                    .filter(|l| l.contains(&format!("runtime-epochs: ok {p} {d} ")))
                    .count();
                assert_eq!(
                    ok, ranks as usize,
                    "{p} {d}: every rank reports ok:\n{text}"
                );
            }
        }
    }
}

/// The start's collectives over every backend at 1, 2, 3, 5, 8 and 17 ranks: every
/// rank's epoch start equals the whole job's plan computed plainly from what the ranks
/// brought (`titus_tests::start_check`), under both diffusion plans (the neighbours'
/// exchange; the string scan and search), the facts' reduce under both.
#[test]
fn every_start_is_the_whole_jobs_plan_over_every_backend_and_size() {
    if !titus_tests::libfabric_or_skip() {
        return;
    }
    let runs: Vec<(&str, u32)> = [1, 2, 3, 5, 8, 17]
        .into_iter()
        .flat_map(|n| [("node", n), ("tcp;ofi_rxm", n)])
        .chain([("shm", 3), ("shm", 8), ("sockets", 3), ("sockets", 5)])
        .collect();
    for (provider, ranks) in runs {
        let out = launch(provider, ranks, "runtime-epochs")
            .args(["--protocols", "claim"])
            .output()
            .unwrap();
        let text = titus_tests::output_text(&out);
        assert!(out.status.success(), "{provider}, {ranks} ranks:\n{text}");
        for d in ["neighbours", "string"] {
            let ok = text
                .lines()
                .filter(|l| l.contains(&format!("runtime-epochs: ok claim {d} ")))
                .count();
            assert_eq!(
                ok, ranks as usize,
                "{provider}, {ranks} ranks, {d}:\n{text}"
            );
        }
    }
    // Across two (played) nodes, over the hybrid backend.
    let out = titus_tests::launch_two_nodes(Some("hybrid"), 4, &titus_tests::bin("runtime-epochs"))
        .args(["--protocols", "claim"])
        .output()
        .unwrap();
    let text = titus_tests::output_text(&out);
    assert!(out.status.success(), "hybrid, 4 ranks:\n{text}");
    assert_eq!(
        text.matches("runtime-epochs: ok claim").count(),
        8,
        "{text}"
    );
}

/// The same over the in-process backend (ranks are threads, the all-gather in process).
#[test]
fn every_start_is_the_whole_jobs_plan_in_process() {
    use titus_fabric::mem::MemOptions;
    use titus_runtime::{DiffusionPlan, Runtime, RuntimeConfig, TaskIn};
    use titus_tests::start_check;
    let spin = |p: &[u8]| {
        let mut h = u64::from(p[0]);
        for _ in 0..u32::from(p[0]) * 2_000 {
            h = h.wrapping_mul(0x100_0000_01b3) ^ 7;
        }
        h.to_le_bytes().to_vec()
    };
    for ranks in [1u32, 2, 3, 5, 8, 17] {
        for plan in [DiffusionPlan::Neighbours, DiffusionPlan::String] {
            let mut cfg = RuntimeConfig {
                workers: 1,
                ..RuntimeConfig::default()
            };
            cfg.core.diffusion_plan = plan;
            let rts = Runtime::local(ranks, cfg, MemOptions::default()).unwrap();
            let checked: Vec<usize> = std::thread::scope(|s| {
                let hs: Vec<_> = rts
                    .iter()
                    .map(|rt| {
                        s.spawn(move || {
                            rt.register(0, spin);
                            let r = rt.rank();
                            let mut most = 0;
                            for e in 0..3u64 {
                                // Rank 0 owns the costly tasks; the keys move on each epoch.
                                let n = if r == 0 { 60 } else { 4 };
                                let tasks: Vec<TaskIn> = (0..n)
                                    .map(|i| TaskIn {
                                        key: u64::from(r) * 1_000 + i + e,
                                        kind: 0,
                                        payload: vec![if r == 0 { 20 } else { 2 }],
                                        priority: 0,
                                        cost_hint_ns: 0,
                                    })
                                    .collect();
                                let out = rt.run_epoch_keyed(tasks).unwrap();
                                let all = rt.all_gather(&start_check::encode(&out.start_view));
                                let views: Vec<_> = all
                                    .unwrap()
                                    .iter()
                                    .map(|b| start_check::decode(b).unwrap())
                                    .collect();
                                let c = start_check::check(&views).unwrap_or_else(|err| {
                                    panic!("{ranks} ranks, {plan:?}, epoch {e}: {err}")
                                });
                                most = most.max(c);
                            }
                            most
                        })
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect()
            });
            if ranks > 1 {
                assert!(
                    checked.iter().all(|&c| c >= 2),
                    "{ranks}, {plan:?}: {checked:?}"
                );
            }
        }
    }
}

/// A progress-nap cap the shim would ignore is an error naming the variable, not a
/// silent default.
#[test]
fn a_bad_progress_nap_cap_is_named() {
    if !titus_tests::libfabric_or_skip() {
        return;
    }
    let out = launch("shm", 2, "runtime-bench")
        .args(["--tasks", "10", "--task-ms", "0.1", "--protocol", "claim"])
        .env("TITUS_PROGRESS_MAX_SLEEP_US", "abc")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("TITUS_PROGRESS_MAX_SLEEP_US='abc'"), "{text}");
}

/// An interface the provider does not offer is an error naming it and the ones it does
/// (exit 2: bad input); the loopback the automatic choice falls back to on one host works.
#[test]
fn an_interface_nobody_offers_is_named() {
    if !titus_tests::libfabric_or_skip() {
        return;
    }
    let out = launch("tcp;ofi_rxm", 2, "runtime-bench")
        .args(["--tasks", "10", "--task-ms", "0.1", "--protocol", "claim"])
        .env("TITUS_IFACE", "nosuch0")
        .output()
        .unwrap();
    let text = titus_tests::output_text(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains("TITUS_IFACE=nosuch0: provider") && text.contains("lo"),
        "{text}"
    );
    let out = launch("tcp;ofi_rxm", 2, "runtime-bench")
        .args(["--tasks", "10", "--task-ms", "0.1", "--protocol", "claim"])
        .env("TITUS_IFACE", "lo")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", titus_tests::output_text(&out));
}

/// Without a launcher to clean up: a rank that fails because its peer was killed and
/// exits (status 1, its runtime never closed) leaves no shared-memory file of libfabric's
/// shm provider behind (the killed one cannot help leaving its own).
#[test]
fn a_failed_rank_leaves_no_shared_memory_without_a_launcher() {
    if !titus_tests::libfabric_or_skip() {
        return;
    }
    let port = 30000 + (std::process::id() % 20000) as u16;
    let rank = |r: &str| {
        Command::new(titus_tests::bin("runtime-bench"))
            .args(["--tasks", "4000", "--task-ms", "0.5", "--protocol", "claim"])
            .args(["--kill-rank", "1", "--kill-after", "20"])
            .env("TITUS_RANK", r)
            .env("TITUS_SIZE", "2")
            .env("TITUS_BOOTSTRAP", format!("127.0.0.1:{port}"))
            .env("TITUS_JOB_SECRET", format!("shm-left-{port}"))
            .env("TITUS_PROVIDER", "shm")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (r0, r1) = (rank("0"), rank("1"));
    let (pid0, pid1) = (r0.id(), r1.id());
    let out0 = r0.wait_with_output().unwrap();
    let _ = r1.wait_with_output();
    let files = |pid: u32| -> Vec<String> {
        std::fs::read_dir("/dev/shm")
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with(&format!("{pid}:")))
                    .collect()
            })
            .unwrap_or_default()
    };
    let left0 = files(pid0);
    for f in files(pid1) {
        let _ = std::fs::remove_file(format!("/dev/shm/{f}"));
    }
    let text = titus_tests::output_text(&out0);
    assert_eq!(out0.status.code(), Some(1), "rank 0 fails:\n{text}");
    assert!(text.contains("rank 1's process"), "{text}");
    assert!(left0.is_empty(), "rank 0 left {left0:?}");
}

/// The default worker count follows each rank's CPUs and node (`crates/runtime/src/cores.rs`):
/// two ranks on one node share its cores, bound or not; a rank alone on its (played) node
/// takes every core of its mask — where the launcher's count of ranks on the node (2
/// here) would have halved it.
#[test]
fn default_workers_follow_each_ranks_cpus_and_node() {
    if !titus_tests::libfabric_or_skip() {
        return;
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    let workers = |bind: &str, two_nodes: bool| -> Vec<u64> {
        let mut c = Command::new(titus_tests::bin("titus"));
        c.args([
            "launch",
            "-n",
            "2",
            "--provider",
            "tcp;ofi_rxm",
            "--bind",
            bind,
        ])
        .args(["--timeout", "120", "--"]);
        if two_nodes {
            c.args(["sh", "-c", titus_tests::TWO_NODES]);
        }
        let out = c.arg(titus_tests::bin("runtime-workers")).output().unwrap();
        let text = titus_tests::output_text(&out);
        assert!(
            out.status.success(),
            "{bind}, two nodes {two_nodes}: {text}"
        );
        let mut w = vec![0; 2];
        for l in text.lines().filter(|l| l.contains(" workers ")) {
            let f: Vec<&str> = l.split_whitespace().collect();
            let r: usize = f[f.len() - 3].parse().unwrap();
            w[r] = f[f.len() - 1].parse().unwrap();
        }
        w
    };
    let half = (cores / 2).max(1);
    assert_eq!(workers("none", false), [half, half], "unbound on one node");
    if cores >= 2 {
        assert_eq!(workers("core", false), [half, cores - half], "a slice each");
    }
    assert_eq!(
        workers("none", true),
        [cores, cores],
        "alone on its node, every core"
    );
}
