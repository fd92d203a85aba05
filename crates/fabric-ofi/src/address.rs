//! What a rank publishes so that others can reach it (its endpoint name and each segment's
//! key, base, length and exposure), and what it learns of its peers. The record format:
//! a u32 address length and the address, a u32 segment count, then per segment its key,
//! base and length (u64 each) and its exposure (u32::MAX for everyone, else a count and
//! that many ranks), all little-endian.

use crate::OfiFabric;
use crate::error::transport;
use crate::handle::Handle;
use titus_fabric::{Exposure, FabricError, Rank};
use titus_ofi_sys as sys;

/// A peer's segment as it published it.
#[derive(Debug, Clone)]
pub(crate) struct RemoteSegment {
    pub(crate) key: u64,
    pub(crate) base: u64,
    pub(crate) len: u64,
    pub(crate) exposed_to_me: bool,
}

#[derive(Debug, Clone)]
pub(crate) struct Peer {
    pub(crate) fi_addr: u64,
    pub(crate) segments: Vec<RemoteSegment>,
}

/// Appends a published record: address, then each segment's key, base, length and
/// exposure (u32::MAX = everyone).
pub(crate) fn encode(addr: &[u8], segs: &[(u64, u64, u64, &Exposure)]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&(addr.len() as u32).to_le_bytes());
    b.extend_from_slice(addr);
    b.extend_from_slice(&(segs.len() as u32).to_le_bytes());
    for (key, base, len, exp) in segs {
        b.extend_from_slice(&key.to_le_bytes());
        b.extend_from_slice(&base.to_le_bytes());
        b.extend_from_slice(&len.to_le_bytes());
        match exp {
            Exposure::All => b.extend_from_slice(&u32::MAX.to_le_bytes()),
            Exposure::Peers(p) => {
                b.extend_from_slice(&(p.len() as u32).to_le_bytes());
                for r in p {
                    b.extend_from_slice(&r.to_le_bytes());
                }
            }
        }
    }
    b
}

/// Parses another rank's record; nothing in it is trusted.
pub(crate) fn decode(
    rank: Rank,
    me: Rank,
    blob: &[u8],
) -> Result<(Vec<u8>, Vec<RemoteSegment>), FabricError> {
    let bad = |what: &str| {
        FabricError::Unsupported(format!(
            "rank {rank} published a malformed address record ({what})"
        ))
    };
    let mut at = 0usize;
    let mut take = |n: usize| -> Result<&[u8], FabricError> {
        let s = blob
            .get(at..at.checked_add(n).ok_or_else(|| bad("length overflow"))?)
            .ok_or_else(|| bad("truncated"))?;
        at += n;
        Ok(s)
    };
    let u32_at = |s: &[u8]| u32::from_le_bytes(s.try_into().expect("4 bytes"));
    let u64_at = |s: &[u8]| u64::from_le_bytes(s.try_into().expect("8 bytes"));
    let alen = u32_at(take(4)?) as usize;
    if alen > 4096 {
        return Err(bad("address longer than 4 KiB"));
    }
    let addr = take(alen)?.to_vec();
    let nsegs = u32_at(take(4)?) as usize;
    if nsegs > 4096 {
        return Err(bad("more than 4096 segments"));
    }
    let mut segs = Vec::with_capacity(nsegs);
    for _ in 0..nsegs {
        let key = u64_at(take(8)?);
        let base = u64_at(take(8)?);
        let len = u64_at(take(8)?);
        let n = u32_at(take(4)?);
        let exposed_to_me = if n == u32::MAX {
            true
        } else {
            if n as usize > blob.len() / 4 {
                return Err(bad("exposure list longer than the record"));
            }
            let mut hit = rank == me;
            for _ in 0..n {
                hit |= u32_at(take(4)?) == me;
            }
            hit
        };
        segs.push(RemoteSegment {
            key,
            base,
            len,
            exposed_to_me,
        });
    }
    Ok((addr, segs))
}

impl OfiFabric {
    pub(crate) fn name(h: &Handle) -> Result<Vec<u8>, FabricError> {
        {
            let mut buf = vec![0u8; 1024];
            let mut len = buf.len();
            // SAFETY: buf is writable for len bytes; the shim updates len to the name's size.
            let ret = unsafe { sys::tofi_getname(h.0.as_ptr(), buf.as_mut_ptr().cast(), &mut len) };
            if ret != 0 {
                return Err(transport("fi_getname", ret));
            }
            buf.truncate(len.min(1024));
            Ok(buf)
        }
    }

    pub(crate) fn segment_desc(h: &Handle, seg: usize) -> (u64, u64) {
        let (mut key, mut base) = (0u64, 0u64);
        // SAFETY: seg is below the number of segments registered at open; key and base are
        // valid for writing.
        unsafe { sys::tofi_segment(h.0.as_ptr(), seg, &mut key, &mut base) };
        (key, base)
    }

    pub(crate) fn insert(h: &Handle, addr: &[u8], rank: Rank) -> Result<u64, FabricError> {
        if addr.is_empty() {
            return Err(FabricError::Unsupported(format!(
                "rank {rank} published an empty address"
            )));
        }
        {
            let mut fi_addr = 0u64;
            // SAFETY: addr holds the peer's full fi_getname output (the provider reads its
            // own address format from it); fi_addr is valid for writing.
            let ret =
                unsafe { sys::tofi_av_insert(h.0.as_ptr(), addr.as_ptr().cast(), &mut fi_addr) };
            if ret != 0 {
                return Err(transport("fi_av_insert", ret));
            }
            Ok(fi_addr)
        }
    }
}
