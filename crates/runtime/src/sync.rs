//! Synchronisation of the node's lock and its waits ([`crate::node_lock`]): std's, or
//! loom's under `--cfg runtime_loom`, so that the same code runs in the model checker
//! (`RUSTFLAGS="--cfg runtime_loom" cargo test -p titus-runtime --lib loom`, run by
//! `.ci/test`). A cfg of its own: `--cfg loom` switches the fabric crates' types too,
//! which the backends' shared memory cannot take.

#[cfg(runtime_loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicUsize};
#[cfg(runtime_loom)]
pub(crate) use loom::sync::{Condvar, Mutex, MutexGuard};
#[cfg(not(runtime_loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicUsize};
#[cfg(not(runtime_loom))]
pub(crate) use std::sync::{Condvar, Mutex, MutexGuard};
