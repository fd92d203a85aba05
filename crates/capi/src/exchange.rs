//! The application's all-gather as the fabric's address exchange.
//!
//! The C callback is a fixed-size all-gather (every rank sends `len` bytes; what
//! `MPI_Allgather` does), so a variable-size exchange takes two rounds: the lengths, then
//! the blobs padded to the longest. A barrier (empty blobs) takes one.

use std::ffi::{c_int, c_void};
use titus_fabric::bootstrap::{BootstrapError, Exchange};

/// The callback's signature (see `titus_allgather_fn` in the header).
pub(crate) type AllGather = unsafe extern "C" fn(
    send: *const c_void,
    len: usize,
    recv: *mut c_void,
    ctx: *mut c_void,
) -> c_int;

/// A user pointer handed back to the user's own functions.
#[derive(Debug, Clone, Copy)]
pub(crate) struct UserPtr(pub(crate) *mut c_void);

// SAFETY: Titus never dereferences the pointer; it only passes it back to the user's
// functions, and the header requires the context to be usable from any thread.
unsafe impl Send for UserPtr {}
// SAFETY: as above: shared access only hands the same pointer value to the user.
unsafe impl Sync for UserPtr {}

/// The largest blob a rank may announce (addresses and keys are a few hundred bytes,
/// statistics 144): a length read from another rank is not trusted.
const MAX_BLOB: u64 = 1 << 16;

/// An exchange through the application's all-gather callback.
#[derive(Debug)]
pub(crate) struct Callback {
    pub(crate) rank: u32,
    pub(crate) size: u32,
    pub(crate) f: AllGather,
    pub(crate) ctx: UserPtr,
}

impl Callback {
    /// One fixed-size round: `send` from every rank, concatenated by rank.
    fn round(&mut self, send: &[u8]) -> Result<Vec<u8>, BootstrapError> {
        let mut recv = vec![0u8; send.len() * self.size as usize];
        // SAFETY: `send` is valid for `send.len()` bytes and `recv` for `size` times that,
        // as the callback's contract says; both outlive the call, which must not keep them.
        let rc = unsafe {
            (self.f)(
                send.as_ptr().cast(),
                send.len(),
                recv.as_mut_ptr().cast(),
                self.ctx.0,
            )
        };
        if rc != 0 {
            return Err(BootstrapError::Failed(format!(
                "the application's all-gather callback returned {rc}"
            )));
        }
        Ok(recv)
    }
}

impl Exchange for Callback {
    fn rank(&self) -> u32 {
        self.rank
    }

    fn size(&self) -> u32 {
        self.size
    }

    fn all_gather(&mut self, blob: &[u8]) -> Result<Vec<Vec<u8>>, BootstrapError> {
        // 1. Every rank's length.
        let lens = self.round(&(blob.len() as u64).to_le_bytes())?;
        let lens: Vec<u64> = lens
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect();
        if let Some((r, &l)) = lens.iter().enumerate().find(|(_, l)| **l > MAX_BLOB) {
            return Err(BootstrapError::Protocol(format!(
                "rank {r} announced a {l}-byte blob (at most {MAX_BLOB})"
            )));
        }
        let longest = lens.iter().copied().max().unwrap_or(0) as usize;
        if longest == 0 {
            return Ok(vec![Vec::new(); self.size as usize]);
        }
        // 2. The blobs, padded to the longest.
        let mut padded = blob.to_vec();
        padded.resize(longest, 0);
        let all = self.round(&padded)?;
        Ok(all
            .chunks_exact(longest)
            .zip(&lens)
            .map(|(c, &l)| c[..l as usize].to_vec())
            .collect())
    }
}
