//! Which libfabric provider a job uses: what this build and this machine offer, what is
//! refused by name, and the preference order when none is named.

use crate::error::transport;
use std::ffi::CStr;
use titus_fabric::FabricError;
use titus_ofi_sys as sys;

/// Providers refused by name, with the reason.
const REFUSED: &[(&str, &str)] = &[
    (
        "udp;ofi_rxd",
        "ofi_rxd crashes on atomics in libfabric 1.17",
    ),
    ("ofi_rxd", "ofi_rxd crashes on atomics in libfabric 1.17"),
    ("net", "the net provider has no atomics in libfabric 1.17"),
    ("udp", "udp has no RMA or atomics"),
];

/// Preference order when no provider is named: NICs first, the software fallback last.
const NETWORK_ORDER: &[&str] = &["cxi", "verbs;ofi_rxm", "efa", "tcp;ofi_rxm"];
/// When every rank shares one node, shared memory beats any NIC loopback.
const NODE_ORDER: &[&str] = &["shm", "cxi", "verbs;ofi_rxm", "efa", "tcp;ofi_rxm"];

/// Whether this build has libfabric.
pub fn available() -> bool {
    sys::AVAILABLE
}

/// Crash signals (bit `1 << signal`) whose handler belongs to a library libfabric loads for
/// its psm providers (libinfinipath, libpsm), which would turn a crash or a SIGTERM into a
/// `.btr` file and exit status 1. The shim gives them back the disposition they had before
/// it loaded libfabric (on first use) and before every provider query, so this is 0 in a
/// Titus process.
pub fn foreign_crash_handlers() -> u64 {
    // SAFETY: the shim function takes no arguments and only reads signal dispositions.
    unsafe { sys::tofi_foreign_crash_handlers() }
}

/// Providers of this machine that offer what Titus needs (RDM endpoints, RMA, atomics).
pub fn providers() -> Result<Vec<String>, FabricError> {
    ensure_available()?;
    {
        let mut buf = vec![0u8; 4096];
        // SAFETY: buf is writable for its whole length, which is passed with it; the shim
        // writes a NUL-terminated string within it.
        let ret = unsafe { sys::tofi_providers(buf.as_mut_ptr().cast(), buf.len()) };
        if ret < 0 {
            return Err(transport("fi_getinfo", ret));
        }
        let s = CStr::from_bytes_until_nul(&buf)
            .map_err(|_| FabricError::Unsupported("unterminated provider list".into()))?;
        Ok(s.to_string_lossy()
            .split(',')
            .filter(|p| !p.is_empty())
            .map(str::to_string)
            .collect())
    }
}

pub(crate) fn ensure_available() -> Result<(), FabricError> {
    if sys::AVAILABLE {
        Ok(())
    } else {
        Err(FabricError::Unsupported(
            "this build of Titus has no libfabric backend: install libfabric (Debian: \
             apt-get install libfabric-dev pkg-config) and rebuild, or use the mem backend"
                .into(),
        ))
    }
}

/// The offered providers that are not refused by name, for messages ("none" when empty).
fn usable(offered: &[String]) -> String {
    let ok: Vec<&str> = offered
        .iter()
        .map(String::as_str)
        .filter(|p| !REFUSED.iter().any(|(name, _)| name == p))
        .collect();
    if ok.is_empty() {
        "none".into()
    } else {
        ok.join(", ")
    }
}

/// The provider to use: the one forced (`requested`, `TITUS_PROVIDER` unless it names a
/// backend, `FI_PROVIDER`: `titus_fabric::backend::forced_provider`), else the first of
/// the preference order that every rank offers.
pub fn choose_provider(
    requested: Option<&str>,
    offered_by_all: &[String],
    one_node: bool,
) -> Result<String, FabricError> {
    let requested = titus_fabric::backend::forced_provider(requested);
    if let Some(p) = requested {
        if let Some((_, why)) = REFUSED.iter().find(|(name, _)| *name == p) {
            return Err(FabricError::Unsupported(format!(
                "provider '{p}' is refused: {why}"
            )));
        }
        // A core provider named alone gets the RDM utility layer it needs.
        let p = match p.as_str() {
            "tcp" | "verbs" => format!("{p};ofi_rxm"),
            _ => p,
        };
        if !offered_by_all.contains(&p) {
            return Err(FabricError::Unsupported(format!(
                "provider '{p}' is not offered on every rank with RDM endpoints, RMA and 64-bit atomics \
                 (usable everywhere: {})",
                usable(offered_by_all)
            )));
        }
        return Ok(p);
    }
    let order = if one_node { NODE_ORDER } else { NETWORK_ORDER };
    order
        .iter()
        .find(|p| offered_by_all.iter().any(|o| o == *p))
        .map(|p| p.to_string())
        .ok_or_else(|| {
            FabricError::Unsupported(format!(
                "no usable libfabric provider on every rank (wanted one of {}; usable everywhere: {})",
                order.join(", "),
                usable(offered_by_all)
            ))
        })
}

/// What one connection holds on a rank over provider `name`, bytes: resident memory
/// grown per peer contacted, from `titus fabric-bench --connections` under
/// `titus launch -n 16 --provider P` on the development machine (tcp, shm, sockets).
/// Providers not measured here (verbs, cxi, efa) count a reliable-connection queue
/// pair with its send and receive rings as 64 KiB, an assumption stated as such in
/// `docs/results.md`.
pub(crate) fn connection_bytes(name: &str) -> u64 {
    const KIB: u64 = 1024;
    if name.starts_with("tcp") {
        TCP_KIB * KIB
    } else if name.starts_with("shm") {
        SHM_KIB * KIB
    } else if name.starts_with("sockets") {
        SOCKETS_KIB * KIB
    } else {
        64 * KIB
    }
}
const TCP_KIB: u64 = 1_176;
const SHM_KIB: u64 = 16;
const SOCKETS_KIB: u64 = 19;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_library_but_the_program_handles_crash_signals() {
        if !available() {
            return; // Nothing of libfabric is loaded.
        }
        assert_eq!(foreign_crash_handlers(), 0, "at load");
        providers().unwrap();
        assert_eq!(foreign_crash_handlers(), 0, "after a provider query");
    }

    #[test]
    fn messages_list_only_usable_providers() {
        let offered: Vec<String> = ["tcp;ofi_rxm", "udp;ofi_rxd", "net", "shm"]
            .map(String::from)
            .to_vec();
        let e = choose_provider(Some("nope"), &offered, true)
            .unwrap_err()
            .to_string();
        assert!(e.contains("usable everywhere: tcp;ofi_rxm, shm)"), "{e}");
        let e = choose_provider(Some("udp;ofi_rxd"), &offered, true)
            .unwrap_err()
            .to_string();
        assert!(e.contains("is refused"), "{e}");
    }
}
