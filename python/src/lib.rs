//! The native part of the `titus` Python package: one rank's runtime, opened from
//! libtitus's options and launchers (`titus_capi::embed`), whose tasks call back into
//! Python.
//!
//! The Python side (`titus/__init__.py`) pickles the function and the items, each as a
//! frame of parts whose numpy buffers are out of band: here the parts are copied once,
//! into the task's payload. A map is one epoch: task kind 0 hands its payload to
//! `titus._run_task` on a worker thread, the only place that takes the GIL, as a
//! bytearray that the item's arrays then view (writable, as unpickled arrays are). The
//! caller's thread lets the GIL go for the whole epoch, so the progress thread and steals
//! never wait for Python.

mod buffer;

use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict};
use std::sync::OnceLock;
use titus_runtime::{Runtime, TaskIn};

pyo3::create_exception!(
    _titus,
    Error,
    PyException,
    "The base class of every Titus exception: bad options, a fabric or a peer that failed, a map that failed."
);
pyo3::create_exception!(
    _titus,
    TaskError,
    Error,
    "A task raised, here or on another rank: the map failed on every rank."
);

/// `titus._run_task`, looked up at the first task.
static RUN_TASK: OnceLock<Py<PyAny>> = OnceLock::new();

/// Runs one task's payload through `titus._run_task` (on a worker thread, under the
/// GIL). It answers `(True, the result's frame)` or `(False, why)`: a task that raised
/// gives its exception's type, message and traceback as the epoch's failure.
fn run_task(payload: &[u8]) -> Result<Vec<u8>, String> {
    let answer = Python::attach(|py| -> PyResult<(bool, Vec<u8>)> {
        let f = match RUN_TASK.get() {
            Some(f) => f.bind(py).clone(),
            None => {
                let f = py.import("titus")?.getattr("_run_task")?;
                let _ = RUN_TASK.set(f.clone().unbind());
                f
            }
        };
        let out = f.call1((PyByteArray::new(py, payload),))?;
        let (ok, data): (bool, Bound<'_, PyAny>) = out.extract()?;
        Ok((ok, buffer::joined(&data)?))
    });
    match answer {
        Ok((true, data)) => Ok(data),
        Ok((false, why)) => Err(String::from_utf8_lossy(&why).into_owned()),
        Err(e) => Err(format!("titus._run_task itself failed: {e}")),
    }
}

/// How often a map looks for a signal (Ctrl-C) while its epoch runs.
const SIGNAL_POLL: std::time::Duration = std::time::Duration::from_millis(50);

/// Runs one epoch (without the GIL) on a helper thread while this thread, Python's, looks
/// for signals: a handler that raises (KeyboardInterrupt for Ctrl-C) fails the epoch on
/// every rank (`Runtime::abort`), and its exception is returned beside the epoch's error.
fn run_interruptibly(
    rt: &Runtime,
    tasks: Vec<TaskIn>,
) -> (
    Result<titus_runtime::EpochOutput, titus_runtime::RuntimeError>,
    Option<PyErr>,
) {
    std::thread::scope(|s| {
        let (done, outcome) = std::sync::mpsc::channel();
        s.spawn(move || {
            let _ = done.send(rt.run_epoch_keyed(tasks));
        });
        let mut interrupted = None;
        loop {
            match outcome.recv_timeout(SIGNAL_POLL) {
                Ok(out) => return (out, interrupted),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    // (The epoch's thread panicked: the scope re-raises it.)
                    return (
                        Err(titus_runtime::RuntimeError::Config(
                            "the epoch's thread panicked".into(),
                        )),
                        interrupted,
                    );
                }
            }
            if interrupted.is_none()
                && let Err(e) = Python::attach(|py| py.check_signals())
            {
                rt.abort("interrupted by a signal on this rank (the map stopped on every rank)");
                interrupted = Some(e);
            }
        }
    })
}

/// The largest blob a rank's all-gather may return per rank (addresses and keys are a few
/// hundred bytes): what comes back through Python is checked like any remote data.
const GATHER_MAX: usize = 1 << 20;

/// A job's address exchange through the caller's all-gather (`comm.allgather` of an
/// mpi4py communicator): `titus.Runtime(comm=...)`.
struct PyExchange {
    rank: u32,
    size: u32,
    allgather: Py<PyAny>,
}

impl std::fmt::Debug for PyExchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the all-gather of rank {} of {}", self.rank, self.size)
    }
}

impl titus_fabric::bootstrap::Exchange for PyExchange {
    fn rank(&self) -> u32 {
        self.rank
    }

    fn size(&self) -> u32 {
        self.size
    }

    fn all_gather(
        &mut self,
        blob: &[u8],
    ) -> Result<Vec<Vec<u8>>, titus_fabric::bootstrap::BootstrapError> {
        use titus_fabric::bootstrap::BootstrapError;
        let size = self.size as usize;
        let gathered = Python::attach(|py| -> PyResult<Vec<Vec<u8>>> {
            let all = self.allgather.bind(py).call1((PyBytes::new(py, blob),))?;
            let mut out = Vec::with_capacity(size);
            for item in all.try_iter()? {
                out.push(item?.cast_into::<PyBytes>()?.as_bytes().to_vec());
            }
            Ok(out)
        })
        .map_err(|e| BootstrapError::Failed(format!("the communicator's allgather failed: {e}")))?;
        if gathered.len() != size {
            return Err(BootstrapError::Protocol(format!(
                "the communicator's allgather gave {} blobs for {size} ranks",
                gathered.len()
            )));
        }
        if let Some((r, b)) = gathered
            .iter()
            .enumerate()
            .find(|(_, b)| b.len() > GATHER_MAX)
        {
            return Err(BootstrapError::Protocol(format!(
                "rank {r}'s blob has {} bytes (at most {GATHER_MAX})",
                b.len()
            )));
        }
        Ok(gathered)
    }
}

/// One rank's runtime (`titus.Runtime` wraps it).
#[pyclass(name = "Runtime", module = "titus._titus")]
struct PyRuntime {
    /// None once closed.
    rt: Option<Runtime>,
    /// The last map's figures.
    stats: titus_capi::titus_stats,
}

impl PyRuntime {
    fn rt(&self) -> PyResult<&Runtime> {
        self.rt
            .as_ref()
            .ok_or_else(|| Error::new_err("the runtime is closed"))
    }
}

#[pymethods]
impl PyRuntime {
    /// Opens this rank's runtime from libtitus's `options` text (`key=value` pairs),
    /// under whatever launcher started the process (or a single rank without one), or,
    /// with `exchange` = (rank, size, allgather), over that all-gather (an MPI
    /// communicator's). Collective.
    #[new]
    #[pyo3(signature = (options, exchange=None))]
    fn new(
        py: Python<'_>,
        options: &str,
        exchange: Option<(u32, u32, Py<PyAny>)>,
    ) -> PyResult<Self> {
        let rt = match exchange {
            None => py.detach(|| titus_capi::embed::open(options)),
            Some((rank, size, allgather)) => {
                if size == 0 || rank >= size {
                    return Err(Error::new_err(format!(
                        "rank {rank} of {size} ranks: need 0 <= rank < size"
                    )));
                }
                let ex = Box::new(PyExchange {
                    rank,
                    size,
                    allgather,
                });
                py.detach(|| titus_capi::embed::open_exchange(options, ex))
            }
        }
        .map_err(Error::new_err)?;
        rt.register_fallible(0, run_task);
        Ok(Self {
            rt: Some(rt),
            stats: titus_capi::titus_stats::default(),
        })
    }

    /// This rank.
    #[getter]
    fn rank(&self) -> PyResult<u32> {
        Ok(self.rt()?.rank())
    }

    /// Ranks in the job.
    #[getter]
    fn size(&self) -> PyResult<u32> {
        Ok(self.rt()?.size())
    }

    /// One epoch of `payloads` (this rank's tasks, framed by `titus.Runtime.map`: bytes,
    /// or `(total bytes, parts)`), with optional keys, cost hints (seconds) and priorities;
    /// `nominal_s` is the caller's sequential time of its tasks, for
    /// `nominal_efficiency`. Returns the results' frames in task order, as bytearrays.
    /// Collective; the GIL is released meanwhile.
    #[pyo3(signature = (payloads, keys=None, costs=None, priorities=None, nominal_s=0.0))]
    fn run<'py>(
        &mut self,
        py: Python<'py>,
        payloads: Vec<Bound<'py, PyAny>>,
        keys: Option<Vec<u64>>,
        costs: Option<Vec<f64>>,
        priorities: Option<Vec<i16>>,
        nominal_s: f64,
    ) -> PyResult<Vec<Bound<'py, PyByteArray>>> {
        let n = payloads.len();
        for (what, len) in [
            ("keys", keys.as_ref().map(Vec::len)),
            ("costs", costs.as_ref().map(Vec::len)),
            ("priorities", priorities.as_ref().map(Vec::len)),
        ] {
            if let Some(len) = len.filter(|&l| l != n) {
                return Err(Error::new_err(format!("{len} {what} for {n} items")));
            }
        }
        if let Some((i, c)) = costs
            .iter()
            .flatten()
            .enumerate()
            .find(|(_, c)| !c.is_finite() || **c < 0.0)
        {
            return Err(Error::new_err(format!(
                "costs[{i}] is {c}: a cost hint is a time in seconds, at least 0"
            )));
        }
        let mut tasks = Vec::with_capacity(n);
        for (i, p) in payloads.iter().enumerate() {
            tasks.push(TaskIn {
                key: keys.as_ref().map_or(i as u64, |k| k[i]),
                kind: 0,
                payload: buffer::joined(p)?,
                priority: priorities.as_ref().map_or(0, |p| p[i]),
                cost_hint_ns: costs.as_ref().map_or(0, |c| (c[i] * 1e9) as u64),
            });
        }
        let rt = self.rt()?;
        let (out, interrupted) = py.detach(|| run_interruptibly(rt, tasks));
        if let Some(e) = interrupted {
            // (The epoch failed on every rank: the others raise titus.Error, this one
            // what interrupted it, KeyboardInterrupt for Ctrl-C.)
            return Err(e);
        }
        let out = out.map_err(|e| {
            // (Collective, as the failed map is: every rank learns the task's own words.)
            match py.detach(|| titus_capi::embed::step_failure(rt, e)) {
                (true, why) => TaskError::new_err(why),
                (false, why) => Error::new_err(why),
            }
        })?;
        self.stats = titus_capi::embed::stats(&out.stats, nominal_s);
        Ok(out
            .results
            .iter()
            .map(|r| PyByteArray::new(py, r))
            .collect())
    }

    /// Every rank's `blob`, in rank order (collective; the GIL is released meanwhile).
    fn all_gather<'py>(
        &self,
        py: Python<'py>,
        blob: Bound<'py, PyBytes>,
    ) -> PyResult<Vec<Bound<'py, PyBytes>>> {
        let rt = self.rt()?;
        let mine = blob.as_bytes().to_vec();
        let all = py
            .detach(|| rt.all_gather(&mine))
            .map_err(|e| Error::new_err(e.to_string()))?;
        Ok(all.iter().map(|b| PyBytes::new(py, b)).collect())
    }

    /// The last map's figures.
    #[getter]
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = &self.stats;
        let d = PyDict::new(py);
        for (k, v) in [
            ("resolution_s", s.session_s),
            ("busy_s", s.busy_s),
            ("idle_s", s.idle_s),
            ("steal_s", s.steal_s),
            ("efficiency", s.efficiency),
            ("nominal_s", s.nominal_s),
            ("nominal_efficiency", s.nominal_efficiency),
            ("start_s", s.start_s),
        ] {
            d.set_item(k, v)?;
        }
        for (k, v) in [
            ("workers", s.workers),
            ("tasks_owned", s.tasks_owned),
            ("tasks_run", s.tasks_run),
            ("tasks_run_for_others", s.tasks_run_for_others),
            ("tasks_stolen", s.tasks_stolen),
            ("tasks_ran_elsewhere", s.tasks_ran_elsewhere),
            ("steal_attempts", s.steal_attempts),
            ("steals", s.steals_ok),
            ("steals_empty", s.steals_empty),
            ("steals_locked", s.steals_locked),
            ("bytes_stolen", s.bytes_stolen),
            ("chunks_sent", s.chunks_sent),
            ("chunks_received", s.chunks_received),
            ("records_forwarded", s.records_forwarded),
        ] {
            d.set_item(k, v)?;
        }
        Ok(d)
    }

    /// Closes the runtime (collective: every rank leaves together). Idempotent.
    fn close(&mut self, py: Python<'_>) -> PyResult<()> {
        match self.rt.take() {
            Some(rt) => py
                .detach(|| rt.finalize())
                .map_err(|e| Error::new_err(e.to_string())),
            None => Ok(()),
        }
    }
}

#[pymodule]
fn _titus(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyRuntime>()?;
    m.add("Error", m.py().get_type::<Error>())?;
    m.add("TaskError", m.py().get_type::<TaskError>())?;
    Ok(())
}
