//! Pushes awaited: while diffusion's givers (the neighbours' plan) or the string
//! plan's pushes are still coming here, the thief leaves them (or everyone) alone, up
//! to `push_wait` after the last chunk.

use super::Thief;
use crate::{Rank, Time};

/// A string plan's receiver waits for its first chunk up to this fraction (1/32) of the
/// work owed to it: idle that long costs at most 3% of its epoch, against a costly task's
/// worth of tail when it steals too early (at 3,584 simulated ranks chunks came 17 ms
/// into 1 s epochs; 1/64 was not enough).
pub(crate) const FIRST_PUSH_SHARE: u64 = 32;

impl Thief {
    /// Diffusion: `ranks` push tasks here this epoch; leave them alone until `until`,
    /// and while their pushes keep arriving ([`Thief::push_arrived`]): a steal meanwhile
    /// would take half of what the giver kept on top of what it sends.
    pub(crate) fn hold_for_push(&mut self, ranks: &[Rank], now: Time, until: Time) {
        self.push_givers = ranks.len();
        self.push_until = until;
        for &r in ranks {
            if let Some(i) = self.targets.index_of(r) {
                self.backoff.hold(i, until, now);
            }
        }
    }

    /// Diffusion: a chunk of `rank`'s push arrived at `now`: after its `last`, the giver
    /// may be stolen from at once; before, it stays alone for another `push_wait` (the
    /// bound, should the rest never come).
    pub(crate) fn push_arrived(&mut self, rank: Rank, last: bool, now: Time, cfg: &crate::Config) {
        if last {
            self.push_givers = self.push_givers.saturating_sub(1);
        } else {
            self.push_until = self.push_until.max(now.plus(cfg.push_wait));
        }
        if let Some(i) = self.targets.index_of(rank) {
            if last {
                self.backoff.release(i);
            } else {
                self.backoff.hold(i, now.plus(cfg.push_wait), now);
            }
        }
    }

    /// The string plan: `ns` of predicted work is pushed here this epoch, routed through
    /// the overlay from ranks that need not be neighbours: steal from nobody until all
    /// but an eighth of it arrived, or `push_wait` passed since the last chunk came (the
    /// bound, should the rest never come). The first chunk is awaited longer, up to
    /// 1/[`FIRST_PUSH_SHARE`] of what is owed: a pile's owner pushes to hundreds of
    /// receivers in turn, and a receiver that steals meanwhile takes half of a
    /// neighbour's share, then gets its own on top (1,024 simulated ranks: the first
    /// chunks came up to 13 ms after the start, and the costly tasks taken twice ran at
    /// the end, an epoch at 0.928).
    pub(crate) fn expect_push(&mut self, ns: u64, now: Time, cfg: &crate::Config) {
        self.push_expected = ns;
        self.push_left = ns;
        if ns > 0 {
            let first = std::time::Duration::from_nanos(ns / FIRST_PUSH_SHARE);
            self.push_until = now.plus(cfg.push_wait.max(first));
            self.backoff.pause_until(self.push_until);
        }
    }

    /// The string plan: tasks of `ns` predicted work, pushed here, arrived at `now`.
    pub(crate) fn pushed_here(&mut self, ns: u64, now: Time, cfg: &crate::Config) {
        if self.push_left == 0 {
            return;
        }
        self.push_left = self.push_left.saturating_sub(ns);
        if self.push_left <= self.push_expected / 8 {
            self.push_left = 0;
            self.backoff.unpause();
        } else {
            self.push_until = now.plus(cfg.push_wait);
            self.backoff.pause_until(self.push_until);
        }
    }

    /// Diffusion: while pushes are still coming here (the string plan: more than an
    /// eighth of what is owed; the neighbours': a giver's last chunk), until when at most
    /// (`push_wait` after the last chunk). `None`: nothing is awaited.
    pub(crate) fn push_hold(&self, now: Time) -> Option<Time> {
        (now < self.push_until && (self.push_left > 0 || self.push_givers > 0))
            .then_some(self.push_until)
    }
}
