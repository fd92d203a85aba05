//! Finds libfabric with pkg-config and compiles the C shim against its headers. Without
//! libfabric the crate still builds: `AVAILABLE` is false and the ofi backend says how to
//! install it.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(titus_ofi)");
    println!("cargo::rerun-if-changed=csrc/tofi.c");
    println!("cargo::rerun-if-changed=csrc/tofi.h");
    println!("cargo::rerun-if-env-changed=TITUS_NO_OFI");
    println!("cargo::rerun-if-env-changed=PKG_CONFIG_PATH");
    if std::env::var_os("TITUS_NO_OFI").is_some() {
        return;
    }
    match pkg_config::Config::new()
        .atleast_version("1.9")
        .probe("libfabric")
    {
        Ok(lib) => {
            cc::Build::new()
                .file("csrc/tofi.c")
                .includes(&lib.include_paths)
                .flag_if_supported("-Wall")
                .flag_if_supported("-Wextra")
                .flag_if_supported("-Wno-unused-parameter")
                .compile("tofi");
            println!("cargo::rustc-cfg=titus_ofi");
        }
        Err(e) => println!(
            "cargo::warning=libfabric (>= 1.9) not found by pkg-config ({e}); the ofi backend is \
             disabled. Install it (Debian: apt-get install libfabric-dev pkg-config) and rebuild."
        ),
    }
}
