//! libfabric is loaded when the ofi backend is first used, not with the program
//! (`crates/ofi-sys/csrc/tofi.c`): a process that never asks for a libfabric provider — the
//! node backend's ranks, `titus sim`, a C client over shared memory — neither maps it nor
//! runs its psm libraries' constructors (~0.2 s of sleeps at start-up with Debian's
//! build); when it is loaded, the crash handlers those constructors replaced are given
//! back. Alone in its own test binary: no other test may load it first.

fn libfabric_mapped() -> bool {
    std::fs::read_to_string("/proc/self/maps")
        .expect("/proc/self/maps")
        .lines()
        .any(|l| l.contains("libfabric.so"))
}

#[test]
fn libfabric_is_loaded_on_first_use_and_the_handlers_from_before_stay() {
    if !titus_fabric_ofi::available() {
        return; // A build without libfabric never loads it.
    }
    assert!(
        !libfabric_mapped(),
        "libfabric was mapped before anything asked for it"
    );
    assert_eq!(titus_fabric_ofi::foreign_crash_handlers(), 0, "at start");
    // The application's own handler, installed before libfabric is loaded.
    let handler = on_term as extern "C" fn(libc::c_int) as libc::sighandler_t;
    // SAFETY: `on_term` is an async-signal-safe extern "C" fn(c_int) (it does nothing), as
    // signal(2) wants; no other thread of this test binary touches SIGTERM's disposition.
    let before = unsafe { libc::signal(libc::SIGTERM, handler) };
    assert_ne!(before, libc::SIG_ERR);
    titus_fabric_ofi::providers().expect("the provider query loads libfabric");
    assert!(
        libfabric_mapped(),
        "the provider query did not load libfabric"
    );
    // Its psm libraries' constructors replaced the crash handlers as it loaded: the ones
    // from before are back, the application's included.
    assert_eq!(
        titus_fabric_ofi::foreign_crash_handlers(),
        0,
        "after loading libfabric"
    );
    // SAFETY: as above; SIG_DFL is a valid disposition, and `signal` returns the old one.
    let now = unsafe { libc::signal(libc::SIGTERM, libc::SIG_DFL) };
    assert_eq!(now, handler, "the application's SIGTERM handler was lost");
}

extern "C" fn on_term(_: libc::c_int) {}
