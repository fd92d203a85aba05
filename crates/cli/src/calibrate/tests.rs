//! The calibration's unit tests.

use super::{
    CoreSpeeds, between_fit, grain_fit, op_cpu_fit, op_wait_fit, rank0_line, rank0_rows, residual,
    speeds_of, take_terms,
};
use serde_json::Value;

#[test]
fn core_speeds_are_relative_to_the_median_window_of_all_cores() {
    // Core 1 runs at half core 0's speed but for one burst at twice it.
    let w = [vec![100.0, 100.0, 100.0], vec![50.0, 50.0, 200.0]];
    assert_eq!(
        speeds_of(&w),
        CoreSpeeds {
            cores: vec![1.0, 0.5],
            least: 0.5,
            greatest: 2.0
        }
    );
    // Nothing measured: no drift claimed.
    let s = speeds_of(&[vec![], vec![]]);
    assert_eq!((s.cores, s.least, s.greatest), (vec![1.0, 1.0], 1.0, 1.0));
}

#[test]
fn the_operation_fit_finds_what_serving_and_issuing_cost() {
    // Without balancing: 1 ms of progress CPU per second of each rank's session. Then
    // rank 0 issued 100 operations and served rank 1's 200, at 20 µs served and 30 µs
    // issued, over 0.2 s.
    let none = r#"{"resolution_s":0.4,"progress_cpu_s":[0.0004,0.0004],"ops":[1,1]}"#;
    let y0 = 0.0002 + 200.0 * 20e-6 + 100.0 * 30e-6;
    let y1 = 0.0002 + 100.0 * 20e-6 + 200.0 * 30e-6;
    let balanced =
        format!(r#"{{"resolution_s":0.2,"progress_cpu_s":[{y0},{y1}],"ops":[100,200]}}"#);
    let out = format!("[1] {{}}\n[0] {none}\n[0] {balanced}\n");
    let (serve, issue) = op_cpu_fit(&rank0_rows(&out)).unwrap();
    assert!(
        (serve - 20.0).abs() < 1e-6 && (issue - 30.0).abs() < 1e-6,
        "{serve} {issue}"
    );
    // Ranks that issued alike cannot tell the two apart; a missing run is no fit.
    let even = balanced.replace("[100,200]", "[150,151]");
    let err = op_cpu_fit(&rank0_rows(&format!("[0] {none}\n[0] {even}\n"))).unwrap_err();
    assert!(err.contains("too close"), "{err}");
    let err = op_cpu_fit(&rank0_rows(&format!("[0] {none}\n"))).unwrap_err();
    assert!(err.contains("no two runs"), "{err}");
}

#[test]
fn the_time_between_tasks_is_the_owner_s_alone_the_balanced_owner_s_and_the_thief_s() {
    let row = |b: &str| serde_json::from_str::<Value>(b).unwrap();
    let close = |a: (f64, f64, f64), b: (f64, f64, f64)| {
        assert!(
            (a.0 - b.0).abs() < 1e-12 && (a.1 - b.1).abs() < 1e-12 && (a.2 - b.2).abs() < 1e-12,
            "{a:?} against {b:?}"
        );
    };
    let none = row(r#"{"between_tasks_us":[0.9,0.0]}"#);
    let balanced = row(r#"{"between_tasks_us":[1.5,2.3]}"#);
    close(
        between_fit(&[none.clone(), balanced]).unwrap(),
        (0.9, 1.5, 2.3),
    );
    // An owner faster balanced than alone is read as alone.
    let quick = row(r#"{"between_tasks_us":[0.7,0.5]}"#);
    close(
        between_fit(&[none.clone(), quick]).unwrap(),
        (0.9, 0.9, 0.5),
    );
    // An older dlb-bench without the key, or one run only: named.
    let old = row(r#"{"resolution_s":1.0}"#);
    assert!(
        between_fit(&[old.clone(), old.clone()])
            .unwrap_err()
            .contains("between_tasks_us of rank 0")
    );
    let one_rank = row(r#"{"between_tasks_us":[1.5]}"#);
    assert!(
        between_fit(&[none.clone(), one_rank])
            .unwrap_err()
            .contains("of both ranks")
    );
    assert!(between_fit(&[none]).unwrap_err().contains("1 runs, not 2"));
}

#[test]
fn a_term_is_what_the_simulated_gap_leaves_of_the_real_one_in_the_term_s_units() {
    // Simulated 1.0 µs at 0, 2.1 at 1 µs (the take stretched 1.1×); real 1.55: 0.5 µs.
    assert!((residual(1.55, 1.0, 2.1) - 0.5).abs() < 1e-12);
    // The model already explains more than the real gap: 0, not less.
    assert_eq!(residual(0.8, 1.0, 2.1), 0.0);
    // A term that moved nothing (no such take in the run) is 0.
    assert_eq!(residual(3.0, 1.0, 1.0), 0.0);
}

/// The calibration's balanced run, simulated over a preset whose `node` object has
/// its take terms at 0: the owner's simulated gap is the fit's origin, so a real gap
/// equal to it fits 0, and one a µs longer fits about a µs (stretched by the shared
/// cores).
#[test]
fn the_take_terms_fit_the_simulated_calibration_run_to_the_real_one() {
    let preset: Value =
        serde_json::from_str(include_str!("../../../sim/presets/node.json")).unwrap();
    let mut node = preset["node"].clone();
    node["balanced_take_us"] = 0.0.into();
    node["foreign_task_us"] = 0.0.into();
    let (b0, f0) = take_terms(&preset, &node, "node", 0.0, 0.0).unwrap();
    assert_eq!((b0, f0), (0.0, 0.0));
    let (b, f) = take_terms(&preset, &node, "node", 50.0, 60.0).unwrap();
    assert!(b > 40.0 && b < 55.0, "{b}");
    assert!(f > 0.0 && f < 15.0, "{f}");
}

#[test]
fn a_grain_s_tasks_beyond_the_first_are_what_the_takes_do_not_explain() {
    let row = |b: &str| serde_json::from_str::<Value>(b).unwrap();
    // 10,001 tasks in 2,001 takes of 5: 10,000 gaps of 0.3 µs = 3,000 µs; 2,000 takes
    // after a task at 1 µs = 2,000 µs; 8,000 tasks beyond a take's first: 0.125 µs.
    let run = row(r#"{"between_tasks_us":[0.3,0.0],"grains":[2001,0],"tasks":10001}"#);
    assert!((grain_fit(&[run], 1.0).unwrap() - 0.125).abs() < 1e-12);
    // Takes costlier than the gaps: 0, not less.
    let cheap = row(r#"{"between_tasks_us":[0.1,0.0],"grains":[2001,0],"tasks":10001}"#);
    assert_eq!(grain_fit(&[cheap], 1.0).unwrap(), 0.0);
    // One task a take, no grains figure, or two runs: named.
    let single = row(r#"{"between_tasks_us":[1.0,0.0],"grains":[100,0],"tasks":100}"#);
    assert!(
        grain_fit(&[single], 1.0)
            .unwrap_err()
            .contains("no grain of several")
    );
    let old = row(r#"{"between_tasks_us":[1.0,0.0],"tasks":100}"#);
    assert!(
        grain_fit(std::slice::from_ref(&old), 1.0)
            .unwrap_err()
            .contains("grains")
    );
    assert!(
        grain_fit(&[old.clone(), old], 1.0)
            .unwrap_err()
            .contains("2 runs, not 1")
    );
}

#[test]
fn the_wait_fit_finds_a_busy_target_s_extra_and_own_memory_s_time() {
    // The model: 20 µs one way, atomics 10 µs at the target. The thief's 10 reads
    // took 70 µs (30 more than idle) and its 30 fetch-adds 90 (40 more): 37.5 µs
    // count-weighted. Own memory: 10 at 5 µs and 30 at 25: 20 µs.
    let mut model = titus_sim::Model::preset("mem").unwrap();
    model.latency_ns = 20_000.0;
    model.atomic_ns = 10_000.0;
    model.polled = false;
    let run = r#"{"op_latency":[{"own":{"count":10,"mean_us":5}},{"read":{"count":10,"mean_us":70},"fetch-add":{"count":30,"mean_us":90},"own":{"count":30,"mean_us":25}}]}"#;
    let out = format!("[0] {{\"first\":1}}\n[1] {{}}\n[0] {run}\n");
    let rows = rank0_rows(&out);
    let (busy, own) = op_wait_fit(&rows, &model).unwrap();
    assert!(
        (busy - 37.5).abs() < 1e-9 && (own - 20.0).abs() < 1e-9,
        "{busy} {own}"
    );
    // A polled target's wait is modelled apart; faster than idle is no extra.
    model.polled = true;
    assert_eq!(op_wait_fit(&rows, &model).unwrap().0, 0.0);
    model.polled = false;
    model.latency_ns = 100_000.0;
    assert_eq!(op_wait_fit(&rows, &model).unwrap().0, 0.0);
    // A thief that completed nothing on the owner, or no figures: no fit.
    let idle = r#"[0] {"op_latency":[{},{"own":{"count":1,"mean_us":1}}]}"#;
    let err = op_wait_fit(&rank0_rows(idle), &model).unwrap_err();
    assert!(err.contains("completed no reads"), "{err}");
    let err = op_wait_fit(&rank0_rows("[0] {\"ops\":[1,2]}\n"), &model).unwrap_err();
    assert!(err.contains("no op_latency"), "{err}");
}

#[test]
fn finds_rank_0_behind_a_padded_prefix() {
    assert_eq!(
        rank0_line("[1] {\"a\":1}\n[0] {\"b\":2}\n"),
        Some("{\"b\":2}")
    );
    // 16 ranks: the launcher pads to two digits (seen on a 16-core machine).
    let out = "[ 3] text\n[10] {\"c\":3}\n[ 0] {\"d\":4}\n";
    assert_eq!(rank0_line(out), Some("{\"d\":4}"));
    assert_eq!(rank0_line("[ 0] not json\n[1] {}\n"), None);
    assert_eq!(rank0_line("[10] {}\n"), None);
}
