//! Helpers for the cross-crate tests: find the workspace's binaries.
#![forbid(unsafe_code)]

pub mod start_check;

use std::path::{Path, PathBuf};
use std::process::Command;

/// Path of the workspace binary `name`, built by the same `cargo test` run (cargo builds
/// every binary of a package whose integration tests it builds). Panics, naming the
/// command to run, if it is missing.
pub fn bin(name: &str) -> PathBuf {
    // The test executable lives in target/<profile>/deps/; binaries in target/<profile>/.
    let exe = std::env::current_exe().expect("current_exe");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("test executable under target/<profile>/deps");
    let path = dir.join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        path.exists(),
        "{} is missing: run the tests with `cargo test --workspace`, or `cargo build --workspace --bins` first",
        path.display()
    );
    path
}

/// A finished process's stdout then stderr, as text (for assertions' messages).
pub fn output_text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Whether this build has libfabric; in CI (env `CI` set) its absence is a failure, not a
/// skip, since `.ci/test` installs it.
pub fn libfabric_or_skip() -> bool {
    if titus_fabric_ofi::available() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI must build with libfabric (apt-get install libfabric-dev)"
    );
    eprintln!("skipping: this build has no libfabric");
    false
}

/// Whether PMIx jobs can run here: this build has a PMIx client and Open MPI's `mpirun`
/// is installed. Skips (printing why) only where they are genuinely absent: a build
/// without the client while pkg-config finds libpmix, or in CI (env `CI` set), where
/// `.ci/test` installs both, is a failure.
pub fn pmix_or_skip() -> bool {
    let has = |cmd: &str| {
        Command::new("sh")
            .args(["-c", cmd])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    let ci = std::env::var_os("CI").is_some();
    if !titus_pmix_sys::AVAILABLE {
        assert!(
            !ci && !has("pkg-config --exists pmix"),
            "libpmix is installed (or this is CI) but this build has no PMIx client: see \
             titus-pmix-sys's build warning"
        );
        eprintln!("skipping: this build has no PMIx client (apt-get install libpmix-dev)");
        return false;
    }
    if !has("command -v mpirun") {
        assert!(
            !ci,
            "CI must have Open MPI's mpirun (apt-get install openmpi-bin)"
        );
        eprintln!("skipping: mpirun is not installed (apt-get install openmpi-bin)");
        return false;
    }
    true
}

/// Whether a Slurm cluster answers here: `sinfo` (within 5 s) shows a partition that is
/// up. A developer's machine or a cluster's login node runs the srun tests; CI, with no
/// Slurm daemons, skips them, printing why (`deploy/slurm/one-node.sh start` makes this
/// machine a one-node cluster).
pub fn slurm_or_skip() -> bool {
    let up = Command::new("timeout")
        .args(["5", "sinfo", "--noheader", "--format=%a"])
        .output()
        .is_ok_and(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).contains("up"));
    if !up {
        eprintln!("skipping: no Slurm cluster answers here (sinfo)");
    }
    up
}

/// `srun --overcommit -n RANKS` with Slurm's `--mpi` plugin `mpi` (`pmix`, `none`), a
/// 2-minute limit of its own, in an environment without any `TITUS_` variable but
/// `TITUS_PROVIDER`, to be given a program: the job bootstraps as Slurm starts it.
pub fn srun(ranks: u32, mpi: &str) -> Command {
    let mut c = Command::new("srun");
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        if k.starts_with("TITUS_") && k != "TITUS_PROVIDER" {
            c.env_remove(&*k);
        }
    }
    c.args(["--overcommit", "--kill-on-bad-exit=1", "--time=2"])
        .arg(format!("--mpi={mpi}"))
        .arg(format!("--ntasks={ranks}"));
    c
}

/// `mpirun --oversubscribe -n RANKS` (allowed as root, with a 120 s limit of its own) in
/// an environment without any `TITUS_` variable, to be given a program: the job
/// bootstraps through mpirun's PMIx server.
pub fn mpirun(ranks: u32) -> Command {
    let mut c = Command::new("mpirun");
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("TITUS_") {
            c.env_remove(k);
        }
    }
    c.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .args([
            "--oversubscribe",
            "--timeout",
            "120",
            "-n",
            &ranks.to_string(),
        ]);
    c
}

/// A `sh -c` script that plays two nodes on one machine: the first half of the ranks
/// gets `TITUS_NODE_ID=a`, the rest `b`, then it runs its first argument with the rest
/// (`sh -c TWO_NODES PROGRAM ARGS...`).
pub const TWO_NODES: &str = r#"if [ "$TITUS_RANK" -lt $((TITUS_SIZE / 2)) ]; then TITUS_NODE_ID=a; else TITUS_NODE_ID=b; fi; export TITUS_NODE_ID; exec "$0" "$@""#;

/// `titus launch -n RANKS [--provider P] --timeout 120 -- sh -c TWO_NODES PROGRAM`, to be
/// given arguments: a job across two (played) nodes.
pub fn launch_two_nodes(provider: Option<&str>, ranks: u32, program: &Path) -> Command {
    let mut c = Command::new(bin("titus"));
    c.args(["launch", "-n", &ranks.to_string()]);
    if let Some(p) = provider {
        c.args(["--provider", p]);
    }
    c.args(["--timeout", "120", "--", "sh", "-c", TWO_NODES])
        .arg(program);
    c
}

/// `titus launch -n RANKS --provider P --timeout 120 -- PROGRAM`, to be given arguments.
pub fn launch(provider: &str, ranks: u32, program: &Path) -> Command {
    let mut c = Command::new(bin("titus"));
    c.args(["launch", "-n", &ranks.to_string(), "--provider", provider])
        .args(["--timeout", "120", "--"])
        .arg(program);
    c
}

/// The node backend's shared-memory objects (`/dev/shm/titus-*`) that stay for 2 s: a
/// job's objects exist only while it opens (milliseconds), so what stays was left
/// behind — and other tests' jobs opening meanwhile are not counted.
pub fn node_objects() -> Vec<String> {
    let list = || -> Vec<String> {
        std::fs::read_dir("/dev/shm")
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("titus-"))
            .collect()
    };
    let first = list();
    if first.is_empty() {
        return first;
    }
    std::thread::sleep(std::time::Duration::from_secs(2));
    let now = list();
    first.into_iter().filter(|n| now.contains(n)).collect()
}

/// A scratch directory under the system's temporary one, removed when dropped — also
/// when the test that made it fails.
#[derive(Debug)]
pub struct ScratchDir(pub PathBuf);

impl ScratchDir {
    /// `<tmp>/<name>-<pid>` (not created).
    pub fn new(name: &str) -> ScratchDir {
        ScratchDir(std::env::temp_dir().join(format!("{name}-{}", std::process::id())))
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
