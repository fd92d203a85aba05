//! Resources from C: an executor given as a pair of callbacks — launch a task,
//! test for finished ones — with a context and a capacity, as an accelerator's queue is
//! driven (a CUDA stream and its events, an OpenCL queue).

use crate::exchange::UserPtr;
use std::ffi::{c_int, c_void};
use titus_runtime::{Completions, Executor, Waker};

/// The launch callback (`titus_launch_fn`).
pub(crate) type Launch =
    unsafe extern "C" fn(c_int, *const c_void, usize, *mut u64, *mut c_void) -> c_int;
/// The test callback (`titus_test_fn`).
pub(crate) type Test = unsafe extern "C" fn(
    *mut u64,
    *mut c_void,
    usize,
    *mut usize,
    *mut c_int,
    *mut c_void,
) -> c_int;

/// Most completions one poll takes (a test callback that always reports one more would
/// otherwise hold the resource thread forever).
const POLL_MAX: usize = 4096;

/// An executor driven by the application's callbacks, called (one call at a time, under
/// the rank's resource lock) from its resource thread or a worker that dispatches to it.
pub(crate) struct CExecutor {
    pub(crate) name: String,
    pub(crate) launch: Launch,
    pub(crate) test: Test,
    pub(crate) ctx: UserPtr,
    /// The result buffer's size (`max_result`).
    pub(crate) cap: usize,
    /// 16-byte aligned buffers for the payload and the result.
    input: Vec<u128>,
    result: Vec<u128>,
    /// Wakes the resource thread (after a poll that stopped at POLL_MAX).
    waker: Option<Waker>,
}

impl CExecutor {
    pub(crate) fn new(name: String, launch: Launch, test: Test, ctx: UserPtr, cap: usize) -> Self {
        Self {
            name,
            launch,
            test,
            ctx,
            cap,
            input: Vec::new(),
            result: vec![0; cap.div_ceil(16).max(1)],
            waker: None,
        }
    }
}

impl Executor for CExecutor {
    fn submit(&mut self, kind: u16, payload: &[u8]) -> Result<u64, String> {
        let n = payload.len().div_ceil(16).max(1);
        self.input.clear();
        self.input.resize(n, 0);
        for (w, c) in self.input.iter_mut().zip(payload.chunks(16)) {
            let mut b = [0u8; 16];
            b[..c.len()].copy_from_slice(c);
            *w = u128::from_ne_bytes(b);
        }
        let mut handle = 0u64;
        // SAFETY: `input` holds `payload.len()` readable bytes, 16-byte aligned, alive for
        // the call (the callback copies what it keeps, as the header says); `handle` is a
        // valid out-pointer; `ctx` is the application's, handed back unchanged.
        let rc = unsafe {
            (self.launch)(
                c_int::from(kind),
                self.input.as_ptr().cast(),
                payload.len(),
                &mut handle,
                self.ctx.0,
            )
        };
        if rc != 0 {
            return Err(format!("its launch callback returned {rc}"));
        }
        Ok(handle)
    }

    fn poll(&mut self, done: &mut Completions) {
        for _ in 0..POLL_MAX {
            let (mut handle, mut len, mut finished) = (0u64, 0usize, 0 as c_int);
            // SAFETY: `result` holds `cap` writable bytes, 16-byte aligned, alive for the
            // call; the other pointers are valid out-pointers; `ctx` as in `submit`.
            let rc = unsafe {
                (self.test)(
                    &mut handle,
                    self.result.as_mut_ptr().cast(),
                    self.cap,
                    &mut len,
                    &mut finished,
                    self.ctx.0,
                )
            };
            if finished == 0 {
                if rc != 0 {
                    tracing::warn!(
                        "resource {:?}: its test callback returned {rc} with nothing finished",
                        self.name
                    );
                }
                return;
            }
            let r = if rc != 0 {
                Err(format!(
                    "its test callback returned {rc} for submission {handle}"
                ))
            } else if len > self.cap {
                Err(format!(
                    "its test callback reported a {len}-byte result, over its {}-byte buffer (option max_result)",
                    self.cap
                ))
            } else {
                Ok(crate::result_bytes(&self.result, len, Vec::new()))
            };
            done.push((handle, r));
        }
        // More may have finished (a GPU's batch of thousands): poll again at once rather
        // than after the resource thread's millisecond.
        if let Some(wake) = &self.waker {
            wake();
        }
    }

    fn set_waker(&mut self, wake: Waker) {
        self.waker = Some(wake);
    }
}
