//! Tasks that spawn tasks from C and Fortran: a spawning task function gets a handle on
//! its running task, through which `titus_spawn` hands children to its rank. After the
//! step, `titus_spawned_count` and `titus_spawned_result` read the spawned results that
//! came home with their keys (the option `spawn=home`), or `titus_reduced` the job's
//! reduction of them (`spawn=LANES`).

use super::*;
use std::sync::atomic::AtomicU64;
use titus_runtime::NewTask;

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

/// The task running on this thread: its handle's value, the job's payload limit (None:
/// the job declared no spawning), and the children spawned so far.
struct Running {
    handle: usize,
    limit: Option<u32>,
    spawned: Vec<NewTask>,
}

thread_local! {
    static RUNNING: RefCell<Option<Running>> = const { RefCell::new(None) };
}

/// Handle values: never 0 (NULL), never reused, so a stale handle is told apart.
static NEXT_HANDLE: AtomicU64 = AtomicU64::new(1);

/// Registers task kind `kind` with a function that may spawn tasks (`titus_spawn`), in a
/// job that declared spawning with the option `spawn=LANES`. Otherwise as
/// `titus_register`.
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
                let limit = tcx.max_payload();
                RUNNING.with(|r| {
                    *r.borrow_mut() = Some(Running {
                        handle,
                        limit,
                        spawned: Vec::new(),
                    })
                });
                let task = std::ptr::without_provenance_mut::<titus_task_t>(handle);
                let out = run_task(kind, cap, payload, |input, len, result, cap, result_len| {
                    // The pointers and lengths are valid for the call (`run_task`); `task`
                    // is a handle, never dereferenced; `ctx` is the user's.
                    // SAFETY: the arguments are valid for the call, as just said.
                    unsafe { f(task, input, len, result, cap, result_len, ctx.0) }
                });
                let spawned = RUNNING
                    .with(|r| r.borrow_mut().take())
                    .map_or_else(Vec::new, |r| r.spawned);
                for child in spawned {
                    tcx.spawn_task(child).map_err(|e| e.to_string())?;
                }
                out
            });
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
/// task returns, before its result, and may be stolen like any other. With the option
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
        RUNNING.with(|r| {
            let mut r = r.borrow_mut();
            let run = r
                .as_mut()
                .filter(|run| run.handle == task.addr())
                .ok_or_else(|| {
                    Error::Invalid(
                        "called outside a running task's function, or with the handle of a task that returned"
                            .into(),
                    )
                })?;
            let limit = run.limit.ok_or_else(|| {
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
            run.spawned.push(NewTask {
                key,
                kind,
                payload: payload.to_vec(),
                ..NewTask::default()
            });
            Ok(())
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
