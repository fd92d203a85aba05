//! `titus launch`: environment, output prefixes, failure propagation.

use std::process::Command;
use std::time::{Duration, Instant};

fn titus(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_titus"))
        .args(args)
        .output()
        .expect("run titus")
}

#[test]
fn ranks_get_their_environment_and_prefixed_output() {
    let out = titus(&[
        "launch",
        "-n",
        "3",
        "--provider",
        "sockets",
        "--",
        "sh",
        "-c",
        "echo rank=$TITUS_RANK size=$TITUS_SIZE boot=${TITUS_BOOTSTRAP:+set} secret=${#TITUS_JOB_SECRET} prov=$TITUS_PROVIDER wait=$FI_SOCKETS_PE_WAITTIME local=$TITUS_LOCAL_RANK/$TITUS_LOCAL_SIZE",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    for r in 0..3 {
        let want =
            format!("[{r}] rank={r} size=3 boot=set secret=32 prov=sockets wait=0 local={r}/3");
        assert!(
            text.lines().any(|l| l == want),
            "missing '{want}' in:\n{text}"
        );
    }
}

#[test]
fn a_failing_rank_stops_the_others() {
    let t = Instant::now();
    let out = titus(&[
        "launch",
        "-n",
        "4",
        "--",
        "sh",
        "-c",
        "if [ $TITUS_RANK = 2 ]; then exit 7; fi; sleep 60",
    ]);
    assert!(
        t.elapsed() < Duration::from_secs(20),
        "the sleeping ranks were not stopped"
    );
    assert_eq!(out.status.code(), Some(7));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("rank 2 exited with status 7"), "{err}");
}

#[test]
fn a_killed_rank_is_named_with_its_signal() {
    let out = titus(&[
        "launch",
        "-n",
        "2",
        "--",
        "sh",
        "-c",
        "if [ $TITUS_RANK = 1 ]; then kill -9 $$; fi; sleep 60",
    ]);
    assert_eq!(out.status.code(), Some(128 + 9));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("rank 1 was killed by signal 9 (SIGKILL)")
    );
}

#[test]
fn timeout_and_bad_input() {
    let out = titus(&["launch", "-n", "2", "--timeout", "0.5", "--", "sleep", "60"]);
    assert_eq!(out.status.code(), Some(124));
    for (args, needle) in [
        (
            &["launch", "-n", "0", "--", "true"][..],
            "-n 0: expected 1..=65536",
        ),
        // A number that would have asked for 120 GB of bookkeeping.
        (
            &["launch", "-n", "4294967295", "--", "true"][..],
            "-n 4294967295: expected 1..=65536 ranks on one machine",
        ),
        (
            &["launch", "-n", "2", "--", "/nonexistent/program"][..],
            "cannot start",
        ),
        (
            &["launch", "-n", "2", "--bootstrap", "nohost", "--", "true"][..],
            "not host:port",
        ),
        (&["launch", "-n", "2"][..], "required"),
    ] {
        let out = titus(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(needle) && err.trim_end().lines().count() == 1,
            "{args:?}: {err}"
        );
    }
}

/// A provider the ranks could not use is refused by the launcher before any rank starts
/// (each rank used to fail on its own with exit 1), whether `--provider` or the
/// `TITUS_PROVIDER` the ranks would inherit names it.
#[test]
fn a_bad_provider_is_refused_before_any_rank_starts() {
    if !titus_fabric_ofi::available() {
        return; // Without libfabric every provider is refused alike.
    }
    let marker = std::env::temp_dir().join(format!("titus-provider-{}", std::process::id()));
    let touch = format!("touch {}", marker.display());
    for (args, env, needle) in [
        (
            &["--provider", "nosuch"][..],
            None,
            "--provider: provider 'nosuch' is not offered",
        ),
        (
            &[][..],
            Some("nosuch"),
            "TITUS_PROVIDER: provider 'nosuch' is not offered",
        ),
        (
            &["--provider", "udp;ofi_rxd"][..],
            None,
            "provider 'udp;ofi_rxd' is refused",
        ),
    ] {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_titus"));
        cmd.args(["launch", "-n", "2"])
            .args(args)
            .args(["--", "sh", "-c", &touch]);
        match env {
            Some(v) => cmd.env("TITUS_PROVIDER", v),
            None => cmd.env_remove("TITUS_PROVIDER"),
        };
        let out = cmd.output().unwrap();
        let started = marker.exists();
        let _ = std::fs::remove_file(&marker);
        assert!(!started, "{args:?} {env:?}: a rank started");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(needle) && err.trim_end().lines().count() == 1,
            "{args:?}: {err}"
        );
    }
}

#[test]
fn fabric_bench_on_mem_prints_every_figure() {
    let bench = |extra: &[&str]| -> serde_json::Value {
        let args = [&["fabric-bench", "--backend", "mem", "--json"][..], extra].concat();
        let out = titus(&args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let v = bench(&["--iters", "50"]);
    let ops: Vec<&str> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["op"].as_str().unwrap())
        .collect();
    for op in [
        "compare-swap",
        "fetch-add",
        "read",
        "write",
        "write-signal round trip",
        "poll",
        "compare-swap (self)",
        "read (self)",
    ] {
        assert!(ops.contains(&op), "{op} missing: {ops:?}");
    }
    assert!(v["read_bandwidth_gbs"].as_f64().unwrap() > 0.0);
    // Each row's quantiles, in order, around its p50.
    for r in v["rows"].as_array().unwrap() {
        let q: Vec<f64> = r["quantiles_us"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        assert_eq!(q.len(), 13, "{r}");
        assert!(q.windows(2).all(|w| w[0] <= w[1]), "{r}");
        assert_eq!(q[5], r["p50_us"].as_f64().unwrap(), "{r}");
    }
    assert_eq!(v["busy_target_threads"], 0);
    // A busy target: its spinning threads are counted, and stopped (the process ends).
    let v = bench(&["--iters", "20", "--busy-target"]);
    assert!(v["busy_target_threads"].as_u64().unwrap() >= 1, "{v}");
}

/// Whether `pid` is a live process (not gone, not a zombie waiting to be reaped).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X")
    })
}

/// Ranks die with their launcher, however it ends: here a SIGKILL, which the launcher
/// cannot see coming (they used to be re-parented to init and run on).
#[test]
fn ranks_die_with_a_killed_launcher() {
    use std::io::BufRead;
    let mut launcher = Command::new(env!("CARGO_BIN_EXE_titus"))
        .args([
            "launch",
            "-n",
            "2",
            "--no-prefix",
            "--",
            "sh",
            "-c",
            "echo $$; exec sleep 60",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(launcher.stdout.take().unwrap()).lines();
    let pids: Vec<u32> = (0..2)
        .map(|_| lines.next().unwrap().unwrap().trim().parse().unwrap())
        .collect();
    assert!(pids.iter().all(|&p| alive(p)));
    launcher.kill().unwrap(); // SIGKILL
    launcher.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while pids.iter().any(|&p| alive(p)) {
        assert!(
            Instant::now() < deadline,
            "ranks {pids:?} outlived their launcher"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A SIGTERM or SIGINT to the launcher reaches what the ranks started too: here each rank
/// is a wrapper script whose `sleep` runs in the background (and, started by a
/// non-interactive shell, ignores SIGINT: the SIGKILL after the grace period ends it).
/// The parent-death signal alone reached only the ranks themselves.
#[test]
fn a_terminated_launcher_leaves_no_grandchild() {
    use rustix::process::{Pid, Signal, kill_process};
    use std::io::BufRead;
    for (signal, code) in [(Signal::TERM, 143), (Signal::INT, 130)] {
        let mut launcher = Command::new(env!("CARGO_BIN_EXE_titus"))
            .args(["launch", "-n", "2", "--no-prefix", "--"])
            .args(["sh", "-c", "sleep 60 & echo $!; wait"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = std::io::BufReader::new(launcher.stdout.take().unwrap()).lines();
        let sleeps: Vec<u32> = (0..2)
            .map(|_| lines.next().unwrap().unwrap().trim().parse().unwrap())
            .collect();
        assert!(sleeps.iter().all(|&p| alive(p)), "{sleeps:?}");
        kill_process(Pid::from_raw(launcher.id() as i32).unwrap(), signal).unwrap();
        let out = launcher.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{signal:?}: {err}");
        assert!(
            err.contains("passed it on to every rank") && err.trim_end().lines().count() == 1,
            "{signal:?}: {err}"
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        while sleeps.iter().any(|&p| alive(p)) {
            assert!(
                Instant::now() < deadline,
                "{signal:?}: the ranks' children {sleeps:?} outlived their launcher"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[test]
fn a_timeout_beyond_a_year_is_refused_before_anything_starts() {
    for t in ["1e300", "inf", "NaN", "0", "-1"] {
        let out = titus(&["launch", "-n", "1", "--timeout", t, "--", "true"]);
        assert_eq!(out.status.code(), Some(2), "--timeout {t}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("--timeout") && err.trim_end().lines().count() == 1,
            "--timeout {t}: {err}"
        );
    }
}

/// Ranks on several hosts: one that could open only on loopback says so in the address
/// exchange, and every rank fails naming it (the others waited for its record before).
/// Rank 0 plays a host of its own (a UTS namespace with another host name, loopback
/// forced by TITUS_IFACE); where namespaces cannot be made (not root, no `unshare`) the
/// test says so and checks nothing.
#[test]
fn a_rank_only_on_loopback_among_hosts_is_named_by_every_rank() {
    let can = Command::new("unshare")
        .args(["-u", "true"])
        .status()
        .is_ok_and(|s| s.success());
    if !can || !titus_fabric_ofi::available() {
        eprintln!("skipped: no UTS namespace here (not root, or no unshare) or no libfabric");
        return;
    }
    // Rank 0 stays a while after its failure, so that the launcher does not stop rank 1
    // before rank 1 fails on its own (before the refusal travelled, rank 1 waited for
    // rank 0's record until the launcher's timeout).
    let script = r#"if [ "$TITUS_RANK" = 0 ]; then
  unshare -u sh -c 'hostname titus-test-rank0 && TITUS_IFACE=lo exec "$0" fabric-bench --iters 5' "$T"
  sleep 20; exit 1
fi
exec "$T" fabric-bench --iters 5"#;
    let t = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_titus"))
        .args([
            "launch",
            "-n",
            "2",
            "--provider",
            "tcp;ofi_rxm",
            "--timeout",
            "60",
        ])
        .args(["--", "sh", "-c", script])
        .env("T", env!("CARGO_BIN_EXE_titus"))
        .output()
        .expect("run titus");
    assert!(t.elapsed() < Duration::from_secs(30), "the ranks waited");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    if err.contains("rank 1 on host") {
        eprintln!("skipped: rank 1 found no routable interface here either:\n{err}");
        return;
    }
    let named = |r: u32| {
        err.lines().any(|l| {
            l.starts_with(&format!("[{r}]"))
                && l.contains("rank 0 on host titus-test-rank0")
                && l.contains("only a loopback or link-local address")
        })
    };
    assert!(named(0), "rank 0 does not say why:\n{err}");
    assert!(named(1), "rank 1 does not name rank 0:\n{err}");
    assert!(err.contains("rank 1 exited with status"), "{err}");
}

/// The CPUs of a `Cpus_allowed_list` line of /proc/PID/status ("0-3,8,10-11").
fn cpu_list(line: &str) -> Vec<usize> {
    let list = line.rsplit(':').next().expect("a list").trim();
    let mut out = Vec::new();
    for part in list.split(',') {
        match part.split_once('-') {
            Some((a, b)) => out.extend(a.parse::<usize>().unwrap()..=b.parse::<usize>().unwrap()),
            None => out.push(part.parse().unwrap()),
        }
    }
    out
}

/// Each rank's allowed CPUs under `titus launch -n N ARGS`.
fn ranks_cpus(n: usize, args: &[&str]) -> Vec<Vec<usize>> {
    let n_arg = n.to_string();
    let mut a = vec!["launch", "-n", &n_arg];
    a.extend_from_slice(args);
    a.extend_from_slice(&["--", "sh", "-c", "grep Cpus_allowed_list /proc/self/status"]);
    let out = titus(&a);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut ranks = vec![None; n];
    for line in text.lines() {
        let (prefix, rest) = line.split_once("] ").expect("prefixed line");
        let r: usize = prefix.trim_start_matches('[').trim().parse().unwrap();
        ranks[r] = Some(cpu_list(rest));
    }
    ranks
        .into_iter()
        .map(|r| r.expect("every rank spoke"))
        .collect()
}

#[test]
fn ranks_that_fit_the_cores_are_bound_to_cores_of_their_own() {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let mine = cpu_list(
        status
            .lines()
            .find(|l| l.starts_with("Cpus_allowed_list"))
            .unwrap(),
    );
    let c = mine.len();
    // The default: as many ranks as cores, every core to exactly one rank, in order.
    let bound = ranks_cpus(c, &[]);
    let mut all = Vec::new();
    for (r, cpus) in bound.iter().enumerate() {
        assert_eq!(cpus, &mine[r..=r], "rank {r}");
        all.extend(cpus.iter().copied());
    }
    assert_eq!(all, mine);
    // Fewer ranks than cores: equal slices.
    if c >= 2 {
        let two = ranks_cpus(2, &["--bind", "core"]);
        assert_eq!(two[0], mine[..c / 2]);
        assert_eq!(two[1], mine[c / 2..]);
    }
    // Unbound on request, and by default when the ranks outnumber the cores.
    for (n, args) in [(2, &["--bind", "none"][..]), (c + 1, &[][..])] {
        for (r, cpus) in ranks_cpus(n, args).iter().enumerate() {
            assert_eq!(cpus, &mine, "{n} ranks {args:?}, rank {r}");
        }
    }
    // Binding asked for more ranks than cores: refused before any rank starts.
    let n = (c + 1).to_string();
    let out = titus(&[
        "launch", "-n", &n, "--bind", "core", "--", "sh", "-c", "echo ran",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty(), "a rank started");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "--bind core needs a core for each rank: {n} ranks, {c} cores"
        )),
        "{err}"
    );
}
