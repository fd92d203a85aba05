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

use std::path::{Path, PathBuf};
use std::process::Command;

/// Where Debian's libpmix-dev installs PMIx (its `pmix.pc` points there too).
fn debian_dir() -> PathBuf {
    let arch = std::env::var("TARGET")
        .unwrap_or_default()
        .split('-')
        .next()
        .unwrap_or_default()
        .to_string();
    PathBuf::from(format!("/usr/lib/{arch}-linux-gnu/pmix2"))
}

fn main() {
    println!("cargo::rustc-check-cfg=cfg(titus_pmix)");
    println!("cargo::rerun-if-changed=csrc/tpmix.c");
    println!("cargo::rerun-if-changed=csrc/tpmix.h");
    println!("cargo::rerun-if-env-changed=TITUS_NO_PMIX");
    if std::env::var_os("TITUS_NO_PMIX").is_some() {
        return;
    }
    let mut watched: Vec<PathBuf> = search_dirs()
        .iter()
        .chain([&debian_dir()])
        .filter_map(|d| watch_target(d))
        .collect();
    watched.sort();
    watched.dedup();
    for dir in watched {
        println!("cargo::rerun-if-changed={}", dir.display());
    }
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
            if let Some(dir) =
                find_header(&include_paths).and_then(|h| h.parent().and_then(watch_target))
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

/// A pkg-config variable as the pkg-config crate reads it (`VAR_<target>`,
/// `VAR_<target_with_underscores>`, `HOST_VAR` or `TARGET_VAR`, then `VAR`), each form
/// named for cargo.
fn targeted_var(base: &str) -> Option<String> {
    let target = std::env::var("TARGET").unwrap_or_default();
    let host = std::env::var("HOST").unwrap_or_default();
    let kind = if host == target { "HOST" } else { "TARGET" };
    [
        format!("{base}_{target}"),
        format!("{base}_{}", target.replace('-', "_")),
        format!("{kind}_{base}"),
        base.to_string(),
    ]
    .into_iter()
    .find_map(|name| {
        println!("cargo::rerun-if-env-changed={name}");
        std::env::var(name).ok()
    })
}

/// The directories pkg-config searches for `.pc` files, in its order.
fn search_dirs() -> Vec<PathBuf> {
    let split = |s: &str| -> Vec<PathBuf> {
        s.split(':')
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
            .collect()
    };
    let _ = targeted_var("PKG_CONFIG_SYSROOT_DIR");
    let mut dirs = targeted_var("PKG_CONFIG_PATH").map_or_else(Vec::new, |p| split(&p));
    match targeted_var("PKG_CONFIG_LIBDIR") {
        Some(libdir) => dirs.extend(split(&libdir)),
        None => dirs.extend(default_dirs().iter().flat_map(|p| split(p))),
    }
    dirs
}

/// pkg-config's built-in search path, or the usual one when pkg-config is missing (a
/// later install of libpmix with pkg-config lands in one of these).
fn default_dirs() -> Vec<String> {
    let exe = targeted_var("PKG_CONFIG");
    let candidates = match &exe {
        Some(exe) => vec![exe.as_str()],
        None => vec!["pkg-config", "pkgconf"],
    };
    for exe in candidates {
        let out = Command::new(exe)
            .args(["--variable", "pc_path", "pkg-config"])
            .output();
        if let Ok(out) = out
            && out.status.success()
            && let Ok(path) = String::from_utf8(out.stdout)
            && !path.trim().is_empty()
        {
            return vec![path.trim().to_string()];
        }
    }
    let arch = std::env::var("TARGET")
        .unwrap_or_default()
        .split('-')
        .next()
        .unwrap_or_default()
        .to_string();
    vec![
        format!("/usr/local/lib/{arch}-linux-gnu/pkgconfig"),
        "/usr/local/lib/pkgconfig".into(),
        "/usr/local/share/pkgconfig".into(),
        format!("/usr/lib/{arch}-linux-gnu/pkgconfig"),
        "/usr/lib/pkgconfig".into(),
        "/usr/share/pkgconfig".into(),
    ]
}

/// What to name for `dir`: itself, or its nearest existing ancestor while it does not
/// exist (see the notes at the top: steps 2 and 3).
fn watch_target(dir: &Path) -> Option<PathBuf> {
    let mut at = Some(dir);
    while let Some(d) = at {
        if d.is_dir() {
            let components = d
                .components()
                .filter(|c| matches!(c, std::path::Component::Normal(_)))
                .count();
            return (d == dir || components >= 2).then(|| d.to_path_buf());
        }
        at = d.parent().filter(|p| !p.as_os_str().is_empty());
    }
    None
}

/// libpmix's main header in its include path (pkg-config leaves out the compiler's own
/// directories, where it usually is).
fn find_header(include_paths: &[PathBuf]) -> Option<PathBuf> {
    include_paths
        .iter()
        .map(PathBuf::as_path)
        .chain([Path::new("/usr/local/include"), Path::new("/usr/include")])
        .map(|d| d.join("pmix.h"))
        .find(|h| h.is_file())
}
