//! The rendezvous server, run by rank 0 on threads: an acceptor checks each greeting (the
//! job secret, the rank, the size) and hands joined ranks to a coordinator, which runs
//! the all-gather rounds until every rank has closed its connection.

use super::wire::{
    MAGIC, Reader, TAG_ERROR, TAG_HELLO, TAG_REFUSED, TAG_RESULT, TAG_ROUND, TAG_WELCOME,
    put_bytes, recv, same_secret, send, text,
};
use super::{BootstrapError, list};
use crate::Rank;
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

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

/// Listens at `addr` (rank 0's rendezvous address).
pub(super) fn bind(addr: &str) -> Result<TcpListener, BootstrapError> {
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
