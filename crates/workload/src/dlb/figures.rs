//! Each rank's figures, gathered for a report: operations by kind, and connections.

use super::*;

/// One rank's figures of a run, as the report needs them.
#[derive(Debug, Clone, Default)]
pub struct RankFigures {
    /// Worker time running tasks (s).
    pub busy: f64,
    /// The rank's session: start to its end of the epoch (s).
    pub session: f64,
    /// Worker time not running tasks (s).
    pub idle: f64,
    /// Time in steal attempts (s).
    pub steal: f64,
    /// The progress thread's CPU time (s): the runtime's measurement (0 where the OS does
    /// not say); the simulator's node model's share of a core over the session.
    pub progress_cpu: f64,
    /// Remote operations this rank issued.
    pub ops: u64,
    /// Its completed operations by kind ([`titus_core::OP_KINDS`]).
    pub op_latency: [titus_core::OpLatency; titus_core::OP_KINDS.len()],
    /// Its workers' time between tasks where they went straight on (s), and how many
    /// such gaps (`titus_core::EpochStats::between`).
    pub between: f64,
    /// Gaps counted in [`RankFigures::between`].
    pub betweens: u64,
    /// Its workers' takes from its queue (`titus_core::CoreStats::grains`).
    pub grains: u64,
    /// Steal outcomes.
    pub steals_ok: u64,
    /// Steals that found nothing.
    pub steals_empty: u64,
    /// Steals that found the victim locked.
    pub steals_locked: u64,
    /// Task and result bytes moved.
    pub bytes: u64,
    /// Tasks this rank took from victims.
    pub tasks_stolen: u64,
    /// Tasks this rank pushed to lighter neighbours before stealing (diffusion).
    pub tasks_pushed: u64,
    /// Sum of the hops of this rank's results, and how many came home.
    pub hops: u64,
    /// Results home.
    pub homed: u64,
    /// Every result of this rank checked out.
    pub verified: bool,
    /// [`digest`] of this rank's results.
    pub digest: u64,
    /// (seconds from the start, victim, tasks) of each successful steal.
    pub steal_log: Vec<(f64, u32, u32)>,
    /// Connections so far ([`connection_figures`] where they come from a real job).
    pub links: Links,
    /// Its epoch start: from the epoch call to its tasks' start (s), bytes sent,
    /// received and read, messages sent and records read, rounds on its longest chain.
    pub start: f64,
    /// See [`RankFigures::start`].
    pub start_bytes: u64,
    /// See [`RankFigures::start`].
    pub start_messages: u64,
    /// See [`RankFigures::start`].
    pub start_rounds: u64,
    /// Its start's time in each of the start's phases, ns
    /// (`titus_core::start::START_PHASES`).
    pub start_phase_ns: [u64; titus_core::start::START_PHASES.len()],
    /// Its start's bytes in each of the start's phases.
    pub start_phase_bytes: [u64; titus_core::start::START_PHASES.len()],
}

/// Completed operations of one kind on one rank (a report's `op_latency`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct OpFigure {
    /// How many completed.
    pub count: u64,
    /// Their mean time from issue to completion, µs.
    pub mean_us: f64,
}

/// `f`'s operations by kind, those it issued.
pub(super) fn op_figures(f: &RankFigures) -> std::collections::BTreeMap<String, OpFigure> {
    titus_core::OP_KINDS
        .iter()
        .zip(&f.op_latency)
        .filter(|(_, l)| l.count > 0)
        .map(|(k, l)| {
            let fig = OpFigure {
                count: l.count,
                mean_us: l.mean_ns() * 1e-3,
            };
            (k.to_string(), fig)
        })
        .collect()
}

/// One rank's connections and their price, since the job began.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Links {
    /// Distinct ranks it exchanged operations with, either way.
    pub peers: u32,
    /// Connection time charged to it, s.
    pub connect_s: f64,
    /// Memory its connections hold, bytes.
    pub bytes: f64,
}

/// What a rank of a real job knows of its connections ([`connection_figures`] joins
/// every rank's).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RankConnections {
    /// Ranks it operated on (operations are one-sided: only the initiator knows).
    pub contacted: Vec<u32>,
    /// Ranks connected when its fabric opened.
    pub opened: Vec<u32>,
    /// Connection time, s.
    pub connect_s: f64,
    /// Whether peers connect on first contact.
    pub lazy: bool,
    /// Memory per connection, bytes.
    pub bytes_per_connection: f64,
}

impl RankConnections {
    /// As numbers, for a job-wide all-gather.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = vec![
            self.connect_s,
            f64::from(u8::from(self.lazy)),
            self.bytes_per_connection,
            self.contacted.len() as f64,
        ];
        v.extend(self.contacted.iter().map(|&r| f64::from(r)));
        v.extend(self.opened.iter().map(|&r| f64::from(r)));
        encode_f64s(&v)
    }

    /// Decodes [`RankConnections::encode`]; ranks at or above `size` are dropped (a
    /// malformed blob cannot make a rank up).
    pub fn decode(b: &[u8], size: u32) -> Self {
        let v = decode_f64s(b);
        let g = |i: usize| v.get(i).copied().unwrap_or(0.0);
        let n = (g(3).max(0.0) as usize).min(v.len().saturating_sub(4));
        let ranks = |s: &[f64]| -> Vec<u32> {
            s.iter()
                .filter(|x| x.is_finite() && **x >= 0.0 && **x < f64::from(size))
                .map(|&x| x as u32)
                .collect()
        };
        Self {
            connect_s: g(0),
            lazy: g(1) == 1.0,
            bytes_per_connection: g(2),
            contacted: ranks(v.get(4..4 + n).unwrap_or(&[])),
            opened: ranks(v.get(4 + n..).unwrap_or(&[])),
        }
    }
}

/// Each rank's [`Links`] from every rank's connections: the ranks it exchanged operations
/// with are those it contacted and those that contacted it; it holds a connection to each
/// of them, and where its fabric connected at open, to each opened peer as well.
pub fn connection_figures(all: &[RankConnections]) -> Vec<Links> {
    let n = all.len();
    let mut exchanged: Vec<Vec<u32>> = all.iter().map(|c| c.contacted.clone()).collect();
    for (r, c) in all.iter().enumerate() {
        for &p in &c.contacted {
            if let Some(e) = exchanged.get_mut(p as usize) {
                e.push(r as u32);
            }
        }
    }
    (0..n)
        .map(|r| {
            let mut e = std::mem::take(&mut exchanged[r]);
            e.retain(|&p| p as usize != r);
            e.sort_unstable();
            e.dedup();
            let peers = e.len() as u32;
            let c = &all[r];
            if !c.lazy {
                e.extend(c.opened.iter().filter(|&&p| p as usize != r));
                e.sort_unstable();
                e.dedup();
            }
            Links {
                peers,
                connect_s: c.connect_s,
                bytes: e.len() as f64 * c.bytes_per_connection,
            }
        })
        .collect()
}

impl RankFigures {
    /// A rank's figures from its epoch's stats, whoever produced them (the runtime, the
    /// simulator): `digest` of its results ([`digest`]), whether they `verified`, and its
    /// steal log where `steal_log` (a real job gathers it separately). The links come from
    /// the job's connections ([`connection_figures`]).
    pub fn of(st: &titus_core::EpochStats, digest: u64, verified: bool, steal_log: bool) -> Self {
        let c = &st.core;
        Self {
            busy: st.busy.as_secs_f64(),
            session: st.session.as_secs_f64(),
            idle: st.idle.as_secs_f64(),
            steal: st.steal.as_secs_f64(),
            progress_cpu: st.progress_cpu.as_secs_f64(),
            ops: c.ops,
            op_latency: c.op_latency,
            between: st.between.as_secs_f64(),
            betweens: st.betweens,
            grains: c.grains,
            steals_ok: c.steals_ok,
            steals_empty: c.steals_empty,
            steals_locked: c.steals_locked,
            bytes: c.bytes_stolen + c.bytes_results,
            tasks_stolen: c.tasks_stolen,
            tasks_pushed: c.tasks_pushed,
            hops: c
                .result_hops
                .iter()
                .enumerate()
                .map(|(h, n)| h as u64 * n)
                .sum(),
            homed: c.result_hops.iter().sum(),
            verified,
            digest,
            steal_log: match steal_log {
                true => c
                    .steals_got()
                    .map(|e| (e.at_ns as f64 * 1e-9, e.victim, e.tasks))
                    .collect(),
                false => Vec::new(),
            },
            links: Links::default(),
            start: st.start.as_secs_f64(),
            start_bytes: st.start_figures.bytes,
            start_messages: st.start_figures.messages,
            start_rounds: st.start_figures.rounds,
            start_phase_ns: st.start_figures.phase_ns,
            start_phase_bytes: st.start_figures.phase_bytes,
        }
    }

    /// As numbers, for a job-wide all-gather (the steal log travels separately).
    pub fn encode(&self) -> Vec<u8> {
        let mut v = vec![
            self.busy,
            self.session,
            self.idle,
            self.steal,
            self.steals_ok as f64,
            self.steals_empty as f64,
            self.steals_locked as f64,
            self.bytes as f64,
            self.hops as f64,
            self.homed as f64,
            f64::from(u8::from(self.verified)),
            (self.digest >> 32) as f64,
            (self.digest & 0xffff_ffff) as f64,
            self.tasks_stolen as f64,
            self.tasks_pushed as f64,
            self.progress_cpu,
            self.ops as f64,
        ];
        for l in &self.op_latency {
            v.extend([l.count as f64, l.ns as f64]);
        }
        v.extend([self.between, self.betweens as f64, self.grains as f64]);
        v.extend([
            self.start,
            self.start_bytes as f64,
            self.start_messages as f64,
            self.start_rounds as f64,
        ]);
        v.extend(self.start_phase_ns.map(|ns| ns as f64));
        v.extend(self.start_phase_bytes.map(|b| b as f64));
        encode_f64s(&v)
    }

    /// Decodes [`RankFigures::encode`] (missing numbers read as 0).
    pub fn decode(b: &[u8]) -> Self {
        let v = decode_f64s(b);
        let g = |i: usize| v.get(i).copied().unwrap_or(0.0);
        Self {
            busy: g(0),
            session: g(1),
            idle: g(2),
            steal: g(3),
            steals_ok: g(4) as u64,
            steals_empty: g(5) as u64,
            steals_locked: g(6) as u64,
            bytes: g(7) as u64,
            hops: g(8) as u64,
            homed: g(9) as u64,
            verified: g(10) == 1.0,
            digest: (g(11) as u64) << 32 | g(12) as u64,
            tasks_stolen: g(13) as u64,
            tasks_pushed: g(14) as u64,
            progress_cpu: g(15),
            ops: g(16) as u64,
            op_latency: std::array::from_fn(|k| titus_core::OpLatency {
                count: g(17 + 2 * k) as u64,
                ns: g(18 + 2 * k) as u64,
            }),
            between: g(17 + 2 * titus_core::OP_KINDS.len()),
            betweens: g(18 + 2 * titus_core::OP_KINDS.len()) as u64,
            grains: g(19 + 2 * titus_core::OP_KINDS.len()) as u64,
            steal_log: Vec::new(),
            links: Links::default(),
            start: g(20 + 2 * titus_core::OP_KINDS.len()),
            start_bytes: g(21 + 2 * titus_core::OP_KINDS.len()) as u64,
            start_messages: g(22 + 2 * titus_core::OP_KINDS.len()) as u64,
            start_rounds: g(23 + 2 * titus_core::OP_KINDS.len()) as u64,
            start_phase_ns: std::array::from_fn(|k| {
                g(24 + 2 * titus_core::OP_KINDS.len() + k) as u64
            }),
            start_phase_bytes: std::array::from_fn(|k| {
                let phases = titus_core::start::START_PHASES.len();
                g(24 + 2 * titus_core::OP_KINDS.len() + phases + k) as u64
            }),
        }
    }
}
