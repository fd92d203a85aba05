//! `uts-bench`: the balanced traversal of a UTS tree counts exactly what the library's
//! sequential traversal counts, in one process and as processes under `titus launch`,
//! over every balancer and a binomial tree as well as a geometric one.

use std::process::Command;
use titus_tests::{bin, output_text};
use titus_workload::uts::{GeoShape, Tree, TreeKind};

/// A geometric tree of fixed shape (T1's, five levels shallower: 5,593 nodes).
const GEO: &[&str] = &["-t", "1", "-a", "3", "-d", "5", "-b", "4", "-r", "19"];
/// A binomial tree (T3's, with 100 root children instead of 2,000).
const BIN: &[&str] = &[
    "-t", "0", "-b", "100", "-q", "0.124875", "-m", "8", "-r", "42",
];

fn tree_of(args: &[&str]) -> Tree {
    let v = |f: &str| args[args.iter().position(|a| *a == f).expect("flag") + 1];
    match v("-t") {
        "0" => Tree {
            kind: TreeKind::Binomial,
            b: v("-b").parse().unwrap(),
            q: v("-q").parse().unwrap(),
            m: v("-m").parse().unwrap(),
            seed: v("-r").parse().unwrap(),
            ..Tree::default()
        },
        _ => Tree {
            kind: TreeKind::Geometric,
            shape: GeoShape::Fixed,
            d: v("-d").parse().unwrap(),
            b: v("-b").parse().unwrap(),
            seed: v("-r").parse().unwrap(),
            ..Tree::default()
        },
    }
}

/// Runs `c` and checks its JSON against the sequential traversal of `tree`.
fn check(mut c: Command, tree: &[&str], what: &str) {
    let out = c.args(tree).arg("--json").output().expect("run uts-bench");
    let text = output_text(&out);
    assert!(out.status.success(), "{what}: {text}");
    let line = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(line.trim()).expect(&text);
    let t = tree_of(tree);
    let want = t.traverse(t.root());
    assert_eq!(v["nodes"], want.nodes, "{what}: {text}");
    assert_eq!(v["leaves"], want.leaves, "{what}: {text}");
    assert_eq!(v["max_depth"], want.max_depth, "{what}: {text}");
    for key in ["nodes_per_s", "efficiency"] {
        assert!(
            v[key].as_f64().is_some_and(|x| x > 0.0),
            "{what}: {key} in {text}"
        );
    }
}

#[test]
fn every_balancer_in_one_process_counts_the_whole_tree() {
    for balancer in ["none", "smallworld", "random", "master", "hierarchical"] {
        for (name, tree) in [("geometric", GEO), ("binomial", BIN)] {
            let mut c = Command::new(bin("uts-bench"));
            c.args(["--ranks", "3", "--balancer", balancer]);
            check(c, tree, &format!("{name}, {balancer}"));
        }
    }
}

#[test]
fn ranks_as_processes_count_the_whole_tree() {
    for (name, tree) in [("geometric", GEO), ("binomial", BIN)] {
        let mut c = Command::new(bin("titus"));
        c.args(["launch", "-n", "2", "--no-prefix", "--timeout", "120", "--"])
            .arg(bin("uts-bench"))
            .args(["--workers", "2"]);
        check(c, tree, &format!("{name} under titus launch"));
    }
}
