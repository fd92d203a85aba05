//! Error codes, the last error's message per thread, and the wrapper that turns every
//! call's outcome (a panic included) into a code.

use super::*;

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

/// Why a call failed; each maps to one code.
#[derive(Debug)]
pub(crate) enum Error {
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
    pub(crate) fn code(&self) -> c_int {
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

    pub(crate) fn message(&self) -> String {
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

pub(crate) fn set_last_error(msg: &str) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|l| *l.borrow_mut() = c);
}

pub(crate) fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into())
}

/// Runs the body of an exported function: its error becomes a code and the thread's last
/// error; a panic becomes `TITUS_ERR_INTERNAL` instead of crossing the ABI.
pub(crate) fn call(name: &str, f: impl FnOnce() -> Result<(), Error>) -> c_int {
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

/// A failed step as the caller sees it. After a task failure (which every rank learns),
/// every rank joins one all-gather and reports the message of the rank where the task
/// failed (`cause.rs`); any other failure is this rank's own.
pub(crate) fn step_error(rt: &Runtime, e: RuntimeError) -> Error {
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

/// The name of an error code, for messages.
pub(crate) fn error_name(code: c_int) -> &'static str {
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
