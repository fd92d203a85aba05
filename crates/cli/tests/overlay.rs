//! `titus overlay` as users run it: output formats, determinism, and bad input.

use std::process::{Command, Output};

fn titus(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_titus"))
        .args(args)
        .output()
        .expect("run titus")
}

fn json(args: &[&str]) -> serde_json::Value {
    let mut all = vec!["overlay", "--json"];
    all.extend_from_slice(args);
    let out = titus(&all);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 1, "--json prints one line");
    serde_json::from_str(&text).unwrap()
}

#[test]
fn json_has_the_figures_and_is_deterministic() {
    let args = [
        "--ranks",
        "2000",
        "--shortcuts",
        "12",
        "--pairs",
        "5000",
        "--seed",
        "9",
    ];
    let a = json(&args);
    for key in [
        "hops",
        "out_degree",
        "in_degree",
        "connections",
        "moore_bound",
        "shortcut_distances",
        "fitted_exponent",
        "timing",
    ] {
        assert!(a.get(key).is_some(), "missing key {key}");
    }
    assert_eq!(a["hops"]["pairs"], 5000);
    assert_eq!(a["out_degree"]["min"], 14);
    assert_eq!(a["out_degree"]["max"], 14);
    let b = json(&args);
    assert_eq!(a["hops"], b["hops"], "same seed, same routes");
    assert_eq!(a["in_degree"], b["in_degree"]);
    let c = json(&[
        "--ranks",
        "2000",
        "--shortcuts",
        "12",
        "--pairs",
        "5000",
        "--seed",
        "10",
    ]);
    assert_ne!(
        a["in_degree"], c["in_degree"],
        "another seed, another graph"
    );
    // The mean hop count lies between the Moore bound and the lattice diameter.
    let mean = a["hops"]["mean"].as_f64().unwrap();
    assert!(mean >= a["moore_bound"].as_f64().unwrap() && mean < 1000.0);
}

#[test]
fn table_names_every_figure() {
    let out = titus(&[
        "overlay",
        "--ranks",
        "500",
        "--pairs",
        "1000",
        "--lattice",
        "torus2",
    ]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for word in [
        "hops",
        "Moore bound",
        "out-degree",
        "in-degree",
        "connections",
        "fitted exponent",
        "timing",
        "torus2 25x20",
    ] {
        assert!(text.contains(word), "table lacks '{word}':\n{text}");
    }
}

#[test]
fn clamped_shortcuts_are_noted() {
    let out = titus(&[
        "overlay",
        "--ranks",
        "6",
        "--shortcuts",
        "50",
        "--pairs",
        "10",
        "--json",
    ]);
    assert!(out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("clamped to 3"), "{err}");
}

#[test]
fn bad_input_is_one_line_and_exit_code_2() {
    let cases: &[(&[&str], &str)] = &[
        (&["--ranks", "0"], "at least 1"),
        (&["--exponent", "-1"], "at least 0"),
        (&["--exponent", "inf"], "finite"),
        (&["--lattice", "hypercube"], "possible values"),
        (&["--routing", "bfs"], "possible values"),
        (&["--reach", "0"], "reach"),
        (
            &["--shape", "3x3", "--lattice", "torus2", "--ranks", "10"],
            "does not hold 10 ranks",
        ),
        (&["--shape", "axb", "--lattice", "torus2"], "not a shape"),
        (
            &["--export", "/nonexistent-dir/graph.txt"],
            "cannot write --export file",
        ),
        (&["--threads", "0"], "--threads"),
        (&["--pairs", "-5"], "--pairs"),
    ];
    for (args, needle) in cases {
        let mut all = vec!["overlay", "--pairs", "10"];
        all.extend_from_slice(args);
        let out = titus(&all);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(
            err.trim_end().lines().count(),
            1,
            "{args:?} must fail on one line: {err}"
        );
        assert!(err.contains(needle), "{args:?}: '{err}' lacks '{needle}'");
        assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    }
}

#[test]
fn help_is_complete() {
    let out = titus(&["overlay", "--help"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for flag in [
        "--ranks",
        "--shortcuts",
        "--exponent",
        "--lattice",
        "--routing",
        "--symmetric",
        "--pairs",
        "--seed",
        "--json",
        "--export",
        "--reach",
        "--shape",
        "--threads",
    ] {
        assert!(text.contains(flag), "help lacks {flag}");
    }
}

/// Bare `titus` prints its usage (on stderr) and exits 2, as any usage error.
#[test]
fn bare_titus_prints_its_usage() {
    let out = titus(&[]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Usage: titus <COMMAND>"), "{err}");
    assert!(err.contains("launch") && err.contains("sim"), "{err}");
}

/// `--shortcut-draw paired`: every shortcut goes both ways, so a rank's connections are
/// its out-neighbours, at most the 2 ring neighbours plus k; the Kleinberg draw's are
/// more. An unknown draw is refused.
#[test]
fn paired_shortcuts_bound_every_ranks_connections() {
    let args = |draw| {
        [
            "--ranks",
            "3000",
            "--shortcuts",
            "12",
            "--pairs",
            "2000",
            "--shortcut-draw",
            draw,
        ]
    };
    let k = json(&args("kleinberg"));
    let p = json(&args("paired"));
    assert_eq!(p["draw"], "paired");
    assert!(
        p["connections"]["max"].as_u64().unwrap() <= 14,
        "{}",
        p["connections"]
    );
    assert_eq!(p["connections"], p["out_degree"]);
    assert_eq!(p["in_degree"], p["out_degree"]);
    assert!(
        k["connections"]["max"].as_u64().unwrap() > 14,
        "{}",
        k["connections"]
    );
    assert!(p["hops"]["max"].as_u64().unwrap() > 0);
    let out = titus(&["overlay", "--shortcut-draw", "chord"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("chord") && err.contains("paired"), "{err}");
}
