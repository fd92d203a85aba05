//! `uts-bench`: the balanced traversal of a UTS tree counts exactly what the library's
//! sequential traversal counts, with tasks that spawn tasks and with a static frontier,
//! in one process and as 2 and 3 processes under `titus launch` (node and `tcp;ofi_rxm`),
//! over every balancer and a binomial tree as well as a geometric one, as 2 processes
//! started the way srun starts them (Slurm's variables, no Slurm), under srun itself where
//! a Slurm cluster answers, and simulated (`titus sim --uts`).

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
    c.args(tree).arg("--json");
    check_without_args(c, tree, what);
}

/// [`check`] for a command that has the tree's flags and `--json` already; returns its
/// JSON.
fn check_without_args(mut c: Command, tree: &[&str], what: &str) -> serde_json::Value {
    let out = c.output().expect("run uts-bench");
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
    v
}

/// Spawn mode with tasks of 16 nodes: thousands of spawns, steals and waves on a small
/// tree.
const SPAWN: &[&str] = &["--mode", "spawn", "--chunk", "16"];

/// [`SPAWN`] with every spawned task's counts sent home to rank 0 instead of reduced.
const SPAWN_HOME: &[&str] = &["--mode", "spawn", "--chunk", "16", "--results", "home"];

#[test]
fn every_balancer_in_one_process_counts_the_whole_tree() {
    for balancer in ["none", "smallworld", "random", "master", "hierarchical"] {
        for (name, tree) in [("geometric", GEO), ("binomial", BIN)] {
            for mode in [SPAWN, SPAWN_HOME, &["--mode", "static"][..]] {
                let mut c = Command::new(bin("uts-bench"));
                c.args(["--ranks", "3", "--balancer", balancer]).args(mode);
                check(c, tree, &format!("{name}, {balancer}, {mode:?}"));
            }
        }
    }
}

#[test]
fn ranks_as_processes_count_the_whole_tree() {
    let mut providers = vec!["node"];
    if titus_tests::libfabric_or_skip() {
        providers.push("tcp;ofi_rxm");
    }
    for provider in providers {
        for ranks in ["2", "3"] {
            for (name, tree) in [("geometric", GEO), ("binomial", BIN)] {
                let mut c = Command::new(bin("titus"));
                c.args(["launch", "-n", ranks, "--provider", provider, "--no-prefix"])
                    .args(["--timeout", "120", "--"])
                    .arg(bin("uts-bench"))
                    .args(["--workers", "2"])
                    .args(SPAWN);
                check(
                    c,
                    tree,
                    &format!("{name}, {ranks} processes over {provider}"),
                );
            }
        }
    }
    // Results home, over processes: every spawned task's counts cross to rank 0.
    for (name, tree) in [("geometric", GEO), ("binomial", BIN)] {
        let mut c = Command::new(bin("titus"));
        c.args(["launch", "-n", "3", "--no-prefix", "--timeout", "120", "--"])
            .arg(bin("uts-bench"))
            .args(["--workers", "2"])
            .args(SPAWN_HOME);
        check(c, tree, &format!("{name}, results home over 3 processes"));
    }
    // A static frontier under the launcher, too.
    let mut c = Command::new(bin("titus"));
    c.args(["launch", "-n", "2", "--no-prefix", "--timeout", "120", "--"])
        .arg(bin("uts-bench"))
        .args(["--mode", "static"]);
    check(c, GEO, "a static frontier under titus launch");
}

/// Two processes with the variables srun gives its tasks (no PMIx: the rendezvous at the
/// port derived from the job and step, on the first node of the list): the Slurm path of
/// the bootstrap, which this machine has no Slurm to take. Rank 0 prints.
#[test]
fn processes_started_as_srun_starts_them_count_the_whole_tree() {
    // A job id of this test's own, so that concurrent runs derive different ports.
    let job = 40_000 + std::process::id() % 20_000;
    for (name, tree) in [("geometric", GEO), ("binomial", BIN)] {
        let ranks: Vec<_> = (0..2)
            .map(|r| {
                let mut c = Command::new(bin("uts-bench"));
                c.env_remove("TITUS_RANK")
                    .env_remove("TITUS_SIZE")
                    .env_remove("PMIX_RANK")
                    .envs([
                        ("SLURM_PROCID", r.to_string()),
                        ("SLURM_LOCALID", r.to_string()),
                        ("SLURM_NTASKS", "2".into()),
                        ("SLURM_NODEID", "0".into()),
                        ("SLURM_STEP_TASKS_PER_NODE", "2".into()),
                        ("SLURM_JOB_ID", job.to_string()),
                        ("SLURM_STEP_ID", "0".into()),
                        ("SLURM_JOB_NODELIST", "localhost".into()),
                        ("SLURM_STEP_NODELIST", "localhost".into()),
                    ])
                    .args(SPAWN)
                    .args(tree)
                    .arg("--json");
                c
            })
            .collect();
        let mut rank1 = ranks.into_iter().rev();
        let mut c1 = rank1.next().expect("rank 1");
        let child = c1
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("rank 1");
        let c0 = rank1.next().expect("rank 0");
        let v = check_without_args(c0, tree, &format!("{name}, srun's variables"));
        assert_eq!(v["ranks"], 2, "{name}: one job of two processes");
        let out = child.wait_with_output().expect("rank 1 ends");
        assert!(
            out.status.success(),
            "{name}: rank 1: {}",
            output_text(&out)
        );
    }
}

/// Under srun itself, where a Slurm cluster answers: Slurm's PMIx and its variables alone,
/// 2 and 3 processes, node and `tcp;ofi_rxm`.
#[test]
fn srun_counts_the_whole_tree() {
    if !titus_tests::slurm_or_skip() {
        return;
    }
    let mut runs = vec![
        ("pmix", 2, "node"),
        ("pmix", 3, "node"),
        ("none", 2, "node"),
    ];
    if titus_tests::libfabric_or_skip() {
        runs.push(("pmix", 2, "tcp;ofi_rxm"));
    }
    for (mpi, ranks, provider) in runs {
        for (name, tree) in [("geometric", GEO), ("binomial", BIN)] {
            let mut c = titus_tests::srun(ranks, mpi);
            c.env("TITUS_PROVIDER", provider)
                .arg(bin("uts-bench"))
                .args(["--workers", "1"])
                .args(SPAWN)
                .args(tree)
                .arg("--json");
            let what = format!("{name}, srun --mpi={mpi} -n {ranks} over {provider}");
            let v = check_without_args(c, tree, &what);
            assert_eq!(v["ranks"], ranks, "{what}: one job");
        }
    }
}

/// `titus sim --uts`: the same trees, simulated at 1 to 64 ranks over two presets and
/// with results reduced or sent home, count what the sequential traversal counts.
#[test]
fn the_simulator_traverses_the_same_trees() {
    for (name, tree) in [("geometric", GEO), ("binomial", BIN)] {
        for (ranks, preset, results) in [
            ("1", "ib-hdr", "reduced"),
            ("64", "ib-hdr", "reduced"),
            ("16", "tcp-loopback", "reduced"),
            ("64", "ib-hdr", "home"),
        ] {
            let mut c = Command::new(bin("titus"));
            c.args([
                "sim",
                "--ranks",
                ranks,
                "--preset",
                preset,
                "--uts-chunk",
                "16",
                "--uts-results",
                results,
            ])
            .arg("--uts")
            .arg(tree.join(" "));
            let out = c.arg("--json").output().expect("titus sim --uts");
            let text = output_text(&out);
            assert!(out.status.success(), "{name}, {ranks} ranks: {text}");
            let v: serde_json::Value =
                serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim()).expect(&text);
            let t = tree_of(tree);
            let want = t.traverse(t.root());
            assert_eq!(v["nodes"], want.nodes, "{name}, {ranks} ranks: {text}");
            assert_eq!(v["leaves"], want.leaves, "{name}, {ranks} ranks: {text}");
            assert_eq!(
                v["max_depth"], want.max_depth,
                "{name}, {ranks} ranks: {text}"
            );
            assert!(v["efficiency"].as_f64().is_some_and(|e| e > 0.0), "{text}");
        }
    }
}
