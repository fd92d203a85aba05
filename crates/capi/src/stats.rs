//! A time step's figures: this rank's, and the job's (a collective).

use super::*;

/// Figures of the last time step. `titus_stats_get`: this rank's. `titus_job_stats`: the
/// job's: `session_s` is the slowest rank's; every other time (busy, idle, steal, nominal)
/// and every count (workers included) is summed over ranks; the two efficiencies are
/// recomputed from those sums.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct titus_stats {
    /// Wall time of `titus_run`, seconds (`titus_job_stats`: the slowest rank's).
    pub session_s: f64,
    /// Time workers spent in tasks, summed over workers, seconds.
    pub busy_s: f64,
    /// Worker time not spent in tasks, seconds.
    pub idle_s: f64,
    /// Time spent in steal attempts, seconds.
    pub steal_s: f64,
    /// busy / (session × workers).
    pub efficiency: f64,
    /// Worker threads.
    pub workers: u64,
    /// Tasks handed over (owned).
    pub tasks_owned: u64,
    /// Tasks run here.
    pub tasks_run: u64,
    /// Tasks run here that other ranks own (the thieves' view; summed over the job it
    /// equals the sum of `tasks_ran_elsewhere`).
    pub tasks_run_for_others: u64,
    /// Tasks this rank took from other ranks in steals, counted at every move: a task
    /// stolen again from its thief counts again, so the job's sum can exceed its tasks.
    /// The count of tasks that left their owner is `tasks_ran_elsewhere`.
    pub tasks_stolen: u64,
    /// This rank's own tasks that ran on another rank (stolen or pushed away, however
    /// often they moved: each counts once): what is usually meant by "tasks stolen".
    pub tasks_ran_elsewhere: u64,
    /// Steal attempts.
    pub steal_attempts: u64,
    /// Successful steals.
    pub steals_ok: u64,
    /// Steals that found the victim empty.
    pub steals_empty: u64,
    /// Steals that found the victim locked.
    pub steals_locked: u64,
    /// Task bytes moved by steals.
    pub bytes_stolen: u64,
    /// Result chunks sent.
    pub chunks_sent: u64,
    /// Result chunks received.
    pub chunks_received: u64,
    /// Result bytes sent.
    pub bytes_results: u64,
    /// Result records forwarded on behalf of other ranks.
    pub records_forwarded: u64,
    /// The nominal work of the step, seconds: what the caller stated with
    /// `titus_nominal_work` before `titus_run` (its calibrated, sequential cost of the
    /// tasks it handed over); 0 if it stated none.
    pub nominal_s: f64,
    /// Efficiency against the nominal work: nominal_s / (session_s × workers), 0 without
    /// nominal work. Unlike `efficiency`, it cannot rise because balancing slowed the
    /// tasks themselves: the ideal is 1.
    pub nominal_efficiency: f64,
    /// The step's start (the collectives before its tasks run), seconds: from the call of
    /// `titus_run` to this rank's first task (`titus_job_stats`: the slowest rank's).
    /// Counted in `session_s`.
    pub start_s: f64,
    /// Bytes the start sent, received and read (`titus_job_stats`: the most of any rank).
    pub start_bytes: u64,
    /// Messages the start sent and records it read (`titus_job_stats`: the most).
    pub start_messages: u64,
    /// Rounds on the start's longest chain (`titus_job_stats`: the most).
    pub start_rounds: u64,
}

pub(crate) fn stats_of(s: &EpochStats, nominal_s: f64) -> titus_stats {
    let c = &s.core;
    let session_s = s.session.as_secs_f64();
    let busy_s = s.busy.as_secs_f64();
    titus_stats {
        session_s,
        busy_s,
        idle_s: s.idle.as_secs_f64(),
        steal_s: s.steal.as_secs_f64(),
        efficiency: efficiency(busy_s, session_s, s.workers as u64),
        workers: s.workers as u64,
        tasks_owned: c.tasks_owned,
        tasks_run: c.tasks_run,
        tasks_run_for_others: c.tasks_run_for_others,
        tasks_stolen: c.tasks_stolen,
        // A result that ran here took 0 hops home; one that ran elsewhere at least 1.
        tasks_ran_elsewhere: c.result_hops.iter().skip(1).sum(),
        steal_attempts: c.steal_attempts,
        steals_ok: c.steals_ok,
        steals_empty: c.steals_empty,
        steals_locked: c.steals_locked,
        bytes_stolen: c.bytes_stolen,
        chunks_sent: c.chunks_sent,
        chunks_received: c.chunks_received,
        bytes_results: c.bytes_results,
        records_forwarded: c.records_forwarded,
        nominal_s,
        nominal_efficiency: efficiency(nominal_s, session_s, s.workers as u64),
        start_s: s.start.as_secs_f64(),
        start_bytes: s.start_figures.bytes,
        start_messages: s.start_figures.messages,
        start_rounds: s.start_figures.rounds,
    }
}

/// `work / (session × workers)`, 0 when either is 0.
pub(crate) fn efficiency(busy_s: f64, session_s: f64, workers: u64) -> f64 {
    if session_s > 0.0 && workers > 0 {
        busy_s / (session_s * workers as f64)
    } else {
        0.0
    }
}

/// This rank's figures of the last titus_run.
#[unsafe(no_mangle)]
pub extern "C" fn titus_stats_get(t: *mut titus_t, stats: *mut titus_stats) -> c_int {
    call("titus_stats_get", || {
        with(t, |inner| {
            *out(stats, "stats")? = inner.stats;
            Ok(())
        })
    })
}

/// The job's figures of the last titus_run (collective): counts and busy/idle/steal/nominal
/// times summed over ranks, session_s the slowest rank's, efficiency
/// Σbusy / (session_s × Σworkers), nominal_efficiency Σnominal_s / (session_s × Σworkers).
#[unsafe(no_mangle)]
pub extern "C" fn titus_job_stats(t: *mut titus_t, stats: *mut titus_stats) -> c_int {
    call("titus_job_stats", || {
        with(t, |inner| {
            let dst = out(stats, "stats")?;
            let s = inner.stats;
            let mine = titus_fabric::versioned::encode(JOB_STATS, &fields(&s));
            let all = inner.rt.all_gather(&mine).map_err(Error::from)?;
            let mut job = titus_stats::default();
            let n = fields(&job).len();
            let mut sum = vec![0f64; n];
            for (r, blob) in all.iter().enumerate() {
                let theirs: Vec<f64> = titus_fabric::versioned::decode(JOB_STATS, blob)
                    .ok()
                    .filter(|v: &Vec<f64>| v.len() == n)
                    .ok_or_else(|| {
                        Error::Exchange(format!(
                            "rank {r} sent {} bytes that are not {n} figures (another collective, or another version of libtitus?)",
                            blob.len()
                        ))
                    })?;
                for (i, v) in theirs.into_iter().enumerate() {
                    // The session and the start's figures: the slowest, the most.
                    sum[i] = if i == 0 || i >= START_FIELDS {
                        sum[i].max(v)
                    } else {
                        sum[i] + v
                    };
                }
            }
            set_fields(&mut job, &sum);
            job.efficiency = efficiency(job.busy_s, job.session_s, job.workers);
            job.nominal_efficiency = efficiency(job.nominal_s, job.session_s, job.workers);
            *dst = job;
            Ok(())
        })
    })
}

/// The tag of `titus_job_stats`'s all-gather: format and version.
pub(crate) const JOB_STATS: &[u8] = b"TJST2";

/// Where the start's figures begin in [`fields`] (each the job's most, not its sum).
pub(crate) const START_FIELDS: usize = 20;

/// The figures as numbers (counts are far below 2^53), session first.
pub(crate) fn fields(s: &titus_stats) -> Vec<f64> {
    vec![
        s.session_s,
        s.busy_s,
        s.idle_s,
        s.steal_s,
        s.workers as f64,
        s.tasks_owned as f64,
        s.tasks_run as f64,
        s.tasks_run_for_others as f64,
        s.tasks_stolen as f64,
        s.tasks_ran_elsewhere as f64,
        s.steal_attempts as f64,
        s.steals_ok as f64,
        s.steals_empty as f64,
        s.steals_locked as f64,
        s.bytes_stolen as f64,
        s.chunks_sent as f64,
        s.chunks_received as f64,
        s.bytes_results as f64,
        s.records_forwarded as f64,
        s.nominal_s,
        s.start_s,
        s.start_bytes as f64,
        s.start_messages as f64,
        s.start_rounds as f64,
    ]
}

pub(crate) fn set_fields(s: &mut titus_stats, v: &[f64]) {
    let n = |i: usize| v[i] as u64;
    *s = titus_stats {
        session_s: v[0],
        busy_s: v[1],
        idle_s: v[2],
        steal_s: v[3],
        efficiency: 0.0,
        workers: n(4),
        tasks_owned: n(5),
        tasks_run: n(6),
        tasks_run_for_others: n(7),
        tasks_stolen: n(8),
        tasks_ran_elsewhere: n(9),
        steal_attempts: n(10),
        steals_ok: n(11),
        steals_empty: n(12),
        steals_locked: n(13),
        bytes_stolen: n(14),
        chunks_sent: n(15),
        chunks_received: n(16),
        bytes_results: n(17),
        records_forwarded: n(18),
        nominal_s: v[19],
        nominal_efficiency: 0.0,
        start_s: v[20],
        start_bytes: n(21),
        start_messages: n(22),
        start_rounds: n(23),
    };
}
