//! Traces (`dlb-bench --trace DIR`, `titus trace DIR`): a traced run's files match the
//! run, the merged file is trace-event JSON, and bad directories and files are named.

use std::path::Path;
use std::process::Command;
use titus_tests::{bin, output_text};

/// A scratch directory under the test's own target directory, emptied.
fn scratch(name: &str) -> std::path::PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn records(dir: &Path, rank: u32) -> Vec<serde_json::Value> {
    let f = dir.join(format!("titus-trace-rank{rank}.jsonl"));
    std::fs::read_to_string(&f)
        .unwrap_or_else(|e| panic!("{}: {e}", f.display()))
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// Checks rank files against the run they traced: every task the stats count has its
/// span, every logged steal its event, every span inside its epoch.
fn check_ranks(dir: &Path, ranks: u32, epochs: usize) {
    for rank in 0..ranks {
        let rs = records(dir, rank);
        assert_eq!(rs.len(), epochs, "rank {rank}: one record per epoch");
        for r in &rs {
            let st = &r["stats"];
            let spans: usize = r["tasks"]
                .as_array()
                .unwrap()
                .iter()
                .map(|w| w.as_array().unwrap().len())
                .sum();
            assert_eq!(r["dropped"], 0);
            assert_eq!(
                spans as u64,
                st["tasks_run"].as_u64().unwrap(),
                "rank {rank}"
            );
            // Every steal in the timeline, what it found with it (0: tasks).
            let steals = r["steals"].as_array().unwrap();
            let got = steals.iter().filter(|s| s[4] == 0).count() as u64;
            let n = |k: &str| st[k].as_u64().unwrap();
            assert_eq!(got, n("steals_ok"), "rank {rank}: every successful steal");
            assert_eq!(
                steals.len() as u64,
                n("steals_ok") + n("steals_empty") + n("steals_locked"),
                "rank {rank}: every attempt"
            );
            // Every chunk of results in the timeline, both ways.
            let transfers = r["transfers"].as_array().unwrap();
            let of = |k: u64| transfers.iter().filter(|t| t[3] == k).count() as u64;
            assert_eq!(of(0), n("chunks_sent"), "rank {rank}: results sent");
            assert_eq!(of(1), n("chunks_received"), "rank {rank}: results received");
            assert_eq!(
                r["keys"].as_array().unwrap().len() as u64,
                n("tasks_owned"),
                "rank {rank}: a key per task owned"
            );
            let (from, end) = (
                r["call_ns"].as_u64().unwrap(),
                r["end_ns"].as_u64().unwrap(),
            );
            for w in r["tasks"].as_array().unwrap() {
                for t in w.as_array().unwrap() {
                    let (s, len) = (t[0].as_u64().unwrap(), t[1].as_u64().unwrap());
                    assert!(
                        from <= s && s + len <= end,
                        "rank {rank}: a task outside its epoch"
                    );
                }
            }
            for i in r["idle"].as_array().unwrap() {
                let (s, len) = (i[1].as_u64().unwrap(), i[2].as_u64().unwrap());
                assert!(
                    from <= s && s + len <= end,
                    "rank {rank}: an idle span outside"
                );
            }
            // The termination barrier: entered once the rank's subtree was complete,
            // after its tasks began, left at the epoch's end.
            let barrier = r["barrier_ns"].as_u64().expect("the barrier");
            assert!(
                r["tasks_from_ns"].as_u64().unwrap() <= barrier && barrier <= end,
                "rank {rank}: the barrier outside its epoch"
            );
        }
    }
}

/// The merged file: trace-event JSON, each event with its fields, a complete one with
/// its length; the task events as many as the tasks the ranks ran.
fn check_merged(dir: &Path, tasks: u64) {
    let (png, svg) = (dir.join("timeline.png"), dir.join("timeline.svg"));
    let out = Command::new(bin("titus"))
        .args(["trace"])
        .arg(dir)
        .arg("--png")
        .arg(&png)
        .arg("--svg")
        .arg(&svg)
        .output()
        .expect("titus trace");
    assert!(out.status.success(), "{}", output_text(&out));
    let summary = String::from_utf8_lossy(&out.stdout);
    assert!(summary.contains("busy"));
    assert!(!summary.contains("log is full"), "{summary}");
    // One host, one clock: nothing to line up.
    assert!(!summary.contains("clocks:"), "{summary}");
    // The pictures: a PNG and an SVG, each with something drawn.
    let png = std::fs::read(&png).expect("the PNG");
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 1000,
        "{} bytes",
        png.len()
    );
    let svg = std::fs::read_to_string(&svg).expect("the SVG");
    assert!(
        svg.contains("<svg") && svg.matches("<rect").count() > 2,
        "{svg}"
    );
    let text = std::fs::read_to_string(dir.join("titus-trace.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).expect("the merged file parses");
    let events = v["traceEvents"].as_array().expect("traceEvents");
    let mut task_events = 0;
    let named = |name: &str| events.iter().filter(|e| e["name"] == name).count();
    let epochs = events.iter().filter(|e| e["cat"] == "epoch").count();
    assert!(epochs > 0);
    assert_eq!(named("barrier"), epochs, "a barrier per rank and epoch");
    for e in events {
        for key in ["ph", "pid", "tid", "name"] {
            assert!(!e[key].is_null(), "{key} in {e}");
        }
        if e["ph"] != "M" {
            assert!(e["ts"].as_f64().is_some_and(|t| t >= 0.0), "ts in {e}");
        }
        if e["ph"] == "X" {
            assert!(e["dur"].as_f64().is_some(), "dur in {e}");
            if e["name"].as_str().unwrap().ends_with("task") {
                task_events += 1;
                assert!(e["args"]["key"].as_u64().is_some(), "a task's key: {e}");
            }
        }
    }
    assert_eq!(task_events, tasks);
}

fn tasks_run(dir: &Path, ranks: u32) -> u64 {
    (0..ranks)
        .flat_map(|r| records(dir, r))
        .map(|r| r["stats"]["tasks_run"].as_u64().unwrap())
        .sum()
}

#[test]
fn a_traced_dlb_bench_run_matches_its_figures() {
    let dir = scratch("trace-dlb");
    let out = Command::new(bin("dlb-bench"))
        .args([
            "--ranks",
            "2",
            "--profile",
            "quick",
            "--balancer",
            "smallworld",
        ])
        .args(["--epochs", "2", "--no-progress", "--trace"])
        .arg(&dir)
        .output()
        .expect("dlb-bench");
    assert!(out.status.success(), "{}", output_text(&out));
    check_ranks(&dir, 2, 2);
    check_merged(&dir, tasks_run(&dir, 2));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ranks_as_processes_trace_through_the_environment() {
    let dir = scratch("trace-launch");
    let out = Command::new(bin("titus"))
        .args(["launch", "-n", "2", "--timeout", "120", "--"])
        .arg(bin("dlb-bench"))
        .args(["--profile", "quick", "--no-progress"])
        .env("TITUS_TRACE", &dir)
        .output()
        .expect("titus launch");
    assert!(out.status.success(), "{}", output_text(&out));
    check_ranks(&dir, 2, 1);
    check_merged(&dir, tasks_run(&dir, 2));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Each epoch's "start: collectives" events' ends in the merged file, µs, by rank.
fn barriers_merged(dir: &Path) -> std::collections::BTreeMap<(u64, u64), f64> {
    let text = std::fs::read_to_string(dir.join("titus-trace.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "start: collectives")
        .map(|e| {
            let end = e["ts"].as_f64().unwrap() + e["dur"].as_f64().unwrap();
            let key = (
                e["args"]["epoch"].as_u64().unwrap(),
                e["pid"].as_u64().unwrap(),
            );
            (key, end)
        })
        .collect()
}

#[test]
fn hosts_clocks_are_lined_up_at_the_start_barriers() {
    use titus_runtime::trace::EpochRecord;
    // Two played hosts, rank 0 on one and rank 1 on the other.
    let dir = scratch("trace-hosts");
    let out = titus_tests::launch_two_nodes(None, 2, &bin("dlb-bench"))
        .args(["--profile", "quick", "--epochs", "3", "--no-progress"])
        .env("TITUS_TRACE", &dir)
        .output()
        .expect("titus launch");
    assert!(out.status.success(), "{}", output_text(&out));
    check_ranks(&dir, 2, 3);
    for (rank, host) in [(0, "node a"), (1, "node b")] {
        assert!(records(&dir, rank).iter().all(|r| r["clock"] == host));
    }
    // Rank 1's host's clock runs 7 s ahead.
    let skew: i64 = 7_000_000_000;
    let file = dir.join("titus-trace-rank1.jsonl");
    let skewed: String = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(|l| {
            let mut r: EpochRecord = serde_json::from_str(l).unwrap();
            r.shift(skew);
            serde_json::to_string(&r).unwrap() + "\n"
        })
        .collect();
    std::fs::write(&file, skewed).unwrap();
    let trace = |raw: bool| {
        let mut c = Command::new(bin("titus"));
        c.arg("trace").arg(&dir);
        if raw {
            c.arg("--raw-clocks");
        }
        let out = c.output().expect("titus trace");
        assert!(out.status.success(), "{}", output_text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // Kept apart, the hosts' barriers lie 7 s apart.
    let summary = trace(true);
    assert!(!summary.contains("clocks:"), "{summary}");
    let apart = barriers_merged(&dir);
    for e in 0..3 {
        let d = apart[&(e, 1)] - apart[&(e, 0)];
        assert!((d - 7e6).abs() < 50e3, "epoch {e}: {d} µs apart");
    }
    // Lined up: rank 1's host moved back by about 7 s, each epoch's barriers within a
    // few messages of each other on this one machine (50 ms on a loaded one).
    let summary = trace(false);
    let line = summary
        .lines()
        .find(|l| l.starts_with("clocks: rank 1 (node b) shifted by -"))
        .unwrap_or_else(|| panic!("{summary}"));
    let ms: f64 = line
        .split("shifted by ")
        .nth(1)
        .and_then(|t| t.split(" ms").next())
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    assert!((ms + 7000.0).abs() < 50.0, "{line}");
    let lined = barriers_merged(&dir);
    for e in 0..3 {
        let d = lined[&(e, 1)] - lined[&(e, 0)];
        assert!(d.abs() < 50e3, "epoch {e}: {d} µs apart after lining up");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_simulated_run_traces_as_the_runtime_does() {
    let dir = scratch("trace-sim");
    let out = Command::new(bin("titus"))
        .args([
            "sim",
            "--ranks",
            "8",
            "--profile",
            "quick",
            "--balancer",
            "smallworld",
        ])
        .args(["--epochs", "2", "--workers", "2", "--trace"])
        .arg(&dir)
        .output()
        .expect("titus sim");
    assert!(out.status.success(), "{}", output_text(&out));
    check_ranks(&dir, 8, 2);
    check_merged(&dir, tasks_run(&dir, 8));
    // One run only, of a few thousand ranks at most.
    let out = Command::new(bin("titus"))
        .args([
            "sim",
            "--ranks",
            "8",
            "--balancer",
            "none,smallworld",
            "--trace",
        ])
        .arg(&dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
    assert!(output_text(&out).contains("--trace takes one run"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_trace_directories_and_files_are_named() {
    // A directory that cannot be made: refused at start, naming it.
    let blocker = scratch("trace-blocker");
    std::fs::write(&blocker, b"a file, not a directory").unwrap();
    let out = Command::new(bin("dlb-bench"))
        .args(["--ranks", "1", "--tasks", "10", "--no-progress", "--trace"])
        .arg(blocker.join("sub"))
        .output()
        .expect("dlb-bench");
    assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
    assert!(
        output_text(&out).contains("trace directory"),
        "{}",
        output_text(&out)
    );
    let _ = std::fs::remove_file(&blocker);
    // A corrupt rank file and a missing one: named, the others merged.
    let dir = scratch("trace-corrupt");
    let out = Command::new(bin("dlb-bench"))
        .args(["--ranks", "3", "--tasks", "60", "--no-progress", "--trace"])
        .arg(&dir)
        .output()
        .expect("dlb-bench");
    assert!(out.status.success(), "{}", output_text(&out));
    // Rank 0 counted a steal its log lacks: the summary says its log was full.
    let rank0 = dir.join("titus-trace-rank0.jsonl");
    let first = std::fs::read_to_string(&rank0).unwrap();
    let mut rec: serde_json::Value = serde_json::from_str(first.lines().next().unwrap()).unwrap();
    let ok = rec["stats"]["steals_ok"].as_u64().unwrap();
    rec["stats"]["steals_ok"] = (ok + 1).into();
    std::fs::write(&rank0, format!("{rec}\n")).unwrap();
    std::fs::write(dir.join("titus-trace-rank1.jsonl"), b"{not json\n").unwrap();
    std::fs::remove_file(dir.join("titus-trace-rank2.jsonl")).unwrap();
    std::fs::write(dir.join("titus-trace-rank3.jsonl"), b"").unwrap();
    let out = Command::new(bin("titus"))
        .arg("trace")
        .arg(&dir)
        .output()
        .expect("titus trace");
    let text = output_text(&out);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("titus-trace-rank1.jsonl' line 1"), "{text}");
    assert!(text.contains("rank 2's file is missing"), "{text}");
    assert!(
        text.contains("rank 0 epoch 0: the steal log is full"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    // No trace at all.
    let empty = scratch("trace-empty");
    std::fs::create_dir_all(&empty).unwrap();
    let out = Command::new(bin("titus"))
        .arg("trace")
        .arg(&empty)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
    let _ = std::fs::remove_dir_all(&empty);
}
