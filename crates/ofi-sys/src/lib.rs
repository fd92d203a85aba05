//! Raw declarations of Titus's C shim over libfabric (`csrc/tofi.h`). Everything here is
//! `unsafe` to call; `titus-fabric-ofi` wraps it. The shim's contract, per function, is in
//! the header; the rules the callers must keep are:
//!
//! - a `tofi` handle is used only between a successful `tofi_open` and `tofi_close`;
//! - the domain is opened `FI_THREAD_SAFE`, so any thread may call any function on it;
//! - a slot index is below `nslots` and owned by one operation from submission to the
//!   event that completes it (slot 0 is reserved for `tofi_raw_latency`);
//! - segment numbers and byte ranges passed as local buffers lie inside the registered
//!   segments (the shim does not re-check them);
//! - registered segment memory outlives the handle.
#![allow(non_camel_case_types)]

use std::os::raw::{c_char, c_int, c_void};

/// Whether this build found libfabric.
pub const AVAILABLE: bool = cfg!(titus_ofi);

/// Opaque shim handle.
#[repr(C)]
#[derive(Debug)]
pub struct tofi {
    _private: [u8; 0],
}

/// One completion-queue event.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct tofi_event {
    /// Operation id (for DONE and ERROR).
    pub opid: u64,
    /// Atomic old value (DONE), signal value (SIGNAL), provider errno (ERROR).
    pub value: u64,
    /// Signal sender.
    pub from: u64,
    /// TOFI_DONE, TOFI_ERROR or TOFI_SIGNAL.
    pub kind: i32,
    /// libfabric error (positive) for ERROR.
    pub err: i32,
}

/// Event kinds.
pub const TOFI_DONE: i32 = 0;
/// See [`TOFI_DONE`].
pub const TOFI_ERROR: i32 = 1;
/// See [`TOFI_DONE`].
pub const TOFI_SIGNAL: i32 = 2;

/// Capability bits.
pub const TOFI_CAP_VIRT_ADDR: u32 = 1;
/// See [`TOFI_CAP_VIRT_ADDR`].
pub const TOFI_CAP_PROV_KEY: u32 = 2;
/// See [`TOFI_CAP_VIRT_ADDR`].
pub const TOFI_CAP_MR_ENDPOINT: u32 = 4;
/// See [`TOFI_CAP_VIRT_ADDR`].
pub const TOFI_CAP_MR_LOCAL: u32 = 8;
/// See [`TOFI_CAP_VIRT_ADDR`].
pub const TOFI_CAP_MANUAL_PROGRESS: u32 = 16;
/// See [`TOFI_CAP_VIRT_ADDR`].
pub const TOFI_CAP_ORDERED_SAW: u32 = 32;
/// See [`TOFI_CAP_VIRT_ADDR`].
pub const TOFI_CAP_CQ_WAIT: u32 = 64;
/// The endpoint's address is loopback or IPv6 link-local: other hosts cannot reach it.
pub const TOFI_CAP_LOOPBACK: u32 = 128;

/// libfabric's FI_EAGAIN (positive).
pub const FI_EAGAIN: c_int = 11;

/// What a stub returns when this build has no libfabric (callers check [`AVAILABLE`]
/// first, so stubs only guard against misuse).
pub trait Stub {
    /// The stub's result.
    fn stub() -> Self;
}
impl Stub for c_int {
    fn stub() -> Self {
        -38 // -FI_ENOSYS
    }
}
impl Stub for u32 {
    fn stub() -> Self {
        0
    }
}
impl Stub for u64 {
    fn stub() -> Self {
        0
    }
}
impl Stub for usize {
    fn stub() -> Self {
        0
    }
}
impl Stub for () {
    fn stub() -> Self {}
}
impl Stub for *const c_char {
    fn stub() -> Self {
        c"libfabric is not part of this build".as_ptr()
    }
}

/// Declares the shim's functions: extern when libfabric was found, stubs otherwise, with
/// one list of signatures.
macro_rules! shim {
    ($(fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty;)*) => {
        #[cfg(titus_ofi)]
        unsafe extern "C" {
            $(
                /// See `csrc/tofi.h`.
                pub fn $name($($arg: $ty),*) -> $ret;
            )*
        }
        $(
            /// Stub: this build has no libfabric.
            ///
            /// # Safety
            /// None needed; `unsafe` matches the real declaration.
            #[cfg(not(titus_ofi))]
            #[allow(unused_variables)]
            pub unsafe fn $name($($arg: $ty),*) -> $ret {
                <$ret as Stub>::stub()
            }
        )*
    };
}

shim! {
    fn tofi_foreign_crash_handlers() -> u64;
    fn tofi_providers(buf: *mut c_char, len: usize) -> c_int;
    fn tofi_open(
        prov: *const c_char,
        iface: *const c_char,
        nsegs: usize,
        bases: *const *mut c_void,
        lens: *const u64,
        nslots: usize,
        nrecv: usize,
        out: *mut *mut tofi,
        err: *mut c_char,
        errlen: usize,
    ) -> c_int;
    fn tofi_close(h: *mut tofi) -> ();
    fn tofi_provider(h: *const tofi) -> *const c_char;
    fn tofi_caps(h: *const tofi) -> u32;
    fn tofi_addr_reach(addr: *const c_void, len: usize) -> c_int;
    fn tofi_iov_limit(h: *const tofi) -> usize;
    fn tofi_getname(h: *mut tofi, buf: *mut c_void, len: *mut usize) -> c_int;
    fn tofi_segment(h: *const tofi, seg: usize, key: *mut u64, base: *mut u64) -> ();
    fn tofi_av_insert(h: *mut tofi, addr: *const c_void, fi_addr: *mut u64) -> c_int;
    fn tofi_read(h: *mut tofi, slot: u32, opid: u64, peer: u64, lseg: usize, loff: u64, len: u64, raddr: u64, rkey: u64) -> c_int;
    fn tofi_writev(
        h: *mut tofi,
        slot: u32,
        opid: u64,
        peer: u64,
        n: usize,
        lsegs: *const usize,
        loffs: *const u64,
        lens: *const u64,
        raddr: u64,
        rkey: u64,
        delivery_complete: c_int,
    ) -> c_int;
    fn tofi_cas(h: *mut tofi, slot: u32, opid: u64, peer: u64, raddr: u64, rkey: u64, expected: u64, desired: u64) -> c_int;
    fn tofi_fadd(h: *mut tofi, slot: u32, opid: u64, peer: u64, raddr: u64, rkey: u64, delta: u64) -> c_int;
    fn tofi_signal(h: *mut tofi, slot: u32, opid: u64, peer: u64, from: u64, value: u64) -> c_int;
    fn tofi_poll(h: *mut tofi, ev: *mut tofi_event, n: usize, timeout_ms: c_int) -> c_int;
    fn tofi_strerror(err: c_int) -> *const c_char;
    fn tofi_set_max_nap(h: *mut tofi, ns: u64) -> ();
    fn tofi_wake(h: *mut tofi) -> ();
    fn tofi_raw_latency(h: *mut tofi, kind: c_int, peer: u64, lseg: usize, len: u64, raddr: u64, rkey: u64, iters: usize, ns: *mut u64) -> c_int;
}

#[cfg(all(test, titus_ofi))]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn reach4(a: Ipv4Addr) -> c_int {
        let sa = libc_sockaddr_in(a);
        // SAFETY: `sa` is a valid sockaddr_in of the length passed, alive for the call.
        unsafe { tofi_addr_reach(sa.as_ptr().cast(), sa.len()) }
    }

    fn reach6(a: Ipv6Addr) -> c_int {
        let sa = libc_sockaddr_in6(a);
        // SAFETY: as above, a sockaddr_in6.
        unsafe { tofi_addr_reach(sa.as_ptr().cast(), sa.len()) }
    }

    /// struct sockaddr_in on Linux: family (u16, host order), port, address, 8 zero bytes.
    fn libc_sockaddr_in(a: Ipv4Addr) -> Vec<u8> {
        let mut v = Vec::with_capacity(16);
        v.extend_from_slice(&2u16.to_ne_bytes()); // AF_INET
        v.extend_from_slice(&0u16.to_be_bytes());
        v.extend_from_slice(&a.octets());
        v.extend_from_slice(&[0; 8]);
        v
    }

    /// struct sockaddr_in6: family, port, flow info, address, scope id.
    fn libc_sockaddr_in6(a: Ipv6Addr) -> Vec<u8> {
        let mut v = Vec::with_capacity(28);
        v.extend_from_slice(&10u16.to_ne_bytes()); // AF_INET6
        v.extend_from_slice(&0u16.to_be_bytes());
        v.extend_from_slice(&0u32.to_be_bytes());
        v.extend_from_slice(&a.octets());
        v.extend_from_slice(&0u32.to_ne_bytes());
        v
    }

    #[test]
    fn addresses_are_ranked_by_how_far_they_reach() {
        assert_eq!(reach4(Ipv4Addr::new(127, 0, 0, 1)), 0);
        assert_eq!(reach4(Ipv4Addr::new(127, 9, 8, 7)), 0);
        assert_eq!(reach4(Ipv4Addr::new(169, 254, 0, 2)), 1, "a BMC's USB NIC");
        assert_eq!(reach4(Ipv4Addr::new(169, 253, 0, 2)), 2);
        assert_eq!(reach4(Ipv4Addr::new(10, 1, 2, 3)), 2);
        assert_eq!(reach6(Ipv6Addr::LOCALHOST), 0);
        assert_eq!(reach6("fe80::1".parse().unwrap()), 0);
        assert_eq!(reach6("::ffff:127.0.0.1".parse().unwrap()), 0);
        assert_eq!(reach6("::ffff:169.254.3.4".parse().unwrap()), 1);
        assert_eq!(reach6("::ffff:10.0.0.1".parse().unwrap()), 2);
        assert_eq!(reach6("2001:db8::1".parse().unwrap()), 2);
        // Too short for its family, or another family: nothing to judge, routable.
        let sa = libc_sockaddr_in(Ipv4Addr::new(127, 0, 0, 1));
        // SAFETY: 8 readable bytes of `sa`.
        assert_eq!(unsafe { tofi_addr_reach(sa.as_ptr().cast(), 8) }, 2);
        // SAFETY: a null address is documented as "not an IP address".
        assert_eq!(unsafe { tofi_addr_reach(std::ptr::null(), 0) }, 2);
    }
}
