// pkg-config discovery shared by the build scripts of the `-sys` crates (ofi-sys,
// pmix-sys), included with `#[path]`: where pkg-config looks, which variables it reads,
// and what a script must watch so that installing or removing the library re-runs it.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The target's architecture (`x86_64` of `x86_64-unknown-linux-gnu`).
pub fn target_arch() -> String {
    std::env::var("TARGET")
        .unwrap_or_default()
        .split('-')
        .next()
        .unwrap_or_default()
        .to_string()
}

/// Names for cargo what must re-run the build script: the directories where an install
/// of the library would land (pkg-config's search path, and `extra`), each by its nearest
/// existing ancestor.
pub fn watch_install_dirs(extra: &[PathBuf]) {
    let mut watched: Vec<PathBuf> = search_dirs()
        .iter()
        .chain(extra)
        .filter_map(|d| watch_target(d))
        .collect();
    watched.sort();
    watched.dedup();
    for dir in watched {
        println!("cargo::rerun-if-changed={}", dir.display());
    }
}

/// A pkg-config variable as the pkg-config crate reads it (`VAR_<target>`,
/// `VAR_<target_with_underscores>`, `HOST_VAR` or `TARGET_VAR`, then `VAR`), each form
/// named for cargo.
pub fn targeted_var(base: &str) -> Option<String> {
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
pub fn search_dirs() -> Vec<PathBuf> {
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
/// later install of the library with pkg-config lands in one of these).
pub fn default_dirs() -> Vec<String> {
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
    let arch = target_arch();
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
pub fn watch_target(dir: &Path) -> Option<PathBuf> {
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

/// The library's main `header` in its include path (pkg-config leaves out the compiler's
/// own directories, where it usually is).
pub fn find_header(include_paths: &[PathBuf], header: &str) -> Option<PathBuf> {
    include_paths
        .iter()
        .map(PathBuf::as_path)
        .chain([Path::new("/usr/local/include"), Path::new("/usr/include")])
        .map(|d| d.join(header))
        .find(|h| h.is_file())
}

/// Whether `var` (`TITUS_NO_OFI`, `TITUS_NO_PMIX`) asks to build without the library: set
/// to 1 (or empty). Any other value stops the build naming it: `=0` used to mean "without"
/// all the same.
pub fn opted_out(var: &str) -> bool {
    match std::env::var_os(var) {
        None => false,
        Some(v) if v.is_empty() || v == "1" => true,
        Some(v) => {
            eprintln!(
                "error: {var}={}: set it to 1 to build without the library, or unset it",
                v.to_string_lossy()
            );
            std::process::exit(1);
        }
    }
}
