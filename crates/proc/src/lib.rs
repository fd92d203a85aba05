//! The operating-system leaf of Titus: what a launcher needs from the kernel that safe
//! Rust cannot say, and the CPU's cycle counter ([`Cycles`]). Its `unsafe` blocks are the
//! `pre_exec` hook below (the code that runs in a forked child before `exec`), the
//! installation of a signal handler that only records which termination signal arrived,
//! and the counter's reading; every other crate stays `forbid(unsafe_code)`.

mod cycles;

pub use cycles::Cycles;

use rustix::process::{Pid, Signal, getpid, getppid, set_parent_process_death_signal};
use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicI32, Ordering};

/// Makes the child that `cmd` spawns receive `signal` when the thread that spawned it
/// exits — whatever ends the launcher: a SIGKILL, a SIGTERM, a panic (Linux's
/// `PR_SET_PDEATHSIG`). Spawn from a thread that lives as long as the children (the main
/// thread): the kernel ties the signal to the spawning thread, not the process.
///
/// Steps, in the child between fork and exec:
/// 1. ask for `signal` on the parent's death;
/// 2. if the parent already died between the fork and step 1 (the child was re-parented,
///    so the signal will never come), fail the spawn instead of running orphaned.
pub fn die_with_parent(cmd: &mut Command, signal: Signal) {
    let parent: Pid = getpid();
    let hook = move || {
        set_parent_process_death_signal(Some(signal))?;
        if getppid() != Some(parent) {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        Ok(())
    };
    // SAFETY: the hook runs in the forked child before exec, where only async-signal-safe work is allowed: two system calls (prctl, getppid) through rustix, no allocation, no lock; its error is built from an ErrorKind (no allocation).
    unsafe { cmd.pre_exec(hook) };
}

/// The termination signal that arrived last (0: none yet).
static TERMINATION: AtomicI32 = AtomicI32::new(0);

/// The handler: records the signal, nothing else (one lock-free atomic store is
/// async-signal-safe).
extern "C" fn record(signal: libc::c_int) {
    TERMINATION.store(signal, Ordering::Relaxed);
}

/// Catches SIGTERM, SIGINT and SIGHUP in this process instead of dying of them, so that
/// a launcher can pass them on to its children (and their children) and clean up: the
/// signal is only recorded, [`termination_signal`] says which came. Children started
/// afterwards get the default dispositions back at `exec`.
pub fn catch_termination() -> io::Result<()> {
    for signal in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        let handler: extern "C" fn(libc::c_int) = record;
        // `action` is a zeroed sigaction (a valid value: empty mask, no flags) whose
        // handler is `record`, an `extern "C"` function that only stores into a static
        // atomic (async-signal-safe) and lives for the whole program; sigemptyset and
        // sigaction get valid pointers to it, and a null pointer for the old action, which
        // sigaction allows.
        // SAFETY: as just described, every pointer is valid and the handler is safe.
        let ret = unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = handler as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut())
        };
        if ret != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The termination signal caught since [`catch_termination`] (the last one, if several).
pub fn termination_signal() -> Option<Signal> {
    match TERMINATION.load(Ordering::Relaxed) {
        0 => None,
        s => Signal::from_named_raw(s),
    }
}

/// Starts the child of `cmd` in a process group of its own (its pid is the group's id),
/// so that a signal to the group reaches whatever it starts in turn (a wrapper script's
/// children), and a terminal's Ctrl-C reaches only the launcher, which forwards it.
pub fn own_process_group(cmd: &mut Command) {
    cmd.process_group(0);
}

/// Sends `signal` to every process of the group `pgid`; false when none is left.
pub fn signal_group(pgid: u32, signal: Signal) -> bool {
    Pid::from_raw(pgid as i32)
        .is_some_and(|p| rustix::process::kill_process_group(p, signal).is_ok())
}

/// Whether the process group `pgid` still has a process (a zombie counts until reaped).
pub fn group_alive(pgid: u32) -> bool {
    Pid::from_raw(pgid as i32).is_some_and(|p| rustix::process::test_kill_process_group(p).is_ok())
}
