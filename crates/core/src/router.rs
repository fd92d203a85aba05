//! Where a result goes next: this rank's out-neighbours (also its victims) and the
//! overlay's routing rule, evaluated locally with the rows of this rank and its
//! out-neighbours (NoN looks two hops ahead), decisions cached.

use crate::fasthash::IntMap;
use crate::neighbours::Neighbours;
use crate::{Config, Rank, Routing};
use std::sync::Arc;
use titus_overlay::Overlay;
use titus_overlay::route::Rows;

/// Destinations whose next hop a rank remembers (the cache restarts when full).
const HOP_CACHE_MAX: usize = 4096;

/// This rank's out-neighbours and its routing decisions.
#[derive(Debug)]
pub(crate) struct Router {
    overlay: Overlay,
    /// This rank's out-neighbours: its victims and next hops.
    pub(crate) victims: Neighbours,
    /// Rows of this rank and of its out-neighbours (routing looks two hops ahead), by
    /// rank, sorted: shared with every router of this overlay in the process
    /// ([`Overlay::shared_row`]), and kept in a list, not a map (a third of the room).
    rows: Vec<(Rank, Arc<[Rank]>)>,
    /// Next hop (index into `victims`) per destination, as decided before.
    hop_cache: IntMap<Rank, u32>,
}

/// Rows of this rank and its neighbours, for routing.
struct RowView<'a>(&'a [(Rank, Arc<[Rank]>)]);

impl Rows for RowView<'_> {
    fn row(&self, rank: Rank) -> &[Rank] {
        match self.0.binary_search_by_key(&rank, |r| r.0) {
            Ok(i) => &self.0[i].1,
            Err(_) => &[],
        }
    }
}

impl Router {
    pub(crate) fn new(overlay: Overlay, rank: Rank, cfg: &Config) -> Self {
        // The complete graph is implicit: every rank is a neighbour and a result's next
        // hop is its owner, so neither rows nor a routing table are kept.
        let victims = if overlay.is_complete() {
            Neighbours::All {
                size: overlay.ranks(),
                me: rank,
            }
        } else {
            Neighbours::List(overlay.shared_row(rank).to_vec())
        };
        let mut rows = Vec::new();
        if let Neighbours::List(row) = &victims {
            if cfg.routing == Routing::Non {
                rows.extend(row.iter().map(|&v| (v, overlay.shared_row(v))));
            }
            rows.push((rank, overlay.shared_row(rank)));
            rows.sort_unstable_by_key(|r| r.0);
        }
        Self {
            overlay,
            victims,
            rows,
            hop_cache: IntMap::default(),
        }
    }

    /// The next hop from `me` towards `dst`, as an index into `victims` (under the
    /// complete graph, `dst` itself).
    /// Decisions are cached (a stolen batch's results all go to one owner, and NoN looks
    /// at every neighbour's row: ~1,000 distances per decision).
    pub(crate) fn next_hop(&mut self, routing: Routing, me: Rank, dst: Rank) -> Option<usize> {
        if self.victims.is_all() {
            return self.victims.index_of(dst);
        }
        if let Some(&h) = self.hop_cache.get(&dst) {
            return Some(h as usize);
        }
        let next = titus_overlay::route::next_hop(
            self.overlay.lattice(),
            &RowView(&self.rows),
            routing,
            me,
            dst,
        )?;
        let h = self.victims.index_of(next)?;
        if self.hop_cache.len() >= HOP_CACHE_MAX {
            self.hop_cache.clear();
        }
        self.hop_cache.insert(dst, h as u32);
        Some(h)
    }
}
