//! One rank of the soak test (started by `titus launch`, `tests/soak.rs`): many epochs
//! over one job with random task failures and random delays, checking that this process's
//! memory, open files and threads stay flat.
//!
//! Every rank draws the same plan from one seeded generator (`TITUS_SEED`, default
//! 1): each epoch's tasks per rank, which tasks sleep and for how long, a rank that enters
//! the epoch late, and whether a task fails (a panic, or a result over the limit). A failed
//! epoch must fail on every rank with the planned failure — the task's own error where it
//! ran, `Aborted` with a task-failure code elsewhere. A failed epoch leaves its runtime
//! failed by design (`Node` keeps the error), so after a barrier (every rank has its
//! error) the soak drops it and opens a new runtime (over the job's one rendezvous) for
//! the next epoch: failures soak runtime teardown too. The protocol changes with each runtime
//! (claim, lock, request).
//!
//! After each epoch it samples its resident memory (`VmRSS`), open file descriptors
//! (`/proc/self/fd`) and threads (`/proc/self/task`). At the end: the last quarter's
//! maximum of descriptors may not exceed the first quarter's (exactly flat after warm-up),
//! of threads by at most one (a thread of the rendezvous may still be winding down when
//! sampled), of memory by at most `RSS_MARGIN_KIB`. Prints one `soak:` line with the figures; exits 1 on any failure.
//!
//! Epochs: `TITUS_SOAK_EPOCHS` (default 200; a few thousand for the ten-minute soak by
//! hand). `TITUS_SOAK_CURVE=DIR` writes each rank's samples to `DIR/soak-rankN.csv`.
#![forbid(unsafe_code)]

use std::sync::{Arc, Mutex};
use std::time::Duration;
use titus_fabric::bootstrap::{BootstrapError, Exchange, JobEnv, Rendezvous};
use titus_runtime::{Backend, CoreError, Protocol, Runtime, RuntimeConfig, RuntimeError};

/// Memory the last quarter may hold above the first quarter's peak. The resident size
/// climbs from about 95 MB to a plateau of 110-126 MB (the allocator's and the provider's
/// high-water mark over runtimes opened and closed) at a moment that varies from run to
/// run, within the first ~2,000 epochs, even with one malloc arena: a 200-epoch run saw
/// its step of 30 MB in the last quarter. So the short run catches only gross leaks
/// (~250 KiB per epoch); a slower leak shows in the long run's curve
/// (`TITUS_SOAK_CURVE`): 20,000 epochs grew 0.4 MB after epoch 2,000.
const RSS_MARGIN_KIB: u64 = 48 * 1024;
/// Largest result (bytes); a task of kind `OVERSIZED` returns more.
const MAX_RESULT: u32 = 16;
const OK: u16 = 0;
const PANICS: u16 = 1;
const OVERSIZED: u16 = 2;

/// SplitMix64: the plan's generator (the same on every rank).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A task's payload: its epoch, its index, how long it sleeps (µs).
fn payload(epoch: u64, index: u32, sleep_us: u32) -> Vec<u8> {
    let mut p = epoch.to_le_bytes().to_vec();
    p.extend_from_slice(&index.to_le_bytes());
    p.extend_from_slice(&sleep_us.to_le_bytes());
    p
}

fn field(p: &[u8], at: usize, n: usize) -> u64 {
    let mut b = [0u8; 8];
    b[..n].copy_from_slice(&p[at..at + n]);
    u64::from_le_bytes(b)
}

/// A task of kind `OK`: sleeps as its payload says, returns the payload's hash.
fn run(p: &[u8]) -> Vec<u8> {
    let sleep_us = field(p, 12, 4);
    if sleep_us > 0 {
        std::thread::sleep(Duration::from_micros(sleep_us));
    }
    checksum(p)
}

fn checksum(p: &[u8]) -> Vec<u8> {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for &b in p {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    h.to_le_bytes().to_vec()
}

/// This process's (resident KiB, open descriptors, threads).
fn sample() -> (u64, u64, u64) {
    let rss = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0);
    let count = |d: &str| std::fs::read_dir(d).map_or(0, |r| r.count() as u64);
    (rss, count("/proc/self/fd"), count("/proc/self/task"))
}

/// The job's one rendezvous, shared by the soak's runtimes one after another (a runtime
/// per session with its own rendezvous port would need hundreds of free ports in a row).
#[derive(Debug, Clone)]
struct Shared(Arc<Mutex<Rendezvous>>);

impl Exchange for Shared {
    fn rank(&self) -> u32 {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).rank()
    }
    fn size(&self) -> u32 {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).size()
    }
    fn all_gather(&mut self, blob: &[u8]) -> Result<Vec<Vec<u8>>, BootstrapError> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .all_gather(blob)
    }
}

fn open(rv: &Shared, session: u16) -> Result<Runtime, String> {
    let mut cfg = RuntimeConfig {
        workers: 1,
        op_timeout: Duration::from_secs(20),
        epoch_timeout: Some(Duration::from_secs(60)),
        ..RuntimeConfig::default()
    };
    cfg.core.protocol = [Protocol::Claim, Protocol::Lock, Protocol::Request][session as usize % 3];
    cfg.core.max_payload = 16;
    cfg.core.max_result = MAX_RESULT;
    let rt = Runtime::from_exchange(cfg, Backend::default_fabric(None), Box::new(rv.clone()))
        .map_err(|e| format!("runtime {session}: {e}"))?;
    rt.register(OK, run);
    rt.register(PANICS, |p: &[u8]| {
        panic!("soak: task failed on purpose in epoch {}", field(p, 0, 8))
    });
    rt.register(OVERSIZED, |_: &[u8]| vec![7u8; MAX_RESULT as usize + 1]);
    Ok(rt)
}

/// Whether `err` is the failure planned for `epoch` (`kind`: PANICS or OVERSIZED).
fn expected(err: &RuntimeError, epoch: u64, kind: u16) -> bool {
    use titus_core::error_code::{RESULT_TOO_LARGE, TASK_FAILED};
    match err {
        RuntimeError::Core(CoreError::TaskFailed { detail, .. }) => {
            kind == PANICS && detail.contains(&format!("on purpose in epoch {epoch}"))
        }
        RuntimeError::Core(CoreError::ResultTooLarge { len, limit, .. }) => {
            kind == OVERSIZED && *len == MAX_RESULT as usize + 1 && *limit == MAX_RESULT
        }
        RuntimeError::Core(CoreError::Aborted { code, .. }) => {
            *code
                == if kind == PANICS {
                    TASK_FAILED
                } else {
                    RESULT_TOO_LARGE
                }
        }
        _ => false,
    }
}

fn soak(env: &JobEnv, epochs: u64, seed: u64) -> Result<String, String> {
    let (rank, size) = (env.rank, env.size);
    let mut rng = Rng(seed);
    let rv = Rendezvous::join(env)
        .map_err(|e| e.to_string())?
        .ok_or("the soak needs a launcher's rendezvous (titus launch -n 2)")?;
    let rv = Shared(Arc::new(Mutex::new(rv)));
    let mut session = 0u16;
    let mut rt = open(&rv, session)?;
    let mut samples = Vec::with_capacity(epochs as usize);
    let (mut failed, mut tasks_run) = (0u64, 0u64);
    for e in 0..epochs {
        // The plan, drawn in the same order on every rank.
        let counts: Vec<u32> = (0..size).map(|_| rng.below(24) as u32).collect();
        let late: Vec<u64> = (0..size)
            .map(|_| {
                if rng.below(4) == 0 {
                    rng.below(2_000)
                } else {
                    0
                }
            })
            .collect();
        // Epoch 2 always fails, so that the warm-up quarter holds a runtime change.
        let fail = (e == 2 || rng.below(10) == 0).then(|| {
            let kind = if rng.below(2) == 0 { PANICS } else { OVERSIZED };
            (rng.below(u64::from(size)) as u32, kind)
        });
        // Every rank's tasks are drawn (this rank keeps its own), so the generator stays
        // in step across ranks.
        let mut tasks = Vec::new();
        for r in 0..size {
            for i in 0..counts[r as usize] {
                let sleep = if rng.below(4) == 0 {
                    rng.below(300) as u32
                } else {
                    0
                };
                if r == rank {
                    tasks.push((OK, payload(e, i, sleep)));
                }
            }
        }
        if let Some((who, kind)) = fail {
            let at = rng.below(u64::from(counts[who as usize]) + 1) as usize;
            if who == rank {
                tasks.insert(at, (kind, payload(e, u32::MAX, 0)));
            }
        }
        if late[rank as usize] > 0 {
            std::thread::sleep(Duration::from_micros(late[rank as usize]));
        }
        let n = tasks.len();
        let out = rt.run_epoch(tasks.clone());
        match (out, fail) {
            (Ok(out), None) => {
                if out.results.len() != n {
                    return Err(format!(
                        "epoch {e}: {} results for {n} tasks",
                        out.results.len()
                    ));
                }
                for (i, (res, (_, p))) in out.results.iter().zip(&tasks).enumerate() {
                    if *res != checksum(p) {
                        return Err(format!("epoch {e}: task {i} came home wrong"));
                    }
                }
                tasks_run += n as u64;
            }
            (Ok(_), Some((who, kind))) => {
                return Err(format!(
                    "epoch {e}: succeeded, but rank {who} planted a failing task (kind {kind})"
                ));
            }
            (Err(err), None) => return Err(format!("epoch {e}: {err}")),
            (Err(err), Some((_, kind))) => {
                if !expected(&err, e, kind) {
                    return Err(format!(
                        "epoch {e}: failed with an unexpected error (planned kind {kind}): {err}"
                    ));
                }
                failed += 1;
                // A failed runtime stays failed: the next epoch gets a new one. Not before
                // every rank has its error: a rank that closed its endpoint at once would
                // make a peer still in the epoch fail on the closed connection ("rank 0 is
                // unreachable") before the abort reached it.
                rt.all_gather(&[])
                    .map_err(|err| format!("epoch {e}: the barrier after the failure: {err}"))?;
                drop(rt);
                session = session
                    .checked_add(1)
                    .ok_or("more failed epochs than sessions")?;
                rt = open(&rv, session)?;
            }
        }
        samples.push(sample());
    }
    drop(rt);
    if let Some(dir) = std::env::var_os("TITUS_SOAK_CURVE") {
        // By hand: every sample, one line per epoch, for plotting.
        let csv: String = std::iter::once("epoch,rss_kib,fds,threads\n".to_string())
            .chain(
                samples
                    .iter()
                    .enumerate()
                    .map(|(e, s)| format!("{e},{},{},{}\n", s.0, s.1, s.2)),
            )
            .collect();
        let path = std::path::Path::new(&dir).join(format!("soak-rank{rank}.csv"));
        std::fs::write(&path, csv).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    let q = samples.len() / 4;
    if q == 0 {
        return Err(format!("{epochs} epochs are too few to compare quarters"));
    }
    let max =
        |s: &[(u64, u64, u64)], f: fn(&(u64, u64, u64)) -> u64| s.iter().map(f).max().unwrap_or(0);
    let (first, last) = (&samples[..q], &samples[samples.len() - q..]);
    let rss = (max(first, |s| s.0), max(last, |s| s.0));
    let fds = (max(first, |s| s.1), max(last, |s| s.1));
    let threads = (max(first, |s| s.2), max(last, |s| s.2));
    let line = format!(
        "soak: rank {rank} seed {seed} epochs {epochs} failed {failed} runtimes {} tasks {tasks_run} \
         rss_kib first {} last {} q1max {} q4max {} fds first {} last {} q1max {} q4max {} \
         threads q1max {} q4max {}",
        u64::from(session) + 1,
        samples[0].0,
        samples[samples.len() - 1].0,
        rss.0,
        rss.1,
        samples[0].1,
        samples[samples.len() - 1].1,
        fds.0,
        fds.1,
        threads.0,
        threads.1,
    );
    // Margins for what a runtime dropped just before a sample may still be winding down
    // (a thread, a socket or two); a leak per session grows far past them.
    if fds.1 > fds.0 + 2 || threads.1 > threads.0 + 1 || rss.1 > rss.0 + RSS_MARGIN_KIB {
        return Err(format!(
            "resources grew (margins: {RSS_MARGIN_KIB} KiB of memory, two descriptors, one thread winding down): {line}"
        ));
    }
    Ok(line)
}

fn main() {
    let env = JobEnv::from_env().unwrap_or_else(|e| {
        eprintln!("soak: error: {e}");
        std::process::exit(2);
    });
    let num = |var: &str, default: u64| match std::env::var(var) {
        Err(_) => default,
        Ok(v) => v.parse().unwrap_or_else(|_| {
            eprintln!("soak: error: {var}='{v}' is not a whole number");
            std::process::exit(2);
        }),
    };
    // The planned failures panic on purpose: keep their reports out of the output.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let planned = info
            .payload()
            .downcast_ref::<String>()
            .is_some_and(|m| m.contains("failed on purpose"));
        if !planned {
            default_hook(info);
        }
    }));
    let epochs = num("TITUS_SOAK_EPOCHS", 200);
    let seed = titus_core::seed::one(1);
    match soak(&env, epochs, seed) {
        Ok(line) => println!("{line}"),
        Err(e) => {
            eprintln!(
                "soak: rank {}: {e} (repeat with {} TITUS_SOAK_EPOCHS={epochs})",
                env.rank,
                titus_core::seed::repeat(seed)
            );
            std::process::exit(1);
        }
    }
}
