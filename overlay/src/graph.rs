//! The whole overlay as a compressed sparse row graph, for statistics, export and the
//! simulator. Ranks never need it: each computes the rows it uses.

use crate::overlay::Overlay;

/// Directed graph over ranks `0..len()`, each row sorted ascending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Graph {
    offsets: Vec<usize>,
    targets: Vec<u32>,
}

impl Graph {
    /// Every row of `overlay`, drawn on `threads` threads (O(N·k) work, O(N·k) memory).
    pub fn build(overlay: &Overlay, threads: usize) -> Self {
        let n = overlay.ranks() as usize;
        let threads = threads.clamp(1, n.div_ceil(1024).max(1));
        let chunk = n.div_ceil(threads);
        let parts: Vec<(Vec<usize>, Vec<u32>)> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|t| {
                    let (lo, hi) = (t * chunk, ((t + 1) * chunk).min(n));
                    s.spawn(move || {
                        let mut lens = Vec::with_capacity(hi.saturating_sub(lo));
                        let mut targets = Vec::with_capacity(
                            hi.saturating_sub(lo) * overlay.out_degree() as usize,
                        );
                        let mut row = Vec::new();
                        for r in lo..hi {
                            overlay.row_into(r as u32, &mut row);
                            lens.push(row.len());
                            targets.extend_from_slice(&row);
                        }
                        (lens, targets)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("row builder thread panicked"))
                .collect()
        });
        let mut offsets = Vec::with_capacity(n + 1);
        offsets.push(0);
        let mut targets = Vec::with_capacity(parts.iter().map(|p| p.1.len()).sum());
        for (lens, t) in parts {
            for l in lens {
                offsets.push(offsets.last().copied().unwrap_or(0) + l);
            }
            targets.extend_from_slice(&t);
        }
        Self { offsets, targets }
    }

    /// A graph from explicit rows (each sorted, without duplicates).
    pub fn from_rows<I: IntoIterator<Item = Vec<u32>>>(rows: I) -> Self {
        let mut offsets = vec![0];
        let mut targets = Vec::new();
        for row in rows {
            targets.extend_from_slice(&row);
            offsets.push(targets.len());
        }
        Self { offsets, targets }
    }

    /// Number of ranks.
    pub fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    /// Whether the graph has no ranks.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of edges.
    pub fn edges(&self) -> usize {
        self.targets.len()
    }

    /// `rank`'s row.
    pub fn neighbours(&self, rank: u32) -> &[u32] {
        let r = rank as usize;
        &self.targets[self.offsets[r]..self.offsets[r + 1]]
    }

    /// Degree of every rank.
    pub fn degrees(&self) -> Vec<u32> {
        self.offsets
            .windows(2)
            .map(|w| (w[1] - w[0]) as u32)
            .collect()
    }

    /// The reverse graph: row v lists the ranks whose rows hold v (in-neighbours),
    /// ascending. O(N + E).
    pub fn reversed(&self) -> Self {
        let n = self.len();
        let mut counts = vec![0usize; n + 1];
        for &t in &self.targets {
            counts[t as usize + 1] += 1;
        }
        for i in 0..n {
            counts[i + 1] += counts[i];
        }
        let offsets = counts.clone();
        let mut fill = counts;
        let mut targets = vec![0u32; self.targets.len()];
        // Sources are visited in ascending order, so every reversed row comes out sorted.
        for u in 0..n {
            for &v in self.neighbours(u as u32) {
                targets[fill[v as usize]] = u as u32;
                fill[v as usize] += 1;
            }
        }
        Self { offsets, targets }
    }

    /// The undirected closure: row u is out(u) ∪ in(u) (TITUS's symmetric edges).
    pub fn symmetrized(&self) -> Self {
        self.union(&self.reversed())
    }

    /// Row-by-row union with `other` (same number of ranks); with the reverse graph, the
    /// undirected closure.
    pub fn union(&self, other: &Graph) -> Self {
        assert_eq!(
            self.len(),
            other.len(),
            "union of graphs over different rank counts"
        );
        let rev = other;
        let mut offsets = Vec::with_capacity(self.len() + 1);
        offsets.push(0);
        let mut targets = Vec::with_capacity(self.targets.len() * 2);
        for u in 0..self.len() as u32 {
            let (a, b) = (self.neighbours(u), rev.neighbours(u));
            let (mut i, mut j) = (0, 0);
            while i < a.len() || j < b.len() {
                let next = match (a.get(i), b.get(j)) {
                    (Some(&x), Some(&y)) if x == y => {
                        i += 1;
                        j += 1;
                        x
                    }
                    (Some(&x), Some(&y)) if x < y => {
                        i += 1;
                        x
                    }
                    (Some(_), Some(&y)) | (None, Some(&y)) => {
                        j += 1;
                        y
                    }
                    (Some(&x), None) => {
                        i += 1;
                        x
                    }
                    (None, None) => unreachable!(),
                };
                targets.push(next);
            }
            offsets.push(targets.len());
        }
        Self { offsets, targets }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reverse_and_symmetrize() {
        let g = Graph::from_rows([vec![1, 2], vec![2], vec![0], vec![0, 1, 2]]);
        assert_eq!(
            g.reversed(),
            Graph::from_rows([vec![2, 3], vec![0, 3], vec![0, 1, 3], vec![]])
        );
        assert_eq!(
            g.symmetrized(),
            Graph::from_rows([vec![1, 2, 3], vec![0, 2, 3], vec![0, 1, 3], vec![0, 1, 2]])
        );
    }
}
