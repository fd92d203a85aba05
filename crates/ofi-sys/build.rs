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

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(titus_ofi)");
    println!("cargo::rerun-if-changed=csrc/tofi.c");
    println!("cargo::rerun-if-changed=csrc/tofi.h");
    println!("cargo::rerun-if-env-changed=TITUS_NO_OFI");
    if std::env::var_os("TITUS_NO_OFI").is_some() {
        return;
    }
    let mut watched: Vec<PathBuf> = search_dirs()
        .iter()
        .filter_map(|d| watch_target(d))
        .collect();
    watched.sort();
    watched.dedup();
    for dir in watched {
        println!("cargo::rerun-if-changed={}", dir.display());
    }
    match pkg_config::Config::new()
        .atleast_version("1.9")
        .probe("libfabric")
    {
        Ok(lib) => {
            if let Some(dir) =
                find_header(&lib.include_paths).and_then(|h| h.parent().and_then(watch_target))
            {
                println!("cargo::rerun-if-changed={}", dir.display());
            }
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
/// later install of libfabric with pkg-config lands in one of these).
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

/// libfabric's main header in its include path (pkg-config leaves out the compiler's own
/// directories, where it usually is).
fn find_header(include_paths: &[PathBuf]) -> Option<PathBuf> {
    include_paths
        .iter()
        .map(PathBuf::as_path)
        .chain([Path::new("/usr/local/include"), Path::new("/usr/include")])
        .map(|d| d.join("rdma/fabric.h"))
        .find(|h| h.is_file())
}
