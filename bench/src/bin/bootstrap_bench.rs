//! `bootstrap-bench`: how long ranks take to meet, through whichever bootstrap the job
//! chose (`JobEnv`'s order: an explicit `TITUS_BOOTSTRAP`, else PMIx under a PMIx server,
//! else Slurm's), measured in every rank from the start of `main`.
//!
//! Each rank times joining the bootstrap plus one all-gather of `--blob` bytes (what a
//! fabric's addresses and keys weigh), then `--rounds` further all-gathers and as many
//! barriers; rank 0 prints the slowest rank's figures. Compare PMIx with the rendezvous
//! under one launcher:
//!
//! ```text
//! mpirun -n 4 bootstrap-bench                                  # PMIx
//! mpirun -n 4 -x TITUS_BOOTSTRAP=127.0.0.1:PORT bootstrap-bench  # the rendezvous
//! ```
//!
//! `--missing-key` is a fault: every rank but the last publishes a key, then all read it
//! from every rank (PMIx only). The read from the last rank must fail with an error
//! naming the rank and the key, within the bootstrap timeout: printed, exit status 3.
#![forbid(unsafe_code)]

use clap::Parser;
use std::time::Instant;
use titus_fabric::bootstrap::{self, JobEnv, Pmix, Via};

#[derive(Debug, Parser)]
#[command(
    name = "bootstrap-bench",
    version,
    about = "Time for the ranks of a job to meet through its bootstrap (PMIx or the rendezvous)"
)]
struct Args {
    /// Bytes each rank contributes to every all-gather (a fabric address and keys), at
    /// most 67,108,864 (what PMIx takes under one key).
    #[arg(long, default_value_t = 128)]
    blob: usize,
    /// All-gathers and barriers timed after the first.
    #[arg(long, default_value_t = 20)]
    rounds: u32,
    /// One JSON object instead of the text line.
    #[arg(long)]
    json: bool,
    /// Fault: the last rank never publishes the key the others read (PMIx only).
    #[arg(long)]
    missing_key: bool,
}

fn fail(code: i32, msg: &str) -> ! {
    eprintln!("bootstrap-bench: error: {msg}");
    std::process::exit(code)
}

fn main() {
    let start = Instant::now();
    let args = titus_workload::dlb::parse_args_of::<Args>("bootstrap-bench");
    titus_workload::init_logging().unwrap_or_else(|e| fail(2, &e.to_string()));
    // PMIx's bound for one key, for both bootstraps, so that they time the same blobs.
    if args.blob > bootstrap::MAX_BLOB {
        fail(
            2,
            &format!("--blob {}: expected 0..={}", args.blob, bootstrap::MAX_BLOB),
        );
    }
    let env = JobEnv::from_env().unwrap_or_else(|e| fail(2, &e.to_string()));
    if env.size < 2 {
        fail(
            2,
            "start it under a launcher with at least 2 ranks (mpirun -n 2, titus launch -n 2)",
        );
    }
    // Each all-gather hands every rank the whole job's blobs.
    let gathered = (args.blob as u64).saturating_mul(u64::from(env.size));
    if let Some(have) = titus_fabric::mem::available_memory()
        && gathered > have
    {
        let gib = |b: u64| b as f64 / f64::from(1u32 << 30);
        fail(
            2,
            &format!(
                "--blob {} from each of {} ranks needs about {:.1} GiB of memory in every \
                 rank; this process has {:.1} GiB available (free memory within its cgroup's \
                 limit)",
                args.blob,
                env.size,
                gib(gathered),
                gib(have)
            ),
        );
    }
    if args.missing_key {
        missing_key(&env);
    }
    let mut ex = bootstrap::join(&env)
        .unwrap_or_else(|e| fail(1, &e.to_string()))
        .unwrap_or_else(|| fail(2, "no bootstrap for this job"));
    let blob: Vec<u8> = (0..args.blob)
        .map(|i| (i as u32 ^ env.rank) as u8)
        .collect();
    let all = ex
        .all_gather(&blob)
        .unwrap_or_else(|e| fail(1, &e.to_string()));
    let joined = start.elapsed();
    check(&all, &env, args.blob);
    let t = Instant::now();
    for _ in 0..args.rounds {
        let all = ex
            .all_gather(&blob)
            .unwrap_or_else(|e| fail(1, &e.to_string()));
        check(&all, &env, args.blob);
    }
    let gather = t.elapsed() / args.rounds.max(1);
    let t = Instant::now();
    for _ in 0..args.rounds {
        ex.barrier().unwrap_or_else(|e| fail(1, &e.to_string()));
    }
    let barrier = t.elapsed() / args.rounds.max(1);
    // Every rank's figures, to rank 0: the slowest rank's count.
    let mine: Vec<u8> = [joined, gather, barrier]
        .iter()
        .flat_map(|d| (d.as_nanos() as u64).to_le_bytes())
        .collect();
    let figures = ex
        .all_gather(&mine)
        .unwrap_or_else(|e| fail(1, &e.to_string()));
    if env.rank != 0 {
        return;
    }
    let max = |i: usize| -> f64 {
        figures
            .iter()
            .map(|f| {
                let b: [u8; 8] = f
                    .get(i * 8..i * 8 + 8)
                    .and_then(|s| s.try_into().ok())
                    .unwrap_or_else(|| fail(1, "a rank's figures are malformed"));
                u64::from_le_bytes(b) as f64
            })
            .fold(0.0, f64::max)
    };
    let (joined_ms, gather_us, barrier_us) = (max(0) / 1e6, max(1) / 1e3, max(2) / 1e3);
    let via = match env.via {
        Via::Pmix => "pmix",
        _ => "rendezvous",
    };
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "bootstrap": via,
                "ranks": env.size,
                "blob": args.blob,
                "start_to_first_allgather_ms": joined_ms,
                "allgather_us": gather_us,
                "barrier_us": barrier_us,
                "rounds": args.rounds,
            })
        );
    } else {
        println!(
            "bootstrap {via:<10} ranks {:>3}   start to first all-gather {joined_ms:8.2} ms   \
             all-gather {gather_us:9.1} us   barrier {barrier_us:9.1} us   (slowest rank, {} rounds)",
            env.size, args.rounds
        );
    }
}

fn check(all: &[Vec<u8>], env: &JobEnv, len: usize) {
    let ok = all.len() == env.size as usize
        && all.iter().enumerate().all(|(r, b)| {
            b.len() == len
                && b.iter()
                    .enumerate()
                    .all(|(i, &x)| x == (i as u32 ^ r as u32) as u8)
        });
    if !ok {
        fail(1, "an all-gather returned wrong blobs");
    }
}

/// The `--missing-key` fault (see the notes at the top).
fn missing_key(env: &JobEnv) -> ! {
    if env.via != Via::Pmix {
        fail(
            2,
            &format!(
                "--missing-key needs PMIx; this job's bootstrap is {}",
                env.via
            ),
        );
    }
    let p = Pmix::join(env).unwrap_or_else(|e| fail(1, &e.to_string()));
    let key = "titus.fault.missing";
    let last = env.size - 1;
    if env.rank != last {
        p.publish(key, b"here")
            .unwrap_or_else(|e| fail(1, &e.to_string()));
    }
    p.fence(true).unwrap_or_else(|e| fail(1, &e.to_string()));
    for r in 0..env.size {
        if let Err(e) = p.read(r, key) {
            fail(3, &e.to_string());
        }
    }
    fail(
        1,
        &format!("rank {last} never published '{key}', yet every read succeeded"),
    )
}
