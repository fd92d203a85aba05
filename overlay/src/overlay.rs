//! A rank's out-neighbours: its lattice neighbours plus `k` shortcuts drawn with
//! Kleinberg's distance bias ("Navigation in a small world", Nature 2000; "The small-world
//! phenomenon: an algorithmic perspective", STOC 2000).
//!
//! # How a row is drawn (O(k) time and memory, no graph, no communication)
//!
//! 1. The lattice neighbours are the ranks within distance `reach` (a fixed ball of
//!    displacements, the same from every rank of a torus).
//! 2. A shortcut to rank v is drawn with probability ∝ d(u, v)^(−p): Kleinberg's law, per
//!    target rank. To sample it without a table over the ranks:
//!    - draw a distance D ∈ (reach, diameter] with weight S(D)·D^(−p), where S(D) is the
//!      number of points at L1 distance D on the *infinite* lattice (2, 4D and 4D²+2 for
//!      1, 2 and 3 dimensions; in 3-D through the envelope 6D² and an acceptance of
//!      (4D²+2)/6D²);
//!    - draw a uniform point at distance D on the infinite lattice (a uniform composition
//!      of D into `dim` parts, random signs, accepted with probability 2^(−zero parts) so
//!      that points on the axes are not favoured);
//!    - keep it only if it is the canonical displacement of a torus rank (every component
//!      in (−L/2, L/2]), so every torus rank at distance D has the same chance, and the
//!      distance on the torus is D.
//! 3. A draw that repeats an earlier shortcut is drawn again. This is successive sampling
//!    without replacement, the law of the TITUS graph generator too.
//! 4. When the shortcuts would take more than half of the ranks left, or the redraws run
//!    long (large exponents concentrate the law on a few close ranks), the row is drawn
//!    instead by Efraimidis–Spirakis keys over every candidate rank ("Weighted random
//!    sampling with a reservoir", IPL 2006), which gives the same law in O(N log k).
//!
//! Everything is keyed by (seed, rank), so any rank computes any row, identically.
//!
//! # Paired shortcuts ([`ShortcutDraw::Paired`]): every edge both ways, in-degree bounded
//!
//! Rows drawn independently give a rank as many in-neighbours as chance sends it: at
//! 10^5 ranks and 30 shortcuts, 11–60 (out ∪ in up to 88). The paired draw makes every
//! shortcut an edge of a *matching*, so a rank's in-neighbours are exactly its
//! out-neighbours and its peers are at most the lattice neighbours plus `k`. It is
//! Kleinberg's hierarchical model ("Small-world phenomena and the dynamics of
//! information", NIPS 2001) made symmetric:
//!
//! 1. Round j (of `k`) has a random origin per dimension, the same for every rank. At
//!    level L a dimension's coordinates, counted from the origin, fall into aligned blocks
//!    of 2^(L+1) (capped at the extent); a rank's *block at level L* is the product of
//!    its blocks in every dimension.
//! 2. The rank picks its level by descending from the largest: level L is taken with the
//!    probability q_L that (seed, j, L, its block at level L) decides, so that levels come
//!    with weights ∝ 2^(L·(dim − p)) — equal weights for p = dim, the share of each
//!    distance scale under Kleinberg's law — from the smallest level outside the lattice
//!    ball up.
//! 3. The partner is drawn from the same key: in one random dimension (the level's scale)
//!    it lies in the other half of the block, matched by a keyed bijection between the
//!    halves (a small Feistel network, so ranks side by side get partners far apart); in
//!    the others its position is XORed with uniform bits. Both lie in one block at every
//!    level ≥ L, so both make the same decisions and draw the same keys, and the bijection
//!    and XOR undo themselves: the partner's partner is the rank.
//! 4. A partner past the end of a dimension that the blocks do not tile, one inside the
//!    lattice ball, or one found in an earlier round gives no new shortcut: a row holds at
//!    most `k` shortcuts, usually a few fewer.
//!
//! A row costs O(k × levels), and a rank's in-neighbours are its row (instead of drawing
//! all N rows). TITUS kept its overlay's edges symmetric too.

use crate::OverlayError;
use crate::lattice::{Lattice, LatticeKind, Offset};
use crate::powerlaw::PowerLaw;
use crate::rng::Rng;
use crate::shared_rows::SharedRows;
use rand::RngExt as _;
use rand::distr::Distribution as _;
use rand_distr::Exp1;
use serde::{Deserialize, Serialize};

/// Domain tag of the row streams (keeps them apart from any other use of the seed).
const ROW_STREAM: u64 = 0x524f_5753; // "ROWS"
/// Domain tag of the paired draw's rounds.
const ROUND_STREAM: u64 = 0x0052_4f55_4e44; // "ROUND"
/// Domain tag of the paired draw's block masks.
const MASK_STREAM: u64 = 0x4d41_534b; // "MASK"

/// How shortcuts are drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ShortcutDraw {
    /// Each rank draws its own `k` targets (Kleinberg's construction): out-degree fixed,
    /// in-degree as chance gives it.
    #[default]
    Kleinberg,
    /// `k` rounds of matchings (module doc): every shortcut is an edge both ways, so a
    /// rank's peers are at most its lattice neighbours plus `k`.
    Paired,
}

impl ShortcutDraw {
    /// Every draw's name, as [`ShortcutDraw::parse`] takes it.
    pub const NAMES: [&'static str; 2] = ["kleinberg", "paired"];

    /// The draw named `s`.
    pub fn parse(s: &str) -> Result<Self, OverlayError> {
        match s {
            "kleinberg" => Ok(Self::Kleinberg),
            "paired" => Ok(Self::Paired),
            other => Err(OverlayError::UnknownDraw(other.to_string())),
        }
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Kleinberg => "kleinberg",
            Self::Paired => "paired",
        }
    }
}

/// The paired draw's job-wide state (module doc).
#[derive(Debug, Clone)]
struct Pairing {
    /// Per round, where each dimension's blocks start.
    origins: Vec<[u32; 3]>,
    /// Per dimension, the largest level whose blocks fit its extent (None: extent 1).
    fit: [Option<u32>; 3],
    /// The smallest level drawn.
    low: u32,
    /// q_L: the chance of taking level L once the descent reaches it (index L − low).
    take: Vec<f64>,
}

/// Parameters of an overlay. Every rank must use the same values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OverlayParams {
    /// Number of ranks.
    pub ranks: u32,
    /// The lattice.
    pub lattice: LatticeKind,
    /// Extents of the torus, or `None` for the near-cubic shape.
    pub shape: Option<Vec<u32>>,
    /// Lattice neighbours are the ranks within this distance (≥ 1: routing needs a
    /// neighbour one step closer to every destination).
    pub reach: u32,
    /// Shortcuts drawn per rank (clamped to the ranks left beyond the lattice neighbours).
    pub shortcuts: u32,
    /// Kleinberg exponent p; `None` takes the lattice dimension, the optimum for greedy
    /// routing as N grows.
    pub exponent: Option<f64>,
    /// Seed of every row.
    pub seed: u64,
    /// How the shortcuts are drawn.
    #[serde(default)]
    pub draw: ShortcutDraw,
}

impl Default for OverlayParams {
    fn default() -> Self {
        Self {
            ranks: 1,
            lattice: LatticeKind::Ring,
            shape: None,
            reach: 1,
            shortcuts: DEFAULT_SHORTCUTS,
            exponent: None,
            seed: DEFAULT_SEED,
            draw: ShortcutDraw::Kleinberg,
        }
    }
}

/// Default shortcuts per rank. 30 shortcuts plus 2 ring neighbours route 10^4 ranks in
/// about 3 hops with NoN routing and 10^6 ranks in about 4 (measured: docs/results.md, "Overlay").
pub const DEFAULT_SHORTCUTS: u32 = 30;

/// Shortcuts per rank a user may ask for (`--shortcuts`, the option `shortcuts`): past a
/// few hundred a rank's row only costs memory and connections (the complete graphs that
/// the random and master balancers build are not asked for this way).
pub const SHORTCUTS_MAX: u32 = 65_536;

/// Default seed.
pub const DEFAULT_SEED: u64 = 1;

/// The overlay: computes rows on demand.
#[derive(Debug, Clone)]
pub struct Overlay {
    params: OverlayParams,
    lattice: Lattice,
    exponent: f64,
    /// Shortcuts actually drawn per rank.
    shortcuts: u32,
    /// Lattice-neighbour displacements.
    ball: Vec<Offset>,
    /// Law of the proposal distance, or `None` when no shortcut is drawn.
    distance: Option<PowerLaw>,
    /// Whether rows are drawn by keys over every rank (dense regime).
    dense: bool,
    /// The paired draw (None: the Kleinberg draw, or no shortcuts).
    pairing: Option<Pairing>,
    notes: Vec<String>,
    /// Rows asked for through [`Overlay::shared_row`], shared by every clone.
    shared: SharedRows,
}

impl Overlay {
    /// Checks the parameters and prepares the shared sampling state (O(reach^dim)).
    pub fn new(params: OverlayParams) -> Result<Self, OverlayError> {
        let lattice = Lattice::new(params.lattice, params.ranks, params.shape.as_deref())?;
        let dim = lattice.dim();
        let exponent = params.exponent.unwrap_or(dim as f64);
        if !exponent.is_finite() {
            return Err(OverlayError::BadExponent(exponent));
        }
        if exponent < 0.0 {
            return Err(OverlayError::NegativeExponent(exponent));
        }
        if params.reach == 0 {
            return Err(OverlayError::ZeroReach);
        }
        let mut notes = Vec::new();
        if params.shape.is_none() && dim > 1 && lattice.shape().contains(&1) {
            notes.push(format!(
                "{} ranks have no {}-D factorisation better than {:?}: the torus degenerates",
                params.ranks,
                dim,
                lattice.shape()
            ));
        }
        let ball = lattice.ball(params.reach);
        let available = params.ranks - 1 - ball.len() as u32;
        let shortcuts = params.shortcuts.min(available);
        if shortcuts < params.shortcuts {
            notes.push(format!(
                "--shortcuts {} clamped to {}: {} ranks leave {} beyond each rank's {} lattice neighbours",
                params.shortcuts,
                shortcuts,
                params.ranks,
                available,
                ball.len()
            ));
        }
        let lo = u64::from(params.reach) + 1;
        let hi = u64::from(lattice.diameter());
        let distance = (shortcuts > 0 && lo <= hi)
            .then(|| PowerLaw::new(lo, hi, exponent - (dim as f64 - 1.0)));
        let dense = u64::from(shortcuts) * 2 > u64::from(available);
        let pairing = (params.draw == ShortcutDraw::Paired && shortcuts > 0)
            .then(|| Self::pairing(&lattice, params.reach, exponent, params.seed, shortcuts))
            .flatten();
        Ok(Self {
            params,
            lattice,
            exponent,
            shortcuts,
            ball,
            distance,
            dense,
            pairing,
            notes,
            shared: SharedRows::default(),
        })
    }

    /// The paired draw's state (module doc, step 1–2); None if no level lies beyond the
    /// ball.
    fn pairing(lattice: &Lattice, reach: u32, p: f64, seed: u64, k: u32) -> Option<Pairing> {
        let dim = lattice.dim();
        let mut fit = [None; 3];
        for (c, &n) in lattice.shape().iter().enumerate() {
            // Blocks of 2^(L+1) must fit the extent.
            fit[c] = (n >= 2).then(|| n.ilog2() - 1);
        }
        let high = fit.iter().flatten().copied().max()?;
        // The first level whose blocks (2^(L+1)) reach past the lattice ball; partners lie
        // anywhere in the other half, so some still fall in the ball (and are dropped).
        let low = reach.ilog2() + 1;
        if low > high {
            return None;
        }
        let slope = dim as f64 - p;
        let take = (low..=high)
            .map(|l| {
                let s: f64 = (low..=l)
                    .map(|m| (f64::from(m) - f64::from(l)) * slope)
                    .map(f64::exp2)
                    .sum();
                1.0 / s
            })
            .collect();
        let origins = (0..k)
            .map(|j| {
                let mut rng = Rng::from_keys(&[seed, ROUND_STREAM, u64::from(j)]);
                let mut o = [0u32; 3];
                for (c, &n) in lattice.shape().iter().enumerate() {
                    o[c] = rng.below(u64::from(n)) as u32;
                }
                o
            })
            .collect();
        Some(Pairing {
            origins,
            fit,
            low,
            take,
        })
    }

    /// `rank`'s partner in round `j` (module doc, steps 2–3), if it has one.
    fn partner(&self, pairing: &Pairing, rank: u32, j: u32) -> Option<u32> {
        let dim = self.lattice.dim();
        let shape = self.lattice.shape();
        let c0 = self.lattice.coords(rank);
        let origin = &pairing.origins[j as usize];
        let mut y = [0u32; 3];
        for c in 0..dim {
            y[c] = (c0[c] + shape[c] - origin[c]) % shape[c];
        }
        let high = pairing.low + pairing.take.len() as u32 - 1;
        // Per dimension at level L: its level (capped) and block index.
        let level = |c: usize, l: u32| pairing.fit[c].map(|f| l.min(f));
        for l in (pairing.low..=high).rev() {
            let mut key = [
                self.params.seed,
                MASK_STREAM,
                u64::from(j),
                u64::from(l),
                0,
                0,
                0,
            ];
            for c in 0..dim {
                key[4 + c] = level(c, l).map_or(0, |lc| u64::from(y[c] >> (lc + 1)));
            }
            let mut rng = Rng::from_keys(&key[..4 + dim]);
            if l > pairing.low && !rng.chance(pairing.take[(l - pairing.low) as usize]) {
                continue;
            }
            // The dimension at the level's scale: one whose blocks reach level l.
            let wide = |c: &usize| level(*c, l) == Some(l);
            let nth = rng.below((0..dim).filter(wide).count() as u64) as usize;
            let top = (0..dim)
                .filter(wide)
                .nth(nth)
                .expect("l is some dimension's level");
            let mut p = c0;
            for c in 0..dim {
                let Some(lc) = level(c, l) else { continue };
                let bits = rng.next_u64();
                let yc = if c == top {
                    // The block's halves are matched by a keyed bijection, so ranks
                    // side by side get partners far apart in the other half.
                    let (base, pos) = (y[c] >> (lc + 1) << (lc + 1), y[c] & ((2 << lc) - 1));
                    let (half, low) = (pos >> lc, pos & ((1 << lc) - 1));
                    let low = if half == 0 {
                        permute(bits, lc, low, false)
                    } else {
                        permute(bits, lc, low, true)
                    };
                    base | (half ^ 1) << lc | low
                } else {
                    y[c] ^ (bits as u32 & ((2 << lc) - 1))
                };
                if yc >= shape[c] {
                    return None;
                }
                p[c] = (yc + origin[c]) % shape[c];
            }
            return Some(self.lattice.rank_of(p));
        }
        None
    }

    /// The paired draw's shortcuts of `rank` (after the ball in `out`).
    fn draw_paired(&self, rank: u32, out: &mut Vec<u32>) {
        let Some(pairing) = &self.pairing else {
            return;
        };
        let reach = self.params.reach;
        let mut taken: Vec<u32> = Vec::with_capacity(pairing.origins.len());
        for j in 0..pairing.origins.len() as u32 {
            let Some(v) = self.partner(pairing, rank, j) else {
                continue;
            };
            if v == rank || self.lattice.distance(rank, v) <= reach {
                continue;
            }
            if let Err(pos) = taken.binary_search(&v) {
                taken.insert(pos, v);
                out.push(v);
            }
        }
    }

    /// Whether every rank's in-neighbours are its out-neighbours (the paired draw, or
    /// the complete graph).
    pub fn is_symmetric(&self) -> bool {
        self.params.draw == ShortcutDraw::Paired || self.is_complete() || self.shortcuts == 0
    }

    /// The parameters as given.
    pub fn params(&self) -> &OverlayParams {
        &self.params
    }

    /// The lattice.
    pub fn lattice(&self) -> &Lattice {
        &self.lattice
    }

    /// Number of ranks.
    pub fn ranks(&self) -> u32 {
        self.lattice.len()
    }

    /// The exponent in use.
    pub fn exponent(&self) -> f64 {
        self.exponent
    }

    /// Shortcuts drawn per rank, after clamping.
    pub fn shortcuts(&self) -> u32 {
        self.shortcuts
    }

    /// Lattice neighbours per rank.
    pub fn lattice_degree(&self) -> u32 {
        self.ball.len() as u32
    }

    /// Out-degree of every rank (lattice neighbours plus shortcuts).
    pub fn out_degree(&self) -> u32 {
        self.lattice_degree() + self.shortcuts
    }

    /// Whether every rank is every other rank's out-neighbour (the complete graph: the
    /// shortcuts take every rank beyond the lattice neighbours). Rows are then every other
    /// rank and cost O(N) each: a caller at scale should not list them.
    pub fn is_complete(&self) -> bool {
        self.out_degree() + 1 >= self.ranks()
    }

    /// What was adjusted in the parameters, one sentence each (clamped shortcuts, a
    /// degenerate torus). The caller decides whether to print them.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// `rank`'s out-neighbours, ascending.
    pub fn row(&self, rank: u32) -> Vec<u32> {
        let mut out = Vec::with_capacity(self.out_degree() as usize);
        self.row_into(rank, &mut out);
        out
    }

    /// `rank`'s out-neighbours, ascending, computed once for this overlay and every
    /// clone of it: a process that holds many ranks' routers (the simulator) keeps one
    /// copy of each row.
    pub fn shared_row(&self, rank: u32) -> std::sync::Arc<[u32]> {
        self.shared.get(rank, || self.row(rank))
    }

    /// `rank`'s out-neighbours, ascending, into `out` (cleared first).
    pub fn row_into(&self, rank: u32, out: &mut Vec<u32>) {
        assert!(
            rank < self.ranks(),
            "rank {rank} out of 0..{}",
            self.ranks()
        );
        out.clear();
        if self.is_complete() {
            out.extend((0..self.ranks()).filter(|&v| v != rank));
            return;
        }
        out.extend(self.ball.iter().map(|o| self.lattice.offset(rank, o)));
        if self.params.draw == ShortcutDraw::Paired {
            self.draw_paired(rank, out);
        } else if self.shortcuts > 0 {
            let mut rng = Rng::from_keys(&[self.params.seed, ROW_STREAM, u64::from(rank)]);
            let drawn = if self.dense {
                false
            } else {
                self.draw_sparse(rank, &mut rng, out)
            };
            if !drawn {
                out.truncate(self.ball.len());
                self.draw_dense(rank, &mut rng, out);
            }
        }
        out.sort_unstable();
    }

    /// Step 2–3 of the module doc. Returns false (leaving `out` to be truncated) if the
    /// redraws exceed their budget.
    fn draw_sparse(&self, rank: u32, rng: &mut Rng, out: &mut Vec<u32>) -> bool {
        let Some(law) = &self.distance else {
            return true;
        };
        let dim = self.lattice.dim();
        let want = self.ball.len() + self.shortcuts as usize;
        // Shortcuts found so far, kept sorted for the duplicate check.
        let mut taken: Vec<u32> = Vec::with_capacity(self.shortcuts as usize);
        // Budget: 64 tries per shortcut is ~100× what a sane law needs (acceptance is above
        // 1/4 for every exponent ≤ 3 and every shape); past it, the dense path is cheaper.
        let mut budget = 64 * u64::from(self.shortcuts) + 1024;
        while out.len() < want {
            if budget == 0 {
                return false;
            }
            budget -= 1;
            let d = law.sample(rng);
            if dim == 3 {
                let df = d as f64;
                if !rng.chance((4.0 * df * df + 2.0) / (6.0 * df * df)) {
                    continue;
                }
            }
            let off = sphere_point(dim, d as i64, rng);
            if !self.lattice.is_canonical(&off) {
                continue;
            }
            let v = self.lattice.offset(rank, &off);
            if let Err(pos) = taken.binary_search(&v) {
                taken.insert(pos, v);
                out.push(v);
            }
        }
        true
    }

    /// Step 4: the k smallest keys E/w(v), E ~ Exp(1), over every rank beyond the ball.
    fn draw_dense(&self, rank: u32, rng: &mut Rng, out: &mut Vec<u32>) {
        let reach = self.params.reach;
        let mut keys: Vec<(f64, u32)> = (0..self.ranks())
            .filter_map(|v| {
                let d = self.lattice.distance(rank, v);
                (d > reach).then(|| {
                    let e: f64 = rng.sample(Exp1);
                    (e * f64::from(d).powf(self.exponent), v)
                })
            })
            .collect();
        let k = self.shortcuts as usize;
        if k < keys.len() {
            keys.select_nth_unstable_by(k, |a, b| a.0.total_cmp(&b.0));
            keys.truncate(k);
        }
        out.extend(keys.into_iter().map(|(_, v)| v));
    }

    /// Ranks whose rows contain `rank`. Symmetric overlays ([`Overlay::is_symmetric`]):
    /// its row, O(k). Otherwise every row is drawn, O(N·k) time, O(k) memory
    /// beyond the answer; to have every rank's in-neighbours, build a
    /// [`Graph`](crate::Graph) once (O(N·k) for all) instead.
    pub fn in_neighbours(&self, rank: u32) -> Vec<u32> {
        if self.is_symmetric() {
            return self.row(rank);
        }
        let mut row = Vec::new();
        (0..self.ranks())
            .filter(|&u| {
                self.row_into(u, &mut row);
                row.binary_search(&rank).is_ok()
            })
            .collect()
    }
}

/// A keyed bijection of `0..2^bits` (`inverse`: its inverse): a 4-round Feistel network
/// over the even number of bits ≥ `bits`, cycle-walking back into the domain.
fn permute(key: u64, bits: u32, x: u32, inverse: bool) -> u32 {
    let half = bits.div_ceil(2);
    let m = (1u64 << half) - 1;
    let f = |i: u64, v: u64| {
        let mut z = key ^ (i << 40) ^ v;
        // SplitMix64's finaliser.
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) & m
    };
    let round = |v: u64| {
        let (mut l, mut r) = (v >> half, v & m);
        if inverse {
            for i in (0..4).rev() {
                (l, r) = (r ^ f(i, l), l);
            }
        } else {
            for i in 0..4 {
                (l, r) = (r, l ^ f(i, r));
            }
        }
        l << half | r
    };
    let mut v = round(u64::from(x));
    while v >> bits != 0 {
        v = round(v);
    }
    v as u32
}

/// A uniform point at L1 distance `d` ≥ 1 on the infinite `dim`-D lattice.
///
/// A uniform composition of d into `dim` non-negative parts (stars and bars) with `z`
/// zero parts stands for 2^(dim − z) points, one with none for 2^dim, so a composition
/// is kept with probability 2^(−z) and given random signs. The retry stays at this `d`:
/// the rejection rate depends on d, and redrawing d would bias the distance law.
fn sphere_point(dim: usize, d: i64, rng: &mut Rng) -> Offset {
    loop {
        let mut parts = [0i64; 3];
        match dim {
            1 => parts[0] = d,
            2 => {
                let i = rng.below(d as u64 + 1) as i64;
                parts[0] = i;
                parts[1] = d - i;
            }
            _ => {
                let i = rng.below(d as u64 + 2) as i64;
                let mut j = rng.below(d as u64 + 1) as i64;
                if j >= i {
                    j += 1;
                }
                let (a, b) = (i.min(j), i.max(j));
                parts = [a, b - a - 1, d + 1 - b];
            }
        }
        let zeros = parts[..dim].iter().filter(|&&x| x == 0).count();
        if zeros > 0 && rng.below(1 << zeros) != 0 {
            continue;
        }
        let signs = rng.next_u64();
        for (i, part) in parts[..dim].iter_mut().enumerate() {
            if signs >> i & 1 == 1 {
                *part = -*part;
            }
        }
        return parts;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(ranks: u32, lattice: LatticeKind, shortcuts: u32, exponent: f64) -> OverlayParams {
        OverlayParams {
            ranks,
            lattice,
            shortcuts,
            exponent: Some(exponent),
            ..OverlayParams::default()
        }
    }

    #[test]
    fn sphere_points_are_uniform() {
        for (dim, d, size) in [(2usize, 3i64, 12usize), (3, 2, 18), (3, 3, 38)] {
            let mut rng = Rng::seeded(d as u64);
            let mut counts = std::collections::HashMap::new();
            let mut accepted = 0;
            while accepted < 200 * size {
                let p = sphere_point(dim, d, &mut rng);
                assert_eq!(p.iter().map(|x| x.abs()).sum::<i64>(), d);
                *counts.entry(p).or_insert(0u32) += 1;
                accepted += 1;
            }
            assert_eq!(counts.len(), size, "dim {dim} d {d}");
            assert!(
                counts.values().all(|&c| (120..=280).contains(&c)),
                "{counts:?}"
            );
        }
    }

    #[test]
    fn shortcut_law_is_kleinberg_per_rank() {
        // Torus 2-D, 12x12, exponent 2: the frequency with which rank 0 links to a rank at
        // distance d, divided by d^-2, must not depend on d.
        let o = Overlay::new(OverlayParams {
            seed: 11,
            ..params(144, LatticeKind::Torus2, 1, 2.0)
        })
        .unwrap();
        let l = o.lattice().clone();
        let shells = l.shell_sizes();
        let mut per_distance = vec![0u64; shells.len()];
        let trials = 60_000u32;
        for t in 0..trials {
            // Rows of different seeds stand for independent draws.
            let o = Overlay::new(OverlayParams {
                seed: u64::from(t),
                ..o.params().clone()
            })
            .unwrap();
            for v in o.row(0) {
                let d = l.distance(0, v);
                if d > 1 {
                    per_distance[d as usize] += 1;
                }
            }
        }
        let norm: f64 = (2..shells.len())
            .map(|d| shells[d] as f64 / (d * d) as f64)
            .sum();
        for d in 2..shells.len() {
            let expect = f64::from(trials) * shells[d] as f64 / (d * d) as f64 / norm;
            let got = per_distance[d] as f64;
            assert!(
                (got - expect).abs() < 5.0 * expect.sqrt() + 1.0,
                "distance {d}: {got} draws, {expect:.0} expected"
            );
        }
    }

    /// A few rows, pinned: the overlay is a format every rank computes alike, so a change
    /// of its generator or of a distribution shows here (update the pins on purpose only).
    #[test]
    fn pinned_rows() {
        let rows = |p: OverlayParams, ranks: &[u32]| -> Vec<Vec<u32>> {
            let o = Overlay::new(p).unwrap();
            ranks.iter().map(|&r| o.row(r)).collect()
        };
        let got = [
            rows(params(1000, LatticeKind::Ring, 8, 1.0), &[0, 617]),
            rows(params(4096, LatticeKind::Torus2, 6, 2.0), &[5]),
            rows(params(4096, LatticeKind::Torus3, 6, 3.0), &[77]),
            // Dense: 30 shortcuts of 47 ranks (keys E/w, E ~ Exp(1)).
            rows(params(50, LatticeKind::Ring, 30, 1.0), &[7]),
        ];
        let want: [Vec<Vec<u32>>; 4] = [
            vec![
                vec![1, 2, 4, 5, 12, 108, 276, 933, 998, 999],
                vec![611, 612, 616, 618, 621, 622, 623, 638, 669, 707],
            ],
            vec![vec![2, 4, 6, 69, 453, 850, 3711, 3959, 3998, 4037]],
            vec![vec![
                45, 61, 76, 78, 91, 93, 333, 1337, 3213, 3885, 3904, 3917,
            ]],
            // Since E is rand_distr's Exp1 (ziggurat) rather than −ln(1 − U).
            vec![vec![
                0, 1, 2, 3, 4, 5, 6, 8, 9, 10, 11, 12, 13, 15, 16, 17, 20, 21, 22, 24, 25, 31, 32,
                34, 36, 38, 40, 41, 42, 45, 47, 48,
            ]],
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn rows_are_deterministic_and_distinct() {
        let o = Overlay::new(params(1000, LatticeKind::Ring, 20, 1.0)).unwrap();
        for r in [0, 1, 499, 999] {
            let row = o.row(r);
            assert_eq!(row, o.row(r));
            assert_eq!(row.len(), 22);
            assert!(row.windows(2).all(|w| w[0] < w[1]));
            assert!(!row.contains(&r));
            assert!(row.contains(&((r + 1) % 1000)) && row.contains(&((r + 999) % 1000)));
        }
        assert_ne!(o.row(3), {
            let mut p = o.params().clone();
            p.seed = 2;
            Overlay::new(p).unwrap().row(3)
        });
    }

    #[test]
    fn tiny_and_dense_overlays() {
        let o = Overlay::new(params(1, LatticeKind::Ring, 5, 1.0)).unwrap();
        assert_eq!(o.row(0), Vec::<u32>::new());
        let o = Overlay::new(params(5, LatticeKind::Ring, 64, 1.0)).unwrap();
        assert_eq!(o.shortcuts(), 2);
        assert_eq!(o.notes().len(), 1, "{:?}", o.notes());
        for r in 0..5 {
            assert_eq!(o.row(r).len(), 4);
        }
        // Dense regime (30 of 47 available) and a concentrated law that exhausts the
        // sparse budget (exponent 12): both still give distinct, valid rows.
        for p in [
            params(50, LatticeKind::Ring, 30, 1.0),
            params(3000, LatticeKind::Ring, 200, 12.0),
        ] {
            let o = Overlay::new(p).unwrap();
            for r in [0, 7, 49] {
                let row = o.row(r);
                assert_eq!(row.len() as u32, o.out_degree());
                assert!(row.windows(2).all(|w| w[0] < w[1]) && !row.contains(&r));
            }
        }
    }

    #[test]
    fn complete_overlays_list_every_other_rank() {
        for lattice in [LatticeKind::Ring, LatticeKind::Torus2, LatticeKind::Torus3] {
            for n in [2u32, 3, 8, 27, 64] {
                let o = Overlay::new(params(n, lattice, n, 0.0)).unwrap();
                assert!(o.is_complete(), "{lattice:?} {n}");
                for r in 0..n {
                    let all: Vec<u32> = (0..n).filter(|&v| v != r).collect();
                    assert_eq!(o.row(r), all, "{lattice:?} {n} rank {r}");
                    assert_eq!(o.in_neighbours(r), all, "{lattice:?} {n} rank {r}");
                }
                // One shortcut fewer than the ranks beyond the lattice neighbours: not
                // complete, and the rows are drawn.
                let ball = o.lattice_degree();
                if n > ball + 2 {
                    let o = Overlay::new(params(n, lattice, n - ball - 2, 0.0)).unwrap();
                    assert!(!o.is_complete(), "{lattice:?} {n}");
                    assert_eq!(o.row(0).len() as u32, n - 2);
                }
            }
        }
    }

    #[test]
    fn bad_parameters() {
        assert!(matches!(
            Overlay::new(params(0, LatticeKind::Ring, 1, 1.0)),
            Err(OverlayError::ZeroRanks)
        ));
        assert!(matches!(
            Overlay::new(params(10, LatticeKind::Ring, 1, -1.0)),
            Err(OverlayError::NegativeExponent(_))
        ));
        assert!(matches!(
            Overlay::new(params(10, LatticeKind::Ring, 1, f64::NAN)),
            Err(OverlayError::BadExponent(_))
        ));
        let mut p = params(10, LatticeKind::Ring, 1, 1.0);
        p.reach = 0;
        assert!(matches!(Overlay::new(p), Err(OverlayError::ZeroReach)));
    }

    fn paired(ranks: u32, lattice: LatticeKind, shortcuts: u32) -> Overlay {
        Overlay::new(OverlayParams {
            draw: ShortcutDraw::Paired,
            ..params(ranks, lattice, shortcuts, lattice.dim() as f64)
        })
        .unwrap()
    }

    #[test]
    fn paired_shortcuts_go_both_ways() {
        for (n, lattice, k) in [
            (1000, LatticeKind::Ring, 8),
            (3001, LatticeKind::Ring, 30),
            (4096, LatticeKind::Torus2, 12),
            (60 * 50, LatticeKind::Torus2, 20),
            (13 * 11 * 7, LatticeKind::Torus3, 10),
            (37, LatticeKind::Ring, 30),
        ] {
            // Dense (k near N): partners repeat across rounds, fewer distinct shortcuts.
            let floor = if k * 2 > n { 0.4 } else { 0.6 };
            let o = paired(n, lattice, k);
            assert!(o.is_symmetric());
            let rows: Vec<Vec<u32>> = (0..n).map(|r| o.row(r)).collect();
            let mut shortcuts = 0usize;
            for (u, row) in rows.iter().enumerate() {
                let u = u as u32;
                assert!(row.windows(2).all(|w| w[0] < w[1]) && !row.contains(&u));
                assert!(
                    row.len() as u32 <= o.out_degree(),
                    "{lattice:?} {n}: rank {u}"
                );
                for &v in row {
                    assert!(
                        rows[v as usize].binary_search(&u).is_ok(),
                        "{lattice:?} {n}: {u} -> {v} but not {v} -> {u}"
                    );
                }
                shortcuts += row.len() - o.lattice_degree() as usize;
                if u.is_multiple_of(97) {
                    assert_eq!(o.in_neighbours(u), *row);
                }
            }
            let mean = shortcuts as f64 / f64::from(n);
            assert!(
                mean >= floor * f64::from(o.shortcuts()),
                "{lattice:?} {n}: {mean:.1} shortcuts a rank of {k}"
            );
        }
    }

    #[test]
    fn paired_distances_spread_over_every_scale() {
        // Ring, p = 1: Kleinberg's law puts the same share of shortcuts in every dyadic
        // distance band [2^b, 2^(b+1)); the paired draw keeps that within a factor ~2.
        let n = 100_003;
        let o = paired(n, LatticeKind::Ring, 30);
        let mut bands = [0u64; 17];
        for r in (0..n).step_by(7) {
            for v in o.row(r) {
                let d = o.lattice().distance(r, v);
                if d > 1 {
                    bands[(31 - d.leading_zeros()) as usize] += 1;
                }
            }
        }
        let inner = &bands[2..15];
        let (lo, hi) = (inner.iter().min().unwrap(), inner.iter().max().unwrap());
        assert!(*lo * 4 >= *hi, "bands {bands:?}");
    }

    #[test]
    fn keyed_permutations_are_bijections_with_inverses() {
        for bits in [1u32, 2, 3, 7, 10] {
            let n = 1u32 << bits;
            let image: std::collections::BTreeSet<u32> =
                (0..n).map(|x| permute(99, bits, x, false)).collect();
            assert_eq!(image.len() as u32, n, "{bits} bits");
            assert!(image.iter().all(|&y| y < n));
            for x in 0..n {
                assert_eq!(permute(99, bits, permute(99, bits, x, false), true), x);
            }
        }
    }

    #[test]
    fn paired_rows_are_pinned() {
        let o = paired(1000, LatticeKind::Ring, 8);
        assert_eq!(o.row(0), o.row(0));
        let got = [
            o.row(0),
            o.row(617),
            paired(4096, LatticeKind::Torus2, 6).row(5),
        ];
        let want: [Vec<u32>; 3] = [
            vec![1, 2, 5, 10, 19, 164, 917, 966, 999],
            vec![390, 428, 480, 543, 596, 609, 614, 616, 618, 620],
            vec![4, 6, 16, 69, 131, 514, 2837, 4034, 4036, 4037],
        ];
        assert_eq!(got, want);
        assert!(ShortcutDraw::parse("chord").is_err());
        for n in ShortcutDraw::NAMES {
            assert_eq!(ShortcutDraw::parse(n).unwrap().name(), n);
        }
    }

    #[test]
    fn in_neighbours_invert_rows() {
        let o = Overlay::new(params(200, LatticeKind::Torus2, 6, 2.0)).unwrap();
        for r in [0, 57, 199] {
            let ins = o.in_neighbours(r);
            for u in 0..200 {
                assert_eq!(ins.contains(&u), o.row(u).contains(&r));
            }
        }
    }
}
