//! The launcher environment's unit tests.

use super::*;
use std::collections::HashMap;

fn env(vars: &[(&str, &str)]) -> Result<JobEnv, BootstrapError> {
    let m: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    JobEnv::from_vars(|k| m.get(k).cloned())
}

#[test]
fn launchers() {
    let e = env(&[]).unwrap();
    assert_eq!((e.rank, e.size, e.launcher), (0, 1, Launcher::Single));
    let e = env(&[
        ("TITUS_RANK", "2"),
        ("TITUS_SIZE", "4"),
        ("TITUS_BOOTSTRAP", "127.0.0.1:9"),
        ("TITUS_JOB_SECRET", "s"),
    ])
    .unwrap();
    assert_eq!((e.rank, e.size, e.launcher), (2, 4, Launcher::Titus));
    let e = env(&[
        ("SLURM_PROCID", "1"),
        ("SLURM_NTASKS", "8"),
        ("SLURM_JOB_ID", "1234"),
        ("SLURM_STEP_ID", "0"),
        ("SLURM_JOB_NODELIST", "cn[017-020],gpu3"),
    ])
    .unwrap();
    assert_eq!(e.launcher, Launcher::Slurm);
    // Below the ephemeral range: 16384 + ((job mod 512) × 32 + step mod 32).
    assert_eq!(e.via, Via::SlurmDerived);
    assert_eq!(e.rendezvous.as_deref(), Some("cn017:23104"));
    assert_eq!(e.secret, "slurm-1234.0");
    let e = env(&[("OMPI_COMM_WORLD_RANK", "0"), ("OMPI_COMM_WORLD_SIZE", "1")]).unwrap();
    assert_eq!(e.launcher, Launcher::OpenMpi);
    let e = env(&[
        ("PMI_RANK", "0"),
        ("PMI_SIZE", "3"),
        ("TITUS_BOOTSTRAP", "h:1"),
        ("TITUS_JOB_SECRET", "x"),
    ])
    .unwrap();
    assert_eq!(e.launcher, Launcher::Pmi);
}

/// Every launcher is found from either of its variables, and a process that has one is
/// never a single in-process rank: an incomplete pair is an error naming the other.
#[test]
fn every_launcher_is_detected_from_either_variable() {
    assert_eq!(Launcher::detect(|_| None), Launcher::Single);
    assert_eq!(Launcher::Single.vars(), None);
    for LauncherVars {
        launcher,
        rank,
        size,
        ..
    } in LAUNCHERS
    {
        assert_eq!(launcher.vars(), Some((rank, size)));
        for (set, other) in [(rank, size), (size, rank)] {
            let get = |k: &str| (k == set).then(|| "1".to_string());
            assert_eq!(Launcher::detect(get), launcher, "{set} alone");
            let err = env(&[(set, "1")]).unwrap_err().to_string();
            assert!(
                err.contains(&format!("{other} is not")),
                "{set} alone: {err}"
            );
        }
        let e = env(&[(rank, "0"), (size, "1")]).unwrap();
        assert_eq!((e.launcher, e.launched()), (launcher, true), "{rank}");
    }
    assert!(!env(&[]).unwrap().launched());
    // First match wins: titus launch under an allocation that Slurm also describes.
    let get = |k: &str| {
        ["TITUS_SIZE", "SLURM_NTASKS"]
            .contains(&k)
            .then(String::new)
    };
    assert_eq!(Launcher::detect(get), Launcher::Titus);
}

/// mpirun (or Hydra) without a rendezvous address: a clear error, not one rank alone.
#[test]
fn mpi_launchers_without_a_rendezvous_fail_loudly() {
    for (rank, size) in [
        ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
        ("PMI_RANK", "PMI_SIZE"),
    ] {
        let err = env(&[(rank, "1"), (size, "4")]).unwrap_err().to_string();
        assert!(err.contains("TITUS_BOOTSTRAP is not set"), "{err}");
    }
    // Open MPI's job id stands in for the secret.
    let e = env(&[
        ("OMPI_COMM_WORLD_RANK", "1"),
        ("OMPI_COMM_WORLD_SIZE", "4"),
        ("TITUS_BOOTSTRAP", "127.0.0.1:9"),
        ("PMIX_NAMESPACE", "prterun-x-1@1"),
    ])
    .unwrap();
    assert_eq!((e.rank, e.size, e.launched()), (1, 4, true));
    assert_eq!(e.secret, "prterun-x-1@1");
}

#[test]
fn bad_environments_name_the_variable() {
    let err = |vars: &[(&str, &str)]| env(vars).unwrap_err().to_string();
    assert!(err(&[("TITUS_RANK", "x"), ("TITUS_SIZE", "2")]).contains("TITUS_RANK='x'"));
    assert!(err(&[("TITUS_RANK", "1")]).contains("TITUS_SIZE is not"));
    assert!(err(&[("TITUS_RANK", "3"), ("TITUS_SIZE", "2")]).contains("not below"));
    assert!(err(&[("TITUS_RANK", "0"), ("TITUS_SIZE", "0")]).contains("at least one rank"));
    assert!(
        err(&[("TITUS_RANK", "0"), ("TITUS_SIZE", "2")]).contains("TITUS_BOOTSTRAP is not set")
    );
    assert!(
        err(&[
            ("TITUS_RANK", "0"),
            ("TITUS_SIZE", "2"),
            ("TITUS_BOOTSTRAP", "nohostport")
        ])
        .contains("host:port")
    );
    assert!(
        err(&[
            ("TITUS_RANK", "0"),
            ("TITUS_SIZE", "2"),
            ("TITUS_BOOTSTRAP", "h:1")
        ])
        .contains("TITUS_JOB_SECRET")
    );
    assert!(err(&[("TITUS_BOOTSTRAP_TIMEOUT", "-3")]).contains("positive"));
    assert!(err(&[("TITUS_BOOTSTRAP_TIMEOUT", "1e300")]).contains("a week"));
    assert!(err(&[("TITUS_BOOTSTRAP_TIMEOUT", "NaN")]).contains("positive"));
}

/// The job size is bounded where it is read, by every launcher's variable; a step id
/// and a rendezvous address that do not parse are refused, not replaced.
#[test]
fn sizes_steps_and_addresses_are_bounded() {
    let err = |vars: &[(&str, &str)]| env(vars).unwrap_err().to_string();
    for v in &LAUNCHERS {
        let e = err(&[(v.rank, "0"), (v.size, "1073741825")]);
        assert!(
            e.contains(&format!("{}='1073741825'", v.size)) && e.contains("1073741824"),
            "{e}"
        );
    }
    let e = env(&[
        ("TITUS_RANK", "0"),
        ("TITUS_SIZE", "1073741824"),
        ("TITUS_BOOTSTRAP", "h:1"),
        ("TITUS_JOB_SECRET", "s"),
    ])
    .unwrap();
    assert_eq!(e.size, MAX_JOB_SIZE);
    let e = err(&[
        ("SLURM_PROCID", "0"),
        ("SLURM_NTASKS", "2"),
        ("SLURM_JOB_ID", "7"),
        ("SLURM_STEP_ID", "batch"),
        ("SLURM_JOB_NODELIST", "n1"),
    ]);
    assert!(e.contains("SLURM_STEP_ID='batch'"), "{e}");
    for bad in ["h:0", ":4000", "h:", "h:65536"] {
        let e = err(&[
            ("TITUS_RANK", "0"),
            ("TITUS_SIZE", "2"),
            ("TITUS_BOOTSTRAP", bad),
            ("TITUS_JOB_SECRET", "s"),
        ]);
        assert!(
            e.contains(&format!("TITUS_BOOTSTRAP='{bad}'")) && e.contains("1..=65535"),
            "{e}"
        );
    }
    let e = JobEnv::from_vars_full(
        |k| (k == "PMIX_RANK").then(|| "0".to_string()),
        true,
        (32_768, 60_999),
        &|| Ok((0, u32::MAX)),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("4294967295 ranks") && e.contains("1073741824"),
        "{e}"
    );
}

/// The node's ranks alone (`local_size_from_vars`): a job size that does not parse is
/// an error naming it, never an unbounded node.
#[test]
fn local_sizes_alone_check_the_job_size() {
    let get = |vars: &'static [(&'static str, &'static str)]| {
        move |k: &str| vars.iter().find(|v| v.0 == k).map(|v| v.1.to_string())
    };
    let e = local_size_from_vars(get(&[
        ("OMPI_COMM_WORLD_RANK", "0"),
        ("OMPI_COMM_WORLD_SIZE", "many"),
        ("OMPI_COMM_WORLD_LOCAL_SIZE", "4"),
    ]))
    .unwrap_err()
    .to_string();
    assert!(e.contains("OMPI_COMM_WORLD_SIZE='many'"), "{e}");
    let e = local_size_from_vars(get(&[
        ("OMPI_COMM_WORLD_RANK", "0"),
        ("OMPI_COMM_WORLD_SIZE", "2"),
        ("OMPI_COMM_WORLD_LOCAL_SIZE", "4"),
    ]))
    .unwrap_err()
    .to_string();
    assert!(e.contains("job's 2"), "{e}");
    let n = local_size_from_vars(get(&[
        ("OMPI_COMM_WORLD_RANK", "0"),
        ("OMPI_COMM_WORLD_SIZE", "8"),
        ("OMPI_COMM_WORLD_LOCAL_SIZE", "4"),
    ]))
    .unwrap();
    assert_eq!(n, Some(4));
    assert_eq!(local_size_from_vars(get(&[])).unwrap(), Some(1));
}

/// Every `TITUS_*` variable this module reads is in `TITUS_VARS`, which `from_env`
/// checks for values that are not UTF-8.
#[test]
fn titus_vars_lists_every_titus_variable_read() {
    let asked = std::cell::RefCell::new(std::collections::BTreeSet::new());
    let set = [
        ("TITUS_RANK", "0"),
        ("TITUS_SIZE", "2"),
        ("TITUS_LOCAL_RANK", "0"),
        ("TITUS_LOCAL_SIZE", "2"),
        ("TITUS_BOOTSTRAP", "h:1"),
        ("TITUS_BOOTSTRAP_TIMEOUT", "5"),
    ];
    for vars in [
        &set[..],
        &[],
        &[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "2")],
    ] {
        let _ = JobEnv::from_vars_with(
            |k| {
                asked.borrow_mut().insert(k.to_string());
                vars.iter().find(|v| v.0 == k).map(|v| v.1.to_string())
            },
            false,
            (32_768, 60_999),
        );
    }
    let asked = asked.into_inner();
    let titus: Vec<&String> = asked.iter().filter(|k| k.starts_with("TITUS_")).collect();
    assert!(titus.len() >= TITUS_VARS.len(), "{titus:?}");
    for k in titus {
        assert!(
            TITUS_VARS.contains(&k.as_str()),
            "{k} is read but not in TITUS_VARS"
        );
    }
}

/// Each launcher's local rank and local size are read from its row of the table.
#[test]
fn local_ranks_per_launcher() {
    let base = [("TITUS_BOOTSTRAP", "h:1"), ("TITUS_JOB_SECRET", "s")];
    let with = |vars: &[(&str, &str)]| {
        let mut v = base.to_vec();
        v.extend_from_slice(vars);
        env(&v)
    };
    let e = env(&[]).unwrap();
    assert_eq!(
        (e.local_rank, e.local_size, e.ranks_on_node()),
        (Some(0), Some(1), 1)
    );
    for v in LAUNCHERS.iter().filter(|v| v.launcher != Launcher::Slurm) {
        let e = with(&[
            (v.rank, "3"),
            (v.size, "8"),
            (v.local_rank, "1"),
            (v.local_size, "4"),
        ])
        .unwrap();
        assert_eq!(e.launcher, v.launcher);
        assert_eq!(
            (e.local_rank, e.local_size, e.ranks_on_node()),
            (Some(1), Some(4), 4)
        );
        // A launcher that does not say: the rank counts as alone on its node.
        let e = with(&[(v.rank, "3"), (v.size, "8")]).unwrap();
        assert_eq!(
            (e.local_rank, e.local_size, e.ranks_on_node()),
            (None, None, 1)
        );
    }
    // Slurm: the step's per-node list, indexed by the node id.
    let slurm = [
        ("SLURM_PROCID", "6"),
        ("SLURM_NTASKS", "7"),
        ("SLURM_LOCALID", "0"),
    ];
    let s = |vars: &[(&str, &str)]| {
        let mut v = slurm.to_vec();
        v.extend_from_slice(vars);
        with(&v)
    };
    let e = s(&[
        ("SLURM_STEP_TASKS_PER_NODE", "2(x3),1"),
        ("SLURM_TASKS_PER_NODE", "4(x2)"),
        ("SLURM_NODEID", "3"),
    ])
    .unwrap();
    assert_eq!((e.local_rank, e.local_size), (Some(0), Some(1)));
    let e = s(&[("SLURM_TASKS_PER_NODE", "2(x3),1"), ("SLURM_NODEID", "1")]).unwrap();
    assert_eq!(e.local_size, Some(2));
    // Every node the same: no node id needed.
    let e = s(&[("SLURM_TASKS_PER_NODE", "3(x2)")]).unwrap();
    assert_eq!(e.local_size, Some(3));
    let e = s(&[("SLURM_NTASKS_PER_NODE", "5")]).unwrap();
    assert_eq!(e.local_size, Some(5));
    let e = s(&[]).unwrap();
    assert_eq!((e.local_size, e.ranks_on_node()), (None, 1));
}

#[test]
fn bad_local_ranks_name_the_variable() {
    let err = |vars: &[(&str, &str)]| {
        let mut v = vec![
            ("TITUS_RANK", "0"),
            ("TITUS_SIZE", "4"),
            ("TITUS_BOOTSTRAP", "h:1"),
            ("TITUS_JOB_SECRET", "s"),
        ];
        v.extend_from_slice(vars);
        env(&v).unwrap_err().to_string()
    };
    let e = err(&[("TITUS_LOCAL_SIZE", "two")]);
    assert!(e.contains("TITUS_LOCAL_SIZE='two'"), "{e}");
    let e = err(&[("TITUS_LOCAL_RANK", "-1"), ("TITUS_LOCAL_SIZE", "2")]);
    assert!(e.contains("TITUS_LOCAL_RANK='-1'"), "{e}");
    let e = err(&[("TITUS_LOCAL_SIZE", "0")]);
    assert!(e.contains("TITUS_LOCAL_SIZE='0'"), "{e}");
    let e = err(&[("TITUS_LOCAL_SIZE", "5")]);
    assert!(
        e.contains("TITUS_LOCAL_SIZE='5'") && e.contains("job's 4"),
        "{e}"
    );
    let e = err(&[("TITUS_LOCAL_RANK", "2"), ("TITUS_LOCAL_SIZE", "2")]);
    assert!(
        e.contains("TITUS_LOCAL_RANK='2'") && e.contains("not below"),
        "{e}"
    );
    // A rank alone, without a launcher: set by hand, they are still checked.
    let alone = |vars: &[(&str, &str)]| env(vars).unwrap_err().to_string();
    let e = alone(&[("TITUS_LOCAL_SIZE", "abc")]);
    assert!(e.contains("TITUS_LOCAL_SIZE='abc'"), "{e}");
    let e = alone(&[("TITUS_LOCAL_SIZE", "2")]);
    assert!(
        e.contains("TITUS_LOCAL_SIZE='2'") && e.contains("job's 1"),
        "{e}"
    );
    assert!(env(&[("TITUS_LOCAL_SIZE", "1"), ("TITUS_LOCAL_RANK", "0")]).is_ok());
    let slurm = |vars: &[(&str, &str)]| {
        let mut v = vec![
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "4"),
            ("TITUS_BOOTSTRAP", "h:1"),
            ("TITUS_JOB_SECRET", "s"),
        ];
        v.extend_from_slice(vars);
        env(&v).unwrap_err().to_string()
    };
    let e = slurm(&[("SLURM_STEP_TASKS_PER_NODE", "2(3)"), ("SLURM_NODEID", "0")]);
    assert!(e.contains("SLURM_STEP_TASKS_PER_NODE='2(3)'"), "{e}");
    let e = slurm(&[("SLURM_TASKS_PER_NODE", "2,1")]);
    assert!(
        e.contains("SLURM_TASKS_PER_NODE") && e.contains("SLURM_NODEID"),
        "{e}"
    );
    let e = slurm(&[("SLURM_TASKS_PER_NODE", "2,1"), ("SLURM_NODEID", "2")]);
    assert!(e.contains("lists 2 nodes"), "{e}");
    let e = slurm(&[("SLURM_TASKS_PER_NODE", "2,1"), ("SLURM_NODEID", "x")]);
    assert!(e.contains("SLURM_NODEID='x'"), "{e}");
    let e = slurm(&[("SLURM_NTASKS_PER_NODE", "")]);
    assert!(e.contains("SLURM_NTASKS_PER_NODE=''"), "{e}");
}

/// The Slurm fallback's port: two concurrent steps of one job, several runtimes each,
/// never share a port (the runtimes of a process share their rendezvous, told apart
/// by the greeting), nor do job J step 31 and job J+1 step 0 (the old formula,
/// 30000 + (job × 31 + step) mod 20000, gave both 30620 for J = 19); every port is
/// below the ephemeral range, and one inside it is an error naming the way out.
#[test]
fn slurm_ports_never_collide_where_they_used_to() {
    let eph = (32_768, 60_999);
    let step_env = |job: &str, step: &str| {
        env(&[
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "4"),
            ("SLURM_JOB_ID", job),
            ("SLURM_STEP_ID", step),
            ("SLURM_JOB_NODELIST", "cn[1-2]"),
        ])
        .unwrap()
    };
    for job in [0u64, 19, 1234, 99_999, u64::from(u32::MAX)] {
        let j = job.to_string();
        // Two steps of one job, runtimes 0..4 each: one address per step.
        let addrs = |step: &str| -> Vec<(String, u32)> {
            let e = step_env(&j, step);
            assert_eq!(e.via, Via::SlurmDerived);
            (0..4u16)
                .map(|k| {
                    let s = e.session(k).unwrap();
                    (s.rendezvous.unwrap(), s.runtime)
                })
                .collect()
        };
        let (a, b) = (addrs("0"), addrs("1"));
        for (x, y) in a.iter().zip(&b) {
            assert_ne!(x.0, y.0, "job {job}: steps 0 and 1 share {}", x.0);
        }
        assert!(
            a.iter().all(|x| x.0 == a[0].0),
            "one rendezvous per process: {a:?}"
        );
        assert_eq!(a.iter().map(|x| x.1).collect::<Vec<_>>(), [0, 1, 2, 3]);
        // Job J step 31 against job J+1 step 0; every step of a job apart.
        let p = |job: u64, step: u64| slurm_port(job, step, eph).unwrap();
        assert_ne!(p(job, 31), p(job + 1, 0), "job {job}");
        let steps: std::collections::BTreeSet<u16> = (0..SLURM_STEPS).map(|s| p(job, s)).collect();
        assert_eq!(steps.len() as u64, SLURM_STEPS, "job {job}");
        for s in 0..SLURM_STEPS {
            let port = p(job, s);
            assert!((SLURM_PORT_BASE..eph.0).contains(&port), "{port}");
        }
    }
    // Consecutive jobs' steps never meet.
    for job in 0..600u64 {
        for s in 0..SLURM_STEPS {
            assert_ne!(
                slurm_port(job, s, eph).unwrap(),
                slurm_port(job + 1, s, eph).unwrap()
            );
        }
    }
    let err = slurm_port(3, 0, (1024, 65_535)).unwrap_err().to_string();
    assert!(
        err.contains("ephemeral") && err.contains("TITUS_BOOTSTRAP"),
        "{err}"
    );
    // Reserved ports win over the derived one, from the step's first port.
    let e = env(&[
        ("SLURM_PROCID", "0"),
        ("SLURM_NTASKS", "2"),
        ("SLURM_JOB_ID", "7"),
        ("SLURM_STEP_RESV_PORTS", "12000-12003"),
        ("SLURM_STEP_NODELIST", "gpu[3-4]"),
    ])
    .unwrap();
    assert_eq!(
        (e.via, e.rendezvous.as_deref()),
        (Via::SlurmReserved, Some("gpu3:12000"))
    );
    let err = env(&[
        ("SLURM_PROCID", "0"),
        ("SLURM_NTASKS", "2"),
        ("SLURM_JOB_ID", "7"),
        ("SLURM_STEP_RESV_PORTS", "none"),
        ("SLURM_STEP_NODELIST", "gpu3"),
    ])
    .unwrap_err()
    .to_string();
    assert!(err.contains("SLURM_STEP_RESV_PORTS='none'"), "{err}");
}

/// The order of choice: an explicit TITUS_BOOTSTRAP, a single rank, PMIx, Slurm; a
/// PMIx server in a build without the client is an error, never a silent fallback.
#[test]
fn the_bootstrap_is_chosen_in_order() {
    let vars = |v: &[(&str, &str)]| {
        let m: HashMap<String, String> = v
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k: &str| m.get(k).cloned()
    };
    let ompi = [
        ("OMPI_COMM_WORLD_RANK", "1"),
        ("OMPI_COMM_WORLD_SIZE", "4"),
        ("PMIX_NAMESPACE", "prterun-x-1@1"),
        ("PMIX_RANK", "1"),
    ];
    let e = JobEnv::from_vars_with(vars(&ompi), true, (32_768, 60_999)).unwrap();
    assert_eq!((e.via, e.rendezvous.as_deref()), (Via::Pmix, None));
    let mut forced = ompi.to_vec();
    forced.push(("TITUS_BOOTSTRAP", "10.0.0.1:4000"));
    let e = JobEnv::from_vars_with(vars(&forced), true, (32_768, 60_999)).unwrap();
    assert_eq!(e.via, Via::Explicit);
    let err = JobEnv::from_vars_with(vars(&ompi), false, (32_768, 60_999))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("PMIX_NAMESPACE is set")
            && err.contains("libpmix-dev")
            && err.contains("TITUS_BOOTSTRAP"),
        "{err}"
    );
    // srun --mpi=pmix: PMIx before the Slurm fallback; any server variable will do.
    let srun = [
        ("SLURM_PROCID", "0"),
        ("SLURM_NTASKS", "2"),
        ("SLURM_JOB_ID", "7"),
        ("SLURM_JOB_NODELIST", "n1"),
        ("PMIX_SERVER_URI41", "x"),
    ];
    let e = JobEnv::from_vars_with(vars(&srun), true, (32_768, 60_999)).unwrap();
    assert_eq!(e.via, Via::Pmix);
    // One rank under mpirun: nothing to bootstrap.
    let one = [
        ("OMPI_COMM_WORLD_RANK", "0"),
        ("OMPI_COMM_WORLD_SIZE", "1"),
        ("PMIX_RANK", "0"),
    ];
    let e = JobEnv::from_vars_with(vars(&one), true, (32_768, 60_999)).unwrap();
    assert_eq!((e.via, e.launched()), (Via::Alone, true));
}

/// A bare PMIx launcher (no OMPI, Slurm, PMI or Titus variable): rank and size come
/// from the server; without a PMIx client that is an error, not one rank.
#[test]
fn a_bare_pmix_launcher_gives_rank_and_size() {
    let vars = |pairs: &[(&str, &str)]| {
        let m: std::collections::HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k: &str| m.get(k).cloned()
    };
    let bare = [("PMIX_NAMESPACE", "prterun-x-1@1"), ("PMIX_RANK", "2")];
    let e = JobEnv::from_vars_full(vars(&bare), true, (32_768, 60_999), &|| Ok((2, 4))).unwrap();
    assert_eq!(
        (e.rank, e.size, e.via, e.launched()),
        (2, 4, Via::Pmix, true)
    );
    assert_eq!(e.ranks_on_node(), 1, "the node's ranks are unknown");
    let err = JobEnv::from_vars_full(vars(&bare), true, (32_768, 60_999), &|| {
        Err(titus_pmix_sys::Error {
            kind: titus_pmix_sys::ErrorKind::Other,
            status: 0,
            message: "PMIx_Init failed".into(),
        })
    })
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("PMIx_Init failed") && err.contains("PMIX_NAMESPACE"),
        "{err}"
    );
    let err = JobEnv::from_vars_with(vars(&bare), false, (32_768, 60_999))
        .unwrap_err()
        .to_string();
    assert!(err.contains("no PMIx client"), "{err}");
    // The rendezvous forced: PMIx is not asked.
    let mut forced = bare.to_vec();
    forced.push(("TITUS_BOOTSTRAP", "10.0.0.1:4000"));
    let e = JobEnv::from_vars_full(vars(&forced), true, (32_768, 60_999), &|| {
        panic!("PMIx asked")
    })
    .unwrap();
    assert_eq!((e.via, e.size), (Via::Explicit, 1));
}

#[test]
fn slurm_task_lists() {
    assert_eq!(tasks_per_node("2(x3),1").unwrap(), vec![2, 2, 2, 1]);
    assert_eq!(tasks_per_node("4").unwrap(), vec![4]);
    assert_eq!(tasks_per_node("1,3(x2)").unwrap(), vec![1, 3, 3]);
    for bad in ["", "x", "2(x)", "2(x0)", "2x3", "2(x3", "(x2)", "2(x3),"] {
        assert!(tasks_per_node(bad).is_err(), "{bad}");
    }
}

#[test]
fn host_lists() {
    assert_eq!(first_host("node[03-05,9],gpu1").as_deref(), Some("node03"));
    assert_eq!(first_host("a,b").as_deref(), Some("a"));
    assert_eq!(first_host("single").as_deref(), Some("single"));
    assert_eq!(first_host("").as_deref(), None);
}
