//! The per-process progress thread.

use crate::{Fabric, Signal};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// How long one blocking progress call lasts before the thread checks whether to stop:
/// the bound on shutdown latency, not a polling period (the call returns as soon as
/// something arrives).
const PROGRESS_SLICE: Duration = Duration::from_millis(50);

/// A thread that keeps calling [`Fabric::progress`], so that remote operations on this
/// rank's memory complete while the rank's own threads compute. It blocks in the fabric
/// while idle, and hands each signal to `on_signal`.
#[derive(Debug)]
pub struct ProgressThread {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
    error: Arc<Mutex<Option<crate::FabricError>>>,
}

impl ProgressThread {
    /// Starts the thread.
    pub fn spawn<F, S>(fabric: Arc<F>, mut on_signal: S) -> Self
    where
        F: Fabric + ?Sized + 'static,
        S: FnMut(Signal) + Send + 'static,
    {
        let stop = Arc::new(AtomicBool::new(false));
        let error = Arc::new(Mutex::new(None));
        let (stop2, error2) = (stop.clone(), error.clone());
        let handle = std::thread::Builder::new()
            .name(format!("titus-progress-{}", fabric.rank()))
            .spawn(move || {
                let mut signals = Vec::new();
                while !stop2.load(Ordering::Acquire) {
                    if let Err(e) = fabric.progress(PROGRESS_SLICE, &mut signals) {
                        *error2.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                        return;
                    }
                    for s in signals.drain(..) {
                        on_signal(s);
                    }
                }
            })
            .expect("spawn the progress thread");
        Self {
            stop,
            handle: Some(handle),
            error,
        }
    }

    /// The error that stopped the thread, if one did.
    pub fn error(&self) -> Option<crate::FabricError> {
        self.error.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Stops the thread and waits for it (within one progress slice).
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

impl Drop for ProgressThread {
    fn drop(&mut self) {
        self.shutdown();
    }
}
