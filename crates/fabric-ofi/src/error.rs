//! How the shim's return codes and libfabric errnos become [`FabricError`]s.

use std::ffi::CStr;
use titus_fabric::FabricError;
use titus_ofi_sys as sys;

pub(crate) fn strerror(code: i32) -> String {
    {
        // SAFETY: tofi_strerror returns a pointer to a static NUL-terminated string.
        unsafe { CStr::from_ptr(sys::tofi_strerror(code)) }
            .to_string_lossy()
            .into_owned()
    }
}

pub(crate) fn transport(call: &'static str, ret: i32) -> FabricError {
    FabricError::Transport {
        call,
        code: ret,
        detail: strerror(ret),
    }
}

/// libfabric errnos that mean the peer is gone.
pub(crate) fn is_peer_gone(err: i32) -> bool {
    // FI_ECONNREFUSED 111, FI_ECONNRESET 104, FI_ECONNABORTED 103, FI_EHOSTUNREACH 113,
    // FI_ENOTCONN 107, FI_EPIPE 32, FI_ESHUTDOWN 108, FI_EIO 5 (shm: process gone).
    matches!(err.abs(), 111 | 104 | 103 | 113 | 107 | 32 | 108 | 5)
}
