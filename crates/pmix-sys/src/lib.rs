//! Titus's C shim over the PMIx client library (`csrc/tpmix.h`) and a safe client over it:
//! the process's identity in its job (namespace, rank, size) and the key-value exchange a
//! launcher's PMIx server provides (`PMIx_Put`, `PMIx_Commit`, `PMIx_Fence`, `PMIx_Get`).
//! Open MPI's `mpirun` and Slurm's `srun --mpi=pmix` serve it.
//!
//! Without libpmix at build time the crate still builds: [`AVAILABLE`] is false and
//! [`Client::init`] says how to install it.
//!
//! Every wait is bounded twice: the PMIx server is given `PMIX_TIMEOUT`, and the shim
//! waits for the server's answer at most a little longer ([`GRACE`]), so a server that
//! ignores the timeout (or never answers) still cannot hold the caller.
#![allow(non_camel_case_types)]

use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_int, c_void};
use std::time::Duration;

/// Whether this build found libpmix.
pub const AVAILABLE: bool = cfg!(titus_pmix);

/// How much longer than the server's `PMIX_TIMEOUT` the shim waits for its answer.
pub const GRACE: Duration = Duration::from_secs(2);

/// The longest key PMIx takes (`PMIX_MAX_KEYLEN`), without its terminating NUL.
pub const MAX_KEY: usize = 511;

/// The shim's own status for a wait it gave up on (`TPMIX_LOCAL_TIMEOUT`).
pub const LOCAL_TIMEOUT: c_int = -100_000;

/// Raw declarations of the shim (see `csrc/tpmix.h` for each function's contract).
pub mod raw {
    use std::os::raw::{c_char, c_int, c_void};

    /// What a stub returns when this build has no libpmix.
    pub trait Stub {
        /// The stub's result.
        fn stub() -> Self;
    }
    impl Stub for c_int {
        fn stub() -> Self {
            -46 // PMIX_ERR_NOT_SUPPORTED
        }
    }
    impl Stub for () {
        fn stub() -> Self {}
    }
    impl Stub for *const c_char {
        fn stub() -> Self {
            c"libpmix is not part of this build".as_ptr()
        }
    }

    /// Declares the shim's functions: extern when libpmix was found, stubs otherwise.
    macro_rules! shim {
        ($(fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty;)*) => {
            #[cfg(titus_pmix)]
            unsafe extern "C" {
                $(
                    /// See `csrc/tpmix.h`.
                    pub fn $name($($arg: $ty),*) -> $ret;
                )*
            }
            $(
                /// Stub: this build has no libpmix.
                ///
                /// # Safety
                /// None needed; `unsafe` matches the real declaration.
                #[cfg(not(titus_pmix))]
                #[allow(unused_variables)]
                pub unsafe fn $name($($arg: $ty),*) -> $ret {
                    <$ret as Stub>::stub()
                }
            )*
        };
    }

    shim! {
        fn tpmix_init(nspace: *mut c_char, nslen: usize, rank: *mut u32, size: *mut u32, err: *mut c_char, errlen: usize) -> c_int;
        fn tpmix_put(key: *const c_char, data: *const c_void, len: usize) -> c_int;
        fn tpmix_fence(collect: c_int, timeout_s: c_int, wait_ms: i64) -> c_int;
        fn tpmix_get(rank: u32, key: *const c_char, timeout_s: c_int, wait_ms: i64, max_len: usize, data: *mut *mut c_void, len: *mut usize, kind: *mut c_int) -> c_int;
        fn tpmix_strerror(status: c_int) -> *const c_char;
        fn tpmix_free(p: *mut c_void) -> ();
        fn tpmix_status_not_found() -> c_int;
        fn tpmix_status_timeout() -> c_int;
    }
}

/// What kind of failure a PMIx call had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// This build has no libpmix.
    Unavailable,
    /// The key is not there (the rank never published it).
    NotFound,
    /// The server's timeout or the shim's bound ran out.
    Timeout,
    /// A value that is not what the caller asked for (type or length).
    Malformed,
    /// Bad arguments from the caller (a key too long, with a NUL).
    Invalid,
    /// Any other PMIx error.
    Other,
}

/// A failed PMIx call: its kind, PMIx's status and a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// What kind of failure.
    pub kind: ErrorKind,
    /// PMIx's status (or the shim's [`LOCAL_TIMEOUT`]; 0 where PMIx reported none).
    pub status: i32,
    /// What happened, in words.
    pub message: String,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

/// PMIx's text for a status (the shim's own for [`LOCAL_TIMEOUT`]).
pub fn status_text(status: c_int) -> String {
    // SAFETY: tpmix_strerror returns a pointer to a static NUL-terminated string (PMIx's
    // table, the shim's own text, or the stub's literal) for any status.
    let p = unsafe { raw::tpmix_strerror(status) };
    if p.is_null() {
        return format!("PMIx status {status}");
    }
    // SAFETY: p is non-null and points to a static NUL-terminated string (above).
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

fn classify(status: c_int) -> ErrorKind {
    if !AVAILABLE {
        return ErrorKind::Unavailable;
    }
    // SAFETY: both functions only return a constant.
    let (not_found, timeout) =
        unsafe { (raw::tpmix_status_not_found(), raw::tpmix_status_timeout()) };
    if status == LOCAL_TIMEOUT || status == timeout {
        ErrorKind::Timeout
    } else if status == not_found {
        ErrorKind::NotFound
    } else {
        ErrorKind::Other
    }
}

fn fail(status: c_int, what: impl std::fmt::Display) -> Error {
    Error {
        kind: classify(status),
        status,
        message: format!("{what}: {}", status_text(status)),
    }
}

fn unavailable() -> Error {
    Error {
        kind: ErrorKind::Unavailable,
        status: 0,
        message: "this build of Titus has no PMIx client (libpmix was not found when it was \
                  built): install it (Debian: apt-get install libpmix-dev pkg-config) and \
                  rebuild, or set TITUS_BOOTSTRAP to use the rendezvous"
            .into(),
    }
}

/// The server's timeout in whole seconds (at least 1) and the shim's bound in
/// milliseconds ([`GRACE`] more).
fn bounds(timeout: Duration) -> (c_int, i64) {
    let secs = timeout
        .as_secs_f64()
        .ceil()
        .clamp(1.0, f64::from(c_int::MAX)) as c_int;
    let wait = (timeout + GRACE).as_millis().min(i64::MAX as u128) as i64;
    (secs, wait)
}

fn key_c(key: &str) -> Result<CString, Error> {
    let invalid = |why: &str| Error {
        kind: ErrorKind::Invalid,
        status: 0,
        message: format!("PMIx key '{key}': {why}"),
    };
    if key.is_empty() || key.len() > MAX_KEY {
        return Err(invalid("must be 1 to 511 bytes long"));
    }
    CString::new(key).map_err(|_| invalid("contains a NUL byte"))
}

/// This process's PMIx client: its job's namespace, its rank and the job's size. PMIx is
/// initialised once per process (further [`Client::init`] calls return the same identity)
/// and finalized at process exit, so clients may be created and dropped freely.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Client {
    namespace: String,
    rank: u32,
    size: u32,
}

impl Client {
    /// Connects to the PMIx server that started this process (named by the `PMIX_*`
    /// variables it set).
    pub fn init() -> Result<Client, Error> {
        if !AVAILABLE {
            return Err(unavailable());
        }
        let mut ns = vec![0 as c_char; 512];
        let mut err = vec![0 as c_char; 512];
        let (mut rank, mut size) = (0u32, 0u32);
        // SAFETY: the buffers are writable for the lengths passed, the shim NUL-terminates
        // what it writes into them, and rank and size are valid u32 destinations.
        let rc = unsafe {
            raw::tpmix_init(
                ns.as_mut_ptr(),
                ns.len(),
                &mut rank,
                &mut size,
                err.as_mut_ptr(),
                err.len(),
            )
        };
        // The last byte stays NUL: the shim writes at most len - 1 characters.
        *ns.last_mut().expect("non-empty") = 0;
        *err.last_mut().expect("non-empty") = 0;
        let text = |b: &[c_char]| {
            let bytes: Vec<u8> = b.iter().map(|&c| c as u8).collect();
            CStr::from_bytes_until_nul(&bytes)
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default()
        };
        if rc != 0 {
            return Err(Error {
                kind: classify(rc),
                status: rc,
                message: text(&err),
            });
        }
        let namespace = text(&ns);
        if size == 0 || rank >= size {
            return Err(Error {
                kind: ErrorKind::Malformed,
                status: 0,
                message: format!(
                    "PMIx says rank {rank} of a job of {size} (namespace {namespace})"
                ),
            });
        }
        Ok(Client {
            namespace,
            rank,
            size,
        })
    }

    /// The job's PMIx namespace (its identity: every rank of the job shares it).
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// This process's rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// The job's size (`PMIX_JOB_SIZE`).
    pub fn size(&self) -> u32 {
        self.size
    }

    /// Publishes `value` (a byte object, not empty) under `key` for the whole job, and
    /// commits it: it reaches the other ranks with the next collecting [`Client::fence`].
    pub fn put(&self, key: &str, value: &[u8]) -> Result<(), Error> {
        let k = key_c(key)?;
        if value.is_empty() {
            return Err(Error {
                kind: ErrorKind::Invalid,
                status: 0,
                message: format!("PMIx key '{key}': an empty value"),
            });
        }
        // SAFETY: k is NUL-terminated and value is readable for its length; PMIx_Put
        // copies the value before returning.
        let rc = unsafe { raw::tpmix_put(k.as_ptr(), value.as_ptr().cast(), value.len()) };
        if rc != 0 {
            return Err(fail(
                rc,
                format_args!("PMIx_Put/Commit of key '{key}' by rank {}", self.rank),
            ));
        }
        Ok(())
    }

    /// Waits until every rank of the job reaches the fence, at most `timeout` (and
    /// [`GRACE`]); with `collect`, the data each rank committed is exchanged.
    pub fn fence(&self, collect: bool, timeout: Duration) -> Result<(), Error> {
        let (secs, wait) = bounds(timeout);
        // SAFETY: plain values; the shim keeps what the server's callback needs alive
        // itself, whether or not this call gives up waiting.
        let rc = unsafe { raw::tpmix_fence(c_int::from(collect), secs, wait) };
        if rc != 0 {
            return Err(fail(
                rc,
                format_args!("PMIx_Fence of rank {} within {timeout:?}", self.rank),
            ));
        }
        Ok(())
    }

    /// The value `rank` published under `key`, at most `max_len` bytes, waiting at most
    /// `timeout` (and [`GRACE`]). A value that is not a byte object, is empty or is longer
    /// than `max_len` is an error ([`ErrorKind::Malformed`]): nothing is trusted.
    pub fn get(
        &self,
        rank: u32,
        key: &str,
        timeout: Duration,
        max_len: usize,
    ) -> Result<Vec<u8>, Error> {
        let k = key_c(key)?;
        let (secs, wait) = bounds(timeout);
        let mut data: *mut c_void = std::ptr::null_mut();
        let (mut len, mut kind) = (0usize, 0 as c_int);
        // SAFETY: k is NUL-terminated; data, len and kind are valid destinations. On
        // success the shim hands over a malloc'd buffer of len bytes (or none).
        let rc = unsafe {
            raw::tpmix_get(
                rank,
                k.as_ptr(),
                secs,
                wait,
                max_len,
                &mut data,
                &mut len,
                &mut kind,
            )
        };
        if rc != 0 {
            return Err(fail(
                rc,
                format_args!("PMIx_Get of key '{key}' of rank {rank} within {timeout:?}"),
            ));
        }
        let value = if data.is_null() {
            None
        } else {
            // SAFETY: the shim returned a buffer of exactly len bytes (len <= max_len),
            // which is copied before it is freed below.
            let v = unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len) }.to_vec();
            // SAFETY: data came from tpmix_get and is released once, here.
            unsafe { raw::tpmix_free(data) };
            Some(v)
        };
        value.ok_or_else(|| Error {
            kind: ErrorKind::Malformed,
            status: 0,
            message: format!(
                "PMIx_Get of key '{key}' of rank {rank}: not a byte object of 1 to {max_len} bytes \
                 (PMIx type {kind}, {len} bytes)"
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_checked() {
        assert!(key_c("titus.0.1").is_ok());
        assert_eq!(key_c("").unwrap_err().kind, ErrorKind::Invalid);
        assert_eq!(
            key_c(&"k".repeat(512)).unwrap_err().kind,
            ErrorKind::Invalid
        );
        assert_eq!(key_c("a\0b").unwrap_err().kind, ErrorKind::Invalid);
    }

    #[test]
    fn bounds_round_up_and_add_grace() {
        assert_eq!(bounds(Duration::from_millis(300)), (1, 2300));
        assert_eq!(bounds(Duration::from_secs(60)), (60, 62_000));
    }

    /// Outside a PMIx job, init fails with a message (never hangs, never panics).
    #[test]
    fn init_without_a_server_fails_cleanly() {
        if std::env::var_os("PMIX_NAMESPACE").is_some() {
            return; // under a real server: nothing to show here
        }
        let e = Client::init().unwrap_err();
        assert!(!e.message.is_empty());
    }
}
