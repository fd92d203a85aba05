//! libtitus: the C ABI of the Titus runtime, for C, C++ and Fortran solvers.
//!
//! The header `include/titus.h` is generated from this crate by cbindgen and checked in
//! (the test `header_is_current` fails when they differ), so a change to the ABI shows in
//! review. `fortran/titus.f90` binds every function with `iso_c_binding` (the test
//! `fortran_module_covers_the_header` checks that), and `include/titus_mpi.h` initialises
//! Titus from an MPI communicator in the solver's own code, so this library never links
//! MPI and never calls `MPI_Init`.
//!
//! Every function catches panics (a bug in Titus becomes `TITUS_ERR_INTERNAL`, never an
//! unwind across the ABI); a task function that fails (non-zero return, a result larger
//! than its buffer) fails the time step on every rank with `TITUS_ERR_TASK` — an error
//! value inside the runtime, not a panic, so nothing is printed — and its message reaches
//! every rank's `titus_last_error()` (`cause.rs`).
#![warn(missing_docs)]
#![allow(non_camel_case_types)]
// The exported functions are called from C, where every call is unsafe: their pointer
// contracts are stated in the header (and checked for NULL here), so they are safe-looking
// `extern "C"` functions rather than `unsafe` ones that only Rust callers would notice.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

mod cause;
mod exchange;
mod log;
mod options;
mod resource;

mod error;
mod results;
mod spawn;
mod stats;
mod tasks;

pub use error::*;
pub use results::*;
pub use spawn::*;
pub use stats::*;
pub use tasks::*;

use exchange::{AllGather, Callback, UserPtr};
use options::Options;
use std::cell::RefCell;
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU16, Ordering};
use titus_fabric::bootstrap::JobEnv;
use titus_fabric::mem::MemOptions;
use titus_runtime::{Backend, CoreError, EpochStats, Runtime, RuntimeError, TaskIn};

/// A resource's launch callback (`titus_add_resource`): accepts a task of `kind` whose
/// `payload_len` bytes are at `payload` (16-byte aligned; valid only during the call: copy
/// what the device needs), stores a handle for it in `*handle` (unique among its
/// unfinished submissions) and returns 0; any other return fails the time step with
/// `TITUS_ERR_TASK`. Called from the rank's resource thread or from one of its worker
/// threads (a worker that took a task the dispatch policy gives the resource), never
/// concurrently with the resource's other calls: a callback that needs per-thread state
/// (a device context) sets it itself.
pub type titus_launch_fn = Option<
    unsafe extern "C" fn(
        kind: c_int,
        payload: *const c_void,
        payload_len: usize,
        handle: *mut u64,
        ctx: *mut c_void,
    ) -> c_int,
>;

/// A resource's test callback: reports one finished submission, if any. Nothing finished:
/// sets `*done` to 0 (and returns 0). One finished: sets `*done` to 1, `*handle` to its
/// handle, writes its result (at most `result_capacity` bytes, the `max_result` option) at
/// `result` (16-byte aligned), stores their number in `*result_len` and returns 0 — or
/// returns non-zero if that submission failed, which fails the time step with
/// `TITUS_ERR_TASK`. Called repeatedly (about every millisecond while tasks are out) until
/// it reports nothing, completions in any order.
pub type titus_test_fn = Option<
    unsafe extern "C" fn(
        handle: *mut u64,
        result: *mut c_void,
        result_capacity: usize,
        result_len: *mut usize,
        done: *mut c_int,
        ctx: *mut c_void,
    ) -> c_int,
>;

/// The application's all-gather (for example `MPI_Allgather` over its communicator): every
/// rank contributes `len` bytes at `send`; `recv` receives `len` bytes from each rank, in
/// rank order (`size * len` bytes). Returns 0 on success. Called only from inside
/// `titus_init_exchange`, `titus_run`, `titus_job_stats` and `titus_finalize`, on the
/// calling thread, collectively.
pub type titus_allgather_fn = Option<
    unsafe extern "C" fn(
        send: *const c_void,
        len: usize,
        recv: *mut c_void,
        ctx: *mut c_void,
    ) -> c_int,
>;

/// A Titus runtime: one per rank (process), opaque.
pub struct titus_t {
    magic: u64,
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for titus_t {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("titus_t").finish_non_exhaustive()
    }
}

const MAGIC: u64 = 0x5449_5455_535f_4842; // "TITUS_HB"

/// Runtimes started from the launcher's environment in this process: the k-th uses the
/// rendezvous of session k ([`JobEnv::session`]). Process-wide bookkeeping, not state.
static SESSIONS: AtomicU16 = AtomicU16::new(0);

struct Inner {
    rt: Runtime,
    /// The tasks handed over for the next step, keyed by index until titus_task_keys.
    pending: Vec<TaskIn>,
    /// Keys of the pending tasks (titus_task_keys), or None: each task's index.
    keys: Option<Vec<u64>>,
    /// Priorities and cost hints of the pending tasks (titus_task_hints), or None: 0.
    hints: Option<(Vec<i16>, Vec<u64>)>,
    results: Vec<Vec<u8>>,
    /// The result buffers of the step before the last, which the next hand-over copies
    /// payloads into, in order from `recycled_at` (`tasks::add_tasks`).
    recycled: Vec<Vec<u8>>,
    recycled_at: usize,
    /// Measured cost of each result's task, ns.
    costs: Vec<u64>,
    /// The last step's reduction of spawned results (the option `spawn=LANES`).
    reduced: Vec<u64>,
    /// The last step's spawned results home here, ordered by key (`spawn=home`).
    spawned: Vec<titus_runtime::SpawnedResult>,
    stats: titus_stats,
    /// Nominal work stated for the next titus_run, seconds.
    nominal: f64,
    /// Why a titus_run failed (every rank's step failed with it): the handle is only
    /// good for titus_finalize and reading since.
    failed: Option<c_int>,
    /// The option `dispatch`: where ready tasks go among the workers and the resources.
    dispatch: titus_runtime::Dispatch,
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// The handle's state, locked.
fn with<T>(t: *mut titus_t, f: impl FnOnce(&mut Inner) -> Result<T, Error>) -> Result<T, Error> {
    // SAFETY: the header's contract: `t` is NULL or a handle from titus_init* that was not
    // finalised (titus_finalize sets the caller's pointer to NULL). The magic word catches
    // most other pointers without trusting them further.
    let h = unsafe { t.as_ref() }.ok_or(Error::NotInitialized)?;
    if h.magic != MAGIC {
        return Err(Error::NotInitialized);
    }
    let mut inner = h.inner.lock().unwrap_or_else(|p| p.into_inner());
    f(&mut inner)
}

/// `p` as a mutable reference, or an error naming `what`.
fn out<'a, T>(p: *mut T, what: &str) -> Result<&'a mut T, Error> {
    // SAFETY: the caller passes NULL or a valid, writable, aligned pointer (header).
    unsafe { p.as_mut() }.ok_or_else(|| Error::Invalid(format!("{what} is NULL")))
}

/// `len` bytes at `p` (NULL allowed when `len` is 0).
fn bytes<'a>(p: *const c_void, len: usize, what: &str) -> Result<&'a [u8], Error> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Error::Invalid(format!("{what} is NULL")));
    }
    if len > isize::MAX as usize {
        return Err(Error::Invalid(format!("{what}: {len} bytes")));
    }
    // SAFETY: the caller guarantees `len` readable bytes at `p` (header); `len` fits a slice.
    Ok(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) })
}

fn options(text: *const c_char) -> Result<Options, Error> {
    let text = if text.is_null() {
        ""
    } else {
        // SAFETY: a non-NULL options pointer is a NUL-terminated string (header).
        unsafe { CStr::from_ptr(text) }
            .to_str()
            .map_err(|_| Error::Invalid("the options string is not UTF-8".into()))?
    };
    options_of(text)
}

/// The options of `text` over `TITUS_OPTIONS`, and the log they ask for.
fn options_of(text: &str) -> Result<Options, Error> {
    let env = titus_fabric::env_var::get(titus_fabric::env_var::OPTIONS)
        .map_err(|e| Error::Invalid(e.to_string()))?;
    let o = Options::parse(text, env.as_deref()).map_err(Error::Invalid)?;
    let env = titus_fabric::env_var::get(titus_fabric::env_var::LOG)
        .map_err(|e| Error::Invalid(e.to_string()))?;
    if let Some(f) = log::filter(o.log.as_deref(), env.as_deref()).map_err(Error::Invalid)? {
        log::install(f);
    }
    Ok(o)
}

fn fresh<'a>(handle: *mut *mut titus_t) -> Result<&'a mut *mut titus_t, Error> {
    let slot = out(handle, "the handle pointer")?;
    if !slot.is_null() {
        return Err(Error::AlreadyInitialized);
    }
    Ok(slot)
}

fn install(slot: &mut *mut titus_t, rt: Runtime, dispatch: titus_runtime::Dispatch) {
    let h = Box::new(titus_t {
        magic: MAGIC,
        inner: Mutex::new(Inner {
            rt,
            pending: Vec::new(),
            keys: None,
            hints: None,
            costs: Vec::new(),
            results: Vec::new(),
            recycled: Vec::new(),
            recycled_at: 0,
            reduced: Vec::new(),
            spawned: Vec::new(),
            stats: titus_stats::default(),
            nominal: 0.0,
            failed: None,
            dispatch,
        }),
    });
    *slot = Box::into_raw(h);
}

/// Initialises this rank from the launcher's environment (`titus launch`, srun, mpirun:
/// through its PMIx server, or the rendezvous at `TITUS_BOOTSTRAP` when set; a single rank
/// without a launcher) and stores the handle in `*handle`, which
/// must be NULL. `options`: NULL or `key=value` pairs separated by commas or spaces
/// (workers, worker_grain, balancer, protocol, backend, provider, max_payload, max_result, seed,
/// group_size, op_timeout, epoch_timeout, min_private, steal_below, backoff_max,
/// check_interval, flush_delay, push_wait, diffusion, diffusion_plan, repartition_plan, advertise,
/// cost_aware, shortcuts, shortcut_draw, dispatch, resource_types, log, trace), overridden by `TITUS_OPTIONS`. `trace` names a
/// directory for each rank's timeline (`titus trace DIR` merges them). `workers` defaults to
/// this rank's share of the node: max(1, cores this process may use (affinity mask, cgroup
/// quota) / ranks of the job on this node (from the launcher: `titus launch`, Slurm, Open
/// MPI, Hydra)). libtitus prints nothing unless asked: `log` (a filter such as `info` or
/// `titus_fabric_ofi=debug`, directives separated by `;`) or the variable `TITUS_LOG` (the
/// same, commas between directives; it wins) sends its log to stderr, for the rest of the
/// process, from the first init that asks. Collective.
#[unsafe(no_mangle)]
pub extern "C" fn titus_init(handle: *mut *mut titus_t, options_text: *const c_char) -> c_int {
    call("titus_init", || {
        let slot = fresh(handle)?;
        let o = options(options_text)?;
        let rt = open_job(&o)?;
        install(slot, rt, o.dispatch);
        Ok(())
    })
}

/// This rank's runtime over the application's own all-gather, as titus_init_exchange
/// opens it.
fn open_exchanged(
    o: &Options,
    ex: Box<dyn titus_fabric::bootstrap::Exchange>,
) -> Result<Runtime, Error> {
    let size = ex.size();
    let cfg = o.config(size).map_err(Error::Invalid)?;
    Ok(match o.backend(size) {
        Backend::Mem if size == 1 => Runtime::local(1, cfg, MemOptions::default())?.remove(0),
        Backend::Mem => {
            return Err(Error::Invalid(
                "backend=mem runs a single rank; this job has several".into(),
            ));
        }
        backend => Runtime::from_exchange(cfg, backend, ex)?,
    })
}

/// This rank's runtime from the launcher's environment, as titus_init opens it.
fn open_job(o: &Options) -> Result<Runtime, Error> {
    let env = JobEnv::from_env().map_err(|e| Error::Fabric(e.to_string()))?;
    let cfg = o.config(env.size).map_err(Error::Invalid)?;
    let backend = o.backend(env.size);
    let env = if env.size > 1 {
        let k = SESSIONS.fetch_add(1, Ordering::Relaxed);
        env.session(k).map_err(|e| Error::Fabric(e.to_string()))?
    } else {
        env
    };
    Ok(Runtime::from_job(cfg, backend, env)?)
}

/// libtitus for front ends written in Rust (the Python package): the runtime that
/// titus_init would open from `options` (the same keys, `TITUS_OPTIONS` over them, the
/// same launchers), and a step's figures as titus_stats_get gives them.
pub mod embed {
    use super::*;

    /// This rank's runtime, as `titus_init(options)` opens it; the error names the
    /// option or what failed.
    pub fn open(options: &str) -> Result<Runtime, String> {
        options_of(options)
            .and_then(|o| open_job(&o))
            .map_err(|e| e.message())
    }

    /// This rank's runtime over the caller's own all-gather `ex` (an MPI communicator's),
    /// as `titus_init_exchange(options)` opens it.
    pub fn open_exchange(
        options: &str,
        ex: Box<dyn titus_fabric::bootstrap::Exchange>,
    ) -> Result<Runtime, String> {
        options_of(options)
            .and_then(|o| open_exchanged(&o, ex))
            .map_err(|e| e.message())
    }

    /// Why a step failed, as titus_run says it on every rank (collective, after a failed
    /// step: a failed task's own words are gathered from the rank where it failed), and
    /// whether a task failed (rather than the job).
    pub fn step_failure(rt: &Runtime, e: titus_runtime::RuntimeError) -> (bool, String) {
        let e = error::step_error(rt, e);
        (matches!(e, Error::Task(_)), e.message())
    }

    /// A step's figures, as titus_stats_get gives them; `nominal_s`: the step's stated
    /// sequential work (0: none).
    pub fn stats(s: &titus_runtime::EpochStats, nominal_s: f64) -> titus_stats {
        stats::stats_of(s, nominal_s)
    }
}

/// Initialises rank `rank` of `size` whose ranks exchange fabric addresses through the
/// application's `allgather` (for example over its MPI communicator: see titus_mpi.h), so
/// no launcher variables or rendezvous are needed. `ctx` is passed back to `allgather` and
/// must stay valid until titus_finalize. `*handle` must be NULL; options as titus_init.
/// Collective.
#[unsafe(no_mangle)]
pub extern "C" fn titus_init_exchange(
    handle: *mut *mut titus_t,
    rank: c_int,
    size: c_int,
    allgather: titus_allgather_fn,
    ctx: *mut c_void,
    options_text: *const c_char,
) -> c_int {
    call("titus_init_exchange", || {
        let slot = fresh(handle)?;
        let f: AllGather =
            allgather.ok_or_else(|| Error::Invalid("the all-gather callback is NULL".into()))?;
        if size < 1 || rank < 0 || rank >= size {
            return Err(Error::Invalid(format!(
                "rank {rank} of {size} ranks: need 0 <= rank < size"
            )));
        }
        let (rank, size) = (rank as u32, size as u32);
        let o = options(options_text)?;
        let ex = Callback {
            rank,
            size,
            f,
            ctx: UserPtr(ctx),
        };
        let rt = open_exchanged(&o, Box::new(ex))?;
        install(slot, rt, o.dispatch);
        Ok(())
    })
}

/// Adds a resource beside this rank's CPU workers (an accelerator's queue): it
/// holds up to `capacity` tasks at once, of the `nkinds` kinds at `kinds` with their speeds
/// relative to one worker at `speeds` (a hint for dispatch and statistics) — or, with
/// `nkinds` 0, of every kind at speed `speeds[0]` (1 if `speeds` is NULL). Each ready task
/// goes to the capable resource with room that the option `dispatch` picks
/// (`least-loaded`: fewest unfinished submissions; `round-robin`; `fixed`: the last added
/// resource whenever it has room). The rank's resource thread calls `launch` and `test`
/// with `ctx`, which must stay valid until titus_finalize. `name` appears in errors and
/// statistics. Ranks may add different resources (a task a resource cannot run goes to
/// the workers, which run every kind). With the option `resource_types` (the same on every
/// rank, e.g. `all/1/2+3`: the workers' every kind, then each resource's kinds) a resource
/// whose kinds are a type asks other ranks for work of its kinds when it has room and
/// none is queued, while the workers are busy; its kinds must then be one of the types. Between time steps; not collective. Bad input
/// (capacity ≤ 0, a speed ≤ 0, a kind outside 0..=65535, NULL callbacks):
/// `TITUS_ERR_INVALID`.
#[unsafe(no_mangle)]
pub extern "C" fn titus_add_resource(
    t: *mut titus_t,
    name: *const c_char,
    capacity: c_int,
    kinds: *const c_int,
    speeds: *const f64,
    nkinds: usize,
    launch: titus_launch_fn,
    test: titus_test_fn,
    ctx: *mut c_void,
) -> c_int {
    call("titus_add_resource", || {
        with(t, |inner| {
            if name.is_null() {
                return Err(Error::Invalid("the resource's name is NULL".into()));
            }
            // SAFETY: a non-NULL name is a NUL-terminated string (header).
            let name = unsafe { CStr::from_ptr(name) }
                .to_str()
                .map_err(|_| Error::Invalid("the resource's name is not UTF-8".into()))?
                .to_string();
            let capacity = u32::try_from(capacity)
                .ok()
                .filter(|&c| c > 0)
                .ok_or_else(|| {
                    Error::Invalid(format!("resource {name:?} has capacity {capacity}"))
                })?;
            let (Some(launch), Some(test)) = (launch, test) else {
                return Err(Error::Invalid(format!(
                    "resource {name:?}: its launch or test callback is NULL"
                )));
            };
            let variants = if nkinds == 0 {
                let speed = if speeds.is_null() {
                    1.0
                } else {
                    // SAFETY: a non-NULL `speeds` holds at least one value (header).
                    unsafe { *speeds }
                };
                titus_runtime::Variants::All(speed)
            } else {
                if kinds.is_null() || speeds.is_null() {
                    return Err(Error::Invalid(format!(
                        "resource {name:?}: {nkinds} kinds but kinds or speeds is NULL"
                    )));
                }
                if nkinds > 65_536 {
                    return Err(Error::Invalid(format!("resource {name:?}: {nkinds} kinds")));
                }
                // SAFETY: the caller guarantees `nkinds` values at `kinds` and at `speeds`
                // (header); `nkinds` is bounded above.
                let (ks, ss) = unsafe {
                    (
                        std::slice::from_raw_parts(kinds, nkinds),
                        std::slice::from_raw_parts(speeds, nkinds),
                    )
                };
                let mut v = Vec::with_capacity(nkinds);
                for (&k, &sp) in ks.iter().zip(ss) {
                    v.push((task_kind(k)?, sp));
                }
                titus_runtime::Variants::Kinds(v)
            };
            let cap = inner.rt.config().core.max_result as usize;
            let exec = resource::CExecutor::new(name.clone(), launch, test, UserPtr(ctx), cap);
            inner
                .rt
                .add_resource(&name, capacity, variants, inner.dispatch, Box::new(exec))?;
            Ok(())
        })
    })
}

/// The first `len` bytes of a 16-byte aligned result buffer (`len` ≤ its size), in `out`
/// (emptied first), in one copy: byte by byte through an iterator cost ~4% of µs-cells'
/// time, and word by word a tenth of a no-op task's.
pub(crate) fn result_bytes(result: &[u128], len: usize, mut out: Vec<u8>) -> Vec<u8> {
    // `result` is `result.len() * 16` initialized bytes (any bit pattern is a valid u8),
    // borrowed for as long as the view.
    // SAFETY: as just said; u8 has no alignment requirement.
    let bytes: &[u8] =
        unsafe { std::slice::from_raw_parts(result.as_ptr().cast::<u8>(), size_of_val(result)) };
    out.clear();
    out.extend_from_slice(&bytes[..len]);
    out
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::default());
}

/// Runs the tasks handed over on every rank until all results are home (collective).
/// Afterwards this rank's results are read with titus_result*, in task order, until the
/// next titus_run. With no task anywhere, every rank gets TITUS_ERR_NO_TASKS and the
/// handle stays usable. After any other failure of the step (TITUS_ERR_TASK, _EPOCH, ...)
/// this rank holds no results (titus_result_count gives 0), titus_stats_get still gives
/// the last successful step's figures, and the handle is good only for titus_finalize
/// (collective as always): a further titus_run returns TITUS_ERR_INVALID.
#[unsafe(no_mangle)]
pub extern "C" fn titus_run(t: *mut titus_t) -> c_int {
    call("titus_run", || {
        with(t, |inner| {
            if let Some(code) = inner.failed {
                return Err(Error::Invalid(format!(
                    "an earlier titus_run failed ({}): only titus_finalize is left for this handle",
                    error_name(code)
                )));
            }
            let mut tasks = std::mem::take(&mut inner.pending);
            let keys = inner.keys.take();
            let hints = inner.hints.take();
            // The last step's results are read until now: their buffers carry the next
            // step's payloads (`tasks::add_tasks`).
            inner.recycled = std::mem::take(&mut inner.results);
            inner.recycled_at = 0;
            inner.costs.clear();
            let nominal = std::mem::take(&mut inner.nominal);
            if let Some(k) = &keys
                && k.len() != tasks.len()
            {
                return Err(Error::Invalid(format!(
                    "{} keys for {} tasks: titus_task_keys must follow the last hand-over",
                    k.len(),
                    tasks.len()
                )));
            }
            if let Some((p, _)) = &hints
                && p.len() != tasks.len()
            {
                return Err(Error::Invalid(format!(
                    "{} hints for {} tasks: titus_task_hints must follow the last hand-over",
                    p.len(),
                    tasks.len()
                )));
            }
            // Keys and hints filled in where the tasks lie (a second array of 100,000s of
            // tasks cost a millisecond a step).
            if let Some(k) = &keys {
                tasks.iter_mut().zip(k).for_each(|(t, &k)| t.key = k);
            }
            if let Some((p, c)) = &hints {
                for ((t, &p), &c) in tasks.iter_mut().zip(p).zip(c) {
                    (t.priority, t.cost_hint_ns) = (p, c);
                }
            }
            let out = match inner.rt.run_epoch_if_any_keyed(tasks) {
                Ok(out) => out.ok_or(Error::NoTasks)?,
                Err(e) => {
                    let e = step_error(&inner.rt, e);
                    inner.failed = Some(e.code());
                    return Err(e);
                }
            };
            inner.stats = stats_of(&out.stats, nominal);
            inner.results = out.results;
            inner.costs = out.costs_ns;
            inner.reduced = out.reduced;
            inner.spawned = out.spawned;
            Ok(())
        })
    })
}

/// A repartition plan for the solver (collective; after at least one titus_run): which
/// of this rank's tasks should move for good to which rank so that the loads predicted for
/// the next step (the last step's measured costs, moved as the job's front moved) even
/// out: to a neighbour in the rank string by default, anywhere with the option
/// `repartition_plan=recut` (the string cut anew: each rank's cells stay one contiguous
/// piece of it). `keys`: the `count` tasks this rank will own, in string order (a cell's
/// key, as given to titus_task_keys). On return `*n_moves` moves are in `move_keys` /
/// `move_to` (task key, new owner rank: this rank ± 1 by default); `capacity` is the room
/// in both arrays, and `capacity = count` always
/// suffices (a task moves at most once). Before any titus_run, or with a key twice, every
/// rank gets TITUS_ERR_INVALID. Moving the cells is the solver's own work.
#[unsafe(no_mangle)]
pub extern "C" fn titus_repartition_plan(
    t: *mut titus_t,
    keys: *const u64,
    count: usize,
    move_keys: *mut u64,
    move_to: *mut c_int,
    capacity: usize,
    n_moves: *mut usize,
) -> c_int {
    call("titus_repartition_plan", || {
        with(t, |inner| {
            let n_moves = out(n_moves, "n_moves")?;
            let k: &[u64] = if count == 0 {
                &[]
            } else if keys.is_null() {
                return Err(Error::Invalid("the keys are NULL".into()));
            } else {
                // SAFETY: the caller guarantees `count` readable keys at `keys` (header).
                unsafe { std::slice::from_raw_parts(keys, count) }
            };
            let plan = inner.rt.repartition_plan(k)?;
            *n_moves = plan.len();
            if plan.len() > capacity {
                return Err(Error::TooSmall(format!(
                    "{} moves; the arrays hold {capacity} (capacity = count always suffices)",
                    plan.len()
                )));
            }
            if plan.is_empty() {
                return Ok(());
            }
            if move_keys.is_null() || move_to.is_null() {
                return Err(Error::Invalid("move_keys or move_to is NULL".into()));
            }
            // SAFETY: the caller guarantees `capacity` writable entries in both arrays
            // (header), and plan.len() ≤ capacity.
            let (ks, to) = unsafe {
                (
                    std::slice::from_raw_parts_mut(move_keys, plan.len()),
                    std::slice::from_raw_parts_mut(move_to, plan.len()),
                )
            };
            for ((k, t), m) in ks.iter_mut().zip(to.iter_mut()).zip(&plan) {
                *k = m.key;
                *t = m.to as c_int;
            }
            Ok(())
        })
    })
}

/// States the nominal work of this rank's tasks for the next titus_run: `seconds` (finite,
/// at least 0) is added to it, so it can be stated per task, per batch or once. The
/// nominal work is the tasks' calibrated cost — their time run sequentially on one core,
/// measured once or modelled — and gives the stats' `nominal_s` and
/// `nominal_efficiency`; titus_run starts the next step's at 0.
#[unsafe(no_mangle)]
pub extern "C" fn titus_nominal_work(t: *mut titus_t, seconds: f64) -> c_int {
    call("titus_nominal_work", || {
        with(t, |inner| {
            if !(seconds.is_finite() && seconds >= 0.0) {
                return Err(Error::Invalid(format!(
                    "nominal work {seconds} s: expected a finite number of seconds, at least 0"
                )));
            }
            inner.nominal += seconds;
            Ok(())
        })
    })
}

/// This rank in `*rank` and the number of ranks in `*size` (either may be NULL).
#[unsafe(no_mangle)]
pub extern "C" fn titus_rank_size(t: *mut titus_t, rank: *mut c_int, size: *mut c_int) -> c_int {
    call("titus_rank_size", || {
        with(t, |inner| {
            if let Ok(r) = out(rank, "rank") {
                *r = inner.rt.rank() as c_int;
            }
            if let Ok(s) = out(size, "size") {
                *s = inner.rt.size() as c_int;
            }
            Ok(())
        })
    })
}

/// Ends this rank's runtime and sets `*handle` to NULL (collective: a barrier first, so no
/// rank's memory goes away while another may still read it). NULL `*handle`: nothing to
/// do, TITUS_OK; `handle` itself NULL: TITUS_ERR_INVALID. Afterwards titus_init* may
/// start a new runtime in the same process (collectively, as the first); nothing carries
/// over: register the kinds again.
#[unsafe(no_mangle)]
pub extern "C" fn titus_finalize(handle: *mut *mut titus_t) -> c_int {
    call("titus_finalize", || {
        let slot = out(handle, "the handle pointer")?;
        if slot.is_null() {
            return Ok(());
        }
        let barrier = with(*slot, |inner| inner.rt.all_gather(&[]).map_err(Error::from));
        if matches!(barrier, Err(Error::NotInitialized)) {
            return Err(Error::NotInitialized);
        }
        // SAFETY: `*slot` is a live handle from Box::into_raw (checked above); it is taken
        // out of the caller's pointer before it is freed, so it is freed once.
        let h = unsafe { Box::from_raw(std::mem::replace(slot, std::ptr::null_mut())) };
        drop(h);
        barrier.map(drop)
    })
}

/// The library's version, e.g. "0.1.0".
#[unsafe(no_mangle)]
pub extern "C" fn titus_version() -> *const c_char {
    const V: &CStr =
        match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
            Ok(v) => v,
            Err(_) => c"unknown",
        };
    V.as_ptr()
}

#[cfg(test)]
mod tests;
