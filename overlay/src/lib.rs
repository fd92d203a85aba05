//! The Kleinberg small-world overlay that constrains who talks to whom in Titus.
//!
//! Idle ranks steal only from their overlay neighbours, and results travel back to their
//! owners hop by hop along it, so each rank connects to O(k) peers instead of N − 1, yet
//! work and results cross the whole machine in a few hops (TITUS_DLB, Euro-Par 2019 §4).
//!
//! - [`Lattice`]: ring or torus over rank numbers, and the lattice distance.
//! - [`Overlay`]: a rank's row (lattice neighbours plus `k` shortcuts with
//!   P ∝ d^(−p)) computed by any rank in O(k), deterministic in (seed, rank).
//! - [`route`]: greedy and neighbour-of-neighbour routing; every hop gets closer.
//! - [`Graph`] and [`stats`]: the whole graph and its figures, for tools and the simulator.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod graph;
mod lattice;
mod overlay;
mod powerlaw;
pub mod rng;
pub mod route;
mod shared_rows;
pub mod stats;

pub use graph::Graph;
pub use lattice::{Lattice, LatticeKind, MAX_RANKS, Offset};
pub use overlay::{
    DEFAULT_SEED, DEFAULT_SHORTCUTS, Overlay, OverlayParams, SHORTCUTS_MAX, ShortcutDraw,
};
pub use powerlaw::PowerLaw;
pub use route::Routing;

/// Why overlay parameters were refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OverlayError {
    /// An overlay needs at least one rank.
    #[error("the number of ranks must be at least 1")]
    ZeroRanks,
    /// Ranks are `u32` with a spare bit.
    #[error("{0} ranks is more than the {max} an overlay supports", max = MAX_RANKS)]
    TooManyRanks(u32),
    /// Kleinberg's exponent is a non-negative real.
    #[error("the shortcut exponent must be at least 0 (got {0})")]
    NegativeExponent(f64),
    /// NaN or infinite exponent.
    #[error("the shortcut exponent must be a finite number (got {0})")]
    BadExponent(f64),
    /// Routing needs every rank to have a lattice neighbour one step closer to any
    /// destination.
    #[error("the lattice reach must be at least 1 (routing relies on the lattice neighbours)")]
    ZeroReach,
    /// A lattice name that is not ring, torus2 or torus3.
    #[error("unknown lattice '{0}' (expected ring, torus2 or torus3)")]
    UnknownLattice(String),
    /// A shortcut draw that is not kleinberg or paired.
    #[error("unknown shortcut draw '{0}' (expected kleinberg or paired)")]
    UnknownDraw(String),
    /// A routing name that is not greedy or non.
    #[error("unknown routing '{0}' (expected greedy or non)")]
    UnknownRouting(String),
    /// A shape with the wrong number of extents.
    #[error("a {kind} lattice takes {} extents, got {got}", kind.dim())]
    ShapeDimension {
        /// The lattice.
        kind: LatticeKind,
        /// Extents given.
        got: usize,
    },
    /// A shape whose extents do not multiply to the number of ranks.
    #[error(
        "shape {shape:?} does not hold {ranks} ranks (its extents must be positive and multiply to the rank count)"
    )]
    ShapeMismatch {
        /// The extents given.
        shape: Vec<u32>,
        /// The number of ranks.
        ranks: u32,
    },
}
