//! Jobs under Open MPI's `mpirun` with no Titus variable set: they bootstrap through
//! mpirun's PMIx server (no rendezvous address, port or secret), over each backend — the
//! default (`node`, shared memory, on one machine), and libfabric's `tcp;ofi_rxm` and
//! `shm` — at 2, 3 and 4 ranks (oversubscribed on a small machine). A PMIx key that a
//! rank never published is a clear error within the bootstrap timeout, and an explicit
//! `TITUS_BOOTSTRAP` still wins over PMIx. Skips (saying why) only where libpmix or
//! mpirun are genuinely absent.

use std::process::{Command, Output};
use titus_tests::{bin, mpirun, output_text, pmix_or_skip};

/// The backends to try: the default, then libfabric's providers when this build has
/// libfabric.
fn providers() -> Vec<Option<&'static str>> {
    let mut v = vec![None];
    if titus_tests::libfabric_or_skip() {
        v.extend([Some("tcp;ofi_rxm"), Some("shm")]);
    }
    v
}

fn run(cmd: &mut Command, what: &str) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot start {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}",
        out.status,
        output_text(&out)
    );
    out
}

fn with_provider(mut c: Command, provider: Option<&str>) -> Command {
    if let Some(p) = provider {
        c.args(["-x", &format!("TITUS_PROVIDER={p}")]);
    }
    c
}

#[test]
fn dlb_bench_under_mpirun_bootstraps_through_pmix() {
    if !pmix_or_skip() {
        return;
    }
    for provider in providers() {
        for n in [2, 3, 4] {
            let what = format!("mpirun -n {n} dlb-bench ({})", provider.unwrap_or("node"));
            let out = run(
                with_provider(mpirun(n), provider)
                    .arg(bin("dlb-bench"))
                    .args(["--profile", "quick", "--no-progress"]),
                &what,
            );
            let text = output_text(&out);
            assert!(
                text.contains(&format!("dlb-bench: {n} ranks x")) && text.contains("verified true"),
                "{what}:\n{text}"
            );
            assert!(!text.contains("verified false"), "{what}:\n{text}");
        }
    }
}

#[test]
fn runtime_bench_under_mpirun_bootstraps_through_pmix() {
    if !pmix_or_skip() {
        return;
    }
    for provider in providers() {
        for n in [2, 3, 4] {
            let what = format!(
                "mpirun -n {n} runtime-bench ({})",
                provider.unwrap_or("node")
            );
            let out = run(
                with_provider(mpirun(n), provider)
                    .arg(bin("runtime-bench"))
                    .args(["--protocol", "claim", "--tasks", "300", "--json"]),
                &what,
            );
            let text = String::from_utf8_lossy(&out.stdout);
            let reports: Vec<serde_json::Value> = text
                .lines()
                .filter(|l| l.starts_with('{'))
                .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{what}: {e}: {l}")))
                .collect();
            assert!(
                !reports.is_empty(),
                "{what}: no report:\n{}",
                output_text(&out)
            );
            for r in reports {
                assert_eq!(
                    (&r["ranks"], &r["verified"]),
                    (&n.into(), &true.into()),
                    "{what}: {r}"
                );
            }
        }
    }
}

/// Every rank but the last publishes a key, then all read it from every rank: the reads
/// from the last rank fail within the bootstrap timeout (2 s here; mpirun's own limit of
/// 120 s never comes into play), naming the rank and the key — not a hang, not a
/// fallback to another bootstrap.
#[test]
fn a_key_never_published_is_a_clear_error_within_the_timeout() {
    if !pmix_or_skip() {
        return;
    }
    let out = mpirun(3)
        .args(["-x", "TITUS_BOOTSTRAP_TIMEOUT=2"])
        .arg(bin("bootstrap-bench"))
        .arg("--missing-key")
        .output()
        .expect("start mpirun");
    let text = output_text(&out);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("PMIx bootstrap: rank 2 did not publish key 'titus.fault.missing'")
            && text.contains("within 2s"),
        "{text}"
    );
    // The program's own exit status for this error, not mpirun's time limit.
    assert!(text.contains("Exit code:    3"), "{text}");
    assert!(!text.contains("time limit"), "{text}");
}

/// The log says which bootstrap the job used; an explicit TITUS_BOOTSTRAP wins over the
/// PMIx server mpirun offers. Both meet and exchange correctly (the bench checks every
/// blob of every all-gather).
#[test]
fn the_log_names_the_bootstrap_and_titus_bootstrap_wins() {
    if !pmix_or_skip() {
        return;
    }
    let log = ["-x", "TITUS_LOG=titus_fabric::bootstrap=info"];
    let out = run(
        mpirun(2)
            .args(log)
            .arg(bin("bootstrap-bench"))
            .args(["--rounds", "3"]),
        "bootstrap-bench over PMIx",
    );
    let text = output_text(&out);
    assert!(
        text.contains("bootstrap: PMIx (the launcher's server) — namespace")
            && text.contains("bootstrap pmix"),
        "{text}"
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = run(
        mpirun(2)
            .args(log)
            .args(["-x", &format!("TITUS_BOOTSTRAP=127.0.0.1:{port}")])
            .arg(bin("bootstrap-bench"))
            .args(["--rounds", "3"]),
        "bootstrap-bench over the rendezvous",
    );
    let text = output_text(&out);
    assert!(
        text.contains("bootstrap: the rendezvous at TITUS_BOOTSTRAP — 127.0.0.1:")
            && text.contains("bootstrap rendezvous"),
        "{text}"
    );
    assert!(!text.contains("PMIx"), "{text}");
}

/// A PMIx launcher that sets none of the launcher variables Titus knows (a bare
/// `prterun`; played here by `mpirun` with its `OMPI_COMM_WORLD_*` variables removed):
/// rank and size come from the server, and the job runs as its ranks, not as separate
/// single-rank jobs.
#[test]
fn a_bare_pmix_launcher_gives_rank_and_size() {
    if !pmix_or_skip() {
        return;
    }
    let mut c = mpirun(3);
    c.arg("env");
    for v in [
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE",
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "OMPI_COMM_WORLD_LOCAL_SIZE",
        "OMPI_COMM_WORLD_NODE_RANK",
    ] {
        c.args(["-u", v]);
    }
    let out = run(
        c.arg("TITUS_LOG=titus_fabric=info")
            .arg(bin("dlb-bench"))
            .args(["--profile", "quick", "--no-progress"]),
        "mpirun -n 3 env -u OMPI_COMM_WORLD_* dlb-bench",
    );
    let text = output_text(&out);
    assert!(
        text.contains("dlb-bench: 3 ranks x") && text.contains("verified true"),
        "{text}"
    );
    for r in 0..3 {
        assert!(text.contains(&format!("rank {r} of 3")), "{text}");
    }
}
