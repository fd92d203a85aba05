//! Bootstrap: who am I, how many are we, and everyone's fabric address.
//!
//! Rank and size come from the launcher's environment, first match wins:
//! `TITUS_RANK`/`TITUS_SIZE` (`titus launch`), `SLURM_PROCID`/`SLURM_NTASKS` (srun),
//! `OMPI_COMM_WORLD_RANK`/`OMPI_COMM_WORLD_SIZE` (Open MPI's mpirun), `PMI_RANK`/`PMI_SIZE`
//! (MPICH/Hydra and other PMI launchers); with none, a single rank.
//!
//! Addresses are exchanged through a rendezvous: rank 0 serves it at `TITUS_BOOTSTRAP`
//! (`host:port`; under Slurm, derived from the job's first node and id when unset), every
//! rank (rank 0 too) connects, proves it belongs to the job with the per-job secret
//! `TITUS_JOB_SECRET`, and takes part in all-gathers. A process without the secret is
//! refused with a clear error and the job goes on. Every wait has a timeout
//! (`TITUS_BOOTSTRAP_TIMEOUT` seconds, default 60) that names the ranks that did not show
//! up. The secret keeps stray processes of other jobs out; it is not a defence against an
//! attacker who can read the job's environment or its traffic.
//!
//! Cost: an all-gather sends all N blobs to each of the N ranks through rank 0, O(N²)
//! bytes: with ~100-byte addresses, 100 MB at 10^3 ranks, 10 GB at 10^4. A tree
//! all-gather, or exchanging only overlay neighbours' addresses, is the upgrade path for
//! larger jobs.

use crate::Rank;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

/// Why bootstrap failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BootstrapError {
    /// An environment variable with a bad value.
    #[error("{var}='{value}': {reason}")]
    BadVar {
        /// The variable.
        var: String,
        /// Its value.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A variable the launcher should have set is missing.
    #[error("{0}")]
    Missing(String),
    /// Could not reach the rendezvous.
    #[error("cannot reach the rendezvous at {addr} within {after:?}: {reason}")]
    Connect {
        /// The address tried.
        addr: String,
        /// Time spent trying.
        after: Duration,
        /// The last error.
        reason: String,
    },
    /// The rendezvous refused this process.
    #[error("the rendezvous refused this process: {0}")]
    Refused(String),
    /// Ranks that never joined.
    #[error("ranks {} did not join the rendezvous within {after:?}", list(.ranks))]
    Absent {
        /// The missing ranks.
        ranks: Vec<Rank>,
        /// The timeout.
        after: Duration,
    },
    /// The rendezvous or a rank failed during an exchange.
    #[error("the rendezvous failed: {0}")]
    Failed(String),
    /// A malformed message.
    #[error("malformed rendezvous message: {0}")]
    Protocol(String),
}

fn list(ranks: &[Rank]) -> String {
    let mut s: Vec<String> = ranks.iter().take(16).map(Rank::to_string).collect();
    if ranks.len() > 16 {
        s.push(format!("... ({} in all)", ranks.len()));
    }
    s.join(", ")
}

/// Which launcher started this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Launcher {
    /// `titus launch`.
    Titus,
    /// Slurm's srun.
    Slurm,
    /// Open MPI's mpirun.
    OpenMpi,
    /// A PMI launcher (MPICH's Hydra, ...).
    Pmi,
    /// None: one rank.
    Single,
}

/// What the launcher told this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobEnv {
    /// This rank.
    pub rank: Rank,
    /// Number of ranks.
    pub size: u32,
    /// The launcher.
    pub launcher: Launcher,
    /// The rendezvous `host:port` (`None` for a single rank).
    pub rendezvous: Option<String>,
    /// The job secret.
    pub secret: String,
    /// Timeout of every bootstrap wait.
    pub timeout: Duration,
}

/// Default bootstrap timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

impl JobEnv {
    /// The same job for its `session`-th runtime in one process (0: the first): the
    /// rendezvous port moves up by `session`, so a runtime never meets the rendezvous of
    /// an earlier one whose threads may still be winding down. Every rank must use the
    /// same session numbers in the same order.
    pub fn session(&self, session: u16) -> Result<Self, BootstrapError> {
        let mut env = self.clone();
        if session == 0 {
            return Ok(env);
        }
        if let Some(addr) = &self.rendezvous {
            let bad = |reason: &str| BootstrapError::BadVar {
                var: "rendezvous address".into(),
                value: addr.clone(),
                reason: reason.into(),
            };
            let (host, port) = addr.rsplit_once(':').ok_or_else(|| bad("no port"))?;
            let port: u16 = port.parse().map_err(|_| bad("the port is not a number"))?;
            let port = port
                .checked_add(session)
                .ok_or_else(|| bad("no port left for another runtime in this job"))?;
            env.rendezvous = Some(format!("{host}:{port}"));
        }
        Ok(env)
    }

    /// Reads the process environment.
    pub fn from_env() -> Result<Self, BootstrapError> {
        Self::from_vars(|k| std::env::var(k).ok())
    }

    /// Reads variables through `get` (the environment, or a map in tests).
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Self, BootstrapError> {
        let pairs = [
            ("TITUS_RANK", "TITUS_SIZE", Launcher::Titus),
            ("SLURM_PROCID", "SLURM_NTASKS", Launcher::Slurm),
            (
                "OMPI_COMM_WORLD_RANK",
                "OMPI_COMM_WORLD_SIZE",
                Launcher::OpenMpi,
            ),
            ("PMI_RANK", "PMI_SIZE", Launcher::Pmi),
        ];
        let num = |var: &str, v: String| -> Result<u32, BootstrapError> {
            v.trim().parse::<u32>().map_err(|_| BootstrapError::BadVar {
                var: var.into(),
                value: v.clone(),
                reason: "not a non-negative integer".into(),
            })
        };
        let mut found = None;
        for (rv, sv, launcher) in pairs {
            match (get(rv), get(sv)) {
                (Some(r), Some(s)) => {
                    found = Some((num(rv, r)?, num(sv, s.clone())?, launcher, sv, s));
                    break;
                }
                (Some(_), None) => {
                    return Err(BootstrapError::Missing(format!(
                        "{rv} is set but {sv} is not"
                    )));
                }
                (None, Some(_)) => {
                    return Err(BootstrapError::Missing(format!(
                        "{sv} is set but {rv} is not"
                    )));
                }
                (None, None) => {}
            }
        }
        let (rank, size, launcher) = match found {
            Some((rank, size, launcher, sv, s)) => {
                if size == 0 {
                    return Err(BootstrapError::BadVar {
                        var: sv.into(),
                        value: s,
                        reason: "a job has at least one rank".into(),
                    });
                }
                if rank >= size {
                    return Err(BootstrapError::Missing(format!(
                        "rank {rank} is not below the job size {size}"
                    )));
                }
                (rank, size, launcher)
            }
            None => (0, 1, Launcher::Single),
        };
        let timeout = match get("TITUS_BOOTSTRAP_TIMEOUT") {
            None => DEFAULT_TIMEOUT,
            Some(v) => match v.trim().parse::<f64>() {
                Ok(s) if s > 0.0 && s.is_finite() => Duration::from_secs_f64(s),
                _ => {
                    return Err(BootstrapError::BadVar {
                        var: "TITUS_BOOTSTRAP_TIMEOUT".into(),
                        value: v,
                        reason: "expected a positive number of seconds".into(),
                    });
                }
            },
        };
        let slurm_id = || {
            Some(format!(
                "{}.{}",
                get("SLURM_JOB_ID")?,
                get("SLURM_STEP_ID").unwrap_or_default()
            ))
        };
        let rendezvous = match get("TITUS_BOOTSTRAP") {
            Some(v)
                if v.rsplit_once(':')
                    .is_some_and(|(_, p)| p.parse::<u16>().is_ok()) =>
            {
                Some(v)
            }
            Some(v) => {
                return Err(BootstrapError::BadVar {
                    var: "TITUS_BOOTSTRAP".into(),
                    value: v,
                    reason: "expected host:port".into(),
                });
            }
            None if launcher == Launcher::Slurm => {
                let nodes = get("SLURM_STEP_NODELIST").or_else(|| get("SLURM_JOB_NODELIST"));
                match (nodes.as_deref().and_then(first_host), get("SLURM_JOB_ID")) {
                    (Some(host), Some(job)) => {
                        let job: u64 = job.trim().parse().unwrap_or(0);
                        let step: u64 = get("SLURM_STEP_ID")
                            .and_then(|s| s.trim().parse().ok())
                            .unwrap_or(0);
                        Some(format!("{host}:{}", 30_000 + (job * 31 + step) % 20_000))
                    }
                    _ => None,
                }
            }
            None => None,
        };
        if size > 1 && rendezvous.is_none() {
            return Err(BootstrapError::Missing(
                "TITUS_BOOTSTRAP is not set: give the rendezvous address host:port (rank 0 serves it), \
                 or start the job with `titus launch`"
                    .into(),
            ));
        }
        let secret = get("TITUS_JOB_SECRET")
            .or_else(|| match launcher {
                Launcher::Slurm => slurm_id().map(|id| format!("slurm-{id}")),
                Launcher::OpenMpi => {
                    get("PMIX_NAMESPACE").or_else(|| get("OMPI_MCA_ess_base_jobid"))
                }
                _ => None,
            })
            .unwrap_or_default();
        if size > 1 && secret.is_empty() {
            return Err(BootstrapError::Missing(
                "TITUS_JOB_SECRET is not set and the launcher gives no job id to derive it from: \
                 set it to the same value on every rank"
                    .into(),
            ));
        }
        Ok(Self {
            rank,
            size,
            launcher,
            rendezvous,
            secret,
            timeout,
        })
    }
}

/// The first host of a Slurm host list (`node[03-05,9],gpu1` gives `node03`).
pub fn first_host(list: &str) -> Option<String> {
    let list = list.trim();
    let end = list
        .find(',')
        .filter(|&c| list.find('[').is_none_or(|b| c < b))
        .unwrap_or(list.len());
    let first = &list[..end];
    match first.find('[') {
        None => (!first.is_empty()).then(|| first.to_string()),
        Some(b) => {
            let inner = &first[b + 1..];
            let token = inner.split([',', ']']).next()?;
            let start = token.split('-').next()?;
            (!start.is_empty()).then(|| format!("{}{}", &first[..b], start))
        }
    }
}

// ---------------------------------------------------------------------------------------
// Wire format. Frames are a u32 little-endian length then the payload; payloads start with
// a tag byte. Nothing read from the socket is trusted: lengths are bounded and checked.

const MAGIC: &[u8; 8] = b"TITUSRV1";
/// Largest frame accepted (an all-gather of 10^4 ranks × 4 KiB fits).
const MAX_FRAME: u32 = 256 << 20;
const TAG_HELLO: u8 = 1;
const TAG_WELCOME: u8 = 2;
const TAG_REFUSED: u8 = 3;
const TAG_ROUND: u8 = 4;
const TAG_RESULT: u8 = 5;
const TAG_ERROR: u8 = 6;

fn io_fail(what: &str, e: std::io::Error) -> BootstrapError {
    BootstrapError::Failed(format!("{what}: {e}"))
}

fn send(stream: &mut TcpStream, payload: &[u8]) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(4 + payload.len());
    buf.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    buf.extend_from_slice(payload);
    stream.write_all(&buf)
}

fn recv(stream: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    stream.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len);
    if len > MAX_FRAME {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("frame of {len} bytes"),
        ));
    }
    let mut buf = vec![0u8; len as usize];
    stream.read_exact(&mut buf)?;
    Ok(buf)
}

/// A cursor over a received payload that fails on truncation instead of panicking.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], BootstrapError> {
        if self.0.len() < n {
            return Err(BootstrapError::Protocol(format!(
                "truncated: wanted {n} bytes, {} left",
                self.0.len()
            )));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, BootstrapError> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, BootstrapError> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }
    fn bytes(&mut self) -> Result<Vec<u8>, BootstrapError> {
        let n = self.u32()? as usize;
        Ok(self.take(n)?.to_vec())
    }
}

fn put_bytes(buf: &mut Vec<u8>, b: &[u8]) {
    buf.extend_from_slice(&(b.len() as u32).to_le_bytes());
    buf.extend_from_slice(b);
}

fn text(tag: u8, msg: &str) -> Vec<u8> {
    let mut p = vec![tag];
    put_bytes(&mut p, msg.as_bytes());
    p
}

/// Constant-time comparison, so a prober learns nothing from timing.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

// ---------------------------------------------------------------------------------------
// The server, run by rank 0 on a thread.

/// A joined rank's connection, handed from the acceptor to the coordinator.
struct Joined {
    rank: Rank,
    stream: TcpStream,
}

/// Serves the rendezvous for a job of `size` ranks on `listener` until every rank has
/// closed its connection (or the job failed). Returns at once; the work runs on threads.
pub fn serve(
    listener: TcpListener,
    size: u32,
    secret: String,
    timeout: Duration,
) -> std::io::Result<()> {
    listener.set_nonblocking(true)?;
    let (tx, rx) = mpsc::channel::<Joined>();
    let done = Arc::new(AtomicBool::new(false));
    let done2 = done.clone();
    std::thread::Builder::new()
        .name("titus-rendezvous-accept".into())
        .spawn(move || accept_loop(listener, size, secret, tx, done2))?;
    std::thread::Builder::new()
        .name("titus-rendezvous".into())
        .spawn(move || {
            coordinate(size, rx, timeout);
            done.store(true, Ordering::Release);
        })?;
    Ok(())
}

fn accept_loop(
    listener: TcpListener,
    size: u32,
    secret: String,
    tx: mpsc::Sender<Joined>,
    done: Arc<AtomicBool>,
) {
    let mut joined = vec![false; size as usize];
    while !done.load(Ordering::Acquire) {
        match listener.accept() {
            Ok((stream, peer)) => {
                if let Some(j) = handshake(stream, peer, size, secret.as_bytes(), &mut joined)
                    && tx.send(j).is_err()
                {
                    return;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

/// Reads a HELLO; refuses (and logs) anything that is not a new rank of this job.
fn handshake(
    mut stream: TcpStream,
    peer: SocketAddr,
    size: u32,
    secret: &[u8],
    joined: &mut [bool],
) -> Option<Joined> {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = stream.set_nodelay(true);
    let hello = recv(&mut stream).ok();
    let verdict = (|| -> Result<Rank, String> {
        let hello = hello.ok_or("no greeting within 5 s")?;
        let mut r = Reader(&hello);
        let bad = |e: BootstrapError| e.to_string();
        if r.u8().map_err(bad)? != TAG_HELLO || r.take(8).map_err(bad)? != MAGIC {
            return Err("not a Titus rendezvous client".into());
        }
        let their_secret = r.bytes().map_err(bad)?;
        let rank = r.u32().map_err(bad)?;
        let their_size = r.u32().map_err(bad)?;
        if !same_secret(&their_secret, secret) {
            return Err("wrong job secret (TITUS_JOB_SECRET)".into());
        }
        if their_size != size {
            return Err(format!(
                "job size {their_size} does not match the rendezvous's {size}"
            ));
        }
        if rank >= size {
            return Err(format!("rank {rank} is outside the job (size {size})"));
        }
        if joined[rank as usize] {
            return Err(format!("rank {rank} has already joined"));
        }
        Ok(rank)
    })();
    match verdict {
        Ok(rank) => {
            joined[rank as usize] = true;
            send(&mut stream, &[TAG_WELCOME]).ok()?;
            let _ = stream.set_read_timeout(None);
            Some(Joined { rank, stream })
        }
        Err(reason) => {
            eprintln!("titus: rendezvous: refused a connection from {peer}: {reason}");
            let _ = send(&mut stream, &text(TAG_REFUSED, &reason));
            None
        }
    }
}

fn coordinate(size: u32, rx: mpsc::Receiver<Joined>, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    let mut streams: Vec<Option<TcpStream>> = (0..size).map(|_| None).collect();
    let mut count = 0;
    while count < size {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(j) => {
                streams[j.rank as usize] = Some(j.stream);
                count += 1;
            }
            Err(_) => {
                let absent: Vec<Rank> = (0..size)
                    .filter(|&r| streams[r as usize].is_none())
                    .collect();
                let msg = BootstrapError::Absent {
                    ranks: absent,
                    after: timeout,
                }
                .to_string();
                for s in streams.iter_mut().flatten() {
                    let _ = send(s, &text(TAG_ERROR, &msg));
                }
                return;
            }
        }
    }
    let mut streams: Vec<TcpStream> = streams
        .into_iter()
        .map(|s| s.expect("all joined"))
        .collect();
    // Rounds: every rank sends one blob, every rank receives all of them.
    loop {
        let mut blobs = Vec::with_capacity(size as usize);
        let mut left = Vec::new();
        let mut malformed = None;
        for (r, s) in streams.iter_mut().enumerate() {
            match recv(s) {
                Ok(p) => {
                    let mut rd = Reader(&p);
                    match (rd.u8(), rd.bytes()) {
                        (Ok(TAG_ROUND), Ok(blob)) => blobs.push(blob),
                        _ => malformed = Some(r),
                    }
                }
                Err(_) => left.push(r as Rank),
            }
        }
        if left.len() == size as usize {
            return; // Every rank closed its connection: the rendezvous is over.
        }
        let failure = match (left.is_empty(), malformed) {
            (false, _) => Some(format!(
                "ranks {} left the job during an exchange",
                list(&left)
            )),
            (true, Some(r)) => Some(format!("rank {r} sent a malformed message")),
            (true, None) => None,
        };
        if let Some(msg) = failure {
            for s in &mut streams {
                let _ = send(s, &text(TAG_ERROR, &msg));
            }
            return;
        }
        let mut out = vec![TAG_RESULT];
        out.extend_from_slice(&size.to_le_bytes());
        for b in &blobs {
            put_bytes(&mut out, b);
        }
        // Rank 0 hosts this thread: answer it last, so that it cannot return from the
        // exchange (and exit) before every other rank has its answer.
        for i in (1..streams.len()).chain(0..1) {
            let _ = send(&mut streams[i], &out);
        }
    }
}

// ---------------------------------------------------------------------------------------
// How ranks exchange addresses.

/// A job-wide all-gather among the ranks: how they learn each other's fabric addresses and
/// keys. The [`Rendezvous`] is one; an application that already has a communicator (an MPI
/// solver) brings its own, so Titus needs neither a rendezvous port nor MPI itself.
///
/// Called only from the thread that opens the fabric or runs an epoch (never from a
/// progress or worker thread), collectively: every rank calls it in the same order.
pub trait Exchange: Send + std::fmt::Debug {
    /// This rank.
    fn rank(&self) -> Rank;
    /// Number of ranks.
    fn size(&self) -> u32;
    /// Every rank contributes `blob` (lengths may differ); returns all blobs by rank.
    fn all_gather(&mut self, blob: &[u8]) -> Result<Vec<Vec<u8>>, BootstrapError>;
    /// Waits until every rank reaches the barrier.
    fn barrier(&mut self) -> Result<(), BootstrapError> {
        self.all_gather(&[]).map(drop)
    }
}

impl Exchange for Rendezvous {
    fn rank(&self) -> Rank {
        self.rank
    }
    fn size(&self) -> u32 {
        self.size
    }
    fn all_gather(&mut self, blob: &[u8]) -> Result<Vec<Vec<u8>>, BootstrapError> {
        Rendezvous::all_gather(self, blob)
    }
}

// ---------------------------------------------------------------------------------------
// The client, one per rank.

/// This rank's connection to the rendezvous.
#[derive(Debug)]
pub struct Rendezvous {
    stream: TcpStream,
    rank: Rank,
    size: u32,
    timeout: Duration,
}

impl Rendezvous {
    /// Joins the job's rendezvous (rank 0 first starts serving it). `None` for a single
    /// rank, which needs none.
    pub fn join(env: &JobEnv) -> Result<Option<Self>, BootstrapError> {
        let Some(addr) = env.rendezvous.clone() else {
            return Ok(None);
        };
        if env.rank == 0 {
            let listener = bind(&addr)?;
            serve(listener, env.size, env.secret.clone(), env.timeout)
                .map_err(|e| io_fail("start the rendezvous threads", e))?;
        }
        Self::connect(&addr, env.rank, env.size, &env.secret, env.timeout).map(Some)
    }

    /// Connects to the rendezvous at `addr` as `rank` of `size`, retrying until `timeout`
    /// (rank 0 may not be serving yet).
    pub fn connect(
        addr: &str,
        rank: Rank,
        size: u32,
        secret: &str,
        timeout: Duration,
    ) -> Result<Self, BootstrapError> {
        let start = Instant::now();
        let deadline = start + timeout;
        let mut last = String::from("no attempt");
        let mut stream = loop {
            let targets: Vec<SocketAddr> = match addr.to_socket_addrs() {
                Ok(a) => a.collect(),
                Err(e) => {
                    last = e.to_string();
                    Vec::new()
                }
            };
            let mut got = None;
            for t in targets {
                let left = deadline
                    .saturating_duration_since(Instant::now())
                    .max(Duration::from_millis(1));
                match TcpStream::connect_timeout(&t, left.min(Duration::from_secs(5))) {
                    Ok(s) => {
                        got = Some(s);
                        break;
                    }
                    Err(e) => last = e.to_string(),
                }
            }
            if let Some(s) = got {
                break s;
            }
            if Instant::now() >= deadline {
                return Err(BootstrapError::Connect {
                    addr: addr.into(),
                    after: timeout,
                    reason: last,
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let _ = stream.set_nodelay(true);
        let mut hello = vec![TAG_HELLO];
        hello.extend_from_slice(MAGIC);
        put_bytes(&mut hello, secret.as_bytes());
        hello.extend_from_slice(&rank.to_le_bytes());
        hello.extend_from_slice(&size.to_le_bytes());
        send(&mut stream, &hello).map_err(|e| io_fail("send the greeting", e))?;
        let _ = stream.set_read_timeout(Some(
            deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(10)),
        ));
        let reply = recv(&mut stream).map_err(|e| io_fail("read the rendezvous's answer", e))?;
        let mut r = Reader(&reply);
        match r.u8()? {
            TAG_WELCOME => Ok(Self {
                stream,
                rank,
                size,
                timeout,
            }),
            TAG_REFUSED => Err(BootstrapError::Refused(
                String::from_utf8_lossy(&r.bytes()?).into_owned(),
            )),
            TAG_ERROR => Err(BootstrapError::Failed(
                String::from_utf8_lossy(&r.bytes()?).into_owned(),
            )),
            t => Err(BootstrapError::Protocol(format!(
                "unexpected answer tag {t}"
            ))),
        }
    }

    /// This rank.
    pub fn rank(&self) -> Rank {
        self.rank
    }

    /// Number of ranks.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// Every rank contributes `blob`; returns all blobs, indexed by rank. Waits at most
    /// the bootstrap timeout for the slowest rank.
    pub fn all_gather(&mut self, blob: &[u8]) -> Result<Vec<Vec<u8>>, BootstrapError> {
        let mut msg = vec![TAG_ROUND];
        put_bytes(&mut msg, blob);
        send(&mut self.stream, &msg).map_err(|e| io_fail("send to the rendezvous", e))?;
        let _ = self.stream.set_read_timeout(Some(self.timeout));
        let reply = recv(&mut self.stream).map_err(|e| {
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) {
                BootstrapError::Failed(format!(
                    "no all-gather result within {:?} (a rank is late or dead)",
                    self.timeout
                ))
            } else {
                io_fail("read from the rendezvous", e)
            }
        })?;
        let mut r = Reader(&reply);
        match r.u8()? {
            TAG_RESULT => {
                let n = r.u32()?;
                if n != self.size {
                    return Err(BootstrapError::Protocol(format!(
                        "{n} blobs for {} ranks",
                        self.size
                    )));
                }
                (0..n).map(|_| r.bytes()).collect()
            }
            TAG_ERROR => Err(BootstrapError::Failed(
                String::from_utf8_lossy(&r.bytes()?).into_owned(),
            )),
            t => Err(BootstrapError::Protocol(format!("unexpected tag {t}"))),
        }
    }

    /// Waits until every rank reaches the barrier.
    pub fn barrier(&mut self) -> Result<(), BootstrapError> {
        self.all_gather(&[]).map(drop)
    }

    /// This rendezvous as the fabric's [`Exchange`].
    pub fn into_exchange(self) -> Box<dyn Exchange> {
        Box::new(self)
    }
}

fn bind(addr: &str) -> Result<TcpListener, BootstrapError> {
    let fail = |e: std::io::Error| {
        BootstrapError::Failed(format!("rank 0 cannot serve the rendezvous at {addr}: {e}"))
    };
    let (_, port) = addr
        .rsplit_once(':')
        .ok_or_else(|| BootstrapError::Missing(format!("'{addr}' is not host:port")))?;
    // Listen on the named host's address; fall back to every interface with the same port
    // (a host name may resolve to an address other than the interface's).
    let first = addr.to_socket_addrs().map_err(fail)?.next();
    match first.map(TcpListener::bind) {
        Some(Ok(l)) => Ok(l),
        _ => TcpListener::bind(format!("0.0.0.0:{port}")).map_err(fail),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(vars: &[(&str, &str)]) -> Result<JobEnv, BootstrapError> {
        let m: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        JobEnv::from_vars(|k| m.get(k).cloned())
    }

    #[test]
    fn launchers() {
        let e = env(&[]).unwrap();
        assert_eq!((e.rank, e.size, e.launcher), (0, 1, Launcher::Single));
        let e = env(&[
            ("TITUS_RANK", "2"),
            ("TITUS_SIZE", "4"),
            ("TITUS_BOOTSTRAP", "127.0.0.1:9"),
            ("TITUS_JOB_SECRET", "s"),
        ])
        .unwrap();
        assert_eq!((e.rank, e.size, e.launcher), (2, 4, Launcher::Titus));
        let e = env(&[
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "8"),
            ("SLURM_JOB_ID", "1234"),
            ("SLURM_STEP_ID", "0"),
            ("SLURM_JOB_NODELIST", "cn[017-020],gpu3"),
        ])
        .unwrap();
        assert_eq!(e.launcher, Launcher::Slurm);
        // Port 30000 + (job × 31 + step) mod 20000.
        assert_eq!(e.rendezvous.as_deref(), Some("cn017:48254"));
        assert_eq!(e.secret, "slurm-1234.0");
        let e = env(&[("OMPI_COMM_WORLD_RANK", "0"), ("OMPI_COMM_WORLD_SIZE", "1")]).unwrap();
        assert_eq!(e.launcher, Launcher::OpenMpi);
        let e = env(&[
            ("PMI_RANK", "0"),
            ("PMI_SIZE", "3"),
            ("TITUS_BOOTSTRAP", "h:1"),
            ("TITUS_JOB_SECRET", "x"),
        ])
        .unwrap();
        assert_eq!(e.launcher, Launcher::Pmi);
    }

    #[test]
    fn bad_environments_name_the_variable() {
        let err = |vars: &[(&str, &str)]| env(vars).unwrap_err().to_string();
        assert!(err(&[("TITUS_RANK", "x"), ("TITUS_SIZE", "2")]).contains("TITUS_RANK='x'"));
        assert!(err(&[("TITUS_RANK", "1")]).contains("TITUS_SIZE is not"));
        assert!(err(&[("TITUS_RANK", "3"), ("TITUS_SIZE", "2")]).contains("not below"));
        assert!(err(&[("TITUS_RANK", "0"), ("TITUS_SIZE", "0")]).contains("at least one rank"));
        assert!(
            err(&[("TITUS_RANK", "0"), ("TITUS_SIZE", "2")]).contains("TITUS_BOOTSTRAP is not set")
        );
        assert!(
            err(&[
                ("TITUS_RANK", "0"),
                ("TITUS_SIZE", "2"),
                ("TITUS_BOOTSTRAP", "nohostport")
            ])
            .contains("host:port")
        );
        assert!(
            err(&[
                ("TITUS_RANK", "0"),
                ("TITUS_SIZE", "2"),
                ("TITUS_BOOTSTRAP", "h:1")
            ])
            .contains("TITUS_JOB_SECRET")
        );
        assert!(err(&[("TITUS_BOOTSTRAP_TIMEOUT", "-3")]).contains("positive"));
    }

    #[test]
    fn host_lists() {
        assert_eq!(first_host("node[03-05,9],gpu1").as_deref(), Some("node03"));
        assert_eq!(first_host("a,b").as_deref(), Some("a"));
        assert_eq!(first_host("single").as_deref(), Some("single"));
        assert_eq!(first_host("").as_deref(), None);
    }

    fn free_addr() -> String {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    }

    fn job(addr: &str, rank: Rank, size: u32, secret: &str) -> JobEnv {
        JobEnv {
            rank,
            size,
            launcher: Launcher::Titus,
            rendezvous: Some(addr.into()),
            secret: secret.into(),
            timeout: Duration::from_secs(5),
        }
    }

    #[test]
    fn all_gather_and_refusal() {
        let addr = free_addr();
        let size = 4;
        let probed = std::sync::Barrier::new(size as usize + 1);
        let results: Vec<Vec<Vec<u8>>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..size)
                .map(|r| {
                    let (addr, probed) = (addr.clone(), &probed);
                    s.spawn(move || {
                        let mut rv = Rendezvous::join(&job(&addr, r, size, "sesame"))
                            .unwrap()
                            .unwrap();
                        probed.wait();
                        let a = rv.all_gather(format!("rank{r}").as_bytes()).unwrap();
                        rv.barrier().unwrap();
                        a
                    })
                })
                .collect();
            // A foreign process: wrong secret, refused with a clear error; the job goes on.
            std::thread::sleep(Duration::from_millis(100));
            let foreign =
                Rendezvous::connect(&addr, 1, size, "guess", Duration::from_secs(5)).unwrap_err();
            assert!(
                foreign.to_string().contains("wrong job secret"),
                "{foreign}"
            );
            probed.wait();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for r in results {
            assert_eq!(
                r,
                (0..size)
                    .map(|i| format!("rank{i}").into_bytes())
                    .collect::<Vec<_>>()
            );
        }
    }

    #[test]
    fn absent_ranks_are_named() {
        let addr = free_addr();
        let mut e = job(&addr, 0, 3, "s");
        e.timeout = Duration::from_millis(400);
        let t = std::thread::spawn(move || Rendezvous::join(&e).map(|r| r.map(|_| ())));
        let mut r1 = Rendezvous::join(&job(&addr, 1, 3, "s")).unwrap().unwrap();
        // Rank 2 never comes: both joined ranks learn who is missing.
        let err = r1.all_gather(b"x").unwrap_err().to_string();
        assert!(err.contains("ranks 2 did not join"), "{err}");
        let _ = t.join().unwrap();
    }
}
