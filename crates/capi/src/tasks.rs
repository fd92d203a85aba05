//! Task functions and a time step's tasks: registering kinds, running a task through the
//! C callback, and handing tasks in (one, fixed-size, variable-size), with their keys and
//! hints.

use super::*;

/// A task function: reads `payload_len` bytes at `payload` (16-byte aligned), writes at
/// most `result_capacity` bytes (the `max_result` option) at `result` (16-byte aligned),
/// stores their number in `*result_len` and returns 0; any other return fails the time
/// step with `TITUS_ERR_TASK`. `ctx` is the pointer given to `titus_register`. Called
/// concurrently from worker threads of any rank. Only the `*result_len` bytes it reports
/// are kept; write all of them (the buffer is reused: bytes an earlier task wrote past
/// its own report may still be there).
pub type titus_task_fn = Option<
    unsafe extern "C" fn(
        payload: *const c_void,
        payload_len: usize,
        result: *mut c_void,
        result_capacity: usize,
        result_len: *mut usize,
        ctx: *mut c_void,
    ) -> c_int,
>;

/// Registers task kind `kind` (0..=65535): `task` runs its tasks with `ctx`. Every rank
/// registers the same kinds (a stolen task runs where it lands). `task` and `ctx` must stay
/// valid until titus_finalize. Registering a kind again replaces its function and context
/// for the tasks run from then on (between steps; every rank alike).
#[unsafe(no_mangle)]
pub extern "C" fn titus_register(
    t: *mut titus_t,
    kind: c_int,
    task: titus_task_fn,
    ctx: *mut c_void,
) -> c_int {
    call("titus_register", || {
        with(t, |inner| {
            let (kind, f, cap) = registration(inner, kind, task)?;
            let ctx = UserPtr(ctx);
            inner.rt.register_spawning(kind, move |tcx, payload| {
                // (The whole `UserPtr` moves in, which is Send; not its raw field alone.)
                let ctx = &ctx;
                let buffer = |len| tcx.result_buffer(len);
                run_task(
                    kind,
                    cap,
                    payload,
                    buffer,
                    |input, len, result, cap, result_len| {
                        // The pointers and lengths are valid for the call (`run_task`); `ctx`
                        // is the user's, handed back unchanged (the header's contract covers
                        // it).
                        // SAFETY: the arguments are valid for the call, as just said.
                        unsafe { f(input, len, result, cap, result_len, ctx.0) }
                    },
                )
            });
            Ok(())
        })
    })
}

/// A registration's checked kind and function, and the result buffer's capacity
/// (`max_result`).
pub(crate) fn registration<F>(
    inner: &Inner,
    kind: c_int,
    task: Option<F>,
) -> Result<(u16, F, usize), Error> {
    let kind = task_kind(kind)?;
    let f =
        task.ok_or_else(|| Error::Invalid(format!("the function of task kind {kind} is NULL")))?;
    Ok((kind, f, inner.rt.config().core.max_result as usize))
}

pub(crate) fn task_kind(kind: c_int) -> Result<u16, Error> {
    u16::try_from(kind).map_err(|_| Error::Invalid(format!("task kind {kind} is not in 0..=65535")))
}

/// Runs one task through the user's function, on a worker thread: `call` gets the
/// payload (16-byte aligned, `payload.len()` bytes), the result buffer (16-byte aligned,
/// `cap` bytes) and the out-pointer for the result's length, all valid for the call. The
/// result is copied into what `buffer` gives for its length (`TaskCtx::result_buffer`).
pub(crate) fn run_task(
    kind: u16,
    cap: usize,
    payload: &[u8],
    buffer: impl FnOnce(usize) -> Vec<u8>,
    call: impl FnOnce(*const c_void, usize, *mut c_void, usize, *mut usize) -> c_int,
) -> Result<Vec<u8>, String> {
    SCRATCH.with(|scratch| {
        // A task that ran a task on this thread from inside itself would find the buffers
        // taken: that fails the step like any task failure.
        let mut scratch = scratch.try_borrow_mut().map_err(|_| {
            format!("the function of task kind {kind} ran a task from inside itself")
        })?;
        let Scratch {
            input,
            result,
            dirty,
        } = &mut *scratch;
        // Payload and result buffers 16-byte aligned, as the header promises (a C user
        // casts them to its record type). A payload the allocator placed so (glibc's
        // malloc aligns to 16) is passed as it is; any other is copied into a buffer
        // reused by every task of this worker thread.
        let aligned = !payload.is_empty() && (payload.as_ptr() as usize).is_multiple_of(16);
        let input_ptr: *const c_void = if aligned {
            payload.as_ptr().cast()
        } else {
            let n_in = payload.len().div_ceil(16).max(1);
            if input.len() < n_in {
                input.resize(n_in, 0);
            }
            for (w, c) in input.iter_mut().zip(payload.chunks(16)) {
                let mut b = [0u8; 16];
                b[..c.len()].copy_from_slice(c);
                *w = u128::from_ne_bytes(b);
            }
            input.as_ptr().cast()
        };
        let n_out = cap.div_ceil(16).max(1);
        if result.len() < n_out {
            result.resize(n_out, 0);
        }
        // What the last task reported (all of it after a failure) is cleared, so a
        // function finds zeros where no earlier task wrote within its report; zeroing all
        // of `max_result` per task, with three allocations, cost µs-cells several %.
        let d = (*dirty).min(result.len());
        result[..d].fill(0);
        let mut len = 0usize;
        // `input_ptr` points at `payload.len()` readable bytes and `result` holds `cap`
        // writable bytes, both 16-byte aligned and alive for the call; `len` is a valid
        // out-pointer.
        let rc = call(
            input_ptr,
            payload.len(),
            result.as_mut_ptr().cast(),
            cap,
            &mut len,
        );
        // Until it is known to have succeeded, anything it could reach counts as written.
        *dirty = n_out;
        // The runtime turns a failed task into a failed time step on every rank, quietly
        // (an error value, not a panic: nothing is printed).
        if rc != 0 {
            return Err(format!("the function of task kind {kind} returned {rc}"));
        }
        if len > cap {
            return Err(format!(
                "the function of task kind {kind} reported a {len}-byte result, over its {cap}-byte buffer (option max_result)"
            ));
        }
        *dirty = len.div_ceil(16).max(1);
        Ok(result_bytes(result, len, buffer(len)))
    })
}

/// A copy of `p` in the next recycled buffer where its size suits (`Inner::recycled`), else
/// in a new one. A time-step loop then neither allocates nor frees a buffer per task: at
/// 131,072 tasks a step, a malloc per payload, a free per result and glibc merging the
/// freed blocks were about a sixth of the runtime's time. The buffers come in task order,
/// as the results went, so the step still writes and reads memory in order.
pub(crate) fn recycled_copy(recycled: &mut [Vec<u8>], at: &mut usize, p: &[u8]) -> Vec<u8> {
    let slot = recycled.get_mut(*at);
    *at += 1;
    match slot {
        Some(buf) if (p.len()..=2 * p.len() + 64).contains(&buf.capacity()) => {
            let mut buf = std::mem::take(buf);
            buf.clear();
            buf.extend_from_slice(p);
            buf
        }
        _ => p.to_vec(),
    }
}

/// A worker thread's task buffers (`run_task`).
#[derive(Default)]
pub(crate) struct Scratch {
    input: Vec<u128>,
    result: Vec<u128>,
    /// Words of `result` a task may have written since it was last cleared.
    dirty: usize,
}

pub(crate) fn add_tasks<'a>(
    inner: &mut Inner,
    kind: c_int,
    payloads: impl Iterator<Item = &'a [u8]>,
) -> Result<(), Error> {
    let kind = task_kind(kind)?;
    if !inner.rt.has_kind(kind) {
        return Err(Error::Invalid(format!(
            "task kind {kind} has no registered function (titus_register)"
        )));
    }
    let max_payload = inner.rt.config().core.max_payload as usize;
    let start = inner.pending.len();
    // Room for a step like the last (its results, one a task) at once: grown by doubling,
    // a step of 131,072 tasks copied its 6 MB of tasks a dozen times.
    if inner.pending.capacity() == 0 {
        inner.pending.reserve(inner.results.len());
    }
    inner.pending.reserve(payloads.size_hint().0);
    for p in payloads {
        if p.len() > max_payload {
            inner.pending.truncate(start);
            return Err(Error::Invalid(format!(
                "a {}-byte payload is over max_payload={} (an option of titus_init)",
                p.len(),
                max_payload
            )));
        }
        let key = inner.pending.len() as u64;
        let payload = recycled_copy(&mut inner.recycled, &mut inner.recycled_at, p);
        inner.pending.push(TaskIn {
            key,
            kind,
            payload,
            priority: 0,
            cost_hint_ns: 0,
        });
    }
    Ok(())
}

/// Hands over one task of `kind` for the next titus_run (the payload is copied). A
/// payload may be empty (`len` 0; `payload` may then be NULL): the function gets
/// `payload_len` 0 and a valid pointer. A refused call (any error of titus_task,
/// titus_tasks_fixed or titus_tasks_var) hands over none of its tasks; those handed over
/// by earlier calls stay.
#[unsafe(no_mangle)]
pub extern "C" fn titus_task(
    t: *mut titus_t,
    kind: c_int,
    payload: *const c_void,
    len: usize,
) -> c_int {
    call("titus_task", || {
        with(t, |inner| {
            let p = bytes(payload, len, "the payload")?;
            add_tasks(inner, kind, std::iter::once(p))
        })
    })
}

/// Hands over `count` tasks of `kind` whose payloads are consecutive records of
/// `record_size` bytes at `records` (copied). Results come back in the order tasks were
/// handed over, across calls.
#[unsafe(no_mangle)]
pub extern "C" fn titus_tasks_fixed(
    t: *mut titus_t,
    kind: c_int,
    records: *const c_void,
    record_size: usize,
    count: usize,
) -> c_int {
    call("titus_tasks_fixed", || {
        with(t, |inner| {
            let total = record_size.checked_mul(count).ok_or_else(|| {
                Error::Invalid(format!("{count} records of {record_size} bytes overflow"))
            })?;
            let data = bytes(records, total, "the records")?;
            if record_size == 0 {
                return add_tasks(inner, kind, (0..count).map(|_| &[][..]));
            }
            add_tasks(inner, kind, data.chunks_exact(record_size))
        })
    })
}

/// Hands over `count` tasks of `kind` with variable payloads: task i is bytes
/// `offsets[i]..offsets[i+1]` of `data` (`offsets` has `count + 1` non-decreasing entries).
#[unsafe(no_mangle)]
pub extern "C" fn titus_tasks_var(
    t: *mut titus_t,
    kind: c_int,
    data: *const c_void,
    offsets: *const usize,
    count: usize,
) -> c_int {
    call("titus_tasks_var", || {
        with(t, |inner| {
            if count == 0 {
                return Ok(());
            }
            if offsets.is_null() {
                return Err(Error::Invalid("the offsets are NULL".into()));
            }
            let entries = count
                .checked_add(1)
                .ok_or_else(|| Error::Invalid(format!("{count} tasks overflow")))?;
            // SAFETY: `offsets` holds `count + 1` entries (header).
            let offs = unsafe { std::slice::from_raw_parts(offsets, entries) };
            if let Some(i) = (0..count).find(|&i| offs[i] > offs[i + 1]) {
                return Err(Error::Invalid(format!(
                    "offsets[{i}]={} > offsets[{}]={}: offsets must not decrease",
                    offs[i],
                    i + 1,
                    offs[i + 1]
                )));
            }
            let data = bytes(data, offs[count], "the data")?;
            add_tasks(inner, kind, (0..count).map(|i| &data[offs[i]..offs[i + 1]]))
        })
    })
}

/// Gives the tasks handed over for the next titus_run their identities: `keys[i]` is the
/// key of the i-th task handed over (all calls since the last titus_run, in order), and
/// `count` must be that number; call it after the last hand-over. A task's measured cost
/// is remembered under its key and predicts its cost at the next step (diffusion before
/// stealing), so give a cell the same key every step. Keys must be unique within a step:
/// a repeated key fails the step on every rank with TITUS_ERR_EPOCH, naming the key,
/// before any task runs. Without this call, a task's key is its index in the hand-over
/// order.
#[unsafe(no_mangle)]
pub extern "C" fn titus_task_keys(t: *mut titus_t, keys: *const u64, count: usize) -> c_int {
    call("titus_task_keys", || {
        with(t, |inner| {
            let n = inner.pending.len();
            if count != n {
                return Err(Error::Invalid(format!(
                    "{count} keys for the {n} tasks handed over since the last titus_run"
                )));
            }
            if count == 0 {
                inner.keys = Some(Vec::new());
                return Ok(());
            }
            if keys.is_null() {
                return Err(Error::Invalid("the keys are NULL".into()));
            }
            // SAFETY: the caller guarantees `count` readable keys at `keys` (header).
            let k = unsafe { std::slice::from_raw_parts(keys, count) };
            inner.keys = Some(k.to_vec());
            Ok(())
        })
    })
}

/// Gives the tasks handed over for the next titus_run a priority and a cost hint:
/// `priorities[i]` and `cost_ns[i]` are those of the i-th task handed over (all calls
/// since the last titus_run, in order), and `count` must be that number; call it after the
/// last hand-over. Either array may be NULL (every task 0). A rank runs higher priorities
/// first and shares lower ones first (default 0); a priority outside -32768..=32767 is
/// refused with TITUS_ERR_INVALID and nothing is set. A cost hint is the task's estimated
/// run time in ns (0: unknown; above a day counts as a day): with the option `cost_aware`
/// (on by default) a steal takes about half of a rank's estimated work instead of half of
/// its tasks, and work cheaper to finish than to move stays. From the second step on, a
/// step's plan (which ranks push work to which before stealing) takes a hint over the cost
/// Titus predicts from the steps it measured. Hints do not change results.
/// Without this call every task has priority 0 and no hint.
#[unsafe(no_mangle)]
pub extern "C" fn titus_task_hints(
    t: *mut titus_t,
    priorities: *const c_int,
    cost_ns: *const u64,
    count: usize,
) -> c_int {
    call("titus_task_hints", || {
        with(t, |inner| {
            let n = inner.pending.len();
            if count != n {
                return Err(Error::Invalid(format!(
                    "{count} hints for the {n} tasks handed over since the last titus_run"
                )));
            }
            let prio: Vec<i16> = if priorities.is_null() || count == 0 {
                vec![0; count]
            } else {
                // SAFETY: the caller guarantees `count` readable ints at `priorities`
                // (header).
                let p = unsafe { std::slice::from_raw_parts(priorities, count) };
                p.iter()
                    .enumerate()
                    .map(|(i, &v)| {
                        i16::try_from(v).map_err(|_| {
                            Error::Invalid(format!(
                                "priority {v} of task {i} is outside -32768..=32767"
                            ))
                        })
                    })
                    .collect::<Result<_, _>>()?
            };
            let costs: Vec<u64> = if cost_ns.is_null() || count == 0 {
                vec![0; count]
            } else {
                // SAFETY: the caller guarantees `count` readable hints at `cost_ns` (header).
                unsafe { std::slice::from_raw_parts(cost_ns, count) }.to_vec()
            };
            inner.hints = Some((prio, costs));
            Ok(())
        })
    })
}
