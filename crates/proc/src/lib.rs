//! The operating-system leaf of Titus: what a launcher needs from the kernel that safe
//! Rust cannot say. Its one `unsafe` block is the `pre_exec` hook below (the code that
//! runs in a forked child before `exec`); every other crate stays `forbid(unsafe_code)`.

use rustix::process::{Pid, Signal, getpid, getppid, set_parent_process_death_signal};
use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

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
