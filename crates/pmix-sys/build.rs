//! Finds libpmix (the PMIx client library) with pkg-config, else in Debian's `pmix2`
//! directory, and compiles the C shim against its headers. Without libpmix the crate still
//! builds: `AVAILABLE` is false and the bootstrap says how to install it when a PMIx
//! server started the process.
//!
//! # When this script runs again
//!
//! As `titus-ofi-sys`'s build script (see its notes), for `pmix.pc`: the shim's sources,
//! the variables it reads (`TITUS_NO_PMIX` and pkg-config's), every directory pkg-config
//! searches (or its nearest existing ancestor of two components or more), Debian's
//! `pmix2` directory, and the directory of `pmix.h` once found.

use std::path::PathBuf;

#[path = "../build-support/pkgconfig.rs"]
mod pkgconfig;
use pkgconfig::*;

/// Where Debian's libpmix-dev installs PMIx (its `pmix.pc` points there too).
fn debian_dir() -> PathBuf {
    PathBuf::from(format!("/usr/lib/{}-linux-gnu/pmix2", target_arch()))
}

fn main() {
    println!("cargo::rustc-check-cfg=cfg(titus_pmix)");
    println!("cargo::rerun-if-changed=csrc/tpmix.c");
    println!("cargo::rerun-if-changed=csrc/tpmix.h");
    println!("cargo::rerun-if-env-changed=TITUS_NO_PMIX");
    if opted_out("TITUS_NO_PMIX") {
        return;
    }
    watch_install_dirs(&[debian_dir()]);
    let found = match pkg_config::Config::new()
        .atleast_version("2.0")
        .probe("pmix")
    {
        Ok(lib) => Ok(lib.include_paths),
        Err(e) => {
            // No pmix.pc: Debian's directory, linked by hand.
            let dir = debian_dir();
            if dir.join("include/pmix.h").is_file() && dir.join("lib").is_dir() {
                println!(
                    "cargo::rustc-link-search=native={}",
                    dir.join("lib").display()
                );
                println!("cargo::rustc-link-lib=pmix");
                Ok(vec![dir.join("include"), dir.join("include/pmix")])
            } else {
                Err(e)
            }
        }
    };
    match found {
        Ok(include_paths) => {
            if let Some(dir) = find_header(&include_paths, "pmix.h")
                .and_then(|h| h.parent().and_then(watch_target))
            {
                println!("cargo::rerun-if-changed={}", dir.display());
            }
            cc::Build::new()
                .file("csrc/tpmix.c")
                .includes(&include_paths)
                .flag_if_supported("-Wall")
                .flag_if_supported("-Wextra")
                .flag_if_supported("-Wno-unused-parameter")
                .compile("tpmix");
            println!("cargo::rustc-cfg=titus_pmix");
        }
        Err(e) => println!(
            "cargo::warning=libpmix (>= 2) not found by pkg-config ({e}) nor in {}; bootstrapping \
             through PMIx (mpirun, srun --mpi=pmix) is disabled. Install it (Debian: apt-get \
             install libpmix-dev pkg-config) and rebuild.",
            debian_dir().display()
        ),
    }
}
