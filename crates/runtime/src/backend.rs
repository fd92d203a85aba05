//! Which fabric a runtime runs over: the user's choice ([`Backend`]) and the table of
//! multi-process backends this build has ([`BACKENDS`]).
//!
//! The in-process backend (`mem`) is the runtime's own: it builds every rank of a world
//! at once ([`crate::Runtime::local`]). Every other backend opens one rank per process
//! through [`Opener`], found here by name; the runtime never matches on which backend it
//! is. Adding one (verbs, say) is one new crate implementing [`Opener`], its dependency
//! in this crate's Cargo.toml, and one line in [`BACKENDS`].

use crate::RuntimeError;
use titus_fabric::backend::Opener;

/// Every multi-process backend of this build; the first is the default (`backend=auto`
/// of a job of several ranks).
pub static BACKENDS: &[&dyn Opener] = &[&titus_fabric_ofi::Ofi];

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

    /// The default multi-process backend (the first of [`BACKENDS`]) on `provider`.
    pub fn default_fabric(provider: Option<String>) -> Self {
        Self::Fabric {
            name: BACKENDS[0].name().into(),
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

/// The names of every backend, `mem` first.
pub fn backend_names() -> Vec<&'static str> {
    std::iter::once(MEM)
        .chain(BACKENDS.iter().map(|b| b.name()))
        .collect()
}

/// The multi-process backend called `name`.
pub(crate) fn opener(name: &str) -> Result<&'static dyn Opener, RuntimeError> {
    BACKENDS
        .iter()
        .copied()
        .find(|b| b.name() == name)
        .ok_or_else(|| {
            RuntimeError::Config(format!(
                "unknown backend '{name}' (this build has: {})",
                backend_names().join(", ")
            ))
        })
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
        assert_eq!(Backend::default_fabric(None), Backend::ofi(None));
        let e = Backend::named("carrier-pigeon", None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("unknown backend 'carrier-pigeon'") && e.contains("mem, ofi"),
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
