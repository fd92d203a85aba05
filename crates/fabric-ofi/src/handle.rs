//! The owned shim handle: opening the endpoint with its registered segments, and closing it.

use crate::OfiFabric;
use std::ffi::{CStr, CString};
use std::ptr::NonNull;
use titus_fabric::{FabricError, Segment};
use titus_ofi_sys as sys;

/// Operation slots: operations in flight at once (slot 0 is the raw benchmark's).
pub(crate) const SLOTS: usize = 4096;
/// Signal receive buffers posted at once.
pub(crate) const RECV_BUFFERS: usize = 256;

/// The owned shim handle.
#[derive(Debug)]
pub(crate) struct Handle(pub(crate) NonNull<sys::tofi>);

// SAFETY: the shim opens the domain with FI_THREAD_SAFE, so libfabric serialises what it
// must internally and any thread may call into the handle; the handle is closed only in
// Drop, when no other reference to it remains.
unsafe impl Send for Handle {}
// SAFETY: as for Send: every shim call through a shared handle is thread-safe.
unsafe impl Sync for Handle {}

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: the handle came from a successful tofi_open and is closed exactly once.
        unsafe { sys::tofi_close(self.0.as_ptr()) }
    }
}

impl OfiFabric {
    pub(crate) fn open_handle(provider: &str, segments: &[Segment]) -> Result<Handle, FabricError> {
        {
            let prov = CString::new(provider)
                .map_err(|_| FabricError::Unsupported("provider name with NUL".into()))?;
            // The interface to open on (a domain name: eth0, ib0, mlx5_0); unset or empty,
            // the first other hosts can reach.
            let iface = titus_fabric::env_var::iface()
                .map_err(|e| FabricError::Unsupported(e.to_string()))?
                .unwrap_or_default();
            let iface_c = CString::new(iface.as_str()).expect("no NUL: checked");
            let bases: Vec<*mut std::os::raw::c_void> =
                segments.iter().map(|s| s.as_ptr().cast()).collect();
            let lens: Vec<u64> = segments.iter().map(Segment::len).collect();
            let mut out: *mut sys::tofi = std::ptr::null_mut();
            let mut err = vec![0u8; 512];
            // SAFETY: prov, iface_c NUL-terminated, outlive the call; bases, lens: segments.len()
            // entries, each base a live segment of that length outliving the handle (OfiFabric
            // drops the handle first); out and err writable, err for its whole length.
            let ret = unsafe {
                sys::tofi_open(
                    prov.as_ptr(),
                    iface_c.as_ptr(),
                    segments.len(),
                    bases.as_ptr(),
                    lens.as_ptr(),
                    SLOTS,
                    RECV_BUFFERS,
                    &mut out,
                    err.as_mut_ptr().cast(),
                    err.len(),
                )
            };
            if ret != 0 {
                let msg = CStr::from_bytes_until_nul(&err)
                    .map(|c| c.to_string_lossy().into_owned())
                    .unwrap_or_default();
                if msg.starts_with("TITUS_IFACE=") {
                    return Err(FabricError::Unsupported(msg));
                }
                return Err(FabricError::Transport {
                    call: "open the endpoint",
                    code: ret,
                    detail: format!("provider '{provider}': {msg}"),
                });
            }
            NonNull::new(out).map(Handle).ok_or(FabricError::Closed)
        }
    }
}
