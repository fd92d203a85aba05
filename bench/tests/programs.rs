//! The benchmark programs run and print what they promise (tiny sizes; figures come from
//! real runs, see docs/results.md).

use std::process::Command;

#[test]
fn runtime_bench_in_process_verifies_every_protocol() {
    let out = Command::new(env!("CARGO_BIN_EXE_runtime-bench"))
        .args([
            "--ranks",
            "3",
            "--tasks",
            "300",
            "--task-ms",
            "0.05",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with('{')).collect();
    assert_eq!(lines.len(), 3, "one report per protocol:\n{text}");
    for (l, p) in lines.iter().zip(["lock", "claim", "request"]) {
        for key in [
            format!("\"protocol\":\"{p}\""),
            "\"verified\":true".into(),
            "\"efficiency\":".into(),
            "\"steal_p50_us\":".into(),
            "\"nominal_efficiency\":".into(),
        ] {
            assert!(l.contains(&key), "{key} missing: {l}");
        }
    }
    let bad = Command::new(env!("CARGO_BIN_EXE_runtime-bench"))
        .args(["--protocol", "steal-everything"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown steal protocol"));
}

#[test]
fn overlay_bench_prints_every_case() {
    let out = Command::new(env!("CARGO_BIN_EXE_overlay-bench"))
        .args([
            "--pairs",
            "2000",
            "--scale-ranks",
            "20000",
            "--scale-pairs",
            "1000",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    for case in [
        "titus",
        "non-64out",
        "non-64conn",
        "defaults-ring",
        "defaults-torus2",
        "defaults-torus3",
        "scale",
    ] {
        assert!(
            text.contains(&format!("\"case\":\"{case}\"")),
            "{case} missing:\n{text}"
        );
    }
}

fn dlb(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_dlb-bench"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn dlb_bench_verifies_and_shows_the_imbalance() {
    // Every balancer in one run, side by side: one JSON line each, in order.
    let out = dlb(&[
        "--ranks",
        "3",
        "--tasks",
        "120",
        "--task-time",
        "0.0005",
        "--balancer",
        "all",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let reports: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let names = ["none", "smallworld", "random", "master", "hierarchical"];
    assert_eq!(reports.len(), names.len(), "{text}");
    for (r, balancer) in reports.iter().zip(names) {
        assert_eq!(r["balancer"], balancer);
        for key in [
            "efficiency",
            "resolution_s",
            "ideal_s",
            "ranks",
            "balancer",
            "protocol",
            "seed",
            "verified",
        ] {
            assert!(r.get(key).is_some(), "{balancer}: {key} missing");
        }
        assert_eq!(r["verified"], true);
        assert_eq!(r["ranks"], 3);
        if balancer == "none" {
            assert_eq!(r["steals_ok"], 0);
            // Gaussian ownership piles the tasks onto the middle rank.
            let busy: Vec<f64> = r["busy_s"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap())
                .collect();
            assert!(busy[1] > busy[0] + busy[2], "no imbalance: {busy:?}");
        } else {
            // Every balancer moves work off the middle rank (none of them is a formula).
            assert!(r["steals_ok"].as_u64().unwrap() > 0, "{balancer}: {r}");
        }
        if balancer == "hierarchical" {
            assert_eq!(r["group_size"], 2, "⌈√3⌉");
        }
    }
    let csv = dlb(&[
        "--ranks",
        "2",
        "--tasks",
        "40",
        "--task-time",
        "0.0002",
        "--cost",
        "bimodal",
        "--distribution",
        "uniform",
        "--csv",
    ]);
    assert!(csv.status.success());
    let text = String::from_utf8(csv.stdout).unwrap();
    assert!(
        text.starts_with("efficiency,resolution_s,ideal_s,ranks") && text.lines().count() == 2,
        "{text}"
    );
}

#[test]
fn dlb_bench_bad_input_is_one_line_and_exit_code_2() {
    for (args, needle) in [
        (&["--profile", "nope"][..], "unknown --profile"),
        (&["--sweep", "ranks"][..], "expected PARAM=V1,V2"),
        (&["--sweep", "colour=1,2"][..], "unknown parameter 'colour'"),
        (&["--sweep", "ranks=2,x"][..], "'x' is not a rank count"),
        (
            &["--group-size", "0"][..],
            "--group-size must be at least 1",
        ),
        (&["--plot", "/dev/null"][..], "is not a directory"),
        (&["--distribution", "file"][..], "needs --counts"),
        (
            &["--distribution", "file", "--counts", "/nonexistent"][..],
            "cannot read --counts",
        ),
        (&["--task-time", "-1"][..], "not a non-negative"),
        (&["--ranks", "0"][..], "--ranks must be at least 1"),
        (&["--workers", "0"][..], "--workers must be at least 1"),
    ] {
        let out = dlb(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(needle) && err.trim_end().lines().count() == 1,
            "{args:?}: {err}"
        );
    }
}

#[test]
fn dlb_bench_plots_and_sweeps() {
    let dir = std::env::temp_dir().join(format!("titus-dlb-plots-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let d = dir.to_str().unwrap();
    let out = dlb(&[
        "--ranks",
        "3",
        "--tasks",
        "60",
        "--task-time",
        "0.0005",
        "--balancer",
        "none,smallworld",
        "--plot",
        d,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("run ") && text.contains("smallworld/claim"),
        "{text}"
    );
    for f in ["efficiency", "ranks", "steals-smallworld-claim"] {
        for ext in ["png", "svg"] {
            let p = dir.join(format!("{f}.{ext}"));
            assert!(
                std::fs::metadata(&p).is_ok_and(|m| m.len() > 1000),
                "{} missing or empty",
                p.display()
            );
        }
    }
    // A sweep over ranks: one CSV row per point and balancer, and its plot.
    let out = dlb(&[
        "--sweep",
        "ranks=1,2",
        "--tasks",
        "40",
        "--task-time",
        "0.0002",
        "--balancer",
        "none,master",
        "--csv",
        "--plot",
        d,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let csv = std::fs::read_to_string(dir.join("sweep.csv")).unwrap();
    let rows: Vec<&str> = csv.lines().collect();
    assert!(rows[0].starts_with("ranks,run,efficiency,"), "{csv}");
    assert_eq!(rows.len(), 5, "{csv}");
    assert!(
        rows[1].starts_with("1,none,") && rows[4].starts_with("2,master,"),
        "{csv}"
    );
    assert!(dir.join("sweep-efficiency.png").exists() && dir.join("sweep-efficiency.svg").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}
