//! Tasks that spawn tasks from C and Fortran: a spawning task function gets a handle on
//! its running task, through which `titus_spawn` hands children to its rank. After the
//! step, `titus_spawned_count` and `titus_spawned_result` read the spawned results that
//! came home with their keys (the option `spawn=home`), or `titus_reduced` the job's
//! reduction of them (`spawn=LANES`).

use super::*;
use std::cell::Cell;
use std::sync::atomic::AtomicU64;
use titus_runtime::{NewTask, TaskCtx};

/// A running task, opaque: valid only inside the call of the task function it was
/// handed to.
#[derive(Debug)]
pub struct titus_task_t {
    _private: [u8; 0],
}

/// A task function that may spawn: [`titus_task_fn`]'s arguments after `task`, the
/// running task's handle for `titus_spawn` (valid only during this call).
pub type titus_spawning_task_fn = Option<
    unsafe extern "C" fn(
        task: *mut titus_task_t,
        payload: *const c_void,
        payload_len: usize,
        result: *mut c_void,
        result_capacity: usize,
        result_len: *mut usize,
        ctx: *mut c_void,
    ) -> c_int,
>;

/// The task running on this thread: its handle's value, and its context (a
/// `TaskCtx`, type-erased), valid while its function runs.
#[derive(Clone, Copy)]
struct Running {
    handle: usize,
    tcx: *mut c_void,
}

thread_local! {
    static RUNNING: Cell<Option<Running>> = const { Cell::new(None) };
}

/// Puts back the task that ran on this thread before, when dropped.
struct Restore(Option<Running>);

impl Drop for Restore {
    fn drop(&mut self) {
        RUNNING.set(self.0);
    }
}

/// Handle values: never 0 (NULL), never reused, so a stale handle is told apart.
static NEXT_HANDLE: AtomicU64 = AtomicU64::new(1);

/// Registers task kind `kind` with a function that may spawn tasks (`titus_spawn`), in a
/// job that declared spawning with the option `spawn`. Otherwise as `titus_register`.
#[unsafe(no_mangle)]
pub extern "C" fn titus_register_spawning(
    t: *mut titus_t,
    kind: c_int,
    task: titus_spawning_task_fn,
    ctx: *mut c_void,
) -> c_int {
    call("titus_register_spawning", || {
        with(t, |inner| {
            let (kind, f, cap) = registration(inner, kind, task)?;
            let ctx = UserPtr(ctx);
            inner.rt.register_spawning(kind, move |tcx, payload| {
                // (The whole `UserPtr` moves in, which is Send; not its raw field alone.)
                let ctx = &ctx;
                let handle = NEXT_HANDLE.fetch_add(1, Ordering::Relaxed) as usize;
                let tcx: *mut TaskCtx<'_> = tcx;
                // Restored when the call ends, even by a panic: the pointer must not outlive
                // it. (A task run inside a task on this thread gets the outer one back.)
                let _running = Restore(RUNNING.replace(Some(Running {
                    handle,
                    tcx: tcx.cast(),
                })));
                let task = std::ptr::without_provenance_mut::<titus_task_t>(handle);
                run_task(
                    kind,
                    cap,
                    payload,
                    Vec::with_capacity,
                    |input, len, result, cap, result_len| {
                        // The pointers and lengths are valid for the call (`run_task`); `task`
                        // is a handle, never dereferenced; `ctx` is the user's.
                        // SAFETY: the arguments are valid for the call, as just said.
                        unsafe { f(task, input, len, result, cap, result_len, ctx.0) }
                    },
                )
            });
            Ok(())
        })
    })
}

/// The context of the running task `task` on this thread, handed to `use_it`. RUNNING
/// names that context only while its task's function runs on this thread (set before,
/// restored after); the function does not use it meanwhile, being inside the user's C
/// function that called us; and RUNNING forgets it while `use_it` runs.
fn with_running<T>(
    task: *mut titus_task_t,
    use_it: impl FnOnce(&mut TaskCtx<'_>) -> Result<T, Error>,
) -> Result<T, Error> {
    let run = RUNNING
        .get()
        .filter(|run| run.handle == task.addr())
        .ok_or_else(|| {
            Error::Invalid(
                "called outside a running task's function, or with the handle of a task that returned"
                    .into(),
            )
        })?;
    // Unnamed while in use: a call that reached user code on this thread meanwhile (and
    // back here with the same handle) is refused, never a second borrow.
    let _back = Restore(RUNNING.take());
    // SAFETY: the running task's own context, whose only live use this is (see above).
    let tcx = unsafe { &mut *run.tcx.cast::<TaskCtx<'_>>() };
    use_it(tcx)
}

/// Hands the children that the running task `task` spawned so far to its rank now, while
/// the task goes on: they may run on other workers or be stolen before it returns. A task
/// that splits its work for thieves calls it once, not per child. TITUS_ERR_INVALID
/// outside a running task's call.
#[unsafe(no_mangle)]
pub extern "C" fn titus_hand_over(task: *mut titus_task_t) -> c_int {
    call("titus_hand_over", || {
        with_running(task, |tcx| {
            tcx.hand_over();
            Ok(())
        })
    })
}

/// `titus_spawn_keyed` with key 0.
#[unsafe(no_mangle)]
pub extern "C" fn titus_spawn(
    task: *mut titus_task_t,
    kind: c_int,
    payload: *const c_void,
    len: usize,
) -> c_int {
    spawn("titus_spawn", task, 0, kind, payload, len)
}

/// Spawns a task of `kind` with `len` bytes at `payload` (copied; NULL when `len` is 0)
/// under `key`, from inside the running task `task`: it joins this rank's queue when the
/// task returns, before its result, or at `titus_hand_over`, and may be stolen like any
/// other. With the option
/// `spawn=home` its result travels home to the rank that owns the step's task it
/// descends from, which reads it with its key (`titus_spawned_result`). With
/// `spawn=LANES` its result must be one little-endian uint64_t per lane: it joins the
/// job's reduction (`titus_reduced`), and the key is unused. TITUS_ERR_INVALID outside a
/// running task's call, with a handle of a task that returned, in a job without the
/// option `spawn`, or with a payload over `max_payload`.
#[unsafe(no_mangle)]
pub extern "C" fn titus_spawn_keyed(
    task: *mut titus_task_t,
    key: u64,
    kind: c_int,
    payload: *const c_void,
    len: usize,
) -> c_int {
    spawn("titus_spawn_keyed", task, key, kind, payload, len)
}

fn spawn(
    name: &'static str,
    task: *mut titus_task_t,
    key: u64,
    kind: c_int,
    payload: *const c_void,
    len: usize,
) -> c_int {
    call(name, || {
        let kind = task_kind(kind)?;
        let payload = bytes(payload, len, "the payload")?;
        with_running(task, |tcx| {
            let limit = tcx.max_payload().ok_or_else(|| {
                Error::Invalid(
                    "the job declared no spawning (the option spawn=home or spawn=LANES)".into(),
                )
            })?;
            if payload.len() > limit as usize {
                return Err(Error::Invalid(format!(
                    "a {}-byte payload is over max_payload={limit} (an option of titus_init)",
                    payload.len()
                )));
            }
            tcx.spawn_task(NewTask {
                key,
                kind,
                payload: payload.to_vec(),
                ..NewTask::default()
            })
            .map_err(|e| Error::Invalid(e.to_string()))
        })
    })
}

/// Copies the last step's reduction of spawned results (one uint64_t per lane of the
/// option `spawn`, the same on every rank) into `out` (`capacity` values) and their
/// number into `*lanes`. A job without spawning has 0 lanes. When `capacity` is too
/// small, nothing is copied, `*lanes` is the number needed and the call returns
/// TITUS_ERR_BUFFER_TOO_SMALL.
#[unsafe(no_mangle)]
pub extern "C" fn titus_reduced(
    t: *mut titus_t,
    out_values: *mut u64,
    capacity: usize,
    lanes: *mut usize,
) -> c_int {
    call("titus_reduced", || {
        with(t, |inner| {
            let lanes = out(lanes, "lanes")?;
            let n = inner.reduced.len();
            *lanes = n;
            if capacity < n {
                return Err(Error::TooSmall(format!(
                    "{n} lanes; the buffer holds {capacity}"
                )));
            }
            if n > 0 {
                if out_values.is_null() {
                    return Err(Error::Invalid("out_values is NULL".into()));
                }
                // SAFETY: the caller passes `capacity` ≥ n writable, aligned values
                // (header).
                unsafe { std::slice::from_raw_parts_mut(out_values, n) }
                    .copy_from_slice(&inner.reduced);
            }
            Ok(())
        })
    })
}

/// A job's own combine for its custom lanes (`spawn=custom:N`): folds `value` into
/// `acc`, both `lanes` uint64_t. It must be associative and commutative, and may run on
/// any thread, at any time during a step.
pub type titus_combine_fn =
    Option<unsafe extern "C" fn(acc: *mut u64, value: *const u64, lanes: usize, ctx: *mut c_void)>;

/// Gives the combine of the job's custom lanes (the option `spawn=custom:N`): `identity`
/// (`lanes` values: the partial before any spawned task ran, copied) and `combine`,
/// called with `ctx`. Every rank gives the same, before its first titus_run (or between
/// steps). TITUS_ERR_INVALID in a job without custom lanes, with another number of
/// lanes, or with a NULL function.
#[unsafe(no_mangle)]
pub extern "C" fn titus_set_combine(
    t: *mut titus_t,
    identity: *const u64,
    lanes: usize,
    combine: titus_combine_fn,
    ctx: *mut c_void,
) -> c_int {
    call("titus_set_combine", || {
        with(t, |inner| {
            let f = combine.ok_or_else(|| Error::Invalid("the combine function is NULL".into()))?;
            if identity.is_null() || lanes == 0 || lanes > titus_runtime::spawn::LANES_MAX {
                return Err(Error::Invalid(format!(
                    "{lanes} lanes at {identity:?}: 1 to {} values, not NULL",
                    titus_runtime::spawn::LANES_MAX
                )));
            }
            // SAFETY: the caller passes `lanes` readable, aligned values (header), checked
            // non-NULL above; they are copied at once.
            let identity = unsafe { std::slice::from_raw_parts(identity, lanes) }.to_vec();
            let ctx = UserPtr(ctx);
            let combine = titus_runtime::spawn::Combine::new(identity, move |acc, value| {
                let ctx = &ctx;
                // The slices are `acc.len()` lanes each (the core combines equal lengths).
                // SAFETY: both pointers are valid for `lanes` values during the call.
                unsafe { f(acc.as_mut_ptr(), value.as_ptr(), acc.len(), ctx.0) }
            });
            inner
                .rt
                .set_combine(combine)
                .map_err(|e| Error::Invalid(e.to_string()))
        })
    })
}

/// The number of spawned results that came home to this rank in the last step (the
/// option `spawn=home`): those of the spawned tasks descended from its own tasks, each
/// once. 0 in a job that reduces them or does not spawn.
#[unsafe(no_mangle)]
pub extern "C" fn titus_spawned_count(t: *mut titus_t, count: *mut usize) -> c_int {
    call("titus_spawned_count", || {
        with(t, |inner| {
            *out(count, "count")? = inner.spawned.len();
            Ok(())
        })
    })
}

/// Copies spawned result `index` (ordered by key, then by bytes) into `buf` (`capacity`
/// bytes), its size into `*len` and its key into `*key`. When `capacity` is too small,
/// nothing is copied, `*len` is the size needed and the call returns
/// TITUS_ERR_BUFFER_TOO_SMALL (`buf` may be NULL to ask for the size).
#[unsafe(no_mangle)]
pub extern "C" fn titus_spawned_result(
    t: *mut titus_t,
    index: usize,
    key: *mut u64,
    buf: *mut c_void,
    capacity: usize,
    len: *mut usize,
) -> c_int {
    call("titus_spawned_result", || {
        with(t, |inner| {
            let (key, len) = (out(key, "key")?, out(len, "len")?);
            let n = inner.spawned.len();
            let r = inner.spawned.get(index).ok_or_else(|| {
                Error::Invalid(format!("spawned result {index} of {n}: no such result"))
            })?;
            *key = r.key;
            *len = r.data.len();
            if capacity < r.data.len() {
                return Err(Error::TooSmall(format!(
                    "spawned result {index} has {} bytes; the buffer holds {capacity}",
                    r.data.len()
                )));
            }
            results::copy_out(buf, &r.data, "the buffer")
        })
    })
}
