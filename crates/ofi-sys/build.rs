//! Finds libfabric with pkg-config and compiles the C shim against its headers. Without
//! libfabric the crate still builds: `AVAILABLE` is false and the ofi backend says how to
//! install it.
//!
//! # When this script runs again
//!
//! Cargo re-runs a build script only when a path or a variable it named has changed
//! (`rerun-if-changed` compares modification times; a directory is scanned recursively,
//! the directory itself included). Installing, upgrading or removing libfabric must
//! re-run it, and nothing else should, so it names:
//!
//! 1. the shim's sources, and the variables it reads: `TITUS_NO_OFI`, pkg-config's
//!    (`PKG_CONFIG_PATH`, `PKG_CONFIG_LIBDIR`, `PKG_CONFIG_SYSROOT_DIR`, `PKG_CONFIG`, in
//!    their target-specific forms too; the pkg-config crate names those it reads);
//! 2. every directory pkg-config searches (`PKG_CONFIG_PATH`, then `PKG_CONFIG_LIBDIR` or
//!    pkg-config's default path): adding, replacing or removing `libfabric.pc` (`apt-get
//!    install libfabric-dev`, an upgrade, `make install`) changes the directory, found or
//!    not;
//! 3. for a search directory that does not exist yet (`/usr/local/lib/pkgconfig` before a
//!    first `make install`), its nearest existing ancestor, which changes when it is
//!    created. The path itself cannot be named: cargo treats a missing path as changed
//!    and would re-run the script on every build. An ancestor with fewer than two path
//!    components (`/`, `/usr`, `/opt`) is not named: cargo would scan all of it on every
//!    build;
//! 4. the directory of libfabric's `rdma/fabric.h`, once found: an upgrade replaces the
//!    headers the shim was compiled against (a package manager keeps the files' own,
//!    older, modification times, but replacing a file changes its directory).

#[path = "../build-support/pkgconfig.rs"]
mod pkgconfig;
use pkgconfig::*;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(titus_ofi)");
    println!("cargo::rerun-if-changed=csrc/tofi.c");
    println!("cargo::rerun-if-changed=csrc/tofi.h");
    println!("cargo::rerun-if-env-changed=TITUS_NO_OFI");
    if opted_out("TITUS_NO_OFI") {
        return;
    }
    watch_install_dirs(&[]);
    // Headers only: the shim loads libfabric when first used (csrc/tofi.c), so nothing
    // links it.
    match pkg_config::Config::new()
        .atleast_version("1.9")
        .cargo_metadata(false)
        .probe("libfabric")
    {
        Ok(lib) => {
            if let Some(dir) = find_header(&lib.include_paths, "rdma/fabric.h")
                .and_then(|h| h.parent().and_then(watch_target))
            {
                println!("cargo::rerun-if-changed={}", dir.display());
            }
            let mut build = cc::Build::new();
            // Where this libfabric lives (outside the loader's search path), tried first: a
            // path a C string literal holds as it is.
            if let Some(dir) = lib
                .link_paths
                .iter()
                .filter(|d| d.join("libfabric.so.1").exists())
                .filter_map(|d| d.to_str())
                .find(|d| {
                    d.chars()
                        .all(|c| c.is_ascii_graphic() && c != '"' && c != '\\')
                })
            {
                build.define("TOFI_LIBDIR", format!("\"{dir}\"").as_str());
            }
            // dlopen and dladdr (in libc itself from glibc 2.34; libdl before).
            println!("cargo::rustc-link-lib=dl");
            build
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
