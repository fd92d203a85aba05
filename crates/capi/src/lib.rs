//! libtitus: the C ABI of the Titus runtime, for C, C++ and Fortran solvers.
//!
//! The header `include/titus.h` is generated from this file by cbindgen and checked in
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

/// Success.
pub const TITUS_OK: c_int = 0;
/// The handle is NULL or not a live Titus handle (a call before `titus_init` or after
/// `titus_finalize`).
pub const TITUS_ERR_NOT_INITIALIZED: c_int = 1;
/// `titus_init*` was given a handle that is already initialised.
pub const TITUS_ERR_ALREADY_INITIALIZED: c_int = 2;
/// A bad argument: a NULL pointer, a bad option, an unregistered task kind, a payload
/// over `max_payload`, an index out of range.
pub const TITUS_ERR_INVALID: c_int = 3;
/// A caller's buffer is too small for the result(s); nothing was copied.
pub const TITUS_ERR_BUFFER_TOO_SMALL: c_int = 4;
/// `titus_run` found no task on any rank: nothing ran (every rank gets this code).
pub const TITUS_ERR_NO_TASKS: c_int = 5;
/// A task failed (its function returned non-zero or reported a result over its buffer),
/// here or on another rank: the time step failed on every rank, quietly (nothing is
/// printed), and every rank's `titus_last_error()` names the task, its owner, the rank it
/// ran on, its kind and what its function returned.
pub const TITUS_ERR_TASK: c_int = 6;
/// The time step failed on a remote operation, a dead peer, a timeout or malformed data
/// from another rank.
pub const TITUS_ERR_EPOCH: c_int = 7;
/// The fabric or the launcher's environment could not be set up.
pub const TITUS_ERR_FABRIC: c_int = 8;
/// The address exchange failed: the application's all-gather callback or the launcher's
/// rendezvous, at init or in a barrier between time steps, or another rank sent it
/// something malformed.
pub const TITUS_ERR_EXCHANGE: c_int = 9;
/// A bug in Titus (a caught panic); the message says where.
pub const TITUS_ERR_INTERNAL: c_int = 10;

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

/// Figures of the last time step. `titus_stats_get`: this rank's. `titus_job_stats`: the
/// job's: `session_s` is the slowest rank's; every other time (busy, idle, steal, nominal)
/// and every count (workers included) is summed over ranks; the two efficiencies are
/// recomputed from those sums.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct titus_stats {
    /// Wall time of `titus_run`, seconds (`titus_job_stats`: the slowest rank's).
    pub session_s: f64,
    /// Time workers spent in tasks, summed over workers, seconds.
    pub busy_s: f64,
    /// Worker time not spent in tasks, seconds.
    pub idle_s: f64,
    /// Time spent in steal attempts, seconds.
    pub steal_s: f64,
    /// busy / (session × workers).
    pub efficiency: f64,
    /// Worker threads.
    pub workers: u64,
    /// Tasks handed over (owned).
    pub tasks_owned: u64,
    /// Tasks run here.
    pub tasks_run: u64,
    /// Tasks run here that other ranks own (the thieves' view; summed over the job it
    /// equals the sum of `tasks_ran_elsewhere`).
    pub tasks_run_for_others: u64,
    /// Tasks this rank took from other ranks in steals, counted at every move: a task
    /// stolen again from its thief counts again, so the job's sum can exceed its tasks.
    /// The count of tasks that left their owner is `tasks_ran_elsewhere`.
    pub tasks_stolen: u64,
    /// This rank's own tasks that ran on another rank (stolen or pushed away, however
    /// often they moved: each counts once): what is usually meant by "tasks stolen".
    pub tasks_ran_elsewhere: u64,
    /// Steal attempts.
    pub steal_attempts: u64,
    /// Successful steals.
    pub steals_ok: u64,
    /// Steals that found the victim empty.
    pub steals_empty: u64,
    /// Steals that found the victim locked.
    pub steals_locked: u64,
    /// Task bytes moved by steals.
    pub bytes_stolen: u64,
    /// Result chunks sent.
    pub chunks_sent: u64,
    /// Result chunks received.
    pub chunks_received: u64,
    /// Result bytes sent.
    pub bytes_results: u64,
    /// Result records forwarded on behalf of other ranks.
    pub records_forwarded: u64,
    /// The nominal work of the step, seconds: what the caller stated with
    /// `titus_nominal_work` before `titus_run` (its calibrated, sequential cost of the
    /// tasks it handed over); 0 if it stated none.
    pub nominal_s: f64,
    /// Efficiency against the nominal work: nominal_s / (session_s × workers), 0 without
    /// nominal work. Unlike `efficiency`, it cannot rise because balancing slowed the
    /// tasks themselves: the ideal is 1.
    pub nominal_efficiency: f64,
    /// The step's start (the collectives before its tasks run), seconds: from the call of
    /// `titus_run` to this rank's first task (`titus_job_stats`: the slowest rank's).
    /// Counted in `session_s`.
    pub start_s: f64,
    /// Bytes the start sent, received and read (`titus_job_stats`: the most of any rank).
    pub start_bytes: u64,
    /// Messages the start sent and records it read (`titus_job_stats`: the most).
    pub start_messages: u64,
    /// Rounds on the start's longest chain (`titus_job_stats`: the most).
    pub start_rounds: u64,
}

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
    pending: Vec<(u16, Vec<u8>)>,
    /// Keys of the pending tasks (titus_task_keys), or None: each task's index.
    keys: Option<Vec<u64>>,
    /// Priorities and cost hints of the pending tasks (titus_task_hints), or None: 0.
    hints: Option<(Vec<i16>, Vec<u64>)>,
    results: Vec<Vec<u8>>,
    /// Measured cost of each result's task, ns.
    costs: Vec<u64>,
    stats: titus_stats,
    /// Nominal work stated for the next titus_run, seconds.
    nominal: f64,
    /// Why a titus_run failed (every rank's step failed with it): the handle is only
    /// good for titus_finalize and reading since.
    failed: Option<c_int>,
    /// The option `dispatch`: where ready tasks go among the workers and the resources.
    dispatch: titus_runtime::Dispatch,
}

/// Why a call failed; each maps to one code.
#[derive(Debug)]
enum Error {
    NotInitialized,
    AlreadyInitialized,
    Invalid(String),
    TooSmall(String),
    NoTasks,
    Task(String),
    Epoch(String),
    Fabric(String),
    Exchange(String),
    Internal(String),
}

impl Error {
    fn code(&self) -> c_int {
        match self {
            Self::NotInitialized => TITUS_ERR_NOT_INITIALIZED,
            Self::AlreadyInitialized => TITUS_ERR_ALREADY_INITIALIZED,
            Self::Invalid(_) => TITUS_ERR_INVALID,
            Self::TooSmall(_) => TITUS_ERR_BUFFER_TOO_SMALL,
            Self::NoTasks => TITUS_ERR_NO_TASKS,
            Self::Task(_) => TITUS_ERR_TASK,
            Self::Epoch(_) => TITUS_ERR_EPOCH,
            Self::Fabric(_) => TITUS_ERR_FABRIC,
            Self::Exchange(_) => TITUS_ERR_EXCHANGE,
            Self::Internal(_) => TITUS_ERR_INTERNAL,
        }
    }

    fn message(&self) -> String {
        match self {
            Self::NotInitialized => {
                "the handle is not initialised (NULL, or already finalised): call titus_init first"
                    .into()
            }
            Self::AlreadyInitialized => {
                "the handle is already initialised: finalise it, or pass a NULL handle".into()
            }
            Self::NoTasks => "no rank handed over any task: nothing ran".into(),
            Self::Invalid(m)
            | Self::TooSmall(m)
            | Self::Task(m)
            | Self::Epoch(m)
            | Self::Fabric(m)
            | Self::Exchange(m)
            | Self::Internal(m) => m.clone(),
        }
    }
}

impl From<RuntimeError> for Error {
    fn from(e: RuntimeError) -> Self {
        let msg = e.to_string();
        match e {
            // A task failed here or on the rank whose abort ended the epoch.
            RuntimeError::Core(e) if e.is_task_failure() => Self::Task(msg),
            RuntimeError::Core(_) | RuntimeError::EpochTimeout(..) => Self::Epoch(msg),
            // The address exchange (rendezvous or the application's all-gather) failed.
            RuntimeError::Fabric(titus_fabric::FabricError::Bootstrap(_)) => Self::Exchange(msg),
            RuntimeError::Fabric(_) => Self::Fabric(msg),
            RuntimeError::Config(_) => Self::Invalid(msg),
            RuntimeError::Barrier(_) => Self::Exchange(msg),
        }
    }
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last_error(msg: &str) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|l| *l.borrow_mut() = c);
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into())
}

/// Runs the body of an exported function: its error becomes a code and the thread's last
/// error; a panic becomes `TITUS_ERR_INTERNAL` instead of crossing the ABI.
fn call(name: &str, f: impl FnOnce() -> Result<(), Error>) -> c_int {
    let e = match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => return TITUS_OK,
        Ok(Err(e)) => e,
        Err(p) => Error::Internal(format!(
            "internal error (a bug in Titus): {}",
            panic_message(&*p)
        )),
    };
    set_last_error(&format!("{name}: {}", e.message()));
    e.code()
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
    let env = std::env::var("TITUS_OPTIONS").ok();
    let o = Options::parse(text, env.as_deref()).map_err(Error::Invalid)?;
    let env = std::env::var("TITUS_LOG").ok();
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
/// cost_aware, shortcuts, shortcut_draw, dispatch, resource_types, log), overridden by `TITUS_OPTIONS`. `workers` defaults to
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
        let env = JobEnv::from_env().map_err(|e| Error::Fabric(e.to_string()))?;
        let cfg = o.config(env.size).map_err(Error::Invalid)?;
        let backend = o.backend(env.size);
        let env = if env.size > 1 {
            let k = SESSIONS.fetch_add(1, Ordering::Relaxed);
            env.session(k).map_err(|e| Error::Fabric(e.to_string()))?
        } else {
            env
        };
        let rt = Runtime::from_job(cfg, backend, env)?;
        install(slot, rt, o.dispatch);
        Ok(())
    })
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
        let cfg = o.config(size).map_err(Error::Invalid)?;
        let rt = match o.backend(size) {
            Backend::Mem if size == 1 => Runtime::local(1, cfg, MemOptions::default())?.remove(0),
            Backend::Mem => {
                return Err(Error::Invalid(
                    "backend=mem runs a single rank; this job has several".into(),
                ));
            }
            backend => {
                let ex = Callback {
                    rank,
                    size,
                    f,
                    ctx: UserPtr(ctx),
                };
                Runtime::from_exchange(cfg, backend, Box::new(ex))?
            }
        };
        install(slot, rt, o.dispatch);
        Ok(())
    })
}

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
            let kind = task_kind(kind)?;
            let f = task.ok_or_else(|| {
                Error::Invalid(format!("the function of task kind {kind} is NULL"))
            })?;
            let (cap, ctx) = (inner.rt.config().core.max_result as usize, UserPtr(ctx));
            inner
                .rt
                .register_fallible(kind, move |payload| run_task(f, ctx, kind, cap, payload));
            Ok(())
        })
    })
}

/// Adds a resource beside this rank's CPU workers (an accelerator's queue, issue #16): it
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

fn task_kind(kind: c_int) -> Result<u16, Error> {
    u16::try_from(kind).map_err(|_| Error::Invalid(format!("task kind {kind} is not in 0..=65535")))
}

/// Runs one task through the user's function, on a worker thread.
fn run_task(
    f: unsafe extern "C" fn(
        *const c_void,
        usize,
        *mut c_void,
        usize,
        *mut usize,
        *mut c_void,
    ) -> c_int,
    ctx: UserPtr,
    kind: u16,
    cap: usize,
    payload: &[u8],
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
        // casts them to its record type); reused by every task of this worker thread.
        let n_in = payload.len().div_ceil(16).max(1);
        if input.len() < n_in {
            input.resize(n_in, 0);
        }
        for (w, c) in input.iter_mut().zip(payload.chunks(16)) {
            let mut b = [0u8; 16];
            b[..c.len()].copy_from_slice(c);
            *w = u128::from_ne_bytes(b);
        }
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
        // `input` holds `payload.len()` readable bytes and `result` `cap` writable bytes,
        // both 16-byte aligned and alive for the call; `len` is a valid out-pointer; `ctx`
        // is the user's, handed back unchanged (the header's contract covers it).
        // SAFETY: the pointers and lengths just described are valid for the call.
        let rc = unsafe {
            f(
                input.as_ptr().cast(),
                payload.len(),
                result.as_mut_ptr().cast(),
                cap,
                &mut len,
                ctx.0,
            )
        };
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
        Ok(result_bytes(result, len))
    })
}

/// The first `len` bytes of a 16-byte aligned result buffer (`len` ≤ its size), word by
/// word: byte by byte through an iterator cost ~4% of µs-cells' time.
pub(crate) fn result_bytes(result: &[u128], len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len.next_multiple_of(16));
    for w in &result[..len.div_ceil(16)] {
        out.extend_from_slice(&w.to_ne_bytes());
    }
    out.truncate(len);
    out
}

/// A worker thread's task buffers (`run_task`).
#[derive(Default)]
struct Scratch {
    input: Vec<u128>,
    result: Vec<u128>,
    /// Words of `result` a task may have written since it was last cleared.
    dirty: usize,
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::default());
}

fn add_tasks<'a>(
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
    for p in payloads {
        if p.len() > max_payload {
            inner.pending.truncate(start);
            return Err(Error::Invalid(format!(
                "a {}-byte payload is over max_payload={} (an option of titus_init)",
                p.len(),
                max_payload
            )));
        }
        inner.pending.push((kind, p.to_vec()));
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
            let tasks = std::mem::take(&mut inner.pending);
            let keys = inner.keys.take();
            let hints = inner.hints.take();
            inner.results.clear();
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
            let keyed: Vec<TaskIn> = tasks
                .into_iter()
                .enumerate()
                .map(|(i, (kind, payload))| TaskIn {
                    key: keys.as_ref().map_or(i as u64, |k| k[i]),
                    kind,
                    payload,
                    priority: hints.as_ref().map_or(0, |h| h.0[i]),
                    cost_hint_ns: hints.as_ref().map_or(0, |h| h.1[i]),
                })
                .collect();
            let out = match inner.rt.run_epoch_if_any_keyed(keyed) {
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
            Ok(())
        })
    })
}

/// A failed step as the caller sees it. After a task failure (which every rank learns),
/// every rank joins one all-gather and reports the message of the rank where the task
/// failed (`cause.rs`); any other failure is this rank's own.
fn step_error(rt: &Runtime, e: RuntimeError) -> Error {
    let RuntimeError::Core(core) = &e else {
        return e.into();
    };
    if !core.is_task_failure() {
        return e.into();
    }
    let (origin, mine) = match core {
        CoreError::Aborted { rank, .. } => (*rank, None),
        own => (rt.rank(), Some(own.to_string())),
    };
    match rt.all_gather(&cause::encode(mine.as_deref())) {
        Ok(all) => {
            if mine.is_none()
                && let Some(m) = all.get(origin as usize).and_then(|r| cause::decode(r))
            {
                return Error::Task(m);
            }
        }
        Err(g) => tracing::debug!("the cause of the failed step was not gathered: {g}"),
    }
    e.into()
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
/// its tasks, and work cheaper to finish than to move stays. Hints do not change results.
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

/// Copies the measured cost of each of this rank's tasks of the last titus_run, in
/// nanoseconds and task order (measured where the task ran, which may be another rank),
/// into `ns` (room for `count` values). TITUS_ERR_BUFFER_TOO_SMALL, copying nothing, when
/// `count` is below titus_result_count.
#[unsafe(no_mangle)]
pub extern "C" fn titus_costs(t: *mut titus_t, ns: *mut u64, count: usize) -> c_int {
    call("titus_costs", || {
        with(t, |inner| {
            let n = inner.costs.len();
            if count < n {
                return Err(Error::TooSmall(format!(
                    "{n} costs; the buffer holds {count}"
                )));
            }
            if n == 0 {
                return Ok(());
            }
            if ns.is_null() {
                return Err(Error::Invalid("the costs buffer is NULL".into()));
            }
            // SAFETY: the caller guarantees `count` writable values at `ns` (header), and
            // n ≤ count; Titus's buffer never overlaps the caller's.
            unsafe { std::ptr::copy_nonoverlapping(inner.costs.as_ptr(), ns, n) };
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

fn stats_of(s: &EpochStats, nominal_s: f64) -> titus_stats {
    let c = &s.core;
    let session_s = s.session.as_secs_f64();
    let busy_s = s.busy.as_secs_f64();
    titus_stats {
        session_s,
        busy_s,
        idle_s: s.idle.as_secs_f64(),
        steal_s: s.steal.as_secs_f64(),
        efficiency: efficiency(busy_s, session_s, s.workers as u64),
        workers: s.workers as u64,
        tasks_owned: c.tasks_owned,
        tasks_run: c.tasks_run,
        tasks_run_for_others: c.tasks_run_for_others,
        tasks_stolen: c.tasks_stolen,
        // A result that ran here took 0 hops home; one that ran elsewhere at least 1.
        tasks_ran_elsewhere: c.result_hops.iter().skip(1).sum(),
        steal_attempts: c.steal_attempts,
        steals_ok: c.steals_ok,
        steals_empty: c.steals_empty,
        steals_locked: c.steals_locked,
        bytes_stolen: c.bytes_stolen,
        chunks_sent: c.chunks_sent,
        chunks_received: c.chunks_received,
        bytes_results: c.bytes_results,
        records_forwarded: c.records_forwarded,
        nominal_s,
        nominal_efficiency: efficiency(nominal_s, session_s, s.workers as u64),
        start_s: s.start.as_secs_f64(),
        start_bytes: s.start_figures.bytes,
        start_messages: s.start_figures.messages,
        start_rounds: s.start_figures.rounds,
    }
}

/// `work / (session × workers)`, 0 when either is 0.
fn efficiency(busy_s: f64, session_s: f64, workers: u64) -> f64 {
    if session_s > 0.0 && workers > 0 {
        busy_s / (session_s * workers as f64)
    } else {
        0.0
    }
}

/// The number of this rank's results of the last titus_run, in `*count`.
#[unsafe(no_mangle)]
pub extern "C" fn titus_result_count(t: *mut titus_t, count: *mut usize) -> c_int {
    call("titus_result_count", || {
        with(t, |inner| {
            *out(count, "count")? = inner.results.len();
            Ok(())
        })
    })
}

/// Copies result `index` (task order) into `buf` (`capacity` bytes) and its size into
/// `*len`. When `capacity` is too small, nothing is copied, `*len` is the size needed and
/// the call returns TITUS_ERR_BUFFER_TOO_SMALL (`buf` may be NULL to ask for the size).
#[unsafe(no_mangle)]
pub extern "C" fn titus_result(
    t: *mut titus_t,
    index: usize,
    buf: *mut c_void,
    capacity: usize,
    len: *mut usize,
) -> c_int {
    call("titus_result", || {
        with(t, |inner| {
            let len = out(len, "len")?;
            let n = inner.results.len();
            let r = inner
                .results
                .get(index)
                .ok_or_else(|| Error::Invalid(format!("result {index} of {n}: no such result")))?;
            *len = r.len();
            if capacity < r.len() {
                return Err(Error::TooSmall(format!(
                    "result {index} has {} bytes; the buffer holds {capacity}",
                    r.len()
                )));
            }
            copy_out(buf, r, "the buffer")
        })
    })
}

fn copy_out(buf: *mut c_void, data: &[u8], what: &str) -> Result<(), Error> {
    if data.is_empty() {
        return Ok(());
    }
    if buf.is_null() {
        return Err(Error::Invalid(format!("{what} is NULL")));
    }
    // SAFETY: the caller guarantees `capacity` writable bytes at `buf` (header), checked
    // above to hold `data`; Titus's buffers never overlap the caller's.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), buf.cast::<u8>(), data.len()) };
    Ok(())
}

/// Copies every result into `out`, result i at byte `i * record_size` (zero-padded to
/// `record_size`). TITUS_ERR_BUFFER_TOO_SMALL, copying nothing, when `count` is below the
/// number of results or a result is longer than `record_size`.
#[unsafe(no_mangle)]
pub extern "C" fn titus_results_fixed(
    t: *mut titus_t,
    out_records: *mut c_void,
    record_size: usize,
    count: usize,
) -> c_int {
    call("titus_results_fixed", || {
        with(t, |inner| {
            let n = inner.results.len();
            if count < n {
                return Err(Error::TooSmall(format!(
                    "{n} results; the buffer holds {count} records"
                )));
            }
            if let Some((i, r)) = inner
                .results
                .iter()
                .enumerate()
                .find(|(_, r)| r.len() > record_size)
            {
                return Err(Error::TooSmall(format!(
                    "result {i} has {} bytes; records hold {record_size}",
                    r.len()
                )));
            }
            if n == 0 {
                return Ok(());
            }
            if out_records.is_null() {
                return Err(Error::Invalid("the records buffer is NULL".into()));
            }
            // SAFETY: the caller guarantees `count * record_size` writable bytes at
            // `out_records` (header); n ≤ count, and n results of ≤ record_size bytes exist,
            // so n * record_size fits in memory.
            let out = unsafe {
                std::slice::from_raw_parts_mut(out_records.cast::<u8>(), n * record_size)
            };
            for (r, rec) in inner.results.iter().zip(out.chunks_exact_mut(record_size)) {
                rec[..r.len()].copy_from_slice(r);
                rec[r.len()..].fill(0);
            }
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

/// This rank's figures of the last titus_run.
#[unsafe(no_mangle)]
pub extern "C" fn titus_stats_get(t: *mut titus_t, stats: *mut titus_stats) -> c_int {
    call("titus_stats_get", || {
        with(t, |inner| {
            *out(stats, "stats")? = inner.stats;
            Ok(())
        })
    })
}

/// The job's figures of the last titus_run (collective): counts and busy/idle/steal/nominal
/// times summed over ranks, session_s the slowest rank's, efficiency
/// Σbusy / (session_s × Σworkers), nominal_efficiency Σnominal_s / (session_s × Σworkers).
#[unsafe(no_mangle)]
pub extern "C" fn titus_job_stats(t: *mut titus_t, stats: *mut titus_stats) -> c_int {
    call("titus_job_stats", || {
        with(t, |inner| {
            let dst = out(stats, "stats")?;
            let s = inner.stats;
            let mine = titus_fabric::versioned::encode(JOB_STATS, &fields(&s));
            let all = inner.rt.all_gather(&mine).map_err(Error::from)?;
            let mut job = titus_stats::default();
            let n = fields(&job).len();
            let mut sum = vec![0f64; n];
            for (r, blob) in all.iter().enumerate() {
                let theirs: Vec<f64> = titus_fabric::versioned::decode(JOB_STATS, blob)
                    .ok()
                    .filter(|v: &Vec<f64>| v.len() == n)
                    .ok_or_else(|| {
                        Error::Exchange(format!(
                            "rank {r} sent {} bytes that are not {n} figures (another collective, or another version of libtitus?)",
                            blob.len()
                        ))
                    })?;
                for (i, v) in theirs.into_iter().enumerate() {
                    // The session and the start's figures: the slowest, the most.
                    sum[i] = if i == 0 || i >= START_FIELDS {
                        sum[i].max(v)
                    } else {
                        sum[i] + v
                    };
                }
            }
            set_fields(&mut job, &sum);
            job.efficiency = efficiency(job.busy_s, job.session_s, job.workers);
            job.nominal_efficiency = efficiency(job.nominal_s, job.session_s, job.workers);
            *dst = job;
            Ok(())
        })
    })
}

/// The tag of `titus_job_stats`'s all-gather: format and version.
const JOB_STATS: &[u8] = b"TJST2";
/// Where the start's figures begin in [`fields`] (each the job's most, not its sum).
const START_FIELDS: usize = 20;

/// The figures as numbers (counts are far below 2^53), session first.
fn fields(s: &titus_stats) -> Vec<f64> {
    vec![
        s.session_s,
        s.busy_s,
        s.idle_s,
        s.steal_s,
        s.workers as f64,
        s.tasks_owned as f64,
        s.tasks_run as f64,
        s.tasks_run_for_others as f64,
        s.tasks_stolen as f64,
        s.tasks_ran_elsewhere as f64,
        s.steal_attempts as f64,
        s.steals_ok as f64,
        s.steals_empty as f64,
        s.steals_locked as f64,
        s.bytes_stolen as f64,
        s.chunks_sent as f64,
        s.chunks_received as f64,
        s.bytes_results as f64,
        s.records_forwarded as f64,
        s.nominal_s,
        s.start_s,
        s.start_bytes as f64,
        s.start_messages as f64,
        s.start_rounds as f64,
    ]
}

fn set_fields(s: &mut titus_stats, v: &[f64]) {
    let n = |i: usize| v[i] as u64;
    *s = titus_stats {
        session_s: v[0],
        busy_s: v[1],
        idle_s: v[2],
        steal_s: v[3],
        efficiency: 0.0,
        workers: n(4),
        tasks_owned: n(5),
        tasks_run: n(6),
        tasks_run_for_others: n(7),
        tasks_stolen: n(8),
        tasks_ran_elsewhere: n(9),
        steal_attempts: n(10),
        steals_ok: n(11),
        steals_empty: n(12),
        steals_locked: n(13),
        bytes_stolen: n(14),
        chunks_sent: n(15),
        chunks_received: n(16),
        bytes_results: n(17),
        records_forwarded: n(18),
        nominal_s: v[19],
        nominal_efficiency: 0.0,
        start_s: v[20],
        start_bytes: n(21),
        start_messages: n(22),
        start_rounds: n(23),
    };
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

/// The name of an error code, for messages.
fn error_name(code: c_int) -> &'static str {
    match code {
        TITUS_ERR_INVALID => "TITUS_ERR_INVALID",
        TITUS_ERR_TASK => "TITUS_ERR_TASK",
        TITUS_ERR_EPOCH => "TITUS_ERR_EPOCH",
        TITUS_ERR_FABRIC => "TITUS_ERR_FABRIC",
        TITUS_ERR_EXCHANGE => "TITUS_ERR_EXCHANGE",
        TITUS_ERR_INTERNAL => "TITUS_ERR_INTERNAL",
        _ => "an error",
    }
}

/// A static description of an error code.
#[unsafe(no_mangle)]
pub extern "C" fn titus_strerror(code: c_int) -> *const c_char {
    let s: &'static CStr = match code {
        TITUS_OK => c"success",
        TITUS_ERR_NOT_INITIALIZED => c"the handle is not initialised",
        TITUS_ERR_ALREADY_INITIALIZED => c"the handle is already initialised",
        TITUS_ERR_INVALID => c"invalid argument",
        TITUS_ERR_BUFFER_TOO_SMALL => c"buffer too small",
        TITUS_ERR_NO_TASKS => c"no tasks on any rank",
        TITUS_ERR_TASK => c"a task failed",
        TITUS_ERR_EPOCH => c"the time step failed (remote operation, dead peer or timeout)",
        TITUS_ERR_FABRIC => c"the fabric or the launcher's environment could not be set up",
        TITUS_ERR_EXCHANGE => c"the address exchange or a barrier failed",
        TITUS_ERR_INTERNAL => c"internal error (a bug in Titus)",
        _ => c"unknown error code",
    };
    s.as_ptr()
}

/// The message of the last failed call on this thread ("" if none); valid until the next
/// failing call on this thread.
#[unsafe(no_mangle)]
pub extern "C" fn titus_last_error() -> *const c_char {
    LAST_ERROR.with(|l| l.borrow().as_ptr())
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
