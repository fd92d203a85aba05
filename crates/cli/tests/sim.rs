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
fn bad_epochs_and_drift_are_one_line_and_exit_code_2() {
    for (args, needle) in [
        (&["--epochs", "0"][..], "--epochs must be at least 1"),
        (&["--epochs", "-2"][..], "--epochs"),
        (&["--drift", "-1"][..], "--drift -1 is not a fraction"),
        (&["--drift", "abc"][..], "--drift"),
        (&["--drift", "NaN"][..], "--drift NaN is not a fraction"),
        (&["--diffusion", "sometimes"][..], "--diffusion"),
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
