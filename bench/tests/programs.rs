//! The benchmark programs run and print what they promise (tiny sizes; figures come from
//! real runs, see the README).

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
    let run = |balancer: &str| -> serde_json::Value {
        let out = dlb(&[
            "--ranks",
            "3",
            "--tasks",
            "120",
            "--task-time",
            "0.0005",
            "--balancer",
            balancer,
            "--json",
        ]);
        assert!(
            out.status.success(),
            "{balancer}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    for balancer in ["none", "smallworld", "random"] {
        let r = run(balancer);
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
        (&["--balancer", "master"][..], "not in this build yet"),
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
