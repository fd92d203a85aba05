//! The UTS trees (Olivier et al., "UTS: An Unbalanced Tree Search Benchmark", LCPC 2006):
//! trees generated on the fly from SHA-1, whose node counts are published, so that any
//! traversal, sequential or balanced over ranks, is checked against them.
//!
//! A node is its 20-byte state and its depth. The root's state is SHA-1 of 16 zero bytes
//! followed by the big-endian 32-bit seed; child `i`'s is SHA-1 of its parent's state
//! followed by the big-endian `i`. A node's draw is its state's last 4 bytes, big-endian,
//! as 31 bits; its number of children follows from the draw by the tree's kind:
//! - **binomial**: the root has ⌊b⌋ children; every other node `m` with probability `q`,
//!   else none;
//! - **geometric**: ⌊ln(1 − u) / ln(1 − p)⌋ for the draw `u` in [0, 1) and
//!   p = 1 / (1 + bᵢ), bᵢ the expected branching at the node's depth by the shape;
//! - **hybrid**: geometric above `f × d`, binomial from there.
//!
//! No node but a binomial tree's root has more than [`CHILDREN_MAX`] children. The float
//! operations are the specification's, in its order, through the platform's libm, so the
//! published counts come out exactly.

use clap::Parser as _;
use sha1::{Digest, Sha1};

/// Most children of any node but a binomial tree's root (the specification's cap).
pub const CHILDREN_MAX: u32 = 100;

/// Deepest tree the traversal follows: past it the tree is not one of the benchmark's
/// (the deepest sample tree, T3XXL's, is about 15,000 deep).
pub const DEPTH_MAX: u32 = 1 << 20;

/// How a node's number of children is drawn (`-t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TreeKind {
    /// `-t 0`: the root ⌊b⌋ children, every other node `m` with probability `q`.
    Binomial,
    /// `-t 1`: a geometric number of children, its mean by depth along the shape (`-a`).
    Geometric,
    /// `-t 2`: geometric down to depth `f × d`, binomial below.
    Hybrid,
}

/// How a geometric tree's expected branching falls with depth (`-a`), for depth `i`
/// below the root and the tree's depth `d`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GeoShape {
    /// `-a 0`: b × (1 − i / d).
    Linear,
    /// `-a 1`: b × i^(−ln b / ln d).
    ExpDec,
    /// `-a 2`: b^sin(2π i / d), none past 5 d.
    Cyclic,
    /// `-a 3`: b down to depth d, none from there.
    Fixed,
}

/// A UTS tree: the specification's parameters, with its flags' names.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tree {
    /// `-t`: how children are drawn.
    pub kind: TreeKind,
    /// `-b`: the root's branching (binomial: its children; geometric: the mean at depth 0).
    pub b: f64,
    /// `-r`: the root's seed.
    pub seed: u32,
    /// `-a`: the geometric shape.
    pub shape: GeoShape,
    /// `-d`: the geometric tree's depth parameter.
    pub d: u32,
    /// `-q`: the binomial probability of children.
    pub q: f64,
    /// `-m`: the binomial number of children.
    pub m: u32,
    /// `-f`: the hybrid tree's switch to binomial, as a fraction of `d`.
    pub f: f64,
    /// `-g`: SHA-1 evaluations per child (the benchmark's granularity).
    pub g: u32,
}

impl Default for Tree {
    /// The specification's defaults: a geometric tree of linear shape, b = 4, d = 6.
    fn default() -> Self {
        Self {
            kind: TreeKind::Geometric,
            b: 4.0,
            seed: 0,
            shape: GeoShape::Linear,
            d: 6,
            q: 15.0 / 64.0,
            m: 4,
            f: 0.5,
            g: 1,
        }
    }
}

/// Why a tree's parameters describe no tree the benchmark draws.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TreeError {
    /// `-b` negative, not finite, or a binomial root of more than 2^31 children.
    #[error("-b {0}: the branching must be finite, at least 0 (a binomial root's below 2^31)")]
    Branching(f64),
    /// `-q` outside 0..=1.
    #[error("-q {0}: a probability, 0 to 1")]
    Probability(f64),
    /// `-m` past the children a node may have.
    #[error("-m {m}: at most {max} children a node", max = CHILDREN_MAX)]
    Children {
        /// The number given.
        m: u32,
    },
    /// `-d` zero where the shape divides by it, or past the deepest tree followed.
    #[error("-d {0}: 1 to {max} for a geometric or hybrid tree", max = DEPTH_MAX)]
    Depth(u32),
    /// `-f` outside 0..=1 or not finite.
    #[error("-f {0}: a fraction of the depth, 0 to 1")]
    Shift(f64),
    /// `-g` zero or past 1,000.
    #[error("-g {0}: 1 to 1000 evaluations a child")]
    Granularity(u32),
}

/// A tree's flags, UTS's own (`-t -b -r -a -d -q -m -f -g`), so the published sample
/// trees paste as they are: `uts-bench`'s, and `titus sim --uts`'s in one string.
#[derive(Debug, Clone, clap::Args)]
pub struct TreeArgs {
    /// Tree kind: 0 binomial, 1 geometric, 2 hybrid.
    #[arg(short = 't', default_value_t = 1, value_parser = clap::value_parser!(u8).range(0..=2))]
    pub kind: u8,
    /// The root's branching factor.
    #[arg(short = 'b', default_value_t = 4.0, allow_negative_numbers = true)]
    pub b: f64,
    /// The root's seed.
    #[arg(short = 'r', default_value_t = 0)]
    pub seed: u32,
    /// Geometric shape: 0 linear, 1 exponential decrease, 2 cyclic, 3 fixed.
    #[arg(short = 'a', default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=3))]
    pub shape: u8,
    /// Geometric tree depth.
    #[arg(short = 'd', default_value_t = 6)]
    pub d: u32,
    /// Binomial probability of children.
    #[arg(short = 'q', default_value_t = 15.0 / 64.0, allow_negative_numbers = true)]
    pub q: f64,
    /// Binomial number of children.
    #[arg(short = 'm', default_value_t = 4)]
    pub m: u32,
    /// Hybrid: depth fraction where the geometric tree turns binomial.
    #[arg(short = 'f', default_value_t = 0.5, allow_negative_numbers = true)]
    pub f: f64,
    /// SHA-1 evaluations per child (work per node).
    #[arg(short = 'g', default_value_t = 1)]
    pub g: u32,
}

/// [`TreeArgs`] alone, to read them from one string.
#[derive(Debug, clap::Parser)]
#[command(name = "--uts", no_binary_name = true, disable_help_flag = true)]
struct TreeSpec {
    #[command(flatten)]
    tree: TreeArgs,
}

impl TreeArgs {
    /// The tree these flags name (not yet checked: [`Tree::check`]).
    pub fn tree(&self) -> Tree {
        Tree {
            kind: match self.kind {
                0 => TreeKind::Binomial,
                1 => TreeKind::Geometric,
                _ => TreeKind::Hybrid,
            },
            b: self.b,
            seed: self.seed,
            shape: match self.shape {
                0 => GeoShape::Linear,
                1 => GeoShape::ExpDec,
                2 => GeoShape::Cyclic,
                _ => GeoShape::Fixed,
            },
            d: self.d,
            q: self.q,
            m: self.m,
            f: self.f,
            g: self.g,
        }
    }

    /// The checked tree of a string of flags, e.g. `-t 1 -a 3 -d 10 -b 4 -r 19`.
    pub fn parse_tree(spec: &str) -> Result<Tree, String> {
        let args = TreeSpec::try_parse_from(spec.split_whitespace()).map_err(|e| {
            format!(
                "--uts '{spec}': {}",
                e.to_string().lines().next().unwrap_or("")
            )
        })?;
        let tree = args.tree.tree();
        tree.check().map_err(|e| format!("--uts '{spec}': {e}"))?;
        Ok(tree)
    }
}

/// A node: its state and its depth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Node {
    /// Its SHA-1 state.
    pub state: [u8; 20],
    /// Its depth: 0 at the root.
    pub depth: u32,
}

/// What a traversal found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Nodes visited.
    pub nodes: u64,
    /// Nodes without children.
    pub leaves: u64,
    /// The greatest depth.
    pub max_depth: u32,
}

impl Counts {
    /// Both traversals' counts together.
    pub fn add(&mut self, other: &Counts) {
        self.nodes += other.nodes;
        self.leaves += other.leaves;
        self.max_depth = self.max_depth.max(other.max_depth);
    }
}

impl Tree {
    /// Checks the parameters: bounds that keep every draw finite and every node's
    /// children countable.
    pub fn check(&self) -> Result<(), TreeError> {
        let b_max = match self.kind {
            TreeKind::Binomial => f64::from(i32::MAX),
            _ => f64::MAX,
        };
        if !(self.b.is_finite() && (0.0..=b_max).contains(&self.b)) {
            return Err(TreeError::Branching(self.b));
        }
        if !(0.0..=1.0).contains(&self.q) {
            return Err(TreeError::Probability(self.q));
        }
        if self.m > CHILDREN_MAX {
            return Err(TreeError::Children { m: self.m });
        }
        if self.kind != TreeKind::Binomial && !(1..=DEPTH_MAX).contains(&self.d) {
            return Err(TreeError::Depth(self.d));
        }
        if !(0.0..=1.0).contains(&self.f) {
            return Err(TreeError::Shift(self.f));
        }
        if !(1..=1000).contains(&self.g) {
            return Err(TreeError::Granularity(self.g));
        }
        Ok(())
    }

    /// The root.
    pub fn root(&self) -> Node {
        let mut seed = [0u8; 20];
        seed[16..].copy_from_slice(&self.seed.to_be_bytes());
        Node {
            state: Sha1::digest(seed).into(),
            depth: 0,
        }
    }

    /// Child `i` of `parent`.
    #[inline]
    pub fn child(&self, parent: &Node, i: u32) -> Node {
        let mut input = [0u8; 24];
        input[..20].copy_from_slice(&parent.state);
        input[20..].copy_from_slice(&i.to_be_bytes());
        let mut state: [u8; 20] = Sha1::digest(input).into();
        // The benchmark's granularity: the same digest again, as work.
        for _ in 1..self.g {
            state = std::hint::black_box(Sha1::digest(std::hint::black_box(input))).into();
        }
        Node {
            state,
            depth: parent.depth + 1,
        }
    }

    /// How many children `n` has.
    #[inline]
    pub fn children(&self, n: &Node) -> u32 {
        let drawn = match self.kind {
            TreeKind::Binomial if n.depth == 0 => return self.b.floor() as u32,
            TreeKind::Binomial => self.binomial(n),
            TreeKind::Geometric => self.geometric(n),
            TreeKind::Hybrid if f64::from(n.depth) < self.f * f64::from(self.d) => {
                self.geometric(n)
            }
            TreeKind::Hybrid => self.binomial(n),
        };
        drawn.min(CHILDREN_MAX)
    }

    #[inline]
    fn binomial(&self, n: &Node) -> u32 {
        if probability(n) < self.q { self.m } else { 0 }
    }

    fn geometric(&self, n: &Node) -> u32 {
        let (b, depth, d) = (self.b, f64::from(n.depth), f64::from(self.d));
        let expected = if n.depth == 0 {
            b
        } else {
            match self.shape {
                GeoShape::Linear => b * (1.0 - depth / d),
                GeoShape::ExpDec => b * depth.powf(-b.ln() / d.ln()),
                GeoShape::Cyclic if depth > 5.0 * d => 0.0,
                GeoShape::Cyclic => b.powf((2.0 * std::f64::consts::PI * depth / d).sin()),
                GeoShape::Fixed if n.depth < self.d => b,
                GeoShape::Fixed => 0.0,
            }
        };
        let p = 1.0 / (1.0 + expected);
        let children = ((1.0 - probability(n)).ln() / (1.0 - p).ln()).floor();
        // (No branching: ln 0 below, no children. A NaN or a negative count is none.)
        if children >= 1.0 {
            children.min(f64::from(CHILDREN_MAX)) as u32
        } else {
            0
        }
    }

    /// How many children `n` has within the depth bound ([`DEPTH_MAX`]): what a
    /// traversal expands.
    #[inline]
    pub fn fanout(&self, n: &Node) -> u32 {
        if n.depth < DEPTH_MAX {
            self.children(n)
        } else {
            0
        }
    }

    /// Counts `n` in `counts` (a leaf when it has no children within the depth bound)
    /// and returns how many children to expand: every traversal's step.
    #[inline]
    pub fn visit(&self, n: &Node, counts: &mut Counts) -> u32 {
        counts.nodes += 1;
        counts.max_depth = counts.max_depth.max(n.depth);
        let k = self.fanout(n);
        if k == 0 {
            counts.leaves += 1;
        }
        k
    }

    /// Traverses the tree below `from` (included), depth first, with its own stack.
    pub fn traverse(&self, from: Node) -> Counts {
        let mut counts = Counts::default();
        let mut stack = vec![from];
        while let Some(n) = stack.pop() {
            let k = self.visit(&n, &mut counts);
            stack.extend((0..k).map(|i| self.child(&n, i)));
        }
        counts
    }
}

/// A node's draw as a probability in [0, 1).
#[inline]
fn probability(n: &Node) -> f64 {
    let last = [n.state[16], n.state[17], n.state[18], n.state[19]];
    f64::from(u32::from_be_bytes(last) & 0x7fff_ffff) / 2_147_483_648.0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// T1 of the benchmark's sample trees: a geometric tree of fixed shape.
    pub(crate) const T1: Tree = Tree {
        kind: TreeKind::Geometric,
        b: 4.0,
        seed: 19,
        shape: GeoShape::Fixed,
        d: 10,
        q: 15.0 / 64.0,
        m: 4,
        f: 0.5,
        g: 1,
    };

    #[test]
    fn the_sample_tree_t1_has_its_published_counts() {
        let c = T1.traverse(T1.root());
        assert_eq!((c.nodes, c.leaves, c.max_depth), (4_130_071, 3_305_118, 10));
    }

    #[test]
    fn the_sample_tree_t3_has_its_published_counts() {
        let t3 = Tree {
            kind: TreeKind::Binomial,
            b: 2000.0,
            seed: 42,
            q: 0.124875,
            m: 8,
            ..Tree::default()
        };
        let c = t3.traverse(t3.root());
        assert_eq!(
            (c.nodes, c.leaves, c.max_depth),
            (4_112_897, 3_599_034, 1_572)
        );
    }

    #[test]
    fn subtrees_add_up_to_the_tree() {
        let t = Tree { d: 6, ..T1 };
        let root = t.root();
        let mut c = Counts {
            nodes: 1,
            leaves: u64::from(t.children(&root) == 0),
            max_depth: 0,
        };
        for i in 0..t.children(&root) {
            c.add(&t.traverse(t.child(&root, i)));
        }
        assert_eq!(c, t.traverse(root));
    }

    #[test]
    fn granularity_is_work_not_a_different_tree() {
        let t = Tree { d: 5, ..T1 };
        let g = Tree { g: 3, ..t };
        assert_eq!(t.traverse(t.root()), g.traverse(g.root()));
    }

    #[test]
    fn parameters_past_their_bounds_are_refused() {
        assert_eq!(T1.check(), Ok(()));
        for (bad, want) in [
            (Tree { b: -1.0, ..T1 }, "-b -1"),
            (Tree { b: f64::NAN, ..T1 }, "-b NaN"),
            (Tree { q: 1.5, ..T1 }, "-q 1.5"),
            (Tree { m: 101, ..T1 }, "-m 101"),
            (Tree { d: 0, ..T1 }, "-d 0"),
            (Tree { f: 2.0, ..T1 }, "-f 2"),
            (Tree { g: 0, ..T1 }, "-g 0"),
        ] {
            let e = bad.check().unwrap_err().to_string();
            assert!(e.starts_with(want), "{e}");
        }
    }
}
