//! libtitus from C, C++ and Fortran: `crates/capi/install.sh` installs header, libraries,
//! `.pc` and module under a fresh prefix; gcc, mpicc and gfortran compile the chemistry
//! example, and gcc and g++ a bad-use program, against it through pkg-config; they run as
//! one process (mem), under `titus launch` and under Open MPI's `mpirun --oversubscribe`
//! (tcp;ofi_rxm), and every rank checks its results against a sequential run. A CMake
//! project outside the tree builds the example once more with `find_package(Titus)`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The installed prefix and the compiled programs.
struct Built {
    prefix: PathBuf,
    dir: PathBuf,
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

fn run_ok(cmd: &mut Command, what: &str) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot start {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn tool(name: &str) {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {name}")])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        found,
        "{name} is missing: the C ABI tests need gcc, g++, gfortran, pkg-config, cmake and Open \
         MPI (apt-get install g++ gfortran openmpi-bin libopenmpi-dev pkg-config cmake; \
         .ci/test does)"
    );
}

fn pkg_flags(prefix: &Path, args: &[&str]) -> Vec<String> {
    let out = run_ok(
        Command::new("pkg-config")
            .env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig"))
            .args(args)
            .arg("titus"),
        "pkg-config titus",
    );
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(String::from)
        .collect()
}

fn built() -> &'static Built {
    static BUILT: OnceLock<Built> = OnceLock::new();
    BUILT.get_or_init(|| {
        for t in [
            "gcc",
            "g++",
            "gfortran",
            "mpicc",
            "mpirun",
            "pkg-config",
            "cmake",
        ] {
            tool(t);
        }
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("capi");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let prefix = dir.join("prefix");
        // The tests' own profile: the libraries come out of the build this run made.
        run_ok(
            Command::new(root().join("crates/capi/install.sh"))
                .arg(&prefix)
                .env("TITUS_PROFILE", "test"),
            "install.sh",
        );
        for f in [
            "include/titus.h",
            "include/titus_mpi.h",
            "include/titus.mod",
            "lib/libtitus.so",
            "lib/libtitus.a",
            "lib/pkgconfig/titus.pc",
            "lib/cmake/Titus/TitusConfig.cmake",
            "lib/cmake/Titus/TitusConfigVersion.cmake",
        ] {
            assert!(prefix.join(f).exists(), "install.sh did not install {f}");
        }
        let flags = pkg_flags(&prefix, &["--cflags", "--libs"]);
        let chem = root().join("examples/chemistry");
        // In the scratch directory: gfortran writes the example's module (cells.mod) there.
        let compile = |cc: &str, src: PathBuf, out: &str, extra: &[&str]| {
            run_ok(
                Command::new(cc)
                    .current_dir(&dir)
                    .args(["-O2", "-Wall", "-Werror", "-o"])
                    .arg(dir.join(out))
                    .args(extra)
                    .arg(src)
                    .args(&flags)
                    .arg("-lm"),
                &format!("{cc} {out}"),
            );
        };
        compile("gcc", chem.join("chemistry.c"), "chemistry", &[]);
        compile(
            "mpicc",
            chem.join("chemistry.c"),
            "chemistry-mpi",
            &["-DTITUS_WITH_MPI"],
        );
        compile(
            "gfortran",
            chem.join("chemistry.f90"),
            "chemistry-f",
            &["-Wno-unused-dummy-argument"],
        );
        compile(
            "gcc",
            root().join("bench/c/task_overhead.c"),
            "task-overhead",
            &[],
        );
        compile("gcc", root().join("tests/capi/bad_use.c"), "bad-use", &[]);
        compile("gcc", root().join("tests/capi/resource.c"), "resource", &[]);
        compile("gcc", root().join("tests/capi/spawn.c"), "spawn", &[]);
        compile(
            "gfortran",
            root().join("tests/capi/spawn.f90"),
            "spawn-f",
            &["-Wno-unused-dummy-argument"],
        );
        // The header from C++ (extern "C", no C-only constructs).
        run_ok(
            Command::new("g++")
                .args(["-x", "c++", "-Wall", "-Werror", "-o"])
                .arg(dir.join("bad-use-cpp"))
                .arg(root().join("tests/capi/bad_use.c"))
                .args(&flags),
            "g++ bad-use-cpp",
        );
        // The static library: libtitus.a and what it needs (pkg-config --static).
        run_ok(
            Command::new("gcc")
                .arg("-o")
                .arg(dir.join("bad-use-static"))
                .arg(root().join("tests/capi/bad_use.c"))
                .arg(format!("-I{}", prefix.join("include").display()))
                .arg(prefix.join("lib/libtitus.a"))
                .args(
                    pkg_flags(&prefix, &["--static", "--libs-only-l"])
                        .into_iter()
                        .filter(|f| f != "-ltitus" && f != "-ltitusf"),
                ),
            "gcc bad-use-static",
        );
        Built { prefix, dir }
    })
}

/// Small chemistry runs: 16 × 8 cells, 3 steps.
const C_ARGS: [&str; 6] = ["--nx", "16", "--ny", "8", "--steps", "3"];
const F_ARGS: [&str; 3] = ["16", "8", "3"];

fn titus_launch(ranks: u32, program: &Path) -> Command {
    titus_tests::launch("tcp;ofi_rxm", ranks, program)
}

fn mpirun(ranks: u32) -> Command {
    let mut c = Command::new("mpirun");
    c.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .args(["--oversubscribe", "-n", &ranks.to_string()])
        .args(["-x", "TITUS_PROVIDER=tcp;ofi_rxm"]);
    c
}

/// Every rank said its results equal the sequential run.
fn assert_all_ranks_match(out: &Output, ranks: u32, what: &str) {
    let text = titus_tests::output_text(out);
    for r in 0..ranks {
        assert!(
            text.contains(&format!("rank {r}: results equal the sequential run")),
            "{what}: rank {r} did not confirm its results:\n{text}"
        );
    }
    assert!(!text.contains("DIFFER"), "{what}:\n{text}");
}

#[test]
fn c_example_one_process_on_mem() {
    let b = built();
    let out = run_ok(
        Command::new(b.dir.join("chemistry"))
            .args(C_ARGS)
            .env_remove("TITUS_OPTIONS"),
        "chemistry, one process",
    );
    assert_all_ranks_match(&out, 1, "chemistry, one process");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("1 ranks")
            && text.contains("speed-up")
            && text.contains("nominal_efficiency"),
        "{text}"
    );
    for bad in ["0", "x", "1001"] {
        let out = Command::new(b.dir.join("chemistry"))
            .args(["--repeat", bad])
            .output()
            .unwrap();
        let text = titus_tests::output_text(&out);
        assert!(
            out.status.code() == Some(2) && text.contains("--repeat"),
            "--repeat {bad}: {text}"
        );
    }
    // The GPU resource (gpu.cu) needs nvcc: a build without it says so.
    for flag in ["--gpu", "--gpu-below"] {
        let out = Command::new(b.dir.join("chemistry"))
            .args([flag, "64"])
            .output()
            .unwrap();
        let text = titus_tests::output_text(&out);
        assert!(
            out.status.code() == Some(2) && text.contains(flag) && text.contains("no GPU"),
            "{flag}: {text}"
        );
    }
}

/// The per-task benchmark runs its steps, checks every result, and prints its figures,
/// alone and on two ranks; bad flags are refused.
#[test]
fn task_overhead_benchmark_runs_and_checks_its_results() {
    let b = built();
    let one = run_ok(
        Command::new(b.dir.join("task-overhead"))
            .args(["--tasks", "3000", "--steps", "3", "--options", "workers=1"])
            .env_remove("TITUS_OPTIONS"),
        "task-overhead, one process",
    );
    let two = run_ok(
        titus_launch(2, &b.dir.join("task-overhead")).args(["--tasks", "3000", "--steps", "3"]),
        "task-overhead, two processes",
    );
    for (out, ranks) in [(one, 1), (two, 2)] {
        let text = String::from_utf8_lossy(&out.stdout);
        let lines: Vec<serde_json::Value> = text
            .lines()
            .filter_map(|l| l.find('{').map(|at| &l[at..]))
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect();
        assert_eq!(lines.len(), ranks, "a line per rank: {text}");
        for v in lines {
            assert_eq!(v["tasks"], 3000, "{v}");
            assert_eq!(v["ranks"], ranks, "{v}");
            for key in ["ns_per_task", "ns_per_task_min", "run_ns", "sequential_ns"] {
                let x = v[key].as_f64().unwrap_or(-1.0);
                assert!(x > 0.0 && x.is_finite(), "{key} in {v}");
            }
            // The start lies within the run; the time inside tasks is summed over workers.
            let start = v["start_ns"].as_f64().unwrap_or(-1.0);
            assert!(
                start > 0.0 && start <= v["run_ns"].as_f64().unwrap_or(0.0),
                "{v}"
            );
            let inside = v["in_tasks_ns"].as_f64().unwrap_or(-1.0);
            assert!(inside > 0.0 && inside.is_finite(), "in_tasks_ns in {v}");
        }
    }
    for bad in [["--tasks", "0"], ["--steps", "x"], ["--nope", "1"]] {
        let out = Command::new(b.dir.join("task-overhead"))
            .args(bad)
            .output()
            .unwrap();
        let text = titus_tests::output_text(&out);
        assert!(
            out.status.code() == Some(2) && text.contains("task_overhead: error"),
            "{bad:?}: {text}"
        );
    }
}

/// The JSON line of a chemistry run, with the figures every report carries.
fn chemistry_json(out: &Output, what: &str) -> serde_json::Value {
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .map(|l| l.trim_start_matches(|c| c != '{'))
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("{what}: no JSON line in:\n{text}"));
    let v: serde_json::Value =
        serde_json::from_str(line).unwrap_or_else(|e| panic!("{what}: {e}: {line}"));
    for key in [
        "efficiency_none",
        "efficiency_titus",
        "nominal_efficiency_none",
        "nominal_efficiency",
        "speedup",
        "seq_s",
    ] {
        let x = v[key].as_f64().unwrap_or(-1.0);
        assert!(x > 0.0 && x.is_finite(), "{what}: {key} in {line}");
    }
    v
}

#[test]
fn c_example_three_processes_through_titus_launch() {
    if !titus_tests::libfabric_or_skip() {
        return;
    }
    let b = built();
    // Default options: each rank's workers are its share of this machine's cores (bound
    // to a slice each where the 3 ranks fit the cores: every core; unbound, a third of
    // them but at least one). Two repeats: a runtime is started and finalized three times
    // per repeat.
    let out = run_ok(
        titus_launch(3, &b.dir.join("chemistry"))
            .args(C_ARGS)
            .args(["--repeat", "2", "--json"])
            .env_remove("TITUS_OPTIONS"),
        "chemistry, titus launch -n 3",
    );
    assert_all_ranks_match(&out, 3, "chemistry, titus launch -n 3");
    let v = chemistry_json(&out, "chemistry, titus launch -n 3");
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    assert_eq!(v["workers"], cores.max(3), "{v}");
    // The figures are the medians of the repeats (of two: their mean).
    assert_eq!(v["repeat"], 2, "{v}");
    let runs = |key: &str| -> Vec<f64> {
        let a = v[key].as_array().unwrap_or_else(|| panic!("{key} in {v}"));
        a.iter().map(|x| x.as_f64().unwrap()).collect()
    };
    let (nominal, speedup) = (runs("nominal_efficiency_runs"), runs("speedup_runs"));
    assert_eq!((nominal.len(), speedup.len()), (2, 2), "{v}");
    let mean = |x: &[f64]| (x[0] + x[1]) / 2.0;
    let near = |key: &str, want: f64| {
        let got = v[key].as_f64().unwrap();
        assert!(
            (got - want).abs() < 1e-3,
            "{key} {got}, expected {want}: {v}"
        );
    };
    near("nominal_efficiency", mean(&nominal));
    near("speedup", mean(&speedup));
    near("nominal_efficiency_min", nominal[0].min(nominal[1]));
    near("nominal_efficiency_max", nominal[0].max(nominal[1]));
}

#[test]
fn c_example_under_mpirun_exchanges_over_mpi() {
    if !titus_tests::libfabric_or_skip() {
        return;
    }
    let b = built();
    let out = run_ok(
        mpirun(2)
            .arg(b.dir.join("chemistry-mpi"))
            .args(C_ARGS)
            .args(["--options", "workers=1", "--json"]),
        "chemistry-mpi, mpirun -n 2",
    );
    assert_all_ranks_match(&out, 2, "chemistry-mpi, mpirun -n 2");
    let v = chemistry_json(&out, "chemistry-mpi, mpirun -n 2");
    assert_eq!((&v["ranks"], &v["workers"]), (&2.into(), &2.into()), "{v}");
}

#[test]
fn fortran_example_one_process_launch_and_mpirun() {
    let b = built();
    let exe = b.dir.join("chemistry-f");
    let out = run_ok(Command::new(&exe).args(F_ARGS), "chemistry-f, one process");
    assert_all_ranks_match(&out, 1, "chemistry-f, one process");
    if !titus_tests::libfabric_or_skip() {
        return;
    }
    // The flags of the C example: repeats alternate the runs, each figure a median.
    let out = run_ok(
        titus_launch(2, &exe)
            .args(["--nx", "16", "--ny", "8", "--steps", "3"])
            .args([
                "--repeat",
                "2",
                "--ref-passes",
                "2",
                "--options",
                "workers=1",
                "--json",
            ]),
        "chemistry-f, titus launch -n 2",
    );
    assert_all_ranks_match(&out, 2, "chemistry-f, titus launch -n 2");
    let v = chemistry_json(&out, "chemistry-f, titus launch -n 2");
    assert_eq!(
        (&v["ranks"], &v["workers"], &v["repeat"]),
        (&2.into(), &2.into(), &2.into()),
        "{v}"
    );
    assert_eq!(
        v["nominal_efficiency_runs"].as_array().map(Vec::len),
        Some(2),
        "{v}"
    );
    assert!(v["seq_s"].as_f64().is_some_and(|s| s > 0.0), "{v}");
    for bad in [
        &["--repeat", "0"][..],
        &["--nx", "8x"],
        &["--bogus"],
        &["1", "2", "3", "4"],
    ] {
        let out = Command::new(&exe)
            .args(bad)
            .output()
            .expect("run chemistry-f");
        assert_eq!(out.status.code(), Some(2), "chemistry-f {bad:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("usage: chemistry-f") && err.trim().lines().count() == 1,
            "chemistry-f {bad:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Under mpirun with an explicit TITUS_BOOTSTRAP: Titus's own rendezvous (the job
    // secret comes from Open MPI's job id), not mpirun's PMIx server.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = run_ok(
        mpirun(2)
            .args(["-x", &format!("TITUS_BOOTSTRAP=127.0.0.1:{port}")])
            .arg(&exe)
            .args(F_ARGS),
        "chemistry-f, mpirun -n 2",
    );
    assert_all_ranks_match(&out, 2, "chemistry-f, mpirun -n 2");
}

/// The C example built without MPI (no titus_mpi.h) and the Fortran example under
/// mpirun with no Titus bootstrap variable: titus_init bootstraps through mpirun's PMIx
/// server, 3 ranks each, and every rank matches the sequential run.
#[test]
fn c_and_fortran_examples_under_mpirun_bootstrap_through_pmix() {
    if !titus_tests::libfabric_or_skip() || !titus_tests::pmix_or_skip() {
        return;
    }
    let b = built();
    for (exe, args) in [("chemistry", &C_ARGS[..]), ("chemistry-f", &F_ARGS[..])] {
        let what = format!("{exe}, mpirun -n 3 through PMIx");
        let out = run_ok(
            titus_tests::mpirun(3)
                .args(["-x", "TITUS_PROVIDER=tcp;ofi_rxm"])
                .arg(b.dir.join(exe))
                .args(args)
                .arg("--json"),
            &what,
        );
        assert_all_ranks_match(&out, 3, &what);
        let v = chemistry_json(&out, &what);
        assert_eq!(v["ranks"], 3, "{what}: {v}");
    }
}

/// A solver's CMake project, outside the tree, finds the installed Titus with
/// `find_package(Titus 0.1 REQUIRED COMPONENTS Fortran)` and builds the C example against
/// `Titus::titus` and `Titus::titus_static`, the Fortran one against `Titus::fortran`;
/// all run and match.
#[test]
fn cmake_project_links_titus_with_find_package() {
    let b = built();
    let project = b.dir.join("cmake-project");
    let build = b.dir.join("cmake-build");
    let _ = std::fs::remove_dir_all(&project);
    let _ = std::fs::remove_dir_all(&build);
    std::fs::create_dir_all(&project).unwrap();
    std::fs::copy(
        root().join("tests/capi/find_package/CMakeLists.txt"),
        project.join("CMakeLists.txt"),
    )
    .unwrap();
    run_ok(
        Command::new("cmake")
            .arg("-S")
            .arg(&project)
            .arg("-B")
            .arg(&build)
            .arg(format!("-DCMAKE_PREFIX_PATH={}", b.prefix.display()))
            .arg(format!(
                "-DCHEMISTRY_DIR={}",
                root().join("examples/chemistry").display()
            ))
            .arg("-DCMAKE_BUILD_TYPE=Release"),
        "cmake configure",
    );
    run_ok(
        Command::new("cmake").arg("--build").arg(&build),
        "cmake --build",
    );
    let out = run_ok(
        Command::new(build.join("chemistry"))
            .args(C_ARGS)
            .env_remove("TITUS_OPTIONS"),
        "chemistry (CMake), one process",
    );
    assert_all_ranks_match(&out, 1, "chemistry (CMake), one process");
    // Titus::titus_static: no libtitus.so in the program.
    let ldd = run_ok(
        Command::new("ldd").arg(build.join("chemistry-static")),
        "ldd chemistry-static",
    );
    assert!(
        !String::from_utf8_lossy(&ldd.stdout).contains("libtitus.so"),
        "chemistry-static links libtitus.so"
    );
    // Nor libfabric: the library loads it when a libfabric provider is first used.
    assert!(
        !String::from_utf8_lossy(&ldd.stdout).contains("libfabric"),
        "chemistry-static links libfabric"
    );
    let out = run_ok(
        Command::new(build.join("chemistry-static"))
            .args(C_ARGS)
            .env_remove("TITUS_OPTIONS"),
        "chemistry-static (CMake), one process",
    );
    assert_all_ranks_match(&out, 1, "chemistry-static (CMake), one process");
    let out = run_ok(
        Command::new(build.join("chemistry-f")).args(F_ARGS),
        "chemistry-f (CMake), one process",
    );
    assert_all_ranks_match(&out, 1, "chemistry-f (CMake), one process");
    // A version this install cannot meet is refused, naming the version.
    std::fs::write(
        project.join("CMakeLists.txt"),
        "cmake_minimum_required(VERSION 3.16)\nproject(p LANGUAGES C)\nfind_package(Titus 9.0 REQUIRED)\n",
    )
    .unwrap();
    let out = Command::new("cmake")
        .arg("-S")
        .arg(&project)
        .arg("-B")
        .arg(b.dir.join("cmake-build-9"))
        .arg(format!("-DCMAKE_PREFIX_PATH={}", b.prefix.display()))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("9.0"), "{err}");
}

#[test]
fn bad_use_gets_error_codes_from_c() {
    let b = built();
    // A failing task prints nothing (no panic message, no backtrace); nor does anything
    // else of the library without TITUS_LOG.
    for exe in ["bad-use", "bad-use-static", "bad-use-cpp"] {
        let out = run_ok(
            Command::new(b.dir.join(exe))
                .env("RUST_BACKTRACE", "1")
                .env_remove("TITUS_LOG"),
            exe,
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains("rank 0 of 1: bad use handled"),
            "{exe}: {text}"
        );
        assert_eq!(String::from_utf8_lossy(&out.stderr), "", "{exe}");
    }
    if !titus_tests::libfabric_or_skip() {
        return;
    }
    let out = run_ok(
        titus_launch(2, &b.dir.join("bad-use"))
            .env("RUST_BACKTRACE", "1")
            .env_remove("TITUS_LOG"),
        "bad-use, titus launch -n 2",
    );
    let text = String::from_utf8_lossy(&out.stdout);
    for r in 0..2 {
        assert!(
            text.contains(&format!("rank {r} of 2: bad use handled")),
            "{text}"
        );
    }
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "",
        "titus launch -n 2"
    );
    // Asked for, the library logs: the fabric provider line (rank 0, info).
    let out = run_ok(
        titus_launch(2, &b.dir.join("bad-use")).env("TITUS_LOG", "info"),
        "bad-use, titus launch -n 2, TITUS_LOG=info",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("fabric provider tcp;ofi_rxm (2 ranks)"),
        "{err}"
    );
    let _ = &b.prefix;
}

/// A resource from C (`titus_add_resource`: a device queue's launch and test callbacks,
/// finishing out of order): one process, then two over `tcp;ofi_rxm`, every result right
/// and some run on the device.
#[test]
fn a_resource_driven_from_c_callbacks() {
    let b = built();
    let out = run_ok(
        Command::new(b.dir.join("resource")).env_remove("TITUS_OPTIONS"),
        "resource, one process",
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("rank 0 of 1: resource results right"),
        "{text}"
    );
    let on_device: u64 = text
        .split(", ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(on_device > 0, "nothing ran on the device: {text}");
    if !titus_tests::libfabric_or_skip() {
        return;
    }
    let out = run_ok(
        titus_launch(2, &b.dir.join("resource")).env_remove("TITUS_OPTIONS"),
        "resource, titus launch -n 2",
    );
    let text = titus_tests::output_text(&out);
    for r in 0..2 {
        assert!(
            text.contains(&format!("rank {r} of 2: resource results right")),
            "{text}"
        );
    }
}

#[test]
fn tasks_spawned_from_c_and_fortran_reduce_to_the_trees_counted_apart_or_come_home() {
    let b = built();
    let out = run_ok(
        Command::new(b.dir.join("spawn")).env_remove("TITUS_OPTIONS"),
        "spawn, one process",
    );
    let text = titus_tests::output_text(&out);
    assert!(text.contains("rank 0 of 1: spawned trees right"), "{text}");
    let out = run_ok(
        Command::new(b.dir.join("spawn"))
            .arg("home")
            .env_remove("TITUS_OPTIONS"),
        "spawn home, one process",
    );
    let text = titus_tests::output_text(&out);
    assert!(
        text.contains("rank 0 of 1: spawned results home right"),
        "{text}"
    );
    let out = run_ok(
        Command::new(b.dir.join("spawn-f")).env_remove("TITUS_OPTIONS"),
        "spawn-f, one process",
    );
    let text = titus_tests::output_text(&out);
    assert!(
        text.contains("rank 0 of 1: fortran spawned trees right"),
        "{text}"
    );
    if !titus_tests::libfabric_or_skip() {
        return;
    }
    let out = run_ok(
        titus_launch(2, &b.dir.join("spawn-f")).env_remove("TITUS_OPTIONS"),
        "spawn-f, titus launch -n 2",
    );
    let text = titus_tests::output_text(&out);
    for r in 0..2 {
        assert!(
            text.contains(&format!("rank {r} of 2: fortran spawned trees right")),
            "{text}"
        );
    }
    for ranks in [2, 3] {
        let out = run_ok(
            titus_launch(ranks, &b.dir.join("spawn")).env_remove("TITUS_OPTIONS"),
            &format!("spawn, titus launch -n {ranks}"),
        );
        let text = titus_tests::output_text(&out);
        for r in 0..ranks {
            assert!(
                text.contains(&format!("rank {r} of {ranks}: spawned trees right")),
                "{text}"
            );
        }
        let out = run_ok(
            titus_launch(ranks, &b.dir.join("spawn"))
                .arg("home")
                .env_remove("TITUS_OPTIONS"),
            &format!("spawn home, titus launch -n {ranks}"),
        );
        let text = titus_tests::output_text(&out);
        for r in 0..ranks {
            assert!(
                text.contains(&format!("rank {r} of {ranks}: spawned results home right")),
                "{text}"
            );
        }
        let out = run_ok(
            titus_launch(ranks, &b.dir.join("spawn"))
                .arg("custom")
                .env_remove("TITUS_OPTIONS"),
            &format!("spawn custom, titus launch -n {ranks}"),
        );
        let text = titus_tests::output_text(&out);
        for r in 0..ranks {
            assert!(
                text.contains(&format!(
                    "rank {r} of {ranks}: spawned trees right (custom combine)"
                )),
                "{text}"
            );
        }
    }
}
