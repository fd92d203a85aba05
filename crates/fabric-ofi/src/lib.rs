//! The libfabric backend of [`titus_fabric::Fabric`].
//!
//! Providers: `tcp;ofi_rxm` (the portable default), `shm` (one node), `sockets`
//! (automatic progress; needs `FI_SOCKETS_PE_WAITTIME=0`, which `titus launch` sets, or it
//! answers in milliseconds) and `verbs;ofi_rxm` (soft-RoCE and InfiniBand). `udp;ofi_rxd`
//! crashes on atomics and `net` has none in libfabric 1.17: both are refused by name.
//!
//! Bindings: our own C shim (`titus-ofi-sys`, compiled with `cc` against the headers
//! pkg-config finds) rather than bindgen: the data path is libfabric's static inline
//! functions anyway, the shim keeps every libfabric struct on the C side (so no layout
//! depends on the installed version), and a build needs no libclang. No maintained crate
//! builds against Debian 12's libfabric 1.17; `ofi-libfabric-sys` (≥ 1.20) is the upgrade
//! path once distributions ship it.
//!
//! # Modules
//!
//! - `provider`: which provider a job uses ([`available`], [`providers`],
//!   [`choose_provider`]);
//! - `handle`: the owned shim handle, opened with the registered segments;
//! - `address`: the record each rank publishes (address, segment keys) and what it learns;
//! - `connect`: [`OfiFabric::open`], collective: provider, registration, exchange, first
//!   contact with each peer;
//! - `fabric`: [`OfiFabric`] and its [`titus_fabric::Fabric`] operations;
//! - `completion`: the completion queue, the poller token, waits and progress;
//! - `raw`: the raw-latency benchmark ([`OfiFabric::raw_latency`]);
//! - `error`: libfabric errors as [`titus_fabric::FabricError`]s;
//! - `backend`: [`Ofi`], this backend as the runtime opens it (`backend=ofi`).

mod address;
mod backend;
mod completion;
mod connect;
mod error;
mod fabric;
mod handle;
mod provider;
mod raw;
mod watch;

pub use backend::Ofi;
pub use fabric::OfiFabric;
pub use provider::{available, choose_provider, foreign_crash_handlers, providers};

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, recovering the guard from a poisoned lock (a panicked holder leaves no
/// broken invariant behind: every update under these locks is a single step).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
