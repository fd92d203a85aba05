//! Per-type requests (`Config::resource_types`).
//!
//! Under `request` (stealing, no work sharing) a rank with resource types asks for work
//! of a *starved* type only — one whose idle instances find nothing runnable in the queue
//! (the node computes it), accelerators before the CPU (the highest type first, as
//! BOINC's work fetch asks for its coprocessors first, then the starved types in turn) — and
//! the REQUEST carries the type.
//! The victim answers with tasks of that type's kinds, nothing, or *unsupported* (no task
//! of those kinds was ever queued there this epoch). Backoff is kept per (victim, type):
//! nothing doubles it, unsupported holds the victim off for that type for 16 × the longest
//! backoff (not for good: work of the type may still reach it), work clears it. Among the
//! victims ready for the type the thief asks one that gave last time (or was never
//! asked), else one with the fewest nothing-answers in a row, and among those the one it
//! owes most: its *debt* is an equal share of all the work this thief fetched this epoch
//! less what it fetched from that victim, counted in estimated CPU time — instance-seconds
//! weighted by speed, since a task's estimate is its cost on a CPU worker wherever it
//! runs (BOINC's long-term debt summed over resources by speed). A victim that has
//! supplied nothing yet is owed most. Rows of more than [`DEBT_SCAN_MAX`] targets (the
//! complete graph at scale) draw a ready victim instead.
//!
//! A thief whose queue is dry and whose starved types have no ready victim left (each
//! answered nothing or unsupported) steals any work, as without types: over a sparse
//! overlay a task may sit on ranks none of whose in-neighbours can run it, and such
//! relays carry it on until a rank that can run it asks (the victim keeps no task
//! private that it cannot run itself, and its mapper cannot keep one either).

use super::{Pending, Thief};
use crate::ctx::Ctx;
use crate::neighbours::Backoff;
use crate::{Protocol, Rank};

/// Per-type requests scan at most this many targets for the most owed one.
pub(crate) const DEBT_SCAN_MAX: usize = 256;

/// Per-type requests: per type, each target's backoff; the work fetched per victim.
#[derive(Debug, Default)]
pub(super) struct Typed {
    pub(super) backoff: Vec<Backoff>,
    /// Estimated work fetched this epoch per victim, and in all (ns).
    pub(super) fetched: crate::fasthash::IntMap<Rank, f64>,
    pub(super) total: f64,
    /// The type asked for last.
    pub(super) last: Option<usize>,
}

impl Typed {
    /// What this thief owes `victim`: an equal share of the work fetched less its part.
    fn debt(&self, victim: Rank) -> f64 {
        let n = self.fetched.len().max(1) as f64;
        self.total / n - self.fetched.get(&victim).copied().unwrap_or(0.0)
    }
}

/// Whether this job's thieves make per-type requests.
pub(crate) fn typed(cfg: &crate::Config) -> bool {
    !cfg.resource_types.is_empty() && cfg.protocol == Protocol::Request && cfg.sharing.is_none()
}

impl Thief {
    /// A typed request for the first starved type with a ready target, to the target owed
    /// most (module doc). False if no starved type has one.
    pub(super) fn step_typed<P: From<Pending>>(&mut self, cx: &mut Ctx<P>, short: u64) -> bool {
        let now = cx.now;
        let types = self.typed.backoff.len();
        // The highest starved type first, then in turn (one type whose victims keep
        // answering nothing must not starve the others).
        let start = self.typed.last.map_or(types, |l| l.min(types));
        let order = (0..start).rev().chain((start..types).rev());
        for t in order.filter(|t| short >> t & 1 == 1) {
            let b = &self.typed.backoff[t];
            let victim = if self.targets.len() <= DEBT_SCAN_MAX {
                // A victim whose last answer for the type was nothing ranks below any
                // that gave (BOINC's D(P, R) flag): one that never supplies is owed
                // most, and must not crowd out one with work. Among those that answered
                // nothing, fewer such answers in a row first: two victims owed most that
                // keep answering nothing would otherwise take every request (each ready
                // again by the time the other answered) while a third, owed less, holds
                // the only work of the type.
                let mut best: Option<((std::cmp::Reverse<u32>, f64), usize)> = None;
                let mut ties = 0u64;
                for i in (0..self.targets.len()).filter(|&i| b.is_ready(i, now)) {
                    let d = (
                        std::cmp::Reverse(b.failures(i)),
                        self.typed.debt(self.targets.at(i)),
                    );
                    match best {
                        Some((bd, _)) if d < bd => {}
                        Some((bd, _)) if d == bd => {
                            ties += 1;
                            if self.rng.below(ties) == 0 {
                                best = Some((d, i));
                            }
                        }
                        _ => {
                            best = Some((d, i));
                            ties = 1;
                        }
                    }
                }
                best.map(|(_, i)| i)
            } else {
                b.pick_ready(now, &mut self.rng)
            };
            let Some(victim) = victim else { continue };
            self.typed.last = Some(t);
            let rtype = t as u16 + 1;
            let seq = self.begin(cx, victim, rtype);
            self.send_request(cx, victim, seq, rtype);
            return true;
        }
        false
    }
}
