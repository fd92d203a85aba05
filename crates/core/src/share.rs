//! Work sharing through masters: the `master` and `hierarchical` balancers that Titus is
//! compared against, over the same fabric, signals and task slots as stealing.
//!
//! Ranks form groups (one group of every rank for `master`; for `hierarchical`, groups
//! formed from workload estimates, as YALES2 forms them from previous iterations). Each
//! group has a master: rank 0 for `master`; for `hierarchical` the master token rotates
//! through the group's members, one epoch each.
//!
//! # Protocol (on top of `request`'s serving path)
//!
//! - Members report their queue length to their master with LOAD(epoch, seq, length)
//!   signals whenever it halved or doubled since the last report (O(log n) reports per
//!   fill). The master keeps the newest report of each member (by sequence number) in an
//!   ordered table.
//! - An idle member sends REQUEST to its master, which decides with local state only:
//!   it serves the request from its own queue when it holds at least as much as anyone;
//!   otherwise it FORWARDs the request to the member with the largest estimate (halving
//!   that estimate, as the member will give half away), or answers empty when no member
//!   has two tasks. A forwarded request is served by that member exactly as a `request`
//!   steal: tasks go straight from it to the requester, never through the master.
//! - A master that runs dry brokers for itself the same way.
//!
//! Task bytes never transit through the master, but every decision does: the master's
//! signal load grows with its group, which is what the comparison measures.
//!
//! Epoch tags (8 bits) on LOAD and FORWARD let late signals of an earlier epoch be told
//! apart; a FORWARD of an earlier epoch is answered with nothing, like a stale REQUEST.

use crate::ctx::Ctx;
use crate::fasthash::IntMap;
use crate::layout::signal::{self, SEQ_MASK, Signal};
use crate::neighbours::Neighbours;
use crate::queue::Queue;
use crate::{CoreError, Rank};
use std::collections::{BTreeSet, BinaryHeap};
use std::sync::Arc;

const TAG_MASK: u64 = 0xff;
/// Largest rank a FORWARD can name.
const MAX_RANKS: u32 = 1 << signal::FORWARD_RANK_BITS;

/// Groups and masters of a work-sharing run. Cheap to clone (shared tables).
#[derive(Debug, Clone, PartialEq)]
pub struct Sharing {
    groups: Arc<Vec<Vec<Rank>>>,
    group_of: Arc<Vec<u32>>,
    rotate: bool,
}

impl Sharing {
    /// Centralised sharing: one group of `ranks` ranks, rank 0 its master for good.
    pub fn master(ranks: u32) -> Self {
        Self {
            groups: Arc::new(vec![(0..ranks).collect()]),
            group_of: Arc::new(vec![0; ranks as usize]),
            rotate: false,
        }
    }

    /// Hierarchical sharing over `groups`, which must partition `0..ranks`; with `rotate`
    /// the master of each group is its member `epoch mod len` (in the order given),
    /// otherwise its first member.
    pub fn groups(groups: Vec<Vec<Rank>>, ranks: u32, rotate: bool) -> Result<Self, CoreError> {
        let mut group_of = vec![u32::MAX; ranks as usize];
        for (g, members) in groups.iter().enumerate() {
            if members.is_empty() {
                return Err(crate::ConfigError::EmptyGroup(g).into());
            }
            for &r in members {
                let slot = group_of.get_mut(r as usize).ok_or_else(|| {
                    CoreError::from(crate::ConfigError::GroupRankOutside {
                        group: g,
                        rank: r,
                        ranks,
                    })
                })?;
                if *slot != u32::MAX {
                    return Err(crate::ConfigError::RankInTwoGroups {
                        rank: r,
                        first: *slot,
                        second: g,
                    }
                    .into());
                }
                *slot = g as u32;
            }
        }
        if let Some(r) = group_of.iter().position(|&g| g == u32::MAX) {
            return Err(crate::ConfigError::RankInNoGroup(r as Rank).into());
        }
        Ok(Self {
            groups: Arc::new(groups),
            group_of: Arc::new(group_of),
            rotate,
        })
    }

    /// Groups of at most `group_size` ranks with estimated loads as even as possible
    /// (longest-processing-time first: the heaviest rank joins the lightest group that has
    /// room). `estimates[r]` is rank r's expected work in any unit (YALES2 uses previous
    /// iterations; DLB_Bench uses task counts, since costs are unknown in advance).
    /// Members are listed in rank order.
    pub fn balanced_groups(estimates: &[u64], group_size: u32) -> Vec<Vec<Rank>> {
        let n = estimates.len();
        let size = group_size.max(1) as usize;
        let count = n.div_ceil(size).max(1);
        // Sizes differ by at most one.
        let cap = |g: usize| n / count + usize::from(g < n % count);
        let mut order: Vec<Rank> = (0..n as Rank).collect();
        order.sort_by_key(|&r| (std::cmp::Reverse(estimates[r as usize]), r));
        let mut groups: Vec<Vec<Rank>> = vec![Vec::new(); count];
        // Min-heap on (load, group).
        let mut heap: BinaryHeap<std::cmp::Reverse<(u64, usize)>> =
            (0..count).map(|g| std::cmp::Reverse((0, g))).collect();
        for r in order {
            let std::cmp::Reverse((load, g)) = heap.pop().expect("a group has room");
            groups[g].push(r);
            if groups[g].len() < cap(g) {
                heap.push(std::cmp::Reverse((load + estimates[r as usize], g)));
            }
        }
        for g in &mut groups {
            g.sort_unstable();
        }
        groups
    }

    /// Ranks of the job.
    pub fn ranks(&self) -> u32 {
        self.group_of.len() as u32
    }

    /// The members of `rank`'s group.
    pub fn members(&self, rank: Rank) -> &[Rank] {
        &self.groups[self.group_of[rank as usize] as usize]
    }

    /// The groups.
    pub fn all_groups(&self) -> &[Vec<Rank>] {
        &self.groups
    }

    /// The master of `rank`'s group in `epoch` (epochs count from 1).
    pub fn master_of(&self, rank: Rank, epoch: u64) -> Rank {
        let m = self.members(rank);
        if self.rotate {
            m[(epoch.saturating_sub(1) % m.len() as u64) as usize]
        } else {
            m[0]
        }
    }

    fn same_group(&self, a: Rank, b: Rank) -> bool {
        self.group_of.get(a as usize) == self.group_of.get(b as usize)
    }

    pub(crate) fn check(&self, ranks: u32) -> Result<(), CoreError> {
        if self.ranks() != ranks {
            return Err(crate::ConfigError::GroupsCover {
                covered: self.ranks(),
                ranks,
            }
            .into());
        }
        if ranks > MAX_RANKS {
            return Err(crate::ConfigError::SharingRanks(MAX_RANKS).into());
        }
        Ok(())
    }
}

/// What a master does with a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Serve it from this rank's queue.
    ServeHere,
    /// Passed on to a loaded member, which answers the thief.
    Forwarded,
    /// No member holds two tasks: an empty answer.
    NoWork,
}

/// Work-sharing signals in flight.
#[derive(Debug)]
pub(crate) enum Pending {
    /// LOAD, to the master.
    LoadReport,
    /// FORWARD, to a loaded member.
    Forward,
}

impl Pending {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Self::LoadReport => "load report",
            Self::Forward => "forwarded steal request",
        }
    }
}

/// A rank's sharing state for the current epoch (unused in a work-stealing run).
#[derive(Debug, Default)]
pub(crate) struct ShareState {
    /// This epoch's master of this rank's group.
    master: Rank,
    /// Member side: the length last reported, and the report counter.
    reported: u64,
    report_seq: u64,
    /// Master side: members' positions, newest estimates and report numbers, and the
    /// estimates ordered (largest last).
    pos: IntMap<Rank, usize>,
    loads: Vec<(u64, u64)>,
    order: BTreeSet<(u64, Rank)>,
}

/// Whether seq `a` is newer than `b` (20-bit wrapping counters).
fn newer(a: u64, b: u64) -> bool {
    let d = a.wrapping_sub(b) & 0xf_ffff;
    d != 0 && d < 1 << 19
}

/// The epoch's tag on LOAD and FORWARD.
fn tag<P>(cx: &Ctx<P>) -> u64 {
    cx.epoch & TAG_MASK
}

impl ShareState {
    fn set(&mut self, rank: Rank, load: u64) {
        if let Some(&i) = self.pos.get(&rank) {
            let old = self.loads[i].0;
            self.order.remove(&(old, rank));
            self.order.insert((load, rank));
            self.loads[i].0 = load;
        }
    }

    /// Whether this rank is its group's master this epoch.
    pub(crate) fn is_master<P>(&self, cx: &Ctx<P>) -> bool {
        cx.cfg.sharing.is_some() && self.master == cx.rank
    }

    /// Start of an epoch: this epoch's master and a fresh load table. Returns the
    /// thief's targets (the master, or nobody in a group of one); `None` when the run
    /// steals instead.
    pub(crate) fn start_epoch<P>(&mut self, cx: &Ctx<P>) -> Option<Neighbours> {
        let sh = cx.cfg.sharing.as_ref()?;
        let members = sh.members(cx.rank);
        let master = sh.master_of(cx.rank, cx.epoch);
        self.master = master;
        self.reported = 0;
        self.pos.clear();
        self.loads.clear();
        self.order.clear();
        if master == cx.rank {
            for &m in members.iter().filter(|&&m| m != cx.rank) {
                self.pos.insert(m, self.loads.len());
                self.loads.push((0, 0));
                self.order.insert((0, m));
            }
        }
        Some(Neighbours::List(if members.len() > 1 {
            vec![master]
        } else {
            Vec::new()
        }))
    }

    /// Member side, after every input: report the queue length (`queued`) when it halved
    /// or doubled. `has_master`: the group has another rank to report to.
    pub(crate) fn step<P: From<Pending>>(
        &mut self,
        cx: &mut Ctx<P>,
        queued: usize,
        has_master: bool,
    ) {
        if cx.cfg.sharing.is_none() || self.is_master(cx) || !has_master {
            return;
        }
        let q = queued as u64;
        let last = self.reported;
        if q == last || !(q >= 2 * last || 2 * q <= last) {
            return;
        }
        self.reported = q;
        self.report_seq += 1;
        let report = Signal::Load {
            tag: tag(cx) as u8,
            report: self.report_seq & 0xf_ffff,
            load: q.min(u32::MAX.into()),
        };
        cx.signal(self.master, report, Pending::LoadReport);
    }

    /// Master side: decides a request of `thief` (this rank included). `queue`: the
    /// master's own.
    pub(crate) fn broker<P: From<Pending>>(
        &mut self,
        cx: &mut Ctx<P>,
        thief: Rank,
        seq: u64,
        queue: &Queue,
    ) -> Decision {
        // A rank that asks has (almost) nothing.
        self.set(thief, 0);
        let best = self.order.last().copied().unwrap_or((0, cx.rank));
        let own = queue.len() as u64;
        if thief != cx.rank && queue.shareable(&cx.cfg, false) > 0 && own >= best.0 {
            return Decision::ServeHere;
        }
        if best.0 >= 2 && best.1 != thief {
            self.set(best.1, best.0 - best.0 / 2);
            let forward = Signal::Forward {
                thief,
                tag: tag(cx) as u8,
                seq: seq & SEQ_MASK,
            };
            cx.signal(best.1, forward, Pending::Forward);
            return Decision::Forwarded;
        }
        Decision::NoWork
    }

    /// A LOAD or FORWARD signal. Returns a request to queue for serving, if any:
    /// (thief, stale, seq).
    pub(crate) fn on_signal<P>(
        &mut self,
        cx: &Ctx<P>,
        from: Rank,
        sig: Signal,
    ) -> Result<Option<crate::steal::owner::Request>, CoreError> {
        let Some(sh) = &cx.cfg.sharing else {
            return Err(CoreError::Malformed {
                from,
                what: "a work-sharing signal in a work-stealing run".into(),
            });
        };
        if !sh.same_group(from, cx.rank) {
            return Err(CoreError::Malformed {
                from,
                what: "a work-sharing signal from another group".into(),
            });
        }
        if let Signal::Load {
            tag: t,
            report,
            load,
        } = sig
        {
            if u64::from(t) != tag(cx) {
                return Ok(None); // An earlier epoch's report.
            }
            if !self.is_master(cx) {
                return Err(CoreError::Malformed {
                    from,
                    what: "a load report to a rank that is not its group's master".into(),
                });
            }
            let Some(&i) = self.pos.get(&from) else {
                return Ok(None);
            };
            if newer(report, self.loads[i].1) || self.loads[i].1 == 0 {
                self.loads[i].1 = report;
                self.set(from, load);
            }
            return Ok(None);
        }
        // FORWARD: serve `thief` as if it had asked.
        let Signal::Forward { thief, tag: t, seq } = sig else {
            return Ok(None); // Only LOAD and FORWARD come here.
        };
        let stale = u64::from(t) != tag(cx);
        if thief >= cx.size || !sh.same_group(thief, cx.rank) || thief == cx.rank {
            return Err(CoreError::Malformed {
                from,
                what: format!("a forwarded steal request for rank {thief}"),
            });
        }
        if !stale && from != self.master {
            return Err(CoreError::Malformed {
                from,
                what: "a forwarded steal request from a rank that is not the master".into(),
            });
        }
        Ok(Some(crate::steal::owner::Request {
            thief,
            stale,
            seq,
            workers_idle: false,
            rtype: 0,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn balanced_groups_partition_and_even_out_estimates() {
        // Gaussian-like estimates: the middle ranks hold most.
        let est: Vec<u64> = (0..20u64)
            .map(|r| if (8..12).contains(&r) { 100 } else { 1 })
            .collect();
        let groups = Sharing::balanced_groups(&est, 5);
        assert_eq!(groups.len(), 4);
        let mut seen: Vec<Rank> = groups.iter().flatten().copied().collect();
        seen.sort_unstable();
        assert_eq!(seen, (0..20).collect::<Vec<_>>());
        for g in &groups {
            assert_eq!(g.len(), 5);
            // Each group got exactly one heavy rank.
            assert_eq!(g.iter().filter(|&&r| est[r as usize] == 100).count(), 1);
        }
        let sh = Sharing::groups(groups, 20, true).unwrap();
        // The master rotates through the group's members, one epoch each.
        let m = sh.members(0).to_vec();
        assert_eq!(sh.master_of(0, 1), m[0]);
        assert_eq!(sh.master_of(0, 2), m[1]);
        assert_eq!(sh.master_of(0, 1 + m.len() as u64), m[0]);
        // Sizes differ by at most one when N is not a multiple.
        let g = Sharing::balanced_groups(&[1; 7], 3);
        let mut sizes: Vec<usize> = g.iter().map(Vec::len).collect();
        sizes.sort_unstable();
        assert_eq!(sizes, vec![2, 2, 3]);
    }

    #[test]
    fn groups_must_partition_the_ranks() {
        let e = Sharing::groups(vec![vec![0, 1], vec![1, 2]], 3, false).unwrap_err();
        assert!(
            e.to_string()
                .contains("rank 1 is in sharing groups 0 and 1"),
            "{e}"
        );
        let e = Sharing::groups(vec![vec![0, 1]], 3, false).unwrap_err();
        assert!(
            e.to_string().contains("rank 2 is in no sharing group"),
            "{e}"
        );
        let e = Sharing::groups(vec![vec![0, 5]], 3, false).unwrap_err();
        assert!(e.to_string().contains("outside a job of 3"), "{e}");
        let e = Sharing::groups(vec![vec![0, 1, 2], vec![]], 3, false).unwrap_err();
        assert!(e.to_string().contains("group 1 is empty"), "{e}");
        assert_eq!(Sharing::master(4).master_of(3, 9), 0);
    }

    #[test]
    fn report_numbers_wrap() {
        assert!(newer(5, 4));
        assert!(!newer(4, 5));
        assert!(newer(0, 0xf_ffff));
        assert!(!newer(7, 7));
    }
}
