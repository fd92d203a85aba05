//! A rank's timeline on request (`RuntimeConfig::trace`, `TITUS_TRACE=DIR`): each
//! worker's task and idle spans, the epoch start's phases, every steal with what it found
//! (the core keeps the failed ones too: `Config::timeline`), and the rank's tasks' keys,
//! written as one JSON line per epoch to `DIR/titus-trace-rank<R>.jsonl` at its end.
//! `titus trace DIR` merges the ranks' files into one trace-event file that Perfetto and
//! `chrome://tracing` open.
//!
//! Each worker records into a buffer of its own (a lock nobody else takes during the
//! epoch), bounded by [`SPANS_MAX`] spans an epoch; past it the record counts what it
//! dropped. Times are wall-clock nanoseconds since the Unix epoch, so the ranks of one
//! machine line up exactly. Each record names its rank's clock ([`clock_domain`]), so
//! that `titus trace` can shift another host's ranks onto the first's.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Most spans (tasks and idle) a worker records in one epoch: 24 bytes each, so 24 MiB.
pub const SPANS_MAX: usize = 1 << 20;

/// The trace file of rank `rank` in `dir`.
pub fn file_of(dir: &Path, rank: u32) -> PathBuf {
    dir.join(format!("titus-trace-rank{rank}.jsonl"))
}

/// Why tracing could not start.
#[derive(Debug, thiserror::Error)]
#[error("trace directory '{dir}': {source}")]
pub struct TraceDirError {
    /// The directory.
    pub dir: PathBuf,
    /// What the file system said.
    pub source: std::io::Error,
}

/// A task a worker ran: start and length (ns on the rank's clock), owner, index, kind.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TaskSpan {
    start_ns: u64,
    len_ns: u64,
    owner: u32,
    index: u32,
    kind: u16,
}

/// One worker's spans of the epoch running.
#[derive(Debug, Default)]
pub(crate) struct WorkerSpans {
    tasks: Vec<TaskSpan>,
    /// Idle spans that ended in a task: start, length (ns on the rank's clock).
    idle: Vec<(u64, u64)>,
    dropped: u64,
}

impl WorkerSpans {
    fn room(&mut self) -> bool {
        let room = self.tasks.len() + self.idle.len() < SPANS_MAX;
        if !room {
            self.dropped += 1;
        }
        room
    }
}

/// One epoch's line in a rank's file: what the runtime writes, what `titus sim --trace`
/// writes for a simulated rank, and what `titus trace` reads back.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct EpochRecord {
    /// The rank.
    pub rank: u32,
    /// The epoch, from 0.
    pub epoch: u64,
    /// Its workers: as many lists in `tasks`.
    pub workers: usize,
    /// The steal protocol.
    pub protocol: String,
    /// The clock its times were read from ([`clock_domain`]); empty for one clock (a
    /// simulation).
    #[serde(default)]
    pub clock: String,
    /// The epoch call, ns (wall clock since the Unix epoch; virtual time in a simulation).
    pub call_ns: u64,
    /// Its tasks' start, ns.
    pub tasks_from_ns: u64,
    /// Its end on this rank, ns.
    pub end_ns: u64,
    /// When this rank entered the termination barrier (its subtree complete, UP sent),
    /// ns: from then to `end_ns` it waited for the job's DONE (`None`: it never did).
    #[serde(default)]
    pub barrier_ns: Option<u64>,
    /// The start's phases, ns.
    pub phases_ns: PhasesRecord,
    /// The epoch's figures.
    pub stats: StatsRecord,
    /// Per worker: [start, length, owner, index, kind].
    pub tasks: Vec<Vec<[u64; 5]>>,
    /// This rank's own tasks' keys, by index: a task's key is its owner's `keys[index]`.
    #[serde(default)]
    pub keys: Vec<u64>,
    /// [worker, start, length].
    pub idle: Vec<[u64; 3]>,
    /// [when, victim, tasks, latency, outcome]: outcome 0 got tasks, 1 found none, 2
    /// found the victim locked.
    pub steals: Vec<[u64; 5]>,
    /// Spans past [`SPANS_MAX`] a worker, not recorded.
    pub dropped: u64,
    /// [when, peer, bytes, kind]: kind 0 results sent, 1 results received, 2 tasks pushed,
    /// 3 tasks pushed in (`titus_core::Transfer`).
    #[serde(default)]
    pub transfers: Vec<[u64; 4]>,
}

/// The start's phases, ns (a simulated start is all `collectives`).
#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize)]
pub struct PhasesRecord {
    /// The input: the rank's history, its prediction (at the root, the front's decision).
    pub input: u64,
    /// The collectives over the fabric.
    pub collectives: u64,
    /// The collectives' time by the start's own phases (`titus_core::start::START_PHASES`:
    /// the scans, the facts, the front's window, the receivers' search...); zero in
    /// timelines written before they were kept.
    #[serde(default)]
    pub collective_phases: [u64; START_PHASES.len()],
    /// The prediction from what they found.
    pub prediction: u64,
    /// The pushes and the queue's start.
    pub pushes: u64,
}

use titus_core::start::START_PHASES;

impl PhasesRecord {
    /// The phases in order, named.
    pub fn named(&self) -> [(&'static str, u64); 4] {
        [
            ("input", self.input),
            ("collectives", self.collectives),
            ("prediction", self.prediction),
            ("pushes", self.pushes),
        ]
    }

    /// The collectives' own phases that took any time, in order (none in a record
    /// without them).
    pub fn collective_named(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        titus_core::start::phases_named(&self.collective_phases)
    }

    /// The phases in order with the collectives split into their own where the record
    /// has them: where a slow start waited.
    pub fn finest(&self) -> Vec<(&'static str, u64)> {
        let mut out = vec![("input", self.input)];
        match self.collective_named().next() {
            Some(_) => out.extend(self.collective_named()),
            None => out.push(("collectives", self.collectives)),
        }
        out.extend([("prediction", self.prediction), ("pushes", self.pushes)]);
        out
    }
}

/// The epoch's figures that the summary reads.
#[derive(Debug, Clone, Copy, Default, serde::Serialize, serde::Deserialize)]
#[allow(missing_docs)]
pub struct StatsRecord {
    pub tasks_run: u64,
    pub tasks_owned: u64,
    pub steals_ok: u64,
    pub steals_empty: u64,
    pub steals_locked: u64,
    pub steals_logged: u64,
    pub tasks_stolen: u64,
    pub tasks_pushed: u64,
    pub bytes_stolen: u64,
    pub bytes_results: u64,
    pub chunks_sent: u64,
    pub chunks_received: u64,
    pub busy_ns: u64,
    pub session_ns: u64,
}

impl StatsRecord {
    /// From an epoch's stats.
    pub fn of(stats: &titus_core::EpochStats) -> Self {
        let c = &stats.core;
        Self {
            tasks_run: c.tasks_run,
            tasks_owned: c.tasks_owned,
            steals_ok: c.steals_ok,
            steals_empty: c.steals_empty,
            steals_locked: c.steals_locked,
            steals_logged: c.steal_log.len() as u64,
            tasks_stolen: c.tasks_stolen,
            tasks_pushed: c.tasks_pushed,
            bytes_stolen: c.bytes_stolen,
            bytes_results: c.bytes_results,
            chunks_sent: c.chunks_sent,
            chunks_received: c.chunks_received,
            busy_ns: stats.busy.as_nanos() as u64,
            session_ns: stats.session.as_nanos() as u64,
        }
    }
}

impl EpochRecord {
    /// What `stats` gives a record of rank `rank`'s epoch `epoch` whose tasks started at
    /// `tasks_from_ns` (the logs' origin): the workers, the protocol, the figures, the
    /// steals and the chunks. The caller adds its times, spans and keys.
    pub fn of(rank: u32, epoch: u64, stats: &titus_core::EpochStats, tasks_from_ns: u64) -> Self {
        Self {
            rank,
            epoch,
            workers: stats.workers,
            protocol: stats.protocol.to_string(),
            clock: String::new(),
            call_ns: 0,
            tasks_from_ns,
            end_ns: 0,
            barrier_ns: stats.core.barrier_at_ns.map(|at| tasks_from_ns + at),
            phases_ns: PhasesRecord::default(),
            stats: StatsRecord::of(stats),
            tasks: Vec::new(),
            keys: Vec::new(),
            idle: Vec::new(),
            steals: steals_of(stats, tasks_from_ns),
            dropped: 0,
            transfers: transfers_of(stats, tasks_from_ns),
        }
    }

    /// The start's barrier on this rank's clock: the end of its collectives, which none
    /// reaches before every rank's facts reached the root, and every rank reaches within
    /// a few messages of the broadcast. `titus trace` lines hosts up on it.
    pub fn start_barrier_ns(&self) -> u64 {
        self.call_ns + self.phases_ns.input + self.phases_ns.collectives
    }

    /// The record with every time moved by `delta_ns` (another clock's reading of it).
    pub fn shift(&mut self, delta_ns: i64) {
        let at = |t: &mut u64| *t = t.saturating_add_signed(delta_ns);
        at(&mut self.call_ns);
        at(&mut self.tasks_from_ns);
        at(&mut self.end_ns);
        self.barrier_ns.iter_mut().for_each(at);
        self.tasks.iter_mut().flatten().for_each(|t| at(&mut t[0]));
        self.idle.iter_mut().for_each(|i| at(&mut i[1]));
        self.steals.iter_mut().for_each(|s| at(&mut s[0]));
        self.transfers.iter_mut().for_each(|c| at(&mut c[0]));
    }
}

/// The clock a rank reads: its kernel's, named by its boot id, which every process and
/// container of one host shares. `TITUS_NODE_ID`, where set, names it instead, as it
/// names the node: tests play hosts on one machine with it.
pub fn clock_domain() -> String {
    use titus_fabric::env_var;
    if let Some(node) = env_var::non_blank(env_var::NODE_ID) {
        return format!("node {node}");
    }
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    format!("boot {}", boot.trim())
}

/// The steals of `stats`' log, at `tasks_from_ns` plus their time: [when, victim, tasks,
/// latency, outcome].
fn steals_of(stats: &titus_core::EpochStats, tasks_from_ns: u64) -> Vec<[u64; 5]> {
    stats
        .core
        .steal_log
        .iter()
        .map(|e| {
            [
                tasks_from_ns + e.at_ns,
                e.victim.into(),
                e.tasks.into(),
                e.latency_ns,
                e.outcome.code(),
            ]
        })
        .collect()
}

/// The chunks of `stats`' transfer log, at `tasks_from_ns` plus their time: [when, peer,
/// bytes, kind].
fn transfers_of(stats: &titus_core::EpochStats, tasks_from_ns: u64) -> Vec<[u64; 4]> {
    stats
        .core
        .transfer_log
        .iter()
        .map(|e| {
            [
                tasks_from_ns + e.at_ns,
                e.peer.into(),
                e.bytes,
                e.kind.code(),
            ]
        })
        .collect()
}

/// Appends `record` to `file` as one line, one write.
pub fn append(file: &mut impl Write, record: &EpochRecord) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(record).map_err(std::io::Error::other)?;
    line.push(b'\n');
    file.write_all(&line)
}

/// A rank's recorder: the workers' buffers and the file.
#[derive(Debug)]
pub(crate) struct Recorder {
    workers: Vec<Mutex<WorkerSpans>>,
    file: Mutex<std::fs::File>,
    path: PathBuf,
    /// The rank's clock's origin, in ns since the Unix epoch.
    origin_unix_ns: u64,
    /// Its [`clock_domain`].
    clock: String,
    rank: u32,
    /// Epochs written.
    epochs: std::sync::atomic::AtomicU64,
}

impl Recorder {
    /// Starts rank `rank`'s trace in `dir` (created if missing; its file truncated), for
    /// `workers` workers whose clock started at `origin`: an unwritable directory fails
    /// here, not at the first epoch's end.
    pub(crate) fn open(
        dir: &Path,
        rank: u32,
        workers: usize,
        origin: Instant,
    ) -> Result<Self, TraceDirError> {
        let err = |source| TraceDirError {
            dir: dir.to_path_buf(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(err)?;
        let path = file_of(dir, rank);
        let file = std::fs::File::create(&path).map_err(err)?;
        let since_origin = origin.elapsed();
        let now_unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Ok(Self {
            workers: (0..workers).map(|_| Mutex::default()).collect(),
            file: Mutex::new(file),
            path,
            origin_unix_ns: now_unix.saturating_sub(since_origin).as_nanos() as u64,
            clock: clock_domain(),
            rank,
            epochs: Default::default(),
        })
    }

    /// An epoch begins: what a failed one left is dropped.
    pub(crate) fn begin_epoch(&self) {
        for spans in &self.workers {
            *crate::lock(spans) = WorkerSpans::default();
        }
    }

    /// Worker `w` ran a task from `start_ns` to `end_ns` (the rank's clock).
    pub(crate) fn task(&self, w: usize, start_ns: u64, end_ns: u64, t: &titus_core::Task) {
        let mut spans = crate::lock(&self.workers[w]);
        if spans.room() {
            spans.tasks.push(TaskSpan {
                start_ns,
                len_ns: end_ns.saturating_sub(start_ns),
                owner: t.owner,
                index: t.index,
                kind: t.kind,
            });
        }
    }

    /// Worker `w` waited for work from `start_ns` for `len_ns` (the rank's clock).
    pub(crate) fn idle(&self, w: usize, start_ns: u64, len_ns: u64) {
        let mut spans = crate::lock(&self.workers[w]);
        if spans.room() {
            spans.idle.push((start_ns, len_ns));
        }
    }

    /// Writes the epoch's record and empties the buffers: its start's phases, the start
    /// of its tasks and its end (the rank's clock), and its stats. An epoch that failed
    /// writes nothing.
    pub(crate) fn write_epoch(
        &self,
        keys: &[u64],
        call_ns: u64,
        phases: PhasesRecord,
        tasks_from_ns: u64,
        end_ns: u64,
        stats: &titus_core::EpochStats,
    ) -> Result<(), TraceDirError> {
        let o = self.origin_unix_ns;
        let epoch = self
            .epochs
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut workers = Vec::new();
        let mut idle = Vec::new();
        let mut dropped = 0;
        for (w, spans) in self.workers.iter().enumerate() {
            let s = std::mem::take(&mut *crate::lock(spans));
            dropped += s.dropped;
            workers.push(
                s.tasks
                    .iter()
                    .map(|t| {
                        [
                            o + t.start_ns,
                            t.len_ns,
                            t.owner.into(),
                            t.index.into(),
                            t.kind.into(),
                        ]
                    })
                    .collect::<Vec<[u64; 5]>>(),
            );
            // A worker's wait may have begun before the epoch (between epochs): clipped
            // to it. After its last span it waited for the epoch's end (a wait that no
            // task ended, which it did not record).
            let last = s
                .tasks
                .iter()
                .map(|t| t.start_ns + t.len_ns)
                .chain(s.idle.iter().map(|&(at, len)| at + len))
                .max()
                .unwrap_or(tasks_from_ns);
            idle.extend(
                s.idle
                    .iter()
                    .copied()
                    .chain(std::iter::once((last, end_ns.saturating_sub(last))))
                    .filter_map(|(at, len)| {
                        let (from, to) = (at.max(call_ns), (at + len).min(end_ns));
                        (from < to).then(|| [w as u64, o + from, to - from])
                    }),
            );
        }
        // (The core logs steals and chunks from the tasks' start on this rank.)
        let record = EpochRecord {
            clock: self.clock.clone(),
            call_ns: o + call_ns,
            end_ns: o + end_ns,
            phases_ns: phases,
            tasks: workers,
            keys: keys.to_vec(),
            idle,
            dropped,
            ..EpochRecord::of(self.rank, epoch, stats, o + tasks_from_ns)
        };
        // One write a record: formatted straight into the file, each number was a
        // system call of its own.
        append(&mut *crate::lock(&self.file), &record).map_err(|source| TraceDirError {
            dir: self.path.clone(),
            source,
        })
    }
}
