//! `titus launch`: start N ranks of a command on this machine.
//!
//! Each rank gets `TITUS_RANK`, `TITUS_SIZE`, the rendezvous address `TITUS_BOOTSTRAP`
//! (rank 0 serves it), a fresh `TITUS_JOB_SECRET`, `TITUS_LOCAL_RANK` and
//! `TITUS_LOCAL_SIZE` (every rank runs on this machine: the same as rank and size, so each
//! rank's default worker count is its share of the cores), and `TITUS_PROVIDER` when
//! `--provider` is given. With `--bind core` (the default where the ranks fit the cores)
//! each rank runs on cores of its own. Output lines are prefixed with the rank. If a rank
//! exits non-zero or dies, the others are stopped (after `FAILURE_GRACE` to stop on their own) and `launch` exits non-zero, naming the rank and its status.
//!
//! Nothing outlives the launcher: every rank is started with a parent-death signal
//! (SIGTERM when the launcher ends, however it ends: SIGKILL, SIGTERM, a panic), and the
//! shared-memory files a dead rank's libfabric `shm` provider leaves (`/dev/shm/<pid>:…`,
//! 16 MiB each) are removed once the rank is gone, as are the node backend's objects
//! (`/dev/shm/titus-<tag>-<opening>-<rank>`, the tag derived from the job secret) that killed ranks
//! had no time to unlink. Each rank runs in a process group of
//! its own: a SIGTERM, SIGINT or SIGHUP to the launcher is passed on to every rank's whole
//! group (so a wrapper script's children get it too), and whatever of those groups is left
//! after a grace period (`TERMINATION_GRACE`) is killed; the launcher then exits with
//! 128 + the signal.

use crate::UsageError;
use clap::Args;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

#[derive(Debug, Args)]
pub struct LaunchArgs {
    /// Number of ranks to start.
    #[arg(
        short = 'n',
        long = "ranks",
        value_name = "N",
        allow_negative_numbers = true
    )]
    ranks: u32,
    /// Transport for the ranks (sets TITUS_PROVIDER): `node` (shared memory, the default
    /// on one machine) or a libfabric provider, e.g. "tcp;ofi_rxm", shm, sockets,
    /// "verbs;ofi_rxm".
    #[arg(long)]
    provider: Option<String>,
    /// Rendezvous address host:port that rank 0 serves [default: a free loopback port].
    #[arg(long, value_name = "HOST:PORT")]
    bootstrap: Option<String>,
    /// Stop every rank and fail after this many seconds.
    #[arg(long, value_name = "SECONDS", allow_negative_numbers = true)]
    timeout: Option<f64>,
    /// Bind each rank to cores of its own: `core` gives rank r the r-th of N equal
    /// slices of the cores this launcher may use (its whole process: workers, progress
    /// thread, the program's own threads); `none` leaves the scheduler free. [default:
    /// core when the ranks fit the cores, else none]
    #[arg(long, value_enum, value_name = "core|none")]
    bind: Option<Bind>,
    /// Do not prefix output lines with the rank.
    #[arg(long)]
    no_prefix: bool,
    /// The command and its arguments (after `--`).
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

/// `--bind`: where the ranks may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Bind {
    /// Each rank on a slice of the cores of its own.
    Core,
    /// Wherever the scheduler puts them.
    None,
}

/// The cores of each of `ranks` ranks under `bind` (None: unbound), from the `cores` this
/// launcher may use: rank r gets `cores[r·C/N .. (r+1)·C/N]`, every core to one rank.
/// Without `--bind` (`bind` None) ranks are bound when they fit the cores: oversubscribed,
/// a rank pinned to a shared core could not move to one that another rank left idle.
fn core_slices(
    bind: Option<Bind>,
    ranks: u32,
    cores: &[u32],
) -> Result<Option<Vec<Vec<u32>>>, UsageError> {
    let (n, c) = (ranks as usize, cores.len());
    match bind {
        Some(Bind::None) => return Ok(None),
        None if n > c || c == 0 => return Ok(None),
        Some(Bind::Core) if n > c => {
            return Err(UsageError(format!(
                "--bind core needs a core for each rank: {n} ranks, {c} cores this launcher \
                 may use (--bind none runs them unbound)"
            )));
        }
        _ => {}
    }
    Ok(Some(
        (0..n)
            .map(|r| cores[r * c / n..(r + 1) * c / n].to_vec())
            .collect(),
    ))
}

fn spawn_error(command: &str, e: std::io::Error) -> UsageError {
    UsageError(format!("cannot start '{command}': {e}"))
}

/// Sets this thread's CPU affinity to `cores`.
pub(crate) fn set_affinity(cores: &[u32]) -> Result<(), UsageError> {
    let mut set = rustix::thread::CpuSet::new();
    for &c in cores {
        set.set(c as usize);
    }
    rustix::thread::sched_setaffinity(None, &set)
        .map_err(|e| UsageError(format!("cannot bind to cores {cores:?}: {e}")))
}

/// How long ranks have to end after a forwarded SIGTERM/SIGINT before SIGKILL.
const TERMINATION_GRACE: Duration = Duration::from_secs(2);
/// After a rank failed, how long the others have to stop on their own before they are
/// killed: a rank that failed for a reason of its own (an address nobody can reach) tells
/// the others first, then says why — killed at once, its words were lost when the others
/// had already exited with theirs.
const FAILURE_GRACE: Duration = Duration::from_millis(500);

/// Ports a job's rendezvous may take: its program's k-th runtime serves on the first + k
/// (`JobEnv::session`), so a block is checked free, not one port.
const PORT_BLOCK: u16 = 16;

/// A loopback rendezvous address whose port and the `PORT_BLOCK` after it are free, below
/// the kernel's ephemeral range (where libfabric's endpoints and every client connection
/// take their ports, so a later runtime's port + k could be taken meanwhile): random
/// candidates from the kernel's random bytes, the ephemeral port as the last resort.
fn free_loopback_port() -> Result<String, UsageError> {
    let low_ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let (lo, hi) = (10_000u16, low_ephemeral.saturating_sub(PORT_BLOCK));
    let mut bytes = [0u8; 128];
    if hi > lo
        && std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut bytes))
            .is_ok()
    {
        for pair in bytes.chunks_exact(2) {
            let port = lo + u16::from_le_bytes([pair[0], pair[1]]) % (hi - lo);
            let free = (port..port + PORT_BLOCK)
                .all(|p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok());
            if free {
                return Ok(format!("127.0.0.1:{port}"));
            }
        }
    }
    let l = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|e| UsageError(format!("cannot find a free port: {e}")))?;
    Ok(l.local_addr()
        .map_err(|e| UsageError(e.to_string()))?
        .to_string())
}

/// 128 random bits from the kernel, as hex: the job secret.
fn secret() -> Result<String, UsageError> {
    let mut b = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .map_err(|e| UsageError(format!("cannot read /dev/urandom for the job secret: {e}")))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Refuses, before any rank starts, a provider the ranks could not use: `--provider`, or
/// else `TITUS_PROVIDER` as the ranks would inherit it. The ranks run on this machine, so
/// what it offers is what they would find (each rank used to fail on its own, exit 1).
fn check_provider(flag: Option<&str>) -> Result<(), UsageError> {
    let provider = titus_fabric::env_var::PROVIDER;
    let (what, requested) = match (flag, titus_fabric::env_var::get(provider)) {
        (Some(p), _) => ("--provider", p.to_string()),
        (None, Ok(Some(p))) if !p.is_empty() => (provider.name, p),
        _ => return Ok(()),
    };
    // The node backend (shared memory) is no libfabric provider: always there; the
    // hybrid's libfabric side is chosen automatically.
    if titus_fabric::backend::NAMED_BACKENDS.contains(&requested.as_str()) {
        return Ok(());
    }
    let offered = titus_fabric_ofi::providers()
        .map_err(|e| UsageError(format!("{what} '{requested}': {e}")))?;
    titus_fabric_ofi::choose_provider(Some(&requested), &offered, true)
        .map(drop)
        .map_err(|e| {
            UsageError(format!(
                "{what}: {}",
                e.to_string().trim_start_matches("unsupported: ")
            ))
        })
}

/// Kills `pid` and every process descended from it (a rank is often a shell or a wrapper
/// whose children would otherwise outlive it and hold its output open). Descendants are
/// found through /proc.
fn kill_tree(pid: u32) {
    let mut parent_of = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Some(p) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
                continue;
            };
            // The parent pid is the second field after the parenthesised command name.
            if let Some(ppid) = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok())
            {
                parent_of.push((p, ppid));
            }
        }
    }
    let mut tree = vec![pid];
    let mut i = 0;
    while i < tree.len() {
        let p = tree[i];
        tree.extend(parent_of.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    for p in tree.into_iter().rev() {
        if let Some(pid) = rustix::process::Pid::from_raw(p as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
        }
    }
}

/// A signal's name, as `kill -l` spells it (the usual ones; others by number).
fn signal_name(s: i32) -> String {
    let name = match s {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        5 => "SIGTRAP",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        _ => return format!("signal {s}"),
    };
    format!("signal {s} ({name})")
}

fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exited with status {c}"),
        (None, Some(s)) => format!(
            "was killed by {}{}",
            signal_name(s),
            if status.core_dumped() {
                ", core dumped"
            } else {
                ""
            }
        ),
        _ => "ended".into(),
    }
}

/// Removes the shared-memory files libfabric's `shm` provider created for `pid`
/// (`/dev/shm/<pid>:…`) once that process is gone: a rank killed or failed before closing
/// its fabric leaves them (16 MiB each). Only files of a process that no longer exists
/// are touched.
fn remove_shm_of(pid: u32) {
    let alive = rustix::process::Pid::from_raw(pid as i32)
        .is_some_and(|p| rustix::process::test_kill_process(p).is_ok());
    if alive {
        return;
    }
    let prefix = format!("{pid}:");
    if let Ok(dir) = std::fs::read_dir("/dev/shm") {
        for e in dir.flatten() {
            if e.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with(&prefix))
            {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

/// Forwards each line of `from` to stdout or stderr, prefixed.
fn forward(
    from: impl Read + Send + 'static,
    prefix: String,
    to_stderr: bool,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut r = BufReader::new(from);
        let mut line = Vec::new();
        loop {
            line.clear();
            match r.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {
                    if line.last() != Some(&b'\n') {
                        line.push(b'\n');
                    }
                    let mut out: Vec<u8> = prefix.clone().into_bytes();
                    out.extend_from_slice(&line);
                    let _ = if to_stderr {
                        std::io::stderr().lock().write_all(&out)
                    } else {
                        std::io::stdout().lock().write_all(&out)
                    };
                }
            }
        }
    })
}

/// The most ranks one launcher starts on this machine: each is a process with its
/// threads, pipes and shared memory; past this a number is a typo, not a job.
const RANKS_MAX: u32 = 65_536;

pub fn run(args: LaunchArgs) -> Result<u8, UsageError> {
    if !(1..=RANKS_MAX).contains(&args.ranks) {
        return Err(UsageError(format!(
            "-n {}: expected 1..={RANKS_MAX} ranks on one machine",
            args.ranks
        )));
    }
    // At most a year: a longer limit is no limit, and Duration cannot hold every f64.
    const TIMEOUT_MAX_S: f64 = 365.0 * 86_400.0;
    let timeout = match args.timeout {
        Some(t) if t > 0.0 && t <= TIMEOUT_MAX_S => Some(Duration::from_secs_f64(t)),
        Some(t) => {
            return Err(UsageError(format!(
                "--timeout must be a number of seconds in (0, {TIMEOUT_MAX_S}] (got {t})"
            )));
        }
        None => None,
    };
    // As every rank will read it: a host, and a port in 1..=65535.
    let bootstrap = match args.bootstrap {
        Some(b)
            if b.rsplit_once(':').is_some_and(|(h, p)| {
                !h.trim().is_empty() && p.parse::<u16>().is_ok_and(|p| p > 0)
            }) =>
        {
            b
        }
        Some(b) => {
            return Err(UsageError(format!(
                "--bootstrap '{b}' is not host:port (a host, and a port in 1..=65535)"
            )));
        }
        None => free_loopback_port()?,
    };
    check_provider(args.provider.as_deref())?;
    titus_proc::catch_termination()
        .map_err(|e| UsageError(format!("cannot catch SIGTERM/SIGINT: {e}")))?;
    let secret = secret()?;
    let n = args.ranks;
    let mine = titus_fabric::bootstrap::cpu_affinity()
        .map_err(|e| UsageError(format!("cannot read this launcher's CPU affinity: {e}")))?;
    let slices = core_slices(args.bind, n, &mine)?;
    let width = (n - 1).to_string().len();
    let mut children: Vec<Option<Child>> = Vec::with_capacity(n as usize);
    let mut pipes = Vec::new();
    // Each rank's process group (its pid): what a forwarded signal and the final sweep
    // reach.
    let mut groups: Vec<u32> = Vec::with_capacity(n as usize);
    for r in 0..n {
        let mut cmd = Command::new(&args.command[0]);
        cmd.args(&args.command[1..])
            .env("TITUS_RANK", r.to_string())
            .env("TITUS_SIZE", n.to_string())
            .env("TITUS_LOCAL_RANK", r.to_string())
            .env("TITUS_LOCAL_SIZE", n.to_string())
            .env("TITUS_BOOTSTRAP", &bootstrap)
            .env("TITUS_JOB_SECRET", &secret)
            .env("TITUS_LAUNCHER", "titus")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // Spawned from the main thread, which lives until the launcher exits.
        titus_proc::die_with_parent(&mut cmd, rustix::process::Signal::TERM);
        titus_proc::own_process_group(&mut cmd);
        if let Some(p) = &args.provider {
            cmd.env("TITUS_PROVIDER", p);
            // The sockets provider sleeps between progress checks unless told not to.
            if p == "sockets" && std::env::var_os("FI_SOCKETS_PE_WAITTIME").is_none() {
                cmd.env("FI_SOCKETS_PE_WAITTIME", "0");
            }
        }
        // A child starts with its parent thread's affinity: this thread takes the rank's
        // cores for the spawn, and its own back before anything else starts.
        let spawned = match &slices {
            None => cmd.spawn().map_err(|e| spawn_error(&args.command[0], e)),
            Some(s) => set_affinity(&s[r as usize]).and_then(|()| {
                let c = cmd.spawn().map_err(|e| spawn_error(&args.command[0], e));
                match (set_affinity(&mine), c) {
                    (Ok(()), c) => c,
                    (Err(e), Ok(mut child)) => {
                        let _ = child.kill();
                        let _ = child.wait();
                        Err(e)
                    }
                    (Err(e), Err(_)) => Err(e),
                }
            }),
        };
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => {
                for c in children.iter_mut().flatten() {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                return Err(e);
            }
        };
        let prefix = if args.no_prefix {
            String::new()
        } else {
            format!("[{r:>width$}] ")
        };
        if let Some(o) = child.stdout.take() {
            pipes.push(forward(o, prefix.clone(), false));
        }
        if let Some(e) = child.stderr.take() {
            pipes.push(forward(e, prefix, true));
        }
        groups.push(child.id());
        children.push(Some(child));
    }
    let start = Instant::now();
    let deadline = timeout.map(|t| start + t);
    let mut failure: Option<(u32, ExitStatus)> = None;
    let mut failed_at: Option<Instant> = None;
    let mut timed_out = false;
    // A SIGTERM, SIGINT or SIGHUP to the launcher, and when it was forwarded.
    let mut terminated: Option<(rustix::process::Signal, Instant)> = None;
    let mut running = n;
    while running > 0 {
        if terminated.is_none()
            && let Some(sig) = titus_proc::termination_signal()
        {
            // Pass it on to every rank's whole group (a wrapper script's children too).
            for &g in &groups {
                titus_proc::signal_group(g, sig);
            }
            terminated = Some((sig, Instant::now()));
        }
        if let Some((_, at)) = terminated
            && at.elapsed() > TERMINATION_GRACE
        {
            for child in children.iter_mut().flatten() {
                titus_proc::signal_group(child.id(), rustix::process::Signal::KILL);
                kill_tree(child.id());
            }
        }
        for (r, slot) in children.iter_mut().enumerate() {
            let Some(child) = slot else { continue };
            match child.try_wait() {
                Ok(Some(status)) => {
                    remove_shm_of(child.id());
                    *slot = None;
                    running -= 1;
                    // After a timeout or a forwarded signal, the deaths are ours: not
                    // failures of the rank.
                    if !status.success() && failure.is_none() && !timed_out && terminated.is_none()
                    {
                        failure = Some((r as u32, status));
                        failed_at = Some(Instant::now());
                    }
                }
                Ok(None) => {}
                Err(e) => return Err(UsageError(format!("cannot watch rank {r}: {e}"))),
            }
        }
        if deadline.is_some_and(|d| Instant::now() > d) {
            timed_out = true;
        }
        let failed = failed_at.is_some_and(|at| at.elapsed() >= FAILURE_GRACE);
        if (failed || timed_out) && running > 0 {
            // Stop the others: a job with a dead rank cannot finish.
            for child in children.iter_mut().flatten() {
                titus_proc::signal_group(child.id(), rustix::process::Signal::KILL);
                kill_tree(child.id());
            }
        }
        if running > 0 {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    // Shared-memory objects of the node backend that killed ranks could not unlink.
    titus_fabric_node::remove_leftovers(&secret);
    if let Some((_, at)) = terminated {
        // The ranks are gone; what they started may still run (a background job of a
        // script that ignores SIGINT): it has the rest of the grace period, then SIGKILL.
        while groups.iter().any(|&g| titus_proc::group_alive(g))
            && at.elapsed() <= TERMINATION_GRACE
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        for &g in &groups {
            titus_proc::signal_group(g, rustix::process::Signal::KILL);
        }
    }
    // Output of processes that escaped (daemonised grandchildren) must not hold us: give
    // the forwarders a moment to drain, then leave them.
    let drain = Instant::now() + Duration::from_secs(2);
    for p in pipes {
        while !p.is_finished() && Instant::now() < drain {
            std::thread::sleep(Duration::from_millis(5));
        }
        if p.is_finished() {
            let _ = p.join();
        }
    }
    if let Some((sig, _)) = terminated {
        let raw = sig.as_raw();
        eprintln!(
            "titus launch: received {}; passed it on to every rank's processes",
            signal_name(raw)
        );
        return Ok((128 + raw).clamp(1, 255) as u8);
    }
    if let Some((r, status)) = failure {
        eprintln!(
            "titus launch: rank {r} {}; the other ranks were stopped",
            describe(status)
        );
        let code = status
            .code()
            .filter(|&c| c != 0)
            .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
        return Ok(code.clamp(1, 255) as u8);
    }
    if timed_out {
        eprintln!(
            "titus launch: the job exceeded --timeout {:?}; every rank was stopped",
            args.timeout.unwrap_or(0.0)
        );
        return Ok(124);
    }
    Ok(0)
}
