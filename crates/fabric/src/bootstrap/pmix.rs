//! The PMIx bootstrap: the launcher's PMIx server (Open MPI's `mpirun`, Slurm's
//! `srun --mpi=pmix`) is the job's key-value exchange. Rank and size are PMIx's, the
//! namespace is the job's identity, so there is no rendezvous server, port or secret.
//!
//! Each all-gather round publishes this rank's blob under its own key,
//! `titus.<runtime>.<round>` (`PMIx_Put`, `PMIx_Commit`), exchanges the job's data with a
//! collecting `PMIx_Fence`, then reads every other rank's blob (`PMIx_Get`). Keys are
//! never reused: PMIx clients cache what they read, so a reused key could return an
//! earlier round's value. `<runtime>` counts the PMIx exchanges this process opened, which
//! every rank does in the same order (opening a runtime is collective). A barrier is a
//! fence without data. Every call is bounded by the bootstrap timeout; a rank that never
//! published a key, or a fence that does not complete, is an error naming the rank and
//! the key.

use super::{BootstrapError, Exchange, JobEnv};
use crate::Rank;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use titus_pmix_sys::{Client, ErrorKind};

/// The largest blob one rank may contribute to an all-gather (larger values read from
/// PMIx are refused as malformed).
pub const MAX_BLOB: usize = 64 << 20;

/// The first byte of every value Titus publishes (PMIx takes no empty value; a value
/// without it is not Titus's).
const TAG: u8 = 0x54;

/// PMIx exchanges opened in this process so far.
static RUNTIMES: AtomicU64 = AtomicU64::new(0);

/// This rank's PMIx exchange.
#[derive(Debug)]
pub struct Pmix {
    client: Client,
    runtime: u64,
    round: u64,
    timeout: Duration,
}

fn pmix_err(e: titus_pmix_sys::Error) -> BootstrapError {
    BootstrapError::Pmix(e.message)
}

impl Pmix {
    /// Connects to the PMIx server that started this process, as the rank `env` says
    /// (PMIx's rank and size must agree with the launcher's variables).
    pub fn join(env: &JobEnv) -> Result<Self, BootstrapError> {
        let me = Self::connect(env.timeout)?;
        if (me.rank(), me.size()) != (env.rank, env.size) {
            return Err(BootstrapError::Pmix(format!(
                "PMIx says rank {} of {} (namespace {}), the launcher's variables rank {} of {}",
                me.rank(),
                me.size(),
                me.namespace(),
                env.rank,
                env.size
            )));
        }
        Ok(me)
    }

    /// Connects to the PMIx server that started this process; rank and size are PMIx's.
    /// Every wait of the exchange is bounded by `timeout`.
    pub fn connect(timeout: Duration) -> Result<Self, BootstrapError> {
        let client = Client::init().map_err(pmix_err)?;
        Ok(Self {
            client,
            runtime: RUNTIMES.fetch_add(1, Ordering::Relaxed),
            round: 0,
            timeout,
        })
    }

    /// The job's PMIx namespace.
    pub fn namespace(&self) -> &str {
        self.client.namespace()
    }

    /// This rank.
    pub fn rank(&self) -> Rank {
        self.client.rank()
    }

    /// Number of ranks.
    pub fn size(&self) -> u32 {
        self.client.size()
    }

    /// The key of the next all-gather round.
    pub fn next_key(&self) -> String {
        format!("titus.{}.{}", self.runtime, self.round)
    }

    /// Publishes `blob` under `key` (committed; visible to the others after the next
    /// collecting fence).
    pub fn publish(&self, key: &str, blob: &[u8]) -> Result<(), BootstrapError> {
        if blob.len() > MAX_BLOB {
            return Err(BootstrapError::Pmix(format!(
                "rank {} would publish {} bytes under '{key}', over the {MAX_BLOB}-byte limit",
                self.rank(),
                blob.len()
            )));
        }
        let mut v = Vec::with_capacity(blob.len() + 1);
        v.push(TAG);
        v.extend_from_slice(blob);
        self.client.put(key, &v).map_err(pmix_err)
    }

    /// Waits until every rank reaches the fence (with `collect`, exchanging what each
    /// published), within the timeout.
    pub fn fence(&self, collect: bool) -> Result<(), BootstrapError> {
        self.client.fence(collect, self.timeout).map_err(|e| {
            BootstrapError::Pmix(format!(
                "{} (a rank of namespace {} is late, dead or in another exchange)",
                e.message,
                self.namespace()
            ))
        })
    }

    /// What `rank` published under `key`, within the timeout.
    pub fn read(&self, rank: Rank, key: &str) -> Result<Vec<u8>, BootstrapError> {
        let v = self
            .client
            .get(rank, key, self.timeout, MAX_BLOB + 1)
            .map_err(|e| {
                let why = match e.kind {
                    ErrorKind::NotFound | ErrorKind::Timeout => format!(
                        "rank {rank} did not publish key '{key}' (namespace {}) within {:?} \
                         (PMIx_Get: {})",
                        self.namespace(),
                        self.timeout,
                        titus_pmix_sys::status_text(e.status)
                    ),
                    _ => e.message,
                };
                BootstrapError::Pmix(why)
            })?;
        match v.split_first() {
            Some((&TAG, blob)) => Ok(blob.to_vec()),
            _ => Err(BootstrapError::Pmix(format!(
                "rank {rank}'s value under key '{key}' is not Titus's ({} bytes without its tag)",
                v.len()
            ))),
        }
    }
}

impl Exchange for Pmix {
    fn rank(&self) -> Rank {
        self.client.rank()
    }
    fn size(&self) -> u32 {
        self.client.size()
    }
    fn all_gather(&mut self, blob: &[u8]) -> Result<Vec<Vec<u8>>, BootstrapError> {
        let key = self.next_key();
        self.round += 1;
        self.publish(&key, blob)?;
        self.fence(true)?;
        let me = self.rank();
        (0..self.size())
            .map(|r| {
                if r == me {
                    Ok(blob.to_vec())
                } else {
                    self.read(r, &key)
                }
            })
            .collect()
    }
    fn barrier(&mut self) -> Result<(), BootstrapError> {
        self.fence(false)
    }
}
