//! One rank's shared-memory object: created owner-only under the job's name, mapped
//! read-write by the ranks of the node, unmapped when the last view of it goes.
//!
//! The only `unsafe` of the crate: mapping the object, seeing the mapping as words, the
//! futex word, and unmapping.

use rustix::fd::OwnedFd;
use rustix::fs::Mode;
use rustix::mm::{MapFlags, ProtFlags};
use rustix::shm;
use std::sync::atomic::{AtomicU32, AtomicU64};
use titus_fabric::{FabricError, SharedWords};

/// A mapped shared-memory object of `len` bytes (a multiple of the page size).
#[derive(Debug)]
pub(crate) struct Mapping {
    ptr: *mut AtomicU64,
    len: usize,
}

// The mapping is plain shared memory accessed only through atomics (words() hands out
// &[AtomicU64], futex() an &AtomicU32); the pointer is never used for non-atomic access.
// SAFETY: as said above, nothing of the mapping is tied to a thread.
unsafe impl Send for Mapping {}
// SAFETY: as for Send: every access through a shared reference is atomic.
unsafe impl Sync for Mapping {}

fn os(call: &'static str, name: &str, e: rustix::io::Errno) -> FabricError {
    FabricError::Transport {
        call,
        code: e.raw_os_error(),
        detail: format!("{name}: {e}"),
    }
}

impl Mapping {
    /// Creates the object `name` (it must not exist) with owner-only permissions, sizes it
    /// to `len` bytes and maps it. The object is zero-filled.
    pub(crate) fn create(name: &str, len: usize) -> Result<Self, FabricError> {
        let fd = shm::open(
            name,
            shm::OFlags::CREATE | shm::OFlags::EXCL | shm::OFlags::RDWR,
            Mode::RUSR | Mode::WUSR,
        )
        .map_err(|e| os("shm_open", name, e))?;
        if let Err(e) = rustix::fs::ftruncate(&fd, len as u64) {
            let _ = shm::unlink(name);
            return Err(os("ftruncate", name, e));
        }
        Self::map(&fd, name, len).inspect_err(|_| {
            let _ = shm::unlink(name);
        })
    }

    /// Opens and maps the existing object `name`, which must hold at least `len` bytes.
    pub(crate) fn open(name: &str, len: usize) -> Result<Self, FabricError> {
        let fd = shm::open(name, shm::OFlags::RDWR, Mode::empty())
            .map_err(|e| os("shm_open", name, e))?;
        let st = rustix::fs::fstat(&fd).map_err(|e| os("fstat", name, e))?;
        if (st.st_size as u64) < len as u64 {
            return Err(FabricError::Transport {
                call: "fstat",
                code: 0,
                detail: format!(
                    "{name} holds {} bytes, its owner announced {len}",
                    st.st_size
                ),
            });
        }
        Self::map(&fd, name, len)
    }

    fn map(fd: &OwnedFd, name: &str, len: usize) -> Result<Self, FabricError> {
        assert!(len > 0 && len.is_multiple_of(4096));
        // A new shared mapping of `len` bytes of an object at least that long, placed by
        // the kernel (null hint).
        // SAFETY: the new mapping aliases no Rust memory.
        let ptr = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                fd,
                0,
            )
        }
        .map_err(|e| os("mmap", name, e))?;
        Ok(Self {
            ptr: ptr.cast(),
            len,
        })
    }

    /// Removes the object's name; the mappings stay valid until unmapped.
    pub(crate) fn unlink(name: &str) {
        let _ = shm::unlink(name);
    }

    /// The 32-bit futex word in the low-address half of word `index`.
    pub(crate) fn futex(&self, index: usize) -> &AtomicU32 {
        let w = &self.words()[index];
        // The word is 8-aligned shared memory that lives as long as &self; its first four
        // bytes are a valid, 4-aligned AtomicU32 location. Every access to this word goes
        // through this AtomicU32 (never through the AtomicU64): no mixed-size access.
        // SAFETY: aligned, live for &self, and only ever accessed as this AtomicU32.
        unsafe { &*std::ptr::from_ref(w).cast::<AtomicU32>() }
    }
}

impl SharedWords for Mapping {
    fn words(&self) -> &[AtomicU64] {
        // ptr is a live mapping of len bytes (a multiple of 8, page-aligned) for the
        // lifetime of self; AtomicU64 has no invalid bit patterns, and all access is atomic.
        // SAFETY: live, aligned, initialised (zero-filled by the kernel) for &self.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len / 8) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // The mapping was created by mmap with this length; words() and futex() borrow
        // self, so no reference into it outlives it.
        // SAFETY: our own mapping, unmapped once, with nothing borrowing it.
        unsafe {
            let _ = rustix::mm::munmap(self.ptr.cast(), self.len);
        }
    }
}
