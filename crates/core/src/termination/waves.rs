//! Waves: termination while the bag grows (a job that spawns, `crate::spawn`).
//!
//! With a fixed bag a rank that has every result of its own tasks home stays so, and one
//! pass up the tree ends the epoch. A spawned task belongs to no owner's list, so no rank
//! can know alone that none is left. The tree instead runs waves of counts, the four-counter
//! method (Mattern, 1987), with a rank's spawned tasks as the messages:
//!
//! 1. In wave w, a rank reports once it is locally complete (its own tasks' results are
//!    home), its queue is empty and its workers found nothing (otherwise the wave could
//!    not succeed: reporting later saves waves), and each child's report for w arrived.
//!    Its report is its subtree's sums of spawned tasks *created* (handed to it by a
//!    running task) and *completed* (reported done on it), and its partial of the
//!    spawned results' reduction. It writes the report into its parent's slot for it
//!    and signals UP(w).
//! 2. The root, in the same state, holds the job's sums for wave w. If created equals
//!    completed and both equal wave w − 1's sums, the epoch is over: DONE goes down
//!    the tree with the job's reduction. Otherwise DONE(again, w + 1) goes down and every
//!    rank reports again.
//!
//! Where spawned results travel home (`Spawning::routes_home`), each is a second
//! message: sent when its task completes, received when it is *delivered* to its owner.
//! The report carries the subtree's deliveries too, and the root also asks that
//! delivered equal completed, stable over the two waves: the same argument then shows no
//! result in a buffer, a chunk or an inbox on its way home. (A rank reports only once its
//! own outbound buffers are empty; records it forwards later just fail a wave.)
//!
//! Why the end is right. The counters only grow. Every rank's wave-w reading precedes
//! the root's decision on w, which precedes every wave-(w + 1) reading. Equal sums in two
//! waves mean every rank's counters stood still between its two readings, so at the
//! moment the root decided on w − 1 the job held exactly the readings' sums: every
//! spawned task created by then had completed. A task that completes has handed over its
//! children first (`Node::spawned` before `Node::task_done`), so none was running; and
//! every rank was locally complete (that stays true), so no epoch task was running
//! either. Nothing was left that could spawn, and nothing was queued or in a steal: a
//! stolen task was created and not completed. The end needs two waves after the last
//! task; waves go on only while every rank is idle, so they do not spin.
//!
//! Slots: a rank's report lands in its parent's `UP_IN[place]` (place 0 for child 2r + 1,
//! 1 for 2r + 2), the job's reduction in a child's `DOWN_IN`; each is staged in the
//! sender's own `UP_OUT` or `DOWN_OUT` first. A slot is written again only after its
//! reader answered (a child reports w + 1 only after DONE(again, w + 1), which the parent
//! sends only after it read every report for w), so none is overwritten unread. Every
//! field read from a slot is checked: the wave it names, and sums that overflow. (A
//! wave's sums may show more completed than created: a task created after its spawner's
//! reading and completed before its thief's. Such a wave just does not end the epoch.)

use crate::layout::seg;
use crate::spawn::{LANES_MAX, Spawning};
use crate::{CoreError, Loc, Memory, Rank};

/// Words of a report before its lanes: wave, created, completed, delivered.
const COUNTS: usize = 4;
/// Bytes of one slot: the counts, then the lanes.
pub(crate) const SLOT: u64 = 8 * (COUNTS as u64 + LANES_MAX as u64);
/// A child's report, by its place.
const UP_IN: [u64; 2] = [0, SLOT];
/// The job's reduction, from the parent.
const DOWN_IN: u64 = 2 * SLOT;
/// This rank's report, staged.
const UP_OUT: u64 = 3 * SLOT;
/// The job's reduction, staged for the children.
const DOWN_OUT: u64 = 4 * SLOT;
/// Bytes of the region (after the start's part of the START segment).
pub(crate) const REGION: u64 = 5 * SLOT;

/// Waves are numbered modulo 2^28 on the wire (`layout::signal::WAVE_BITS`).
pub(crate) const WAVE_MASK: u32 = (1 << crate::layout::signal::WAVE_BITS) - 1;

/// What a rank (or a subtree) reports in a wave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Report {
    /// Spawned tasks created.
    pub(crate) created: u64,
    /// Spawned tasks completed.
    pub(crate) completed: u64,
    /// Spawned results delivered home (a job that routes them home).
    pub(crate) delivered: u64,
    /// The partial of the spawned results' reduction.
    pub(crate) lanes: Vec<u64>,
}

impl Report {
    /// Adds `other`, the report of the child `from` (its subtree): a sum that overflows
    /// is a malformed report; a combine that panics on its partial fails the epoch.
    fn absorb(&mut self, other: &Report, spawning: &Spawning, from: Rank) -> Result<(), CoreError> {
        let overflow = || CoreError::Malformed {
            from,
            what: "termination wave: the subtree's counts overflow".into(),
        };
        self.created = self
            .created
            .checked_add(other.created)
            .ok_or_else(overflow)?;
        self.completed = self
            .completed
            .checked_add(other.completed)
            .ok_or_else(overflow)?;
        self.delivered = self
            .delivered
            .checked_add(other.delivered)
            .ok_or_else(overflow)?;
        spawning
            .combine(&mut self.lanes, &other.lanes)
            .map_err(|detail| CoreError::TaskFailed {
                owner: from,
                index: crate::spawn::SPAWNED_INDEX,
                ran_on: from,
                detail: format!("combining the partial of rank {from}'s subtree: {detail}"),
            })
    }

    fn encode(&self, wave: u32) -> Vec<u8> {
        [
            u64::from(wave),
            self.created,
            self.completed,
            self.delivered,
        ]
        .iter()
        .chain(&self.lanes)
        .flat_map(|v| v.to_le_bytes())
        .collect()
    }
}

fn words(mem: &dyn Memory, at: u64, n: usize) -> Vec<u64> {
    let mut bytes = vec![0u8; n * 8];
    mem.read(Loc::new(seg::START, at), &mut bytes);
    bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect()
}

/// What a rank does next in the waves.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Next {
    /// Nothing yet.
    Wait,
    /// Write this report (staged at `from`, `len` bytes) to the parent's slot, with UP(wave).
    Report {
        from: Loc,
        to: Loc,
        len: u64,
        wave: u32,
    },
    /// The root: the next wave begins (DONE(again, wave) to the children).
    Again { wave: u32 },
    /// The root: the epoch is over, with the job's reduction.
    End,
}

/// One rank's part in the waves of an epoch.
#[derive(Debug)]
pub(crate) struct Waves {
    spawning: Spawning,
    /// Where the slots begin in the START segment.
    base: u64,
    /// The current wave.
    wave: u32,
    /// The children's reports for it, by place.
    reports: [Option<Report>; 2],
    /// This rank's report for it went up (the root: was judged).
    sent: bool,
    /// The root: the previous wave's sums (created, completed, delivered).
    last: Option<(u64, u64, u64)>,
    /// The job's reduction, once the epoch is over.
    total: Option<Vec<u64>>,
}

impl Waves {
    pub(crate) fn new(spawning: Spawning, base: u64) -> Self {
        Self {
            spawning,
            base,
            wave: 0,
            reports: [None, None],
            sent: false,
            last: None,
            total: None,
        }
    }

    /// Whether this rank's report for the current wave went up.
    pub(crate) fn sent(&self) -> bool {
        self.sent
    }

    /// The current wave.
    pub(crate) fn wave(&self) -> u32 {
        self.wave
    }

    /// The job's reduction, once the epoch ended.
    pub(crate) fn total(&self) -> Option<&[u64]> {
        self.total.as_deref()
    }

    /// Whether the child at `place` reported in this wave.
    pub(crate) fn has_report(&self, place: usize) -> bool {
        self.reports[place].is_some()
    }

    /// Step 1 (and 2 at the root): this rank is `ready` (complete, queue empty, workers
    /// idle), with its `own` counts (asked only when it reports) and its children in
    /// the tree. `mem` stages the report.
    pub(crate) fn step(
        &mut self,
        mem: &dyn Memory,
        ready: bool,
        own: impl FnOnce() -> Report,
        child_ranks: &[Rank],
        has_parent: bool,
        place_at_parent: usize,
    ) -> Result<Next, CoreError> {
        let children = child_ranks.len();
        if self.sent || !ready || self.reports.iter().take(children).any(Option::is_none) {
            return Ok(Next::Wait);
        }
        let mut sums = own();
        for (place, r) in self.reports.iter().take(children).enumerate() {
            // (Each child's report was checked on arrival; its sums with ours can still
            // overflow if a child lied.)
            let r = r.as_ref().expect("every child reported");
            sums.absorb(r, &self.spawning, child_ranks[place])?;
        }
        self.sent = true;
        if !has_parent {
            let counts = (sums.created, sums.completed, sums.delivered);
            // Every completed task's result is home, where results travel home.
            let home = !self.spawning.routes_home() || sums.delivered == sums.completed;
            if sums.created == sums.completed && home && self.last == Some(counts) {
                self.total = Some(sums.lanes);
                return Ok(Next::End);
            }
            self.last = Some(counts);
            self.advance();
            return Ok(Next::Again { wave: self.wave });
        };
        let bytes = sums.encode(self.wave & WAVE_MASK);
        let from = Loc::new(seg::START, self.base + UP_OUT);
        mem.write(from, &bytes);
        Ok(Next::Report {
            from,
            to: Loc::new(seg::START, self.base + UP_IN[place_at_parent]),
            len: bytes.len() as u64,
            wave: self.wave & WAVE_MASK,
        })
    }

    fn advance(&mut self) {
        self.wave = self.wave.wrapping_add(1);
        self.reports = [None, None];
        self.sent = false;
    }

    /// UP(wave) from the child at `place`: its report is in our slot.
    pub(crate) fn on_up(
        &mut self,
        mem: &dyn Memory,
        from: Rank,
        place: usize,
        wave: u32,
    ) -> Result<(), CoreError> {
        let bad = |what: String| CoreError::Malformed {
            from,
            what: format!("termination wave report: {what}"),
        };
        if wave != self.wave & WAVE_MASK || self.reports[place].is_some() {
            return Err(bad(format!(
                "UP for wave {wave} while this rank is in wave {} (its report {})",
                self.wave & WAVE_MASK,
                if self.reports[place].is_some() {
                    "already arrived"
                } else {
                    "is awaited"
                }
            )));
        }
        let lanes = self.spawning.lanes.len();
        let w = words(mem, self.base + UP_IN[place], COUNTS + lanes);
        if w[0] != u64::from(wave) {
            return Err(bad(format!(
                "the slot names wave {}, the signal wave {wave}",
                w[0]
            )));
        }
        // (A subtree may have completed more than it created: stolen tasks. Only the
        // job's sums are bound, and the root compares them.)
        self.reports[place] = Some(Report {
            created: w[1],
            completed: w[2],
            delivered: w[3],
            lanes: w[COUNTS..].to_vec(),
        });
        Ok(())
    }

    /// DONE(again, wave) from the parent: the next wave begins here. It must follow this
    /// rank's report of the wave before.
    pub(crate) fn on_again(&mut self, from: Rank, wave: u32) -> Result<(), CoreError> {
        if !self.sent || wave != self.wave.wrapping_add(1) & WAVE_MASK {
            return Err(CoreError::Malformed {
                from,
                what: format!(
                    "termination wave {wave} began while this rank {} wave {}",
                    if self.sent {
                        "had reported"
                    } else {
                        "had not yet reported"
                    },
                    self.wave & WAVE_MASK
                ),
            });
        }
        self.advance();
        Ok(())
    }

    /// DONE from the parent: the job's reduction is in our slot.
    pub(crate) fn on_end(&mut self, mem: &dyn Memory, from: Rank) -> Result<(), CoreError> {
        let lanes = self.spawning.lanes.len();
        let w = words(mem, self.base + DOWN_IN, 1 + lanes);
        if w[0] != u64::from(self.wave & WAVE_MASK) || !self.sent {
            return Err(CoreError::Malformed {
                from,
                what: format!(
                    "termination DONE for wave {} while this rank is in wave {}{}",
                    w[0],
                    self.wave & WAVE_MASK,
                    if self.sent {
                        ""
                    } else {
                        " and has not reported"
                    }
                ),
            });
        }
        self.total = Some(w[1..].to_vec());
        Ok(())
    }

    /// The job's reduction, staged for the children: (from, their slot, length).
    pub(crate) fn stage_end(&self, mem: &dyn Memory) -> (Loc, Loc, u64) {
        let bytes: Vec<u8> = std::iter::once(u64::from(self.wave & WAVE_MASK))
            .chain(self.total.iter().flatten().copied())
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let from = Loc::new(seg::START, self.base + DOWN_OUT);
        mem.write(from, &bytes);
        (
            from,
            Loc::new(seg::START, self.base + DOWN_IN),
            bytes.len() as u64,
        )
    }
}
