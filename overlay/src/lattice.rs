//! The rank lattice: a 1-D ring over rank numbers, or a 2-D / 3-D torus whose coordinates
//! are the rank in row-major order (last coordinate fastest).
//!
//! Launchers number ranks by placement (node by node, socket by socket), so the lattice
//! distance between two ranks approximates their network distance; the overlay biases its
//! shortcuts and routes by it.

use crate::OverlayError;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The largest number of ranks a lattice may hold: ranks are `u32`, and a few `u32`
/// computations (window checks on `2 * offset`) need one spare bit.
pub const MAX_RANKS: u32 = 1 << 30;

/// Which lattice the overlay is built over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum LatticeKind {
    /// A ring over rank numbers (the default; TITUS's lattice).
    #[default]
    Ring,
    /// A 2-D torus.
    Torus2,
    /// A 3-D torus.
    Torus3,
}

impl LatticeKind {
    /// The lattice's dimension, which is also Kleinberg's optimal shortcut exponent.
    pub fn dim(self) -> usize {
        match self {
            Self::Ring => 1,
            Self::Torus2 => 2,
            Self::Torus3 => 3,
        }
    }

    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Self::Ring => "ring",
            Self::Torus2 => "torus2",
            Self::Torus3 => "torus3",
        }
    }
}

impl fmt::Display for LatticeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for LatticeKind {
    type Err = OverlayError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "ring" => Ok(Self::Ring),
            "torus2" => Ok(Self::Torus2),
            "torus3" => Ok(Self::Torus3),
            other => Err(OverlayError::UnknownLattice(other.to_string())),
        }
    }
}

/// A displacement between two lattice points, one component per dimension (unused
/// dimensions stay 0).
pub type Offset = [i64; 3];

/// A lattice of `len()` ranks with its shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lattice {
    kind: LatticeKind,
    n: u32,
    /// Extent of each dimension; unused dimensions are 1.
    shape: [u32; 3],
}

impl Lattice {
    /// A lattice of `n` ranks. `shape`, when given, must have one extent per dimension and
    /// multiply to `n`; otherwise a near-cubic shape is chosen (extents as equal as the
    /// divisors of `n` allow; a prime `n` gives a degenerate 1 × n torus, which is a ring).
    pub fn new(kind: LatticeKind, n: u32, shape: Option<&[u32]>) -> Result<Self, OverlayError> {
        if n == 0 {
            return Err(OverlayError::ZeroRanks);
        }
        if n > MAX_RANKS {
            return Err(OverlayError::TooManyRanks(n));
        }
        let dim = kind.dim();
        let mut full = [1u32; 3];
        match shape {
            Some(s) => {
                if s.len() != dim {
                    return Err(OverlayError::ShapeDimension { kind, got: s.len() });
                }
                // Three u32 extents can multiply past u64: an overflowing product holds
                // more than `n` ranks, so it is refused as any other mismatch.
                let product = s
                    .iter()
                    .try_fold(1u64, |acc, &x| acc.checked_mul(u64::from(x)));
                if s.contains(&0) || product != Some(u64::from(n)) {
                    return Err(OverlayError::ShapeMismatch {
                        shape: s.to_vec(),
                        ranks: n,
                    });
                }
                full[..dim].copy_from_slice(s);
            }
            None => full[..dim].copy_from_slice(&near_cubic(n, dim)),
        }
        Ok(Self {
            kind,
            n,
            shape: full,
        })
    }

    /// A ring of `n` ranks.
    pub fn ring(n: u32) -> Result<Self, OverlayError> {
        Self::new(LatticeKind::Ring, n, None)
    }

    /// The lattice kind.
    pub fn kind(&self) -> LatticeKind {
        self.kind
    }

    /// Number of ranks.
    pub fn len(&self) -> u32 {
        self.n
    }

    /// Always false: a lattice has at least one rank.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Dimension (1, 2 or 3).
    pub fn dim(&self) -> usize {
        self.kind.dim()
    }

    /// Extent of each dimension.
    pub fn shape(&self) -> &[u32] {
        &self.shape[..self.dim()]
    }

    /// Coordinates of `rank` (row-major: the last used coordinate varies fastest).
    pub fn coords(&self, rank: u32) -> [u32; 3] {
        let [_, b, c] = self.shape;
        match self.dim() {
            1 => [rank, 0, 0],
            2 => [rank / b, rank % b, 0],
            _ => [rank / (b * c), (rank / c) % b, rank % c],
        }
    }

    /// The rank at `coords`.
    pub fn rank_of(&self, coords: [u32; 3]) -> u32 {
        let [_, b, c] = self.shape;
        match self.dim() {
            1 => coords[0],
            2 => coords[0] * b + coords[1],
            _ => (coords[0] * b + coords[1]) * c + coords[2],
        }
    }

    /// Lattice distance: the sum over dimensions of the shorter way round.
    pub fn distance(&self, a: u32, b: u32) -> u32 {
        if self.dim() == 1 {
            let d = a.abs_diff(b);
            return d.min(self.n - d);
        }
        let (ca, cb) = (self.coords(a), self.coords(b));
        (0..self.dim())
            .map(|i| {
                let d = ca[i].abs_diff(cb[i]);
                d.min(self.shape[i] - d)
            })
            .sum()
    }

    /// The largest distance between two ranks.
    pub fn diameter(&self) -> u32 {
        self.shape().iter().map(|&l| l / 2).sum()
    }

    /// Whether `off` is the canonical form of a displacement: every component in
    /// (−L/2, L/2]. Each rank is reached from a given rank by exactly one canonical
    /// displacement, whose L1 norm is the lattice distance.
    pub fn is_canonical(&self, off: &Offset) -> bool {
        (0..self.dim()).all(|i| {
            let l = i64::from(self.shape[i]);
            2 * off[i] > -l && 2 * off[i] <= l
        })
    }

    /// The rank reached from `rank` by displacement `off` (wrapping round each dimension).
    pub fn offset(&self, rank: u32, off: &Offset) -> u32 {
        let mut c = self.coords(rank);
        for i in 0..self.dim() {
            let l = i64::from(self.shape[i]);
            c[i] = (i64::from(c[i]) + off[i]).rem_euclid(l) as u32;
        }
        self.rank_of(c)
    }

    /// Canonical displacements of every rank at distance 1..=`reach`, in a fixed order:
    /// the lattice neighbours of any rank, since the torus looks the same from each.
    pub fn ball(&self, reach: u32) -> Vec<Offset> {
        let dim = self.dim();
        let r = i64::from(reach);
        let range = |i: usize| -> (i64, i64) {
            if i >= dim {
                return (0, 0);
            }
            let l = i64::from(self.shape[i]);
            // Canonical window (−L/2, L/2] intersected with [−r, r].
            ((-(l - 1) / 2).max(-r), (l / 2).min(r))
        };
        let (r0, r1, r2) = (range(0), range(1), range(2));
        let mut out = Vec::new();
        for x in r0.0..=r0.1 {
            for y in r1.0..=r1.1 {
                for z in r2.0..=r2.1 {
                    let norm = x.abs() + y.abs() + z.abs();
                    if norm >= 1 && norm <= r {
                        out.push([x, y, z]);
                    }
                }
            }
        }
        out
    }

    /// `ball(reach).len()`, counted without building the ball: what a caller checks
    /// against the memory available before asking for it. Costs the product of the two
    /// narrowest windows of [`Lattice::ball`] (at most 2^20 steps for 2^30 ranks), not
    /// the ball's size.
    pub fn ball_len(&self, reach: u32) -> u64 {
        let r = i64::from(reach);
        // The same windows as `ball`: canonical (−L/2, L/2] intersected with [−r, r].
        let mut windows = [(0i64, 0i64); 3];
        for (i, w) in windows.iter_mut().enumerate().take(self.dim()) {
            let l = i64::from(self.shape[i]);
            *w = ((-(l - 1) / 2).max(-r), (l / 2).min(r));
        }
        // Iterate over the two narrowest windows and count the widest in closed form.
        windows.sort_by_key(|&(lo, hi)| hi - lo);
        let [(a0, a1), (b0, b1), (c0, c1)] = windows;
        // Points of [lo, hi] within `s` of 0.
        let within = |lo: i64, hi: i64, s: i64| (hi.min(s) - lo.max(-s) + 1).max(0);
        let mut count = 0i64;
        for a in a0..=a1 {
            for b in b0..=b1 {
                let left = r - a.abs() - b.abs();
                if left >= 0 {
                    count += within(c0, c1, left);
                }
            }
        }
        // The origin is in every window and is not a neighbour.
        (count - 1) as u64
    }

    /// Number of ranks at each distance 0..=diameter from any one rank.
    pub fn shell_sizes(&self) -> Vec<u64> {
        let per_dim = |l: u32| -> Vec<u64> {
            (0..=l / 2)
                .map(|d| match d {
                    0 => 1,
                    d if 2 * d == l => 1,
                    _ => 2,
                })
                .collect()
        };
        let mut acc = vec![1u64];
        for &l in self.shape() {
            let c = per_dim(l);
            let mut next = vec![0u64; acc.len() + c.len() - 1];
            for (i, &a) in acc.iter().enumerate() {
                for (j, &b) in c.iter().enumerate() {
                    next[i + j] += a * b;
                }
            }
            acc = next;
        }
        acc
    }
}

/// The divisors of `n`, ascending.
fn divisors(n: u32) -> Vec<u32> {
    let mut small = Vec::new();
    let mut large = Vec::new();
    let mut d = 1u32;
    while u64::from(d) * u64::from(d) <= u64::from(n) {
        if n.is_multiple_of(d) {
            small.push(d);
            if d != n / d {
                large.push(n / d);
            }
        }
        d += 1;
    }
    small.extend(large.into_iter().rev());
    small
}

/// The factorisation of `n` into `dim` extents, sorted descending, whose largest-to-
/// smallest ratio is least.
fn near_cubic(n: u32, dim: usize) -> Vec<u32> {
    match dim {
        1 => vec![n],
        2 => {
            let a = divisors(n)
                .into_iter()
                .filter(|&d| u64::from(d) * u64::from(d) <= u64::from(n))
                .max()
                .unwrap_or(1);
            vec![n / a, a]
        }
        _ => {
            let divs = divisors(n);
            let mut best = vec![n, 1, 1];
            let mut best_ratio = f64::INFINITY;
            for &a in &divs {
                if u64::from(a).pow(3) > u64::from(n) {
                    break;
                }
                let rest = n / a;
                for &b in &divs {
                    if b < a
                        || !rest.is_multiple_of(b)
                        || u64::from(b) * u64::from(b) > u64::from(rest)
                    {
                        continue;
                    }
                    let c = rest / b;
                    let ratio = f64::from(c) / f64::from(a);
                    if ratio < best_ratio {
                        best_ratio = ratio;
                        best = vec![c, b, a];
                    }
                }
            }
            best
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn brute_distance(l: &Lattice, a: u32, b: u32) -> u32 {
        // Smallest L1 norm over every displacement that maps a to b.
        let (ca, cb) = (l.coords(a), l.coords(b));
        (0..l.dim())
            .map(|i| {
                let s = l.shape[i] as i64;
                let d = (cb[i] as i64 - ca[i] as i64).rem_euclid(s);
                d.min(s - d) as u32
            })
            .sum()
    }

    #[test]
    fn shapes() {
        assert_eq!(
            Lattice::new(LatticeKind::Torus2, 10_000, None)
                .unwrap()
                .shape(),
            &[100, 100]
        );
        assert_eq!(
            Lattice::new(LatticeKind::Torus3, 1_000_000, None)
                .unwrap()
                .shape(),
            &[100, 100, 100]
        );
        assert_eq!(
            Lattice::new(LatticeKind::Torus3, 3584, None)
                .unwrap()
                .shape(),
            &[16, 16, 14]
        );
        assert_eq!(
            Lattice::new(LatticeKind::Torus2, 7, None).unwrap().shape(),
            &[7, 1]
        );
        assert!(matches!(
            Lattice::new(LatticeKind::Torus2, 12, Some(&[5, 2])),
            Err(OverlayError::ShapeMismatch { .. })
        ));
        assert!(matches!(
            Lattice::new(LatticeKind::Torus2, 12, Some(&[12])),
            Err(OverlayError::ShapeDimension { .. })
        ));
    }

    #[test]
    fn coords_roundtrip_and_distance() {
        for (kind, n) in [
            (LatticeKind::Ring, 17),
            (LatticeKind::Torus2, 24),
            (LatticeKind::Torus3, 60),
        ] {
            let l = Lattice::new(kind, n, None).unwrap();
            let shells = l.shell_sizes();
            for a in 0..n {
                assert_eq!(l.rank_of(l.coords(a)), a);
                let mut count = vec![0u64; shells.len()];
                for b in 0..n {
                    let d = l.distance(a, b);
                    assert_eq!(d, brute_distance(&l, a, b));
                    assert_eq!(d, l.distance(b, a));
                    count[d as usize] += 1;
                }
                assert_eq!(count, shells, "{kind} {n}");
            }
        }
    }

    #[test]
    fn extents_whose_product_overflows_are_refused() {
        assert!(matches!(
            Lattice::new(
                LatticeKind::Torus3,
                8,
                Some(&[u32::MAX, u32::MAX, u32::MAX])
            ),
            Err(OverlayError::ShapeMismatch { .. })
        ));
        // These multiply to 2 × 2^64 + 8: a wrapping product would read 8 and take them.
        assert!(matches!(
            Lattice::new(
                LatticeKind::Torus3,
                8,
                Some(&[3_340_214_413, 2_761_311_370, 4])
            ),
            Err(OverlayError::ShapeMismatch { .. })
        ));
    }

    #[test]
    fn ball_len_counts_the_ball() {
        for (kind, n, shape) in [
            (LatticeKind::Ring, 1, None),
            (LatticeKind::Ring, 2, None),
            (LatticeKind::Ring, 17, None),
            (LatticeKind::Torus2, 24, None),
            (LatticeKind::Torus2, 60, Some(&[30u32, 2][..])),
            (LatticeKind::Torus2, 7, None),
            (LatticeKind::Torus3, 60, None),
            (LatticeKind::Torus3, 64, None),
            (LatticeKind::Torus3, 90, Some(&[2u32, 45, 1][..])),
        ] {
            let l = Lattice::new(kind, n, shape).unwrap();
            for reach in (1..=l.diameter() + 2).chain([1 << 16, u32::MAX]) {
                assert_eq!(
                    l.ball_len(reach),
                    l.ball(reach).len() as u64,
                    "{kind} {:?} reach {reach}",
                    l.shape()
                );
            }
        }
    }

    #[test]
    fn ball_is_the_set_within_reach() {
        for (kind, n, reach) in [
            (LatticeKind::Ring, 5, 1),
            (LatticeKind::Ring, 2, 1),
            (LatticeKind::Ring, 1, 3),
            (LatticeKind::Torus2, 12, 2),
            (LatticeKind::Torus3, 8, 1),
            (LatticeKind::Torus3, 64, 2),
        ] {
            let l = Lattice::new(kind, n, None).unwrap();
            for a in 0..n {
                let mut got: Vec<u32> = l.ball(reach).iter().map(|o| l.offset(a, o)).collect();
                got.sort_unstable();
                let mut want: Vec<u32> = (0..n)
                    .filter(|&b| b != a && l.distance(a, b) <= reach)
                    .collect();
                want.sort_unstable();
                assert_eq!(got, want, "{kind} n={n} reach={reach} rank={a}");
            }
        }
    }
}
