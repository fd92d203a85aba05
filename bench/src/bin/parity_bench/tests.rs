//! parity-bench's unit tests.

use super::*;
use serde_json::json;

#[test]
fn balancer_lists_are_checked_name_by_name() {
    assert!(unknown_balancer("none,smallworld,random,master,hierarchical").is_none());
    assert!(unknown_balancer("all").is_none());
    let (bad, names) = unknown_balancer("none,smallwrld").unwrap();
    assert_eq!(bad, "smallwrld");
    assert!(names.iter().any(|n| n == "hierarchical") && names.iter().any(|n| n == "all"));
    // As dlb-bench splits the list: no trimming, and an empty name is refused.
    assert_eq!(unknown_balancer("none, random").unwrap().0, " random");
    assert_eq!(unknown_balancer("none,,random").unwrap().0, "");
}

#[test]
fn sustained_speed_is_each_ranks_busy_over_owned_in_the_none_rows() {
    let real = [
        json!({"balancer": "none", "busy_s": [1.10, 0.0], "owned_s": [1.0, 0.0]}),
        json!({"balancer": "none", "busy_s": [1.30, 0.0], "owned_s": [1.0, 0.0]}),
        // Balanced rows do not count: their busy time holds stolen work.
        json!({"balancer": "smallworld", "busy_s": [0.6, 0.6], "owned_s": [1.0, 0.0]}),
    ];
    // Rank 1 owned nothing: the median over every rank's rows.
    assert_eq!(sustained(&real, 2).unwrap(), "0:1.3000,1:1.3000");
    // Per rank, the median epoch: one slow epoch does not move it.
    let epochs = [
        json!({"balancer": "none", "busy_s": [0.5, 2.2], "owned_s": [0.5, 2.0]}),
        json!({"balancer": "none", "busy_s": [0.52, 2.2], "owned_s": [0.5, 2.0]}),
        json!({"balancer": "none", "busy_s": [0.9, 2.0], "owned_s": [0.5, 2.0]}),
    ];
    assert_eq!(sustained(&epochs, 2).unwrap(), "0:1.0400,1:1.1000");
}

#[test]
fn repeated_real_runs_give_their_median_row_and_each_runs_pair() {
    let row = |eff: f64, t: f64, cal: f64| {
        json!({"balancer": "random", "protocol": "claim", "epoch": 0,
               "efficiency": eff, "resolution_s": t, "calibration_s": cal})
    };
    let runs = vec![
        vec![row(0.90, 1.00, 3.0)],
        vec![row(0.96, 1.20, 1.0)],
        vec![row(0.94, 1.02, 2.0)],
    ];
    let (m, each) = median_rows(&runs).unwrap();
    assert_eq!(m[0]["efficiency"], 0.94);
    assert_eq!(m[0]["resolution_s"], 1.02);
    assert_eq!(m[0]["calibration_s"], 3.0, "the first run's");
    assert_eq!(each[0], vec![(0.90, 1.00), (0.96, 1.20), (0.94, 1.02)]);
    // Even counts: the mean of the middle two.
    assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
    // A run whose rows differ is refused, naming it.
    let other = vec![
        runs[0].clone(),
        vec![json!({"balancer": "none", "protocol": "claim", "epoch": 0})],
    ];
    assert!(median_rows(&other).unwrap_err().contains("real run 2"));
    let short = vec![runs[0].clone(), Vec::new()];
    assert!(median_rows(&short).unwrap_err().contains("real run 2"));
    let mut bad = runs.clone();
    bad[1][0]["efficiency"] = Value::Null;
    assert!(median_rows(&bad).unwrap_err().contains("no efficiency"));
    // A row's real runs agree only when each lies within the goal of their median.
    let mut r = Row {
        provider: "shm".into(),
        ranks: 2,
        job: "quick".into(),
        node_model: "on".into(),
        task_speed: "startup".into(),
        run: "random/claim".into(),
        epoch: 0,
        real: (0.94, 1.02),
        sim: (0.95, 1.0),
        runs: each[0].clone(),
        digests_agree: true,
        between: (1.0, 1.0),
    };
    assert!(r.within() && !r.runs_agree());
    r.runs = vec![(0.93, 1.0), (0.95, 1.05)];
    assert!(r.runs_agree());
    // The time's spread check: from 5% below the fastest run to 5% above the slowest.
    r.runs = vec![(0.94, 1.2), (0.94, 1.5), (0.94, 1.3)];
    r.real = (0.94, 1.3);
    for (sim, inside) in [
        (1.13, false),
        (1.15, true),
        (1.0, false),
        (1.57, true),
        (1.58, false),
    ] {
        r.sim.1 = sim;
        assert_eq!(r.time_in_spread(), inside, "simulated {sim} s");
        assert_eq!(r.within_spread(), inside, "simulated {sim} s");
    }
    // The efficiency half still counts.
    r.sim = (0.97, 1.3);
    assert!(r.time_in_spread() && !r.within_spread());
    // One run: ±5% of it.
    r.runs = vec![(0.94, 1.0)];
    r.sim = (0.94, 1.049);
    assert!(r.time_in_spread());
    r.sim.1 = 0.949;
    assert!(!r.time_in_spread());
}

#[test]
fn a_jobs_epochs_together_sum_their_times_and_weight_their_efficiencies() {
    let row = |run: &str, epoch, real, sim, runs: Vec<(f64, f64)>| Row {
        provider: "node".into(),
        ranks: 2,
        job: "chem".into(),
        node_model: "on".into(),
        task_speed: "startup".into(),
        run: run.into(),
        epoch,
        real,
        sim,
        runs,
        digests_agree: true,
        between: (1.0, 1.0),
    };
    let rows = [
        row("none", 0, (0.5, 2.0), (0.5, 2.0), vec![(0.5, 2.0)]),
        row(
            "random/claim",
            0,
            (0.9, 1.0),
            (0.8, 1.0),
            vec![(0.9, 1.0), (0.7, 1.0)],
        ),
        row(
            "random/claim",
            1,
            (1.0, 3.0),
            (1.0, 1.0),
            vec![(1.0, 3.0), (0.9, 2.0)],
        ),
    ];
    let j = jobs(&rows);
    assert_eq!(j.len(), 2);
    assert_eq!(
        (j[0].1, j[0].0.real, j[0].0.sim),
        (1, (0.5, 2.0), (0.5, 2.0))
    );
    let (both, epochs) = &j[1];
    assert_eq!(*epochs, 2);
    // Simulated: (0.8 + 1.0) / 2 s; real runs: (0.9 + 3.0) / 4 s and (0.7 + 1.8) / 3 s,
    // their median the mean of the two.
    assert!((both.sim.0 - 0.9).abs() < 1e-12 && (both.sim.1 - 2.0).abs() < 1e-12);
    let (a, b) = (3.9 / 4.0, 2.5 / 3.0);
    assert!((both.runs[0].0 - a).abs() < 1e-12 && (both.runs[1].0 - b).abs() < 1e-12);
    assert!((both.real.0 - (a + b) / 2.0).abs() < 1e-12 && (both.real.1 - 3.5).abs() < 1e-12);
    // Within: |0.9 − 0.904| ≤ 0.02 but the time is 43% short.
    assert!(!both.within() && !both.runs_agree());
}

#[test]
fn sustained_speed_needs_a_none_run_with_every_rank() {
    let balanced = [json!({"balancer": "random", "busy_s": [1.0], "owned_s": [1.0]})];
    assert!(sustained(&balanced, 1).unwrap_err().contains("needs none"));
    let short = [json!({"balancer": "none", "busy_s": [1.0], "owned_s": [1.0]})];
    assert!(
        sustained(&short, 2)
            .unwrap_err()
            .contains("busy_s for 2 ranks")
    );
    let idle = [json!({"balancer": "none", "busy_s": [0.0, 0.0], "owned_s": [0.0, 0.0]})];
    assert!(sustained(&idle, 2).unwrap_err().contains("no work"));
}
