//! Property test of the launcher environment's parser ([`JobEnv::from_vars_with`]):
//! every variable Titus reads, set to hostile values in any combination, must give a job
//! whose rank, size and placement agree, or an error, never a panic. Cases:
//! `PROPTEST_CASES` (64; 1,000,000 by hand).

use super::*;
use proptest::prelude::*;

/// The variables of every launcher and of the bootstrap.
const VARS: [&str; 20] = [
    "TITUS_RANK",
    "TITUS_SIZE",
    "TITUS_LOCAL_RANK",
    "TITUS_LOCAL_SIZE",
    "TITUS_BOOTSTRAP",
    "TITUS_JOB_SECRET",
    "TITUS_BOOTSTRAP_TIMEOUT",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
    "SLURM_TASKS_PER_NODE",
    "SLURM_STEP_TASKS_PER_NODE",
    "SLURM_NODEID",
    "SLURM_JOB_ID",
    "SLURM_STEP_RESV_PORTS",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "PMI_RANK",
    "PMI_SIZE",
];

const VALUES: [&str; 18] = [
    "0",
    "1",
    "2",
    "-1",
    "4294967295",
    "4294967296",
    "1e300",
    "nan",
    "",
    " ",
    "abc",
    "2(x3),1",
    "3(x4294967295)",
    "1(x0)",
    "127.0.0.1:1",
    "h:99999",
    "1000-999",
    "s",
];

proptest! {
    #![proptest_config(crate::testing::proptest_config())]

    #[test]
    fn any_environment_gives_a_consistent_job_or_an_error(
        set in proptest::collection::vec(
            (proptest::sample::select(&VARS[..]), proptest::sample::select(&VALUES[..])),
            0..10,
        ),
    ) {
        let vars: std::collections::HashMap<&str, &str> = set.iter().copied().collect();
        let get = |k: &str| vars.get(k).map(|v| v.to_string());
        if let Ok(job) = JobEnv::from_vars_with(get, false, (32768, 60999)) {
            prop_assert!(job.size >= 1 && job.rank < job.size, "{vars:?}: {job:?}");
            if let (Some(r), Some(n)) = (job.local_rank, job.local_size) {
                prop_assert!(r < n && n <= job.size, "{vars:?}: {job:?}");
            }
            prop_assert!(job.timeout <= Duration::from_secs(7 * 86_400), "{vars:?}");
        }
    }
}
