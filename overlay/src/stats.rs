//! Statistics of an overlay: route lengths over sampled pairs, degree distributions,
//! shortcut distances with the fitted exponent, and the Moore bound to compare with.

use crate::graph::Graph;
use crate::overlay::Overlay;
use crate::rng::Rng;
use crate::route::{self, Routing};
use serde::Serialize;
use std::time::Instant;

/// Domain tag of the pair streams.
const PAIR_STREAM: u64 = 0x5041_4952; // "PAIR"
/// Pairs drawn from one stream; chunks are independent, so results do not depend on the
/// number of threads.
const PAIR_CHUNK: u64 = 4096;

/// What to measure.
#[derive(Debug, Clone)]
pub struct StatsParams {
    /// Source–destination pairs to route (uniform, distinct ranks).
    pub pairs: u64,
    /// Routing rule.
    pub routing: Routing,
    /// Route over out ∪ in instead of out.
    pub symmetric: bool,
    /// Threads for building the graph and routing.
    pub threads: usize,
    /// Ranks whose rows are timed one by one.
    pub timed_rows: u32,
}

impl Default for StatsParams {
    fn default() -> Self {
        Self {
            pairs: 100_000,
            routing: Routing::Non,
            symmetric: false,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            timed_rows: 1000,
        }
    }
}

/// Summary of an integer distribution.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Summary {
    /// Smallest value.
    pub min: u32,
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: u32,
    /// 99th percentile.
    pub p99: u32,
    /// Largest value.
    pub max: u32,
}

impl Summary {
    /// Summary of `values` (empty gives zeros).
    pub fn of(values: &[u32]) -> Self {
        let mut hist = Vec::new();
        for &v in values {
            if hist.len() <= v as usize {
                hist.resize(v as usize + 1, 0u64);
            }
            hist[v as usize] += 1;
        }
        Self::of_histogram(&hist)
    }

    /// Summary of a histogram (`hist[v]` = how many times v occurs).
    pub fn of_histogram(hist: &[u64]) -> Self {
        let total: u64 = hist.iter().sum();
        if total == 0 {
            return Self {
                min: 0,
                mean: 0.0,
                p50: 0,
                p99: 0,
                max: 0,
            };
        }
        let quantile = |q: f64| -> u32 {
            let target = (q * total as f64).ceil().max(1.0) as u64;
            let mut acc = 0;
            for (v, &c) in hist.iter().enumerate() {
                acc += c;
                if acc >= target {
                    return v as u32;
                }
            }
            hist.len() as u32 - 1
        };
        let sum: f64 = hist
            .iter()
            .enumerate()
            .map(|(v, &c)| v as f64 * c as f64)
            .sum();
        Self {
            min: hist.iter().position(|&c| c > 0).unwrap_or(0) as u32,
            mean: sum / total as f64,
            p50: quantile(0.5),
            p99: quantile(0.99),
            max: hist.iter().rposition(|&c| c > 0).unwrap_or(0) as u32,
        }
    }
}

/// One bin of the shortcut-distance histogram: distances `lo..=hi`.
#[derive(Debug, Clone, Serialize)]
pub struct DistanceBin {
    /// Smallest distance in the bin.
    pub lo: u32,
    /// Largest distance in the bin.
    pub hi: u32,
    /// Shortcuts whose length falls in the bin.
    pub count: u64,
    /// Probability that a given rank at a distance in the bin is one of a given rank's
    /// shortcut targets: count / (N × ranks at those distances). Kleinberg's law makes it
    /// ∝ D^(−p).
    pub link_probability: f64,
}

/// Route-length figures.
#[derive(Debug, Clone, Serialize)]
pub struct HopStats {
    /// Pairs routed.
    pub pairs: u64,
    /// Mean hops.
    pub mean: f64,
    /// Median.
    pub p50: u32,
    /// 99th percentile.
    pub p99: u32,
    /// Longest route.
    pub max: u32,
    /// `histogram[h]` = pairs routed in h hops.
    pub histogram: Vec<u64>,
}

/// Wall-clock costs, in seconds unless named otherwise.
#[derive(Debug, Clone, Serialize)]
pub struct Timing {
    /// Mean time to draw one row, in microseconds, over `timed_rows` ranks.
    pub row_us: f64,
    /// 99th percentile of those rows, in microseconds.
    pub row_p99_us: f64,
    /// Drawing every row (the whole graph).
    pub graph_s: f64,
    /// Reverse and symmetric graphs, degree figures, distance histogram.
    pub degrees_s: f64,
    /// Routing every pair.
    pub routing_s: f64,
    /// All of the above.
    pub total_s: f64,
}

/// Everything `titus overlay` reports.
#[derive(Debug, Clone, Serialize)]
pub struct OverlayStats {
    /// Ranks.
    pub ranks: u32,
    /// Lattice name.
    pub lattice: String,
    /// Lattice extents.
    pub shape: Vec<u32>,
    /// Lattice-neighbour reach.
    pub reach: u32,
    /// Shortcuts asked for.
    pub shortcuts_requested: u32,
    /// Shortcuts drawn per rank.
    pub shortcuts: u32,
    /// Kleinberg exponent used.
    pub exponent: f64,
    /// How the shortcuts were drawn.
    pub draw: crate::ShortcutDraw,
    /// Seed.
    pub seed: u64,
    /// Whether routes use out ∪ in.
    pub symmetric: bool,
    /// Routing rule.
    pub routing: Routing,
    /// Route lengths.
    pub hops: HopStats,
    /// Out-degree per rank.
    pub out_degree: Summary,
    /// In-degree per rank.
    pub in_degree: Summary,
    /// Connections per rank, |out ∪ in|: the peers a rank must connect to.
    pub connections: Summary,
    /// Mean degree of the graph routes run over (out-degree, or connections if symmetric).
    pub routing_degree: f64,
    /// Least possible mean hops for any graph of that mean degree on N ranks.
    pub moore_bound: f64,
    /// Shortcut distances in power-of-two bins.
    pub shortcut_distances: Vec<DistanceBin>,
    /// Least-squares slope of log link probability against log distance, negated: the
    /// measured Kleinberg exponent (bins with at least 20 shortcuts).
    pub fitted_exponent: Option<f64>,
    /// Adjustments made to the parameters.
    pub notes: Vec<String>,
    /// Costs.
    pub timing: Timing,
}

/// The Moore bound on mean hops: the mean distance if every rank reached `degree` new
/// ranks in one hop, `degree²` in two, and so on (a directed graph can do no better).
pub fn moore_bound(ranks: u32, degree: f64) -> f64 {
    if ranks <= 1 {
        return 0.0;
    }
    let mut left = f64::from(ranks) - 1.0;
    let total = left;
    let (mut level, mut sum, mut reach) = (1.0, 0.0, degree.max(1.0));
    while left > 0.0 {
        let here = reach.min(left);
        sum += level * here;
        left -= here;
        level += 1.0;
        reach *= degree.max(1.0);
    }
    sum / total
}

/// Computes the statistics of `overlay`; returns them with the out-graph they were
/// computed on (for export).
pub fn compute(overlay: &Overlay, sp: &StatsParams) -> (OverlayStats, Graph) {
    let start = Instant::now();
    let n = overlay.ranks();
    let lattice = overlay.lattice();

    // Rows timed one by one, spread over the ranks.
    let timed = sp.timed_rows.clamp(1, n);
    let mut row = Vec::new();
    let mut row_times: Vec<f64> = (0..timed)
        .map(|i| {
            let r = (u64::from(i) * u64::from(n) / u64::from(timed)) as u32;
            let t = Instant::now();
            overlay.row_into(r, &mut row);
            t.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    row_times.sort_by(f64::total_cmp);
    let row_us = row_times.iter().sum::<f64>() / row_times.len() as f64;
    let row_p99_us = row_times[(row_times.len() * 99).div_ceil(100) - 1];

    let t = Instant::now();
    let out = Graph::build(overlay, sp.threads);
    let graph_s = t.elapsed().as_secs_f64();

    let t = Instant::now();
    let rev = out.reversed();
    let sym = out.union(&rev);
    let out_degree = Summary::of(&out.degrees());
    let in_degree = Summary::of(&rev.degrees());
    drop(rev);
    let connections = Summary::of(&sym.degrees());
    let (shortcut_distances, fitted_exponent) = distance_histogram(overlay, &out);
    let degrees_s = t.elapsed().as_secs_f64();

    let t = Instant::now();
    let routed = if sp.symmetric { &sym } else { &out };
    let routing_degree = routed.edges() as f64 / f64::from(n);
    let hist = route_pairs(overlay, routed, sp);
    let routing_s = t.elapsed().as_secs_f64();
    let hs = Summary::of_histogram(&hist);

    let p = overlay.params();
    let stats = OverlayStats {
        ranks: n,
        lattice: lattice.kind().name().to_string(),
        shape: lattice.shape().to_vec(),
        reach: p.reach,
        shortcuts_requested: p.shortcuts,
        shortcuts: overlay.shortcuts(),
        exponent: overlay.exponent(),
        draw: p.draw,
        seed: p.seed,
        symmetric: sp.symmetric,
        routing: sp.routing,
        hops: HopStats {
            pairs: hist.iter().sum(),
            mean: hs.mean,
            p50: hs.p50,
            p99: hs.p99,
            max: hs.max,
            histogram: hist,
        },
        out_degree,
        in_degree,
        connections,
        routing_degree,
        moore_bound: moore_bound(n, routing_degree),
        shortcut_distances,
        fitted_exponent,
        notes: overlay.notes().to_vec(),
        timing: Timing {
            row_us,
            row_p99_us,
            graph_s,
            degrees_s,
            routing_s,
            total_s: start.elapsed().as_secs_f64(),
        },
    };
    (stats, out)
}

/// Routes `sp.pairs` uniform pairs of distinct ranks over `graph`; returns the histogram
/// of hop counts.
pub fn route_pairs(overlay: &Overlay, graph: &Graph, sp: &StatsParams) -> Vec<u64> {
    let n = overlay.ranks();
    if n < 2 || sp.pairs == 0 {
        return vec![0];
    }
    let seed = overlay.params().seed;
    let chunks = sp.pairs.div_ceil(PAIR_CHUNK);
    let threads = (sp.threads.max(1) as u64).min(chunks) as usize;
    let lattice = overlay.lattice();
    let hists: Vec<Vec<u64>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    let mut hist = vec![0u64; 8];
                    let mut c = t as u64;
                    while c < chunks {
                        let mut rng = Rng::from_keys(&[seed, PAIR_STREAM, c]);
                        let count = PAIR_CHUNK.min(sp.pairs - c * PAIR_CHUNK);
                        for _ in 0..count {
                            let src = rng.below(u64::from(n)) as u32;
                            // Uniform over the other n − 1 ranks.
                            let mut dst = rng.below(u64::from(n) - 1) as u32;
                            if dst >= src {
                                dst += 1;
                            }
                            let h = route::hops(lattice, graph, sp.routing, src, dst) as usize;
                            if hist.len() <= h {
                                hist.resize(h + 1, 0);
                            }
                            hist[h] += 1;
                        }
                        c += threads as u64;
                    }
                    hist
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("routing thread panicked"))
            .collect()
    });
    let len = hists.iter().map(Vec::len).max().unwrap_or(1);
    let mut hist = vec![0u64; len];
    for h in hists {
        for (i, c) in h.into_iter().enumerate() {
            hist[i] += c;
        }
    }
    while hist.len() > 1 && hist.last() == Some(&0) {
        hist.pop();
    }
    hist
}

/// Histogram of shortcut lengths in power-of-two bins, and the fitted exponent.
fn distance_histogram(overlay: &Overlay, out: &Graph) -> (Vec<DistanceBin>, Option<f64>) {
    let lattice = overlay.lattice();
    let reach = overlay.params().reach;
    let shells = lattice.shell_sizes();
    let mut counts = vec![0u64; shells.len()];
    for u in 0..overlay.ranks() {
        for &v in out.neighbours(u) {
            let d = lattice.distance(u, v);
            if d > reach {
                counts[d as usize] += 1;
            }
        }
    }
    let n = f64::from(overlay.ranks());
    let mut bins = Vec::new();
    let mut lo = reach + 1;
    while (lo as usize) < shells.len() {
        let hi = (lo.saturating_mul(2) - 1).min(shells.len() as u32 - 1);
        let range = lo as usize..=hi as usize;
        let count: u64 = counts[range.clone()].iter().sum();
        let shell: u64 = shells[range].iter().sum();
        bins.push(DistanceBin {
            lo,
            hi,
            count,
            link_probability: count as f64 / (n * shell as f64),
        });
        lo = hi + 1;
    }
    // Least squares of ln(probability) on ln(geometric centre of the bin).
    let points: Vec<(f64, f64)> = bins
        .iter()
        .filter(|b| b.count >= 20)
        .map(|b| {
            let centre = (f64::from(b.lo) * f64::from(b.hi)).sqrt();
            (centre.ln(), b.link_probability.ln())
        })
        .collect();
    let fitted = (points.len() >= 3).then(|| {
        let m = points.len() as f64;
        let (sx, sy) = points
            .iter()
            .fold((0.0, 0.0), |a, p| (a.0 + p.0, a.1 + p.1));
        let (mx, my) = (sx / m, sy / m);
        let cov: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
        let var: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
        -cov / var
    });
    (bins, fitted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moore_bound_reference() {
        // The first design sketch (shared/design.md): ~2.58 average hops for 64 neighbours
        // at N = 10,000.
        let m = moore_bound(10_000, 64.0);
        assert!((m - 2.577).abs() < 0.01, "{m}");
        assert_eq!(moore_bound(5, 4.0), 1.0);
        assert_eq!(moore_bound(1, 4.0), 0.0);
    }

    #[test]
    fn summary_quantiles() {
        let s = Summary::of(&[1, 1, 2, 3, 10]);
        assert_eq!((s.min, s.p50, s.p99, s.max), (1, 2, 10, 10));
        assert!((s.mean - 3.4).abs() < 1e-12);
    }
}
