//! libfabric is loaded when the ofi backend is first used, not with the program
//! (`crates/ofi-sys/csrc/tofi.c`): a process that never asks for a libfabric provider — the
//! node backend's ranks, `titus sim`, a C client over shared memory — neither maps it nor
//! runs its psm libraries' constructors (~0.2 s of sleeps at start-up with Debian's
//! build). Alone in its own test binary: no other test may load it first.

fn libfabric_mapped() -> bool {
    std::fs::read_to_string("/proc/self/maps")
        .expect("/proc/self/maps")
        .lines()
        .any(|l| l.contains("libfabric.so"))
}

#[test]
fn libfabric_is_loaded_on_first_use_and_its_crash_handlers_go() {
    if !titus_fabric_ofi::available() {
        return; // A build without libfabric never loads it.
    }
    assert!(
        !libfabric_mapped(),
        "libfabric was mapped before anything asked for it"
    );
    assert_eq!(titus_fabric_ofi::foreign_crash_handlers(), 0, "at start");
    titus_fabric_ofi::providers().expect("the provider query loads libfabric");
    assert!(
        libfabric_mapped(),
        "the provider query did not load libfabric"
    );
    // Its psm libraries' constructors installed crash handlers as it loaded: gone.
    assert_eq!(
        titus_fabric_ofi::foreign_crash_handlers(),
        0,
        "after loading libfabric"
    );
}
