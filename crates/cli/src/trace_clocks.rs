//! Lining up the clocks of several hosts in `titus trace`. A rank's times are its host's
//! wall clock: exact among the ranks of one host, but hosts disagree by as much as their
//! time service lets them (milliseconds under NTP), more than a task lasts.
//!
//! Every epoch's start is a barrier: no rank ends its start's collectives before every
//! rank's facts reached the root, and all end them within a few messages of the root's
//! broadcast. So a host's offset from the reference host (rank 0's) is where its ranks
//! passed that barrier against where the reference's did. A rank passes it late, never
//! early (a busy core, a slow message), so each host counts its first rank through, and
//! the offset is the median over the epochs both hold. The ranks of one host move
//! together, so what one clock measured stays exact; the error is about one message's
//! latency, and the spread of the per-epoch offsets says how well the estimate holds.

use std::collections::{BTreeMap, BTreeSet};
use titus_runtime::trace::EpochRecord;

/// How one host's ranks were moved.
#[derive(Debug, Clone, PartialEq)]
pub struct ClockShift {
    /// The host's clock (`EpochRecord::clock`).
    pub clock: String,
    /// Its ranks.
    pub ranks: Vec<u32>,
    /// Added to each of its times, ns.
    pub shift_ns: i64,
    /// The epochs the estimate came from.
    pub epochs: usize,
    /// The largest and the smallest per-epoch offsets apart, ns.
    pub spread_ns: u64,
}

/// The median of `v` (the lower of the middle two), or `None` when it is empty.
fn median<T: Ord + Copy>(v: &mut [T]) -> Option<T> {
    v.sort_unstable();
    (!v.is_empty()).then(|| v[(v.len() - 1) / 2])
}

/// Moves every host's ranks onto the clock of the host of the lowest rank, at the epochs'
/// start barriers, and says how. Records of one clock are left as they are, and so is a
/// host that shares no epoch with the reference (there is nothing to line it up with).
pub fn align(records: &mut [EpochRecord]) -> Vec<ClockShift> {
    let Some(reference) = records
        .iter()
        .min_by_key(|r| r.rank)
        .map(|r| r.clock.clone())
    else {
        return Vec::new();
    };
    // clock → epoch → its first rank through the barrier; clock → its ranks.
    let mut first: BTreeMap<&str, BTreeMap<u64, i128>> = BTreeMap::new();
    let mut ranks: BTreeMap<&str, BTreeSet<u32>> = BTreeMap::new();
    for r in records.iter() {
        let at = i128::from(r.start_barrier_ns());
        first
            .entry(&r.clock)
            .or_default()
            .entry(r.epoch)
            .and_modify(|t| *t = (*t).min(at))
            .or_insert(at);
        ranks.entry(&r.clock).or_default().insert(r.rank);
    }
    let at_reference = &first[reference.as_str()];
    let mut shifts = Vec::new();
    for (clock, epochs) in &first {
        if *clock == reference {
            continue;
        }
        let mut offsets: Vec<i128> = epochs
            .iter()
            .filter_map(|(e, theirs)| Some(at_reference.get(e)? - theirs))
            .collect();
        let Some(offset) = median(&mut offsets) else {
            continue;
        };
        shifts.push(ClockShift {
            clock: clock.to_string(),
            ranks: ranks[clock].iter().copied().collect(),
            shift_ns: offset.clamp(i64::MIN.into(), i64::MAX.into()) as i64,
            epochs: offsets.len(),
            spread_ns: (offsets[offsets.len() - 1] - offsets[0]).unsigned_abs() as u64,
        });
    }
    for r in records.iter_mut() {
        if let Some(s) = shifts.iter().find(|s| s.clock == r.clock) {
            r.shift(s.shift_ns);
        }
    }
    shifts
}

/// One line a moved host: its ranks, the shift and the estimate's spread.
pub fn describe(shifts: &[ClockShift]) -> String {
    shifts
        .iter()
        .map(|s| {
            let ranks = match (s.ranks.first(), s.ranks.last()) {
                (Some(a), Some(b)) if a != b => format!("ranks {a}-{b}"),
                (Some(a), _) => format!("rank {a}"),
                _ => String::new(),
            };
            format!(
                "clocks: {ranks} ({}) shifted by {:+.3} ms to rank 0's host, at {} epochs' start barriers (spread {:.3} ms)\n",
                s.clock,
                s.shift_ns as f64 / 1e6,
                s.epochs,
                s.spread_ns as f64 / 1e6
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rank `rank` on `clock`, epoch `epoch`: called at `call`, its collectives ending
    /// 1 ms later, one task at `call` + 2 ms.
    fn record(rank: u32, clock: &str, epoch: u64, call: u64) -> EpochRecord {
        let line = serde_json::json!({
            "rank": rank, "epoch": epoch, "workers": 1, "protocol": "claim",
            "clock": clock, "call_ns": call, "tasks_from_ns": call + 2_000_000,
            "end_ns": call + 9_000_000, "barrier_ns": call + 8_000_000,
            "phases_ns": {"input": 0, "collectives": 1_000_000, "prediction": 0, "pushes": 0},
            "stats": {"tasks_run": 1, "tasks_owned": 1, "steals_ok": 0, "steals_empty": 0,
                "steals_locked": 0, "steals_logged": 0, "tasks_stolen": 0, "tasks_pushed": 0,
                "bytes_stolen": 0, "bytes_results": 0, "chunks_sent": 0, "chunks_received": 0,
                "busy_ns": 0, "session_ns": 0},
            "tasks": [[[call + 2_000_000, 5_000_000, rank, 0, 0]]],
            "idle": [[0, call + 7_000_000, 2_000_000]],
            "steals": [[call + 3_000_000, 0, 1, 1000, 0]],
            "dropped": 0,
            "transfers": [[call + 4_000_000, 0, 64, 0]],
        });
        serde_json::from_value(line).unwrap()
    }

    #[test]
    fn a_host_whose_clock_runs_ahead_is_moved_back_whole() {
        let skew = 5_000_000_000u64;
        let mut records = Vec::new();
        for e in 0..5u64 {
            let t = 1_000_000_000 + e * 20_000_000;
            // Host a: ranks 0 and 1; host b: ranks 2 and 3, 5 s ahead, one message late.
            records.push(record(0, "a", e, t));
            records.push(record(1, "a", e, t + 100_000));
            records.push(record(2, "b", e, t + skew + 30_000));
            records.push(record(3, "b", e, t + skew + 50_000));
        }
        let before: Vec<EpochRecord> = records.clone();
        let shifts = align(&mut records);
        assert_eq!(shifts.len(), 1, "{shifts:?}");
        let s = &shifts[0];
        assert_eq!(
            (s.clock.as_str(), s.ranks.clone(), s.epochs),
            ("b", vec![2, 3], 5)
        );
        // Lined up within the barrier's own skew, 0.1 ms, not 5 s.
        assert!((s.shift_ns + skew as i64).abs() <= 100_000, "{s:?}");
        assert_eq!(s.spread_ns, 0);
        for (r, b) in records.iter().zip(&before) {
            let d = if r.clock == "b" { s.shift_ns } else { 0 };
            let moved = |x: u64| x.saturating_add_signed(d);
            assert_eq!(r.call_ns, moved(b.call_ns));
            assert_eq!(r.end_ns, moved(b.end_ns));
            assert_eq!(r.barrier_ns, b.barrier_ns.map(moved));
            assert_eq!(r.tasks_from_ns, moved(b.tasks_from_ns));
            assert_eq!(r.tasks[0][0][0], moved(b.tasks[0][0][0]));
            assert_eq!(r.idle[0][1], moved(b.idle[0][1]));
            assert_eq!(r.steals[0][0], moved(b.steals[0][0]));
            assert_eq!(r.transfers[0][0], moved(b.transfers[0][0]));
            // What one clock measured stays as it was.
            assert_eq!(r.tasks[0][0][1], b.tasks[0][0][1]);
        }
        assert!(
            describe(&shifts).contains("ranks 2-3 (b) shifted by -5000.030 ms"),
            "{}",
            describe(&shifts)
        );
    }

    #[test]
    fn one_clock_is_left_as_it_is() {
        let mut records: Vec<EpochRecord> = (0..4)
            .map(|r| record(r, "", 0, 1_000_000 + u64::from(r) * 7_000_000))
            .collect();
        let before = records.clone();
        assert!(align(&mut records).is_empty());
        for (r, b) in records.iter().zip(&before) {
            assert_eq!((r.call_ns, r.end_ns), (b.call_ns, b.end_ns));
        }
    }

    #[test]
    fn a_late_rank_does_not_move_its_host() {
        // Host b's rank 3 reaches the barrier 40 ms late in one epoch, and in another
        // the whole host does (a paused process, a paused host): the first rank through
        // and the median over epochs keep the estimate where the other readings are.
        let mut records = Vec::new();
        for e in 0..3u64 {
            let t = 2_000_000_000 + e * 100_000_000;
            records.push(record(0, "a", e, t));
            let late = if e == 1 { 40_000_000 } else { 0 };
            let host_late = if e == 2 { 9_000_000 } else { 0 };
            records.push(record(1, "b", e, t - 3_000_000 + host_late));
            records.push(record(2, "b", e, t - 3_000_000 + host_late));
            records.push(record(3, "b", e, t - 3_000_000 + late + host_late));
        }
        let shifts = align(&mut records);
        assert_eq!(shifts[0].shift_ns, 3_000_000);
        assert_eq!(shifts[0].spread_ns, 9_000_000);
    }
}
