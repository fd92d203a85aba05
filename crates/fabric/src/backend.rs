//! Backends that run one rank per process, as the runtime opens them.
//!
//! The in-process [`crate::mem`] backend builds every rank of a world at once; a
//! multi-process backend (libfabric today, verbs later) opens one rank per process,
//! collectively, with the ranks' addresses exchanged through an [`Exchange`]. Each such
//! backend crate implements [`Opener`] on a unit struct, and the runtime lists it in its
//! table of backends (`titus_runtime::BACKENDS`): adding a backend is one new crate and
//! one line there, with nothing in the runtime matching on which backend it is.

use crate::bootstrap::{BootstrapError, Exchange};
use crate::{Fabric, FabricConfig, FabricError, Rank};
use std::sync::Arc;

/// A job-wide all-gather over the exchange an opened fabric keeps (a barrier when the
/// blobs are empty); collective, called from the thread that runs epochs.
pub type AllGather = Box<dyn Fn(&[u8]) -> Result<Vec<Vec<u8>>, BootstrapError> + Send + Sync>;

/// Backends a user may name where a libfabric provider is expected (`TITUS_PROVIDER=node`,
/// `titus launch --provider hybrid`): naming one forces that backend.
pub const NAMED_BACKENDS: [&str; 2] = ["node", "hybrid"];

/// The transport the user forced, if any: `provider`, else `TITUS_PROVIDER`, else
/// libfabric's `FI_PROVIDER` (empty values do not count). It may name a backend
/// ([`NAMED_BACKENDS`]) or a libfabric provider.
pub fn forced_transport(provider: Option<&str>) -> Option<String> {
    let env = |v| crate::env_var::get(v).ok().flatten();
    provider
        .map(str::to_string)
        .or_else(|| env(crate::env_var::PROVIDER))
        .or_else(|| env(crate::env_var::FI_PROVIDER))
        .filter(|p| !p.trim().is_empty())
}

/// The libfabric provider the user forced, if any: as [`forced_transport`], except that
/// a `TITUS_PROVIDER` naming a backend forces no provider (`FI_PROVIDER` may still).
pub fn forced_provider(provider: Option<&str>) -> Option<String> {
    let env = |v| crate::env_var::get(v).ok().flatten();
    provider
        .map(str::to_string)
        .or_else(|| env(crate::env_var::PROVIDER).filter(|p| !NAMED_BACKENDS.contains(&p.as_str())))
        .or_else(|| env(crate::env_var::FI_PROVIDER))
        .filter(|p| !p.trim().is_empty())
}

/// One rank, opened: its fabric and the job-wide all-gather among the ranks.
pub struct Opened {
    /// This rank's fabric.
    pub fabric: Arc<dyn Fabric>,
    /// The all-gather among every rank of the job (through the exchange given to
    /// [`Opener::open`]; a rank alone gathers its own blob).
    pub all_gather: AllGather,
}

impl std::fmt::Debug for Opened {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Opened")
            .field("rank", &self.fabric.rank())
            .field("size", &self.fabric.size())
            .field("caps", self.fabric.caps())
            .finish_non_exhaustive()
    }
}

/// A backend that opens one rank of a job whose ranks are separate processes.
pub trait Opener: Send + Sync + std::fmt::Debug {
    /// The name users choose it by (`backend=ofi`), unique among the runtime's backends.
    fn name(&self) -> &'static str;

    /// Whether this build can open it. When it cannot, [`Opener::open`] fails with an
    /// error that says how to get it.
    fn available(&self) -> bool;

    /// Whether the automatic choice (`backend=auto`) may take this backend for a job
    /// whose ranks all share one node (`one_node`), when a libfabric provider was forced
    /// (`forced`; a forced backend name never reaches here: that backend is taken).
    fn suits(&self, one_node: bool, forced: Option<&str>) -> bool {
        let _ = (one_node, forced);
        true
    }

    /// Opens rank `rank` of `size` with `config`'s segments and peers, learning the other
    /// ranks' addresses through `exchange` (required when `size > 1`), on `provider` (the
    /// backend's own transport choice; None: automatic). Collective: every rank calls it.
    fn open(
        &self,
        rank: Rank,
        size: u32,
        exchange: Option<Box<dyn Exchange>>,
        config: FabricConfig,
        provider: Option<&str>,
    ) -> Result<Opened, FabricError>;
}
