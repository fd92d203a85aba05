//! Which fabric a runtime runs over: the user's choice ([`Backend`]) and the table of
//! multi-process backends this build has ([`BACKENDS`]).
//!
//! The in-process backend (`mem`) is the runtime's own: it builds every rank of a world
//! at once ([`crate::Runtime::local`]). Every other backend opens one rank per process
//! through [`Opener`], found here by name; the runtime never matches on which backend it
//! is. Adding one (verbs, say) is one new crate implementing [`Opener`], its dependency
//! in this crate's Cargo.toml, and one line in [`BACKENDS`].
//!
//! `auto` ([`AUTO`], the default) chooses collectively: every rank tells whether a
//! transport was forced (a provider given, `TITUS_PROVIDER` or `FI_PROVIDER`) and which
//! node it runs on ([`node_identity`]), and all take the first backend of [`BACKENDS`]
//! that is available and [`Opener::suits`] the job — the node backend when every rank
//! shares one node and nothing was forced, the hybrid (shared memory inside a node,
//! libfabric between nodes) across nodes, libfabric when a provider is forced.

use crate::RuntimeError;
use titus_fabric::backend::{Opened, Opener, forced_transport};
use titus_fabric::bootstrap::{Exchange, node_identity};
use titus_fabric::{FabricConfig, FabricError, Rank};

/// Every multi-process backend of this build, in the order the automatic choice tries
/// them.
pub static BACKENDS: &[&dyn Opener] = &[
    &titus_fabric_node::Node,
    &titus_fabric_hybrid::Hybrid,
    &titus_fabric_ofi::Ofi,
];

/// The automatic choice among [`BACKENDS`] (`backend=auto`).
pub static AUTO: Auto = Auto;

/// The name of the automatic choice.
pub const AUTO_NAME: &str = "auto";

/// The name of the in-process backend.
pub const MEM: &str = "mem";

/// How the runtime reaches other ranks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    /// One rank per process over the backend of [`BACKENDS`] named `name` (`ofi`:
    /// libfabric), bootstrapped from the launcher's environment or an exchange;
    /// `provider` is the backend's own transport choice (ofi: as `TITUS_PROVIDER`; None:
    /// automatic).
    Fabric {
        /// The backend's name.
        name: String,
        /// Provider name.
        provider: Option<String>,
    },
    /// In-process ranks (see [`crate::Runtime::local`]).
    Mem,
}

impl Backend {
    /// libfabric on `provider` (None: automatic).
    pub fn ofi(provider: Option<String>) -> Self {
        Self::Fabric {
            name: titus_fabric_ofi::Ofi.name().into(),
            provider,
        }
    }

    /// The default: the automatic choice among [`BACKENDS`] ([`AUTO`]), with `provider`
    /// forced if given.
    pub fn default_fabric(provider: Option<String>) -> Self {
        Self::Fabric {
            name: AUTO_NAME.into(),
            provider,
        }
    }

    /// The backend called `name` ([`MEM`] or one of [`BACKENDS`]), on `provider`; an
    /// unknown name is an error that lists the known ones.
    pub fn named(name: &str, provider: Option<String>) -> Result<Self, RuntimeError> {
        if name == MEM {
            return Ok(Self::Mem);
        }
        opener(name)?;
        Ok(Self::Fabric {
            name: name.into(),
            provider,
        })
    }
}

/// The names of every backend, `mem` and `auto` first.
pub fn backend_names() -> Vec<&'static str> {
    [MEM, AUTO_NAME]
        .into_iter()
        .chain(BACKENDS.iter().map(|b| b.name()))
        .collect()
}

/// The multi-process backend called `name` (or the automatic choice).
pub(crate) fn opener(name: &str) -> Result<&'static dyn Opener, RuntimeError> {
    std::iter::once(&AUTO as &dyn Opener)
        .chain(BACKENDS.iter().copied())
        .find(|b| b.name() == name)
        .ok_or_else(|| {
            RuntimeError::Config(format!(
                "unknown backend '{name}' (this build has: {})",
                backend_names().join(", ")
            ))
        })
}

/// The automatic choice of backend; see the module documentation.
#[derive(Debug, Clone, Copy, Default)]
pub struct Auto;

impl Opener for Auto {
    fn name(&self) -> &'static str {
        AUTO_NAME
    }

    fn available(&self) -> bool {
        BACKENDS.iter().any(|b| b.available())
    }

    fn open(
        &self,
        rank: Rank,
        size: u32,
        mut exchange: Option<Box<dyn Exchange>>,
        config: FabricConfig,
        provider: Option<&str>,
    ) -> Result<Opened, FabricError> {
        let forced = forced_transport(provider);
        let mine = format!("{}\n{}", forced.as_deref().unwrap_or(""), node_identity());
        let all = match exchange.as_mut() {
            Some(x) => x.all_gather(mine.as_bytes())?,
            None => vec![mine.into_bytes()],
        };
        let all: Vec<String> = all
            .iter()
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .collect();
        let split = |s: &str| -> (String, String) {
            let (f, n) = s.split_once('\n').unwrap_or(("", s));
            (f.to_string(), n.to_string())
        };
        let (first_forced, first_node) = split(&all[0]);
        // Every rank must choose alike: disagreeing forced transports are an error.
        if let Some((r, (f, _))) = all
            .iter()
            .map(|s| split(s))
            .enumerate()
            .find(|(_, (f, _))| *f != first_forced)
        {
            return Err(FabricError::Unsupported(format!(
                "ranks disagree on the transport: rank 0 forces '{first_forced}', rank {r} '{f}' (set TITUS_PROVIDER alike on every rank)"
            )));
        }
        let one_node = all.iter().all(|s| split(s).1 == first_node);
        let forced = (!first_forced.is_empty()).then_some(first_forced.as_str());
        // A forced backend name takes that backend; a forced provider goes to those
        // that suit it.
        if let Some(b) = BACKENDS.iter().find(|b| Some(b.name()) == forced) {
            return b.open(rank, size, exchange, config, None);
        }
        let chosen = BACKENDS
            .iter()
            .find(|b| b.available() && b.suits(one_node, forced))
            .ok_or_else(|| {
                FabricError::Unsupported(format!(
                    "no backend of this build serves this job (ranks on {}, transport {})",
                    if one_node {
                        "one node"
                    } else {
                        "several nodes"
                    },
                    forced.unwrap_or("not forced")
                ))
            })?;
        chosen.open(rank, size, exchange, config, forced)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backends_are_found_by_name() {
        assert_eq!(Backend::named("mem", None).unwrap(), Backend::Mem);
        assert_eq!(
            Backend::named("ofi", Some("shm".into())).unwrap(),
            Backend::ofi(Some("shm".into()))
        );
        assert_eq!(
            Backend::default_fabric(None),
            Backend::named("auto", None).unwrap()
        );
        assert!(Backend::named("node", None).is_ok());
        let e = Backend::named("carrier-pigeon", None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("unknown backend 'carrier-pigeon'")
                && e.contains("mem, auto, node, hybrid, ofi"),
            "{e}"
        );
        // Names are unique, and none is the in-process one's.
        let names = backend_names();
        let mut unique = names.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), names.len(), "{names:?}");
    }
}
