//! The raw-latency benchmark: libfabric operations posted and polled by the C shim alone,
//! the baseline this layer's overhead is measured against (`titus fabric-bench`).

use crate::error::transport;
use crate::{OfiFabric, lock};
use titus_fabric::{Fabric, FabricError, Loc, Rank, SegmentId};
use titus_ofi_sys as sys;

impl OfiFabric {
    /// Raw libfabric latency of `iters` operations of `kind` (0 CAS, 1 fetch-add, 2 read,
    /// 3 write) of `len` bytes to `peer`'s `remote`, posted and polled by the C shim
    /// directly: the baseline that this layer's overhead is measured against. No progress
    /// thread may poll this rank's queue meanwhile.
    pub fn raw_latency(
        &self,
        kind: i32,
        peer: Rank,
        remote: Loc,
        local: SegmentId,
        len: u64,
        iters: usize,
    ) -> Result<Vec<u64>, FabricError> {
        let (fi_addr, raddr, rkey) = self.remote(peer, remote, len.max(8))?;
        self.segment(local)?.check(0, len)?;
        let mut ns = vec![0u64; iters];
        let _token = lock(&self.poller);
        {
            // SAFETY: slot 0 is reserved for this loop and the poller token keeps other
            // threads off the completion queue; the local range 0..len of segment `local`
            // and the remote range were checked; ns is writable for iters entries.
            let ret = unsafe {
                sys::tofi_raw_latency(
                    self.h.0.as_ptr(),
                    kind,
                    fi_addr,
                    local.0 as usize,
                    len,
                    raddr,
                    rkey,
                    iters,
                    ns.as_mut_ptr(),
                )
            };
            if ret != 0 {
                return Err(transport("raw latency loop", ret));
            }
        }
        Ok(ns)
    }
}
