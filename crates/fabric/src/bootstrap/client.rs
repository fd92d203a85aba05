//! The rendezvous client: each rank's connection, and the [`Exchange`] it provides.

use super::server::{Hub, bind, serve};
use super::wire::{Answer, hello, io_fail, parse_answer, parse_result, recv, round, send};
use super::{BootstrapError, Exchange, JobEnv, Via};
use crate::Rank;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The rendezvous this process serves (as rank 0), by address: one for all its runtimes.
static HUBS: Mutex<Vec<(String, Hub)>> = Mutex::new(Vec::new());

/// The rendezvous this process serves at `addr` for `env`'s job, started on first use.
fn hub(addr: &str, everywhere: bool, env: &JobEnv) -> Result<Hub, BootstrapError> {
    let mut hubs = HUBS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, h)) = hubs.iter().find(|(a, _)| a == addr) {
        if !h.serves(env.size, &env.secret) {
            return Err(BootstrapError::Failed(format!(
                "this process already serves a rendezvous at {addr} for another job (another \
                 size or secret)"
            )));
        }
        return Ok(h.clone());
    }
    let listener = bind(addr, everywhere)?;
    let h = serve(listener, env.size, env.secret.clone())
        .map_err(|e| io_fail("start the rendezvous threads", e))?;
    hubs.push((addr.to_string(), h.clone()));
    Ok(h)
}

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
            // A derived address names the first node, whose name may resolve to an address
            // only it can reach (127.0.1.1 on a default Debian /etc/hosts): listen on every
            // interface. An explicit address is taken as given.
            let everywhere = matches!(env.via, Via::SlurmReserved | Via::SlurmDerived);
            hub(&addr, everywhere, env)?.open(env.runtime, env.timeout)?;
        }
        Self::connect_runtime(
            &addr,
            env.rank,
            env.size,
            env.runtime,
            &env.secret,
            env.timeout,
        )
        .map(Some)
    }

    /// Connects to the rendezvous at `addr` as `rank` of `size` for the process's first
    /// runtime, retrying until `timeout` (rank 0 may not be serving yet).
    pub fn connect(
        addr: &str,
        rank: Rank,
        size: u32,
        secret: &str,
        timeout: Duration,
    ) -> Result<Self, BootstrapError> {
        Self::connect_runtime(addr, rank, size, 0, secret, timeout)
    }

    /// [`Rendezvous::connect`] for the process's runtime number `runtime`.
    pub fn connect_runtime(
        addr: &str,
        rank: Rank,
        size: u32,
        runtime: u32,
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
        send(&mut stream, &hello(secret.as_bytes(), rank, size, runtime))
            .map_err(|e| io_fail("send the greeting", e))?;
        let _ = stream.set_read_timeout(Some(
            deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(10)),
        ));
        let reply = recv(&mut stream).map_err(|e| io_fail("read the rendezvous's answer", e))?;
        match parse_answer(&reply)? {
            Answer::Welcome => Ok(Self {
                stream,
                rank,
                size,
                timeout,
            }),
            Answer::Refused(why) if why.contains("wrong job secret") => {
                Err(BootstrapError::Refused(format!(
                    "{why} at {addr} — at start-up this is most likely another job's \
                     rendezvous on the same port (a collision), or ranks started with different \
                     TITUS_JOB_SECRET values: set TITUS_BOOTSTRAP=host:port to a free port of \
                     the first node, or bootstrap through PMIx (mpirun, srun --mpi=pmix)"
                )))
            }
            Answer::Refused(why) => Err(BootstrapError::Refused(why)),
            Answer::Error(why) => Err(BootstrapError::Failed(why)),
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
        send(&mut self.stream, &round(blob)).map_err(|e| io_fail("send to the rendezvous", e))?;
        // The coordinator's own deadline (counted from when rank 0 opened it) ends first
        // and its answer names the absent ranks and what was refused: wait a grace beyond
        // it, so that a loaded machine does not turn that answer into this generic one.
        let grace = (self.timeout / 2).clamp(Duration::from_secs(1), Duration::from_secs(10));
        let _ = self.stream.set_read_timeout(Some(self.timeout + grace));
        let reply = recv(&mut self.stream).map_err(|e| {
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) {
                BootstrapError::Failed(format!(
                    "no all-gather result within {:?} (a rank is late or dead)",
                    self.timeout + grace
                ))
            } else {
                io_fail("read from the rendezvous", e)
            }
        })?;
        parse_result(&reply, self.size)?.map_err(BootstrapError::Failed)
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
