//! The core under randomized schedules across epochs: the second family of checker seeds
//! ([`check_epochs_seed`]), each run with every steal protocol and both work-sharing
//! schemes — two or three epochs per job (later ones with cost history, so diffusion
//! pushes batches before stealing), ranks starting each epoch at different times,
//! tiny shared sets and inboxes (so batches split and inboxes overflow), jittered (hence
//! reordered) operations. Every task must run exactly once and every result reach its
//! owner exactly once and right, in every epoch, and nothing of an epoch but what the
//! next must ignore may still travel at its end ([`titus_sim::simulate`]).
//!
//! `TITUS_SEED` sets the seeds (`titus_core::seed`; default 0..100, 0..20000 by hand in
//! release). A failure prints the command that reproduces it.

use titus_sim::check::{EPOCH_SCHEMES, Exercised, check_epochs_seed};

#[test]
fn every_result_arrives_exactly_once_across_epochs_and_staggered_starts() {
    let range = titus_core::seed::seeds(0..100);
    let seeds = range.end - range.start;
    let (mut events, mut stealing, mut sharing) = (0, Exercised::default(), Exercised::default());
    for seed in range {
        for scheme in EPOCH_SCHEMES {
            match check_epochs_seed(seed, scheme) {
                Ok(d) => {
                    events += d.events;
                    if scheme.0.steals() {
                        stealing.add(&d.exercised);
                    } else {
                        sharing.add(&d.exercised);
                    }
                }
                Err((what, v)) => panic!(
                    "seed {seed}, {} / {} ({what}): {v}\nreproduce: {} cargo test -p titus-sim --test epochs",
                    scheme.0,
                    scheme.1.name(),
                    titus_core::seed::repeat(seed)
                ),
            }
        }
    }
    eprintln!("{events} events; stealing {stealing:?}; sharing {sharing:?}");
    assert!(events > 0);
    // Every path was taken (a handful of seeds might miss one).
    if seeds >= 20 {
        let all = |e: &Exercised| {
            [
                e.steals_ok,
                e.steals_failed,
                e.inbox_overflows,
                e.records_forwarded,
                e.chunks,
                e.pushed,
                e.pushed_forwarded,
                e.pushed_costly,
                e.shares_retracted,
                e.gone_tolerated,
            ]
        };
        assert!(
            all(&stealing).iter().all(|&x| x > 0),
            "a path was never exercised under stealing: {stealing:?}"
        );
        assert!(
            stealing.repartitioned > 0
                && sharing.repartitioned > 0
                && stealing.plans_checked > 0
                && sharing.plans_checked > 0,
            "no repartition plan moved a task: {stealing:?}, {sharing:?}"
        );
        assert!(
            sharing.steals_ok > 0 && sharing.pushed > 0,
            "work sharing never handed out a task, or diffusion never pushed: {sharing:?}"
        );
    }
}

#[test]
fn the_same_seed_gives_the_same_trace_across_epochs() {
    for seed in [3, 17] {
        for scheme in EPOCH_SCHEMES {
            let a = check_epochs_seed(seed, scheme).map_err(|e| e.1).unwrap();
            let b = check_epochs_seed(seed, scheme).map_err(|e| e.1).unwrap();
            assert_eq!((a.trace, a.events), (b.trace, b.events), "seed {seed}");
        }
    }
}
