//! The rendezvous server, run by rank 0 on threads: an acceptor hands each connection to
//! a greeter thread that checks its greeting (the job secret, the rank, the size, the
//! runtime) and hands joined ranks to their runtime's coordinator, which runs the
//! all-gather rounds until every rank has closed its connection.
//!
//! One rendezvous (one port) serves every runtime of the process, one after another or at
//! once: the greeting names the runtime (its number in the process, the same on every
//! rank), each runtime has its own coordinator. A rank that greets for a runtime rank 0
//! has not opened yet waits in that runtime's queue. So a process's second runtime needs
//! no second port (a port + k scheme ran into the next Slurm step's port).
//!
//! # Strangers
//!
//! The port is open to anyone who can reach it, so nothing a stranger does may stop or
//! delay the job's ranks:
//! 1. every connection is greeted on its own thread, so one slow client holds no other;
//! 2. the whole greeting must arrive within [`GREETING_DEADLINE`] of the accept (not per
//!    read: a client trickling a byte at a time gains nothing) and be at most
//!    [`GREETING_MAX`] bytes (a stranger cannot make rank 0 allocate a large frame);
//! 3. connections still being greeted are bounded, per source address
//!    ([`PENDING_PER_ADDR`]) and in all ([`PENDING_MAX`]); a new connection over a bound
//!    evicts the oldest pending one of its address (or the oldest overall), so an idle
//!    flood holds at most the bound and cannot keep a member out: a member greets in
//!    microseconds, a stranger's old connection goes first;
//! 4. every refusal is counted by reason and address, and a job that times out waiting
//!    for its ranks says what the rendezvous refused meanwhile (the real cause, when a
//!    foreign process holds the port), not only which ranks are missing.

use super::wire::{
    Hello, MAX_FRAME, TAG_ERROR, TAG_REFUSED, parse_hello, parse_round, recv, recv_by, result,
    result_len, same_secret, send, text, welcome,
};
use super::{BootstrapError, list};
use crate::Rank;
use std::collections::BTreeMap;
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::{Arc, Mutex, MutexGuard, mpsc};
use std::time::{Duration, Instant};

/// How long a connection has to deliver its whole greeting: a member sends it right after
/// connecting (one small frame), so 5 s is only ever reached by a stalled or foreign peer.
pub(super) const GREETING_DEADLINE: Duration = Duration::from_secs(5);
/// The largest greeting: tag, magic, the secret (a launcher's is 32 hex digits; 1 KiB
/// leaves room for any site's), rank and size.
const GREETING_MAX: u32 = 1 << 12;
/// Connections being greeted at once from one address. Members greet in microseconds, so
/// even a thousand ranks behind one address rarely hold more than a few at a time.
const PENDING_PER_ADDR: usize = 32;
/// Connections being greeted at once in all (each holds a thread for at most the
/// deadline).
const PENDING_MAX: usize = 256;

/// A joined rank's connection, handed from a greeter to the coordinator.
struct Joined {
    rank: Rank,
    stream: TcpStream,
}

/// A connection being greeted: a handle to shut it down if it must be evicted.
struct Pending {
    id: u64,
    ip: IpAddr,
    closer: TcpStream,
}

/// The most runtimes one rendezvous keeps queues for at once.
const RUNTIMES_MAX: usize = 1 << 12;

/// One runtime's ranks: which joined, and the queue of their connections that its
/// coordinator takes (`rx`, until rank 0 opens the runtime).
struct Slot {
    joined: Vec<bool>,
    tx: mpsc::Sender<Joined>,
    rx: Option<mpsc::Receiver<Joined>>,
}

/// What the greeters share: the connections being greeted, each runtime's ranks, and the
/// refusals so far (reason → address → count).
#[derive(Default)]
struct Door {
    pending: Vec<Pending>,
    next_id: u64,
    size: u32,
    runtimes: BTreeMap<u32, Slot>,
    refused: BTreeMap<String, BTreeMap<IpAddr, u64>>,
}

fn lock(m: &Mutex<Door>) -> MutexGuard<'_, Door> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Door {
    /// Runtime `runtime`'s slot, created on first use (`None` over [`RUNTIMES_MAX`]).
    fn slot(&mut self, runtime: u32) -> Option<&mut Slot> {
        if !self.runtimes.contains_key(&runtime) && self.runtimes.len() >= RUNTIMES_MAX {
            return None;
        }
        let size = self.size as usize;
        Some(self.runtimes.entry(runtime).or_insert_with(|| {
            let (tx, rx) = mpsc::channel();
            Slot {
                joined: vec![false; size],
                tx,
                rx: Some(rx),
            }
        }))
    }

    fn refuse(&mut self, ip: IpAddr, reason: &str) {
        *self
            .refused
            .entry(reason.to_owned())
            .or_default()
            .entry(ip)
            .or_default() += 1;
    }

    /// Registers a new connection from `ip`, evicting the oldest pending one of the same
    /// address (or the oldest overall) when a bound is reached.
    fn admit(&mut self, ip: IpAddr, closer: TcpStream) -> u64 {
        let same = self.pending.iter().filter(|p| p.ip == ip).count();
        let victim = if same >= PENDING_PER_ADDR {
            self.pending.iter().position(|p| p.ip == ip)
        } else if self.pending.len() >= PENDING_MAX {
            Some(0)
        } else {
            None
        };
        if let Some(i) = victim {
            let old = self.pending.remove(i);
            let _ = old.closer.shutdown(Shutdown::Both);
            self.refuse(
                old.ip,
                "evicted while greeting: too many connections at once from its address",
            );
        }
        let id = self.next_id;
        self.next_id += 1;
        self.pending.push(Pending { id, ip, closer });
        id
    }

    fn leave(&mut self, id: u64) {
        self.pending.retain(|p| p.id != id);
    }

    /// One line on what was refused, for a job that timed out ("" when nothing was).
    fn refusals(&self) -> String {
        if self.refused.is_empty() {
            return String::new();
        }
        let parts: Vec<String> = self
            .refused
            .iter()
            .map(|(reason, by)| {
                let n: u64 = by.values().sum();
                let from: Vec<String> = by.keys().take(3).map(IpAddr::to_string).collect();
                let more = if by.len() > 3 { ", ..." } else { "" };
                format!("{n} × {reason} (from {}{more})", from.join(", "))
            })
            .collect();
        format!(
            "; meanwhile the rendezvous refused {}: is a process that is not a rank of this job \
             connecting to its port?",
            parts.join("; ")
        )
    }
}

/// Rank 0's rendezvous for a job of `size` ranks: one per process and port, serving every
/// runtime of the process ([`Hub::open`]). Cloning shares it.
#[derive(Clone)]
pub struct Hub {
    door: Arc<Mutex<Door>>,
    size: u32,
    secret: Arc<[u8]>,
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub")
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

/// Serves the rendezvous for a job of `size` ranks on `listener`, for the rest of the
/// process: returns at once, the acceptor and greeters run on threads. Each runtime's
/// rounds start with [`Hub::open`].
pub fn serve(listener: TcpListener, size: u32, secret: String) -> std::io::Result<Hub> {
    listener.set_nonblocking(true)?;
    let door = Arc::new(Mutex::new(Door {
        size,
        ..Door::default()
    }));
    let secret: Arc<[u8]> = Arc::from(secret.as_bytes());
    let (door2, secret2) = (door.clone(), secret.clone());
    std::thread::Builder::new()
        .name("titus-rendezvous-accept".into())
        .spawn(move || accept_loop(listener, size, secret2, door2))?;
    Ok(Hub { door, size, secret })
}

impl Hub {
    /// Whether this hub serves a job of `size` ranks with `secret`.
    pub fn serves(&self, size: u32, secret: &str) -> bool {
        self.size == size && same_secret(&self.secret, secret.as_bytes())
    }

    /// Starts runtime `runtime`'s coordinator: it waits at most `timeout` for every rank
    /// to greet for this runtime, then runs its all-gather rounds until every rank has
    /// closed its connection.
    pub fn open(&self, runtime: u32, timeout: Duration) -> Result<(), BootstrapError> {
        let rx = {
            let mut d = lock(&self.door);
            let slot = d.slot(runtime).ok_or_else(|| {
                BootstrapError::Failed(format!(
                    "the rendezvous has {RUNTIMES_MAX} runtimes open at once"
                ))
            })?;
            slot.rx.take().ok_or_else(|| {
                BootstrapError::Failed(format!(
                    "runtime {runtime} of this process already has a rendezvous: every \
                     runtime of a process needs its own number (JobEnv::session)"
                ))
            })?
        };
        let (door, size) = (self.door.clone(), self.size);
        std::thread::Builder::new()
            .name("titus-rendezvous".into())
            .spawn(move || {
                coordinate(size, rx, timeout, &door);
                // Done: the number may serve a later runtime.
                lock(&door).runtimes.remove(&runtime);
            })
            .map(drop)
            .map_err(|e| BootstrapError::Failed(format!("start the rendezvous thread: {e}")))
    }
}

fn accept_loop(listener: TcpListener, size: u32, secret: Arc<[u8]>, door: Arc<Mutex<Door>>) {
    loop {
        match listener.accept() {
            Ok((stream, peer)) => {
                let Ok(closer) = stream.try_clone() else {
                    continue;
                };
                let id = lock(&door).admit(peer.ip(), closer);
                let (secret, door2) = (secret.clone(), door.clone());
                let greeter = std::thread::Builder::new()
                    .name("titus-rendezvous-greet".into())
                    .spawn(move || {
                        greet(stream, peer, size, &secret, &door2, id);
                        lock(&door2).leave(id);
                    });
                if greeter.is_err() {
                    let mut d = lock(&door);
                    d.leave(id);
                    d.refuse(peer.ip(), "no thread to greet it");
                }
            }
            // Block until a connection waits (or a tenth of a second passes): no polling —
            // rank 0's acceptor lives as long as the process, and woke 200 times a second
            // on cores the workers need.
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let mut fds = [rustix::event::PollFd::new(
                    &listener,
                    rustix::event::PollFlags::IN,
                )];
                let wait = rustix::event::Timespec {
                    tv_sec: 0,
                    tv_nsec: 100_000_000,
                };
                if rustix::event::poll(&mut fds, Some(&wait)).is_err() {
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}

/// Reads a HELLO within the deadline and queues the rank for its runtime's coordinator;
/// refuses (and logs) anything that is not a new rank of this job.
fn greet(
    mut stream: TcpStream,
    peer: SocketAddr,
    size: u32,
    secret: &[u8],
    door: &Mutex<Door>,
    id: u64,
) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_nodelay(true);
    let hello = recv_by(
        &mut stream,
        Instant::now() + GREETING_DEADLINE,
        GREETING_MAX,
    );
    let verdict = (|| -> Result<(Rank, u32), String> {
        let hello = hello.map_err(|e| match e.kind() {
            std::io::ErrorKind::TimedOut => format!(
                "no complete greeting within {} s",
                GREETING_DEADLINE.as_secs()
            ),
            std::io::ErrorKind::InvalidData => format!("not a Titus greeting: {e}"),
            _ => format!("connection lost before its greeting ({e})"),
        })?;
        let Hello {
            secret: their_secret,
            rank,
            size: their_size,
            runtime,
        } = parse_hello(&hello)?;
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
        let mut d = lock(door);
        let slot = d
            .slot(runtime)
            .ok_or_else(|| format!("runtime {runtime}: too many runtimes open at once"))?;
        if slot.joined[rank as usize] {
            return Err(format!("rank {rank} has already joined runtime {runtime}"));
        }
        slot.joined[rank as usize] = true;
        Ok((rank, runtime))
    })();
    match verdict {
        Ok((rank, runtime)) => {
            let _ = stream.set_read_timeout(None);
            let welcomed = send(&mut stream, &welcome()).is_ok();
            let mut d = lock(door);
            if let Some(slot) = d.runtimes.get_mut(&runtime) {
                if welcomed {
                    let _ = slot.tx.send(Joined { rank, stream });
                } else {
                    // It left before the welcome: let the same rank try again.
                    slot.joined[rank as usize] = false;
                }
            }
        }
        Err(reason) => {
            let mut d = lock(door);
            if !d.pending.iter().any(|p| p.id == id) {
                return; // Evicted: counted as such.
            }
            tracing::warn!("rendezvous: refused a connection from {peer}: {reason}");
            d.refuse(peer.ip(), &reason);
            drop(d);
            let _ = send(&mut stream, &text(TAG_REFUSED, &reason));
        }
    }
}

fn coordinate(size: u32, rx: mpsc::Receiver<Joined>, timeout: Duration, door: &Mutex<Door>) {
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
                .to_string()
                    + &lock(door).refusals();
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
                Ok(p) => match parse_round(&p) {
                    Ok(blob) => blobs.push(blob),
                    Err(_) => malformed = Some(r),
                },
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
            (true, None) => oversized(blobs.iter().map(Vec::len)),
        };
        if let Some(msg) = failure {
            for s in &mut streams {
                let _ = send(s, &text(TAG_ERROR, &msg));
            }
            return;
        }
        let out = result(&blobs);
        // Rank 0 hosts this thread: answer it last, so that it cannot return from the
        // exchange (and exit) before every other rank has its answer.
        for i in (1..streams.len()).chain(0..1) {
            let _ = send(&mut streams[i], &out);
        }
    }
}

/// Why an all-gather of blobs of `lens` bytes cannot be answered, if it cannot: each
/// blob fits a frame, but the ranks' blobs joined may not (and past 4 GiB the frame's u32
/// length would wrap), so the total is counted before anything is joined.
fn oversized(lens: impl ExactSizeIterator<Item = usize> + Clone) -> Option<String> {
    let total = result_len(lens.clone());
    (total > u64::from(MAX_FRAME)).then(|| {
        format!(
            "the all-gather's result would be {total} bytes ({} ranks' blobs, the largest {} \
             bytes), more than the rendezvous's frame limit of {MAX_FRAME} bytes",
            lens.len(),
            lens.max().unwrap_or(0)
        )
    })
}

/// Listens at `addr` (rank 0's rendezvous address), on every interface with
/// `everywhere`. A port another process holds is named as a likely collision, with the
/// way out.
pub(super) fn bind(addr: &str, everywhere: bool) -> Result<TcpListener, BootstrapError> {
    let fail = |e: std::io::Error| {
        let hint = if e.kind() == std::io::ErrorKind::AddrInUse {
            " — another job or step probably derived the same port (a collision): set \
             TITUS_BOOTSTRAP=host:port to a free port of the first node, or bootstrap \
             through PMIx (mpirun, srun --mpi=pmix)"
        } else {
            ""
        };
        BootstrapError::Failed(format!(
            "rank 0 cannot serve the rendezvous at {addr}: {e}{hint}"
        ))
    };
    let (_, port) = addr
        .rsplit_once(':')
        .ok_or_else(|| BootstrapError::Missing(format!("'{addr}' is not host:port")))?;
    let any = || TcpListener::bind(format!("0.0.0.0:{port}")).map_err(fail);
    if everywhere {
        return any();
    }
    // Listen on the named host's address; fall back to every interface with the same port
    // (a host name may resolve to an address other than the interface's).
    let first = addr.to_socket_addrs().map_err(fail)?.next();
    match first.map(TcpListener::bind) {
        Some(Ok(l)) => Ok(l),
        _ => any(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_all_gather_past_the_frame_limit_is_refused_naming_it() {
        assert_eq!(oversized([4096; 10_000].into_iter()), None);
        // Two ranks of 200 MiB: each blob fits a frame, the two joined do not.
        let e = oversized([200 << 20, 200 << 20].into_iter()).unwrap();
        assert!(e.contains("frame limit of 268435456 bytes"), "{e}");
        assert!(
            e.contains("2 ranks' blobs, the largest 209715200 bytes"),
            "{e}"
        );
        // Past 4 GiB, where the u32 length used to wrap.
        assert!(oversized([3 << 30, 3 << 30].into_iter()).is_some());
    }
}
