//! `titus trace DIR`: merges the ranks' trace files (`TITUS_TRACE=DIR`, `dlb-bench
//! --trace DIR`) into one trace-event file that Perfetto and `chrome://tracing` open, and
//! prints a summary: each rank's busy, idle and steal shares, its top victims, the bytes
//! it moved, and each epoch's slowest start phase.
//!
//! Ranks are processes and workers threads; each rank's start phases and steals sit on a
//! thread of their own after its workers. Clocks are the ranks' wall clocks, each host's
//! lined up with rank 0's at the epochs' start barriers (`trace_clocks`), shifted so that
//! the first epoch call of any rank is at 0. A missing or corrupt rank file is named on
//! stderr and the others are merged.

use crate::UsageError;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Arguments of `titus trace`.
#[derive(Debug, clap::Args)]
pub struct TraceArgs {
    /// The directory the ranks wrote (`titus-trace-rank<R>.jsonl`).
    dir: PathBuf,
    /// The merged trace-event file (default: DIR/titus-trace.json).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Draw the timeline as a PNG: a row per worker, tasks coloured by their owner, idle
    /// grey, steals marked.
    #[arg(long, value_name = "FILE.png")]
    png: Option<PathBuf>,
    /// The same as an SVG.
    #[arg(long, value_name = "FILE.svg")]
    svg: Option<PathBuf>,
    /// Keep each host's own clock: do not line hosts up at the start barriers (for hosts
    /// whose clocks agree better than a message's latency, as under PTP).
    #[arg(long)]
    raw_clocks: bool,
}

use titus_core::{StealOutcome, Transfer};
use titus_runtime::trace::EpochRecord;

/// The ranks' files in `dir`, by rank, and the epochs each holds (the lines that parse).
fn read_dir(dir: &Path) -> Result<Vec<EpochRecord>, UsageError> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| UsageError(format!("'{}': {e}", dir.display())))?;
    let mut files: Vec<(u32, PathBuf)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let rank = name
                .strip_prefix("titus-trace-rank")?
                .strip_suffix(".jsonl")?
                .parse()
                .ok()?;
            Some((rank, e.path()))
        })
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(UsageError(format!(
            "no titus-trace-rank<R>.jsonl in '{}' (TITUS_TRACE=DIR writes them)",
            dir.display()
        )));
    }
    // Ranks missing from the sequence are named: their part of the picture is gone.
    let last = files.last().map_or(0, |f| f.0);
    for r in 0..=last {
        if !files.iter().any(|f| f.0 == r) {
            eprintln!("titus trace: rank {r}'s file is missing; merging the others");
        }
    }
    let mut records = Vec::new();
    for (rank, path) in files {
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("titus trace: '{}': {e}; merging the others", path.display());
                continue;
            }
        };
        for (n, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            match serde_json::from_str::<EpochRecord>(line) {
                Ok(r) if r.rank == rank && r.tasks.len() == r.workers => records.push(r),
                Ok(r) => eprintln!(
                    "titus trace: '{}' line {}: rank {} with {} worker lists for {} workers; skipped",
                    path.display(),
                    n + 1,
                    r.rank,
                    r.tasks.len(),
                    r.workers
                ),
                Err(e) => eprintln!(
                    "titus trace: '{}' line {}: {e}; skipped",
                    path.display(),
                    n + 1
                ),
            }
        }
    }
    if records.is_empty() {
        return Err(UsageError(format!(
            "titus trace: no epoch could be read in '{}'",
            dir.display()
        )));
    }
    Ok(records)
}

/// The trace events of `records`, times in µs from `zero` (ns).
fn events(records: &[EpochRecord], zero: u64) -> Vec<Value> {
    // A task's key is its owner's, by index, in the same epoch.
    let keys: std::collections::HashMap<(u64, u64), &Vec<u64>> = records
        .iter()
        .map(|r| ((r.epoch, u64::from(r.rank)), &r.keys))
        .collect();
    let us = |ns: u64| ns.saturating_sub(zero) as f64 / 1e3;
    let mut ev = Vec::new();
    let mut named = std::collections::BTreeSet::new();
    for r in records {
        let (pid, progress) = (r.rank, r.workers);
        if named.insert(r.rank) {
            ev.push(
                json!({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                "args": {"name": format!("rank {pid}")}}),
            );
            for w in 0..r.workers {
                ev.push(
                    json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": w,
                    "args": {"name": format!("worker {w}")}}),
                );
            }
            ev.push(
                json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": progress,
                "args": {"name": "start and steals"}}),
            );
        }
        // The start's phases, one after another from the epoch call.
        let mut at = r.call_ns;
        for (phase, len) in r.phases_ns.named() {
            ev.push(
                json!({"ph": "X", "name": format!("start: {phase}"), "cat": "start",
                "pid": pid, "tid": progress, "ts": us(at), "dur": len as f64 / 1e3,
                "args": {"epoch": r.epoch}}),
            );
            // Inside the collectives, their own phases (clipped to its end: they run
            // on the node's clock from its begin, a little before the call returned).
            if phase == "collectives" {
                let (mut sub, end) = (at, at + len);
                for (name, ns) in r.phases_ns.collective_named() {
                    let dur = ns.min(end.saturating_sub(sub));
                    ev.push(json!({"ph": "X", "name": name, "cat": "start phase",
                        "pid": pid, "tid": progress, "ts": us(sub), "dur": dur as f64 / 1e3,
                        "args": {"epoch": r.epoch}}));
                    sub += dur;
                }
            }
            at += len;
        }
        ev.push(
            json!({"ph": "X", "name": format!("epoch {}", r.epoch), "cat": "epoch",
            "pid": pid, "tid": progress, "ts": us(r.tasks_from_ns),
            "dur": r.end_ns.saturating_sub(r.tasks_from_ns) as f64 / 1e3}),
        );
        if let Some(at) = r.barrier_ns {
            ev.push(
                json!({"ph": "X", "name": "barrier", "cat": "barrier", "pid": pid,
                "tid": progress, "ts": us(at), "dur": r.end_ns.saturating_sub(at) as f64 / 1e3,
                "args": {"epoch": r.epoch}}),
            );
        }
        // (Null where the owner's file or its epoch is missing.)
        let key_of = |owner: u64, index: u64| {
            keys.get(&(r.epoch, owner))
                .and_then(|k| k.get(index as usize))
                .copied()
        };
        for (w, tasks) in r.tasks.iter().enumerate() {
            for &[start, len, owner, index, kind] in tasks {
                let name = if owner == u64::from(r.rank) {
                    "task"
                } else {
                    "stolen task"
                };
                ev.push(
                    json!({"ph": "X", "name": name, "cat": format!("owner {owner}"),
                    "pid": pid, "tid": w, "ts": us(start), "dur": len as f64 / 1e3,
                    "args": {"owner": owner, "index": index, "kind": kind,
                        "key": key_of(owner, index)}}),
                );
            }
        }
        for &[w, start, len] in &r.idle {
            ev.push(
                json!({"ph": "X", "name": "idle", "cat": "idle", "pid": pid, "tid": w,
                "ts": us(start), "dur": len as f64 / 1e3}),
            );
        }
        for &[at, peer, bytes, kind] in &r.transfers {
            // (A code past the known ones reads as the last: files of newer builds.)
            let kind = Transfer::ALL.get(kind as usize).copied();
            let name = kind.unwrap_or(Transfer::TasksReceived).name();
            ev.push(
                json!({"ph": "i", "s": "t", "name": name, "cat": "chunk", "pid": pid,
                "tid": progress, "ts": us(at), "args": {"peer": peer, "bytes": bytes}}),
            );
        }
        for &[at, victim, tasks, latency, outcome] in &r.steals {
            let name = match StealOutcome::ALL.get(outcome as usize).copied() {
                Some(StealOutcome::Got) => "steal".to_string(),
                o => format!("steal: {}", o.unwrap_or(StealOutcome::Locked).name()),
            };
            ev.push(
                json!({"ph": "i", "s": "t", "name": name, "cat": "steal", "pid": pid,
                "tid": progress, "ts": us(at), "args": {"victim": victim, "tasks": tasks,
                "latency_us": latency as f64 / 1e3, "protocol": r.protocol}}),
            );
        }
    }
    ev
}

/// The timeline's picture: a row per worker of each rank, seconds from `zero` (ns).
fn picture(records: &[EpochRecord], zero: u64) -> titus_plot::RankTimeline {
    use titus_plot::{Activity, WorkerRow};
    let s = |ns: u64| ns.saturating_sub(zero) as f64 / 1e9;
    let mut rows: BTreeMap<(u32, u32), WorkerRow> = BTreeMap::new();
    let mut steals = Vec::new();
    let mut epochs = Vec::new();
    let mut span: f64 = 0.0;
    for r in records {
        span = span.max(s(r.end_ns));
        epochs.push(s(r.tasks_from_ns));
        for (w, tasks) in r.tasks.iter().enumerate() {
            let row = rows.entry((r.rank, w as u32)).or_insert_with(|| WorkerRow {
                rank: r.rank,
                worker: w as u32,
                spans: Vec::new(),
            });
            row.spans.extend(tasks.iter().map(|t| {
                let owner = u32::try_from(t[2]).unwrap_or(u32::MAX);
                (s(t[0]), s(t[0] + t[1]), Activity::Task { owner })
            }));
        }
        for i in &r.idle {
            if let Some(row) = rows.get_mut(&(r.rank, i[0] as u32)) {
                row.spans.push((s(i[1]), s(i[1] + i[2]), Activity::Idle));
            }
        }
        steals.extend(
            r.steals
                .iter()
                .filter(|st| st[4] == 0)
                .map(|st| (s(st[0]), r.rank, st[1] as u32)),
        );
    }
    epochs.sort_by(f64::total_cmp);
    epochs.dedup();
    let ranks = rows.keys().map(|k| k.0 + 1).max().unwrap_or(0);
    titus_plot::RankTimeline {
        title: format!(
            "{ranks} ranks, {} epochs",
            records.iter().map(|r| r.epoch).max().map_or(0, |e| e + 1)
        ),
        rows: rows.into_values().collect(),
        steals,
        epochs,
        span_s: span,
    }
}

/// The summary: per rank, and each epoch's slowest start phase.
fn summary(records: &[EpochRecord]) -> String {
    let mut out = String::from(
        "rank  epochs  busy   idle   steal  steals ok/empty/locked  top victims (tasks)      bytes moved  dropped\n",
    );
    let mut by_rank: BTreeMap<u32, Vec<&EpochRecord>> = BTreeMap::new();
    for r in records {
        by_rank.entry(r.rank).or_default().push(r);
    }
    for (rank, rs) in &by_rank {
        let stat = |f: fn(&titus_runtime::trace::StatsRecord) -> u64| {
            rs.iter().map(|r| f(&r.stats)).sum::<u64>()
        };
        let span: u64 = rs
            .iter()
            .map(|r| r.end_ns.saturating_sub(r.call_ns) * r.workers as u64)
            .sum();
        let busy: u64 = rs
            .iter()
            .flat_map(|r| r.tasks.iter().flatten())
            .map(|t| t[1])
            .sum();
        let idle: u64 = rs.iter().flat_map(|r| r.idle.iter()).map(|i| i[2]).sum();
        let steal: u64 = rs.iter().flat_map(|r| r.steals.iter()).map(|s| s[3]).sum();
        let mut victims: BTreeMap<u64, u64> = BTreeMap::new();
        for s in rs
            .iter()
            .flat_map(|r| r.steals.iter())
            .filter(|s| s[4] == 0)
        {
            *victims.entry(s[1]).or_default() += s[2];
        }
        let mut top: Vec<(u64, u64)> = victims.into_iter().collect();
        top.sort_by_key(|&(v, n)| (std::cmp::Reverse(n), v));
        let top: Vec<String> = top
            .iter()
            .take(3)
            .map(|(v, n)| format!("{v} ({n})"))
            .collect();
        let share = |x: u64| 100.0 * x as f64 / span.max(1) as f64;
        out += &format!(
            "{rank:<5} {:<7} {:>5.1}% {:>5.1}% {:>5.1}%  {:<23} {:<24} {:<12} {}\n",
            rs.len(),
            share(busy),
            share(idle),
            share(steal),
            format!(
                "{}/{}/{}",
                stat(|s| s.steals_ok),
                stat(|s| s.steals_empty),
                stat(|s| s.steals_locked)
            ),
            if top.is_empty() {
                "-".to_string()
            } else {
                top.join(", ")
            },
            stat(|s| s.bytes_stolen + s.bytes_results),
            rs.iter().map(|r| r.dropped).sum::<u64>(),
        );
    }
    let mut epochs: BTreeMap<u64, Vec<&EpochRecord>> = BTreeMap::new();
    for r in records {
        epochs.entry(r.epoch).or_default().push(r);
    }
    out += "epoch  slowest start phase (rank, ms)  start, slowest rank (ms)  run (ms)  barrier, longest (rank, ms)\n";
    for (e, rs) in &epochs {
        let slowest = rs
            .iter()
            .flat_map(|r| {
                r.phases_ns
                    .finest()
                    .into_iter()
                    .map(move |(p, ns)| (ns, p, r.rank))
            })
            .max();
        let start = rs
            .iter()
            .map(|r| r.tasks_from_ns.saturating_sub(r.call_ns))
            .max();
        let run = rs
            .iter()
            .map(|r| r.end_ns.saturating_sub(r.tasks_from_ns))
            .max();
        let barrier = rs
            .iter()
            .filter_map(|r| Some((r.end_ns.saturating_sub(r.barrier_ns?), r.rank)))
            .max();
        out += &format!(
            "{e:<6} {:<32} {:<25.3} {:<9.3} {}\n",
            slowest.map_or("-".into(), |(ns, p, r)| format!(
                "{p} ({r}, {:.3})",
                ns as f64 / 1e6
            )),
            start.unwrap_or(0) as f64 / 1e6,
            run.unwrap_or(0) as f64 / 1e6,
            barrier.map_or("-".into(), |(ns, r)| format!("{r}, {:.3}", ns as f64 / 1e6)),
        );
    }
    // The logs a rank keeps are bounded: say where one was full, so that a timeline that
    // lacks steals or chunks is not taken for a rank that had none.
    for r in records {
        let s = &r.stats;
        let steals = s.steals_ok + s.steals_empty + s.steals_locked;
        if (r.steals.len() as u64) < steals {
            out += &format!(
                "rank {} epoch {}: the steal log is full: {} of {steals} steals recorded (at most {})\n",
                r.rank,
                r.epoch,
                r.steals.len(),
                titus_core::STEAL_LOG_MAX
            );
        }
        if r.transfers.len() >= titus_core::TRANSFER_LOG_MAX {
            out += &format!(
                "rank {} epoch {}: the chunk log is full: its first {} chunks recorded\n",
                r.rank,
                r.epoch,
                titus_core::TRANSFER_LOG_MAX
            );
        }
    }
    out
}

pub fn run(a: &TraceArgs) -> Result<u8, UsageError> {
    let mut records = read_dir(&a.dir)?;
    let shifts = if a.raw_clocks {
        Vec::new()
    } else {
        crate::trace_clocks::align(&mut records)
    };
    let zero = records.iter().map(|r| r.call_ns).min().unwrap_or(0);
    let out = a
        .out
        .clone()
        .unwrap_or_else(|| a.dir.join("titus-trace.json"));
    let doc = json!({"traceEvents": events(&records, zero), "displayTimeUnit": "ms"});
    let text =
        serde_json::to_string(&doc).map_err(|e| UsageError(format!("encoding the trace: {e}")))?;
    std::fs::write(&out, text).map_err(|e| UsageError(format!("'{}': {e}", out.display())))?;
    print!("{}", crate::trace_clocks::describe(&shifts));
    print!("{}", summary(&records));
    println!(
        "trace: {} (open in https://ui.perfetto.dev or chrome://tracing)",
        out.display()
    );
    if a.png.is_some() || a.svg.is_some() {
        titus_plot::save_as(&picture(&records, zero), a.png.as_deref(), a.svg.as_deref())?;
        for p in a.png.iter().chain(&a.svg) {
            println!("timeline: {}", p.display());
        }
    }
    Ok(0)
}
