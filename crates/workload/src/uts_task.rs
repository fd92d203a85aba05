//! A UTS traversal as tasks that spawn tasks, one policy for `uts-bench` and `titus sim`:
//! a task visits up to a chunk of nodes depth first from the nodes in its payload, then
//! spawns what is left on its stack as tasks of at most [`NODES_PER_TASK`] nodes, the
//! newest first (they run next on the same rank, and thieves take the oldest, nearest
//! the root, from the queue's back). Its counts are the job's reduction's lanes
//! ([`lanes`]).
//!
//! A task that starts on a rank whose queue is empty gives the older half of its stack
//! away after [`HUNGRY_CHUNK`] nodes (spawned and handed over at once, while it goes on):
//! its rank has nothing for thieves, so the work must spread now (at the start, from the
//! root, and at the end), as GLB splits its bag when thieves wait. Where the queue holds
//! work, whole chunks keep the tasks' overhead small.

use crate::uts::{Counts, Node, Tree};
use titus_core::SpawnedResult;
use titus_core::spawn::{ReduceOp, Spawning};

/// Most nodes a spawned task carries (24 bytes each, within the default 256-byte payload).
pub const NODES_PER_TASK: usize = 8;

/// Bytes of a node in a payload: its state, then its depth (little-endian).
pub const NODE_BYTES: usize = 24;

/// The nodes a task visits before it gives half its stack away when its rank's queue was
/// empty.
pub const HUNGRY_CHUNK: u32 = 64;

/// Most nodes a task may visit before it spawns (`--chunk`).
pub const CHUNK_MAX: u32 = 1 << 24;

/// The nodes a task visits before it spawns the rest of its stack, by default: about 0.4
/// ms of SHA-1 a task at one evaluation a node (measured: 2-process efficiency on T3L
/// 0.877 at 1,024 nodes, 1.03 at 4,096).
pub const CHUNK_DEFAULT: u32 = 4096;

/// Where a UTS job's spawned tasks' counts go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum SpawnResults {
    /// Reduced over the job ([`lanes`]): nothing per task travels.
    #[default]
    Reduced,
    /// Each routed home to the root's owner with its key, which sums them: the default
    /// mode of a spawning job, at its hardest (every result has one destination).
    Home,
}

impl SpawnResults {
    /// The job's spawning declaration.
    pub fn spawning(self) -> Spawning {
        match self {
            Self::Reduced => Spawning::reduced(lanes()),
            Self::Home => Spawning::home(),
        }
    }
}

/// The reduction's lanes: nodes and leaves (sums), the greatest depth, and tasks (a sum).
pub fn lanes() -> Vec<ReduceOp> {
    vec![ReduceOp::Sum, ReduceOp::Sum, ReduceOp::Max, ReduceOp::Sum]
}

/// Counts of `tasks` tasks as lane values ([`lanes`]).
pub fn lane_values(c: &Counts, tasks: u64) -> [u64; 4] {
    [c.nodes, c.leaves, u64::from(c.max_depth), tasks]
}

/// Counts of `tasks` tasks as a result's bytes (the lanes, [`Spawning::encode`]): every
/// UTS task's result, spawned or not, and what a rank sends of its own.
pub fn encode_counts(c: &Counts, tasks: u64) -> Vec<u8> {
    Spawning::encode(&lane_values(c, tasks))
}

/// A result's bytes ([`encode_counts`]) back to counts and the tasks they count.
pub fn decode_counts(b: &[u8]) -> Result<(Counts, u64), String> {
    let v = Spawning::reduced(lanes())
        .decode(b)
        .ok_or_else(|| format!("UTS counts are 32 bytes, not {}", b.len()))?;
    counts_of(&v)
}

/// The job's counts and tasks at the root's owner: the reduction of the spawned tasks'
/// lanes (none where they came home), its epoch tasks' own results, and the spawned
/// tasks' results that came home.
pub fn totals(
    reduced: &[u64],
    results: &[Vec<u8>],
    spawned: &[SpawnedResult],
) -> Result<(Counts, u64), String> {
    let (mut counts, mut tasks) = match reduced {
        [] => (Counts::default(), 0),
        v => counts_of(v)?,
    };
    let home = spawned.iter().map(|s| &s.data);
    for r in results.iter().chain(home) {
        let (c, t) = decode_counts(r)?;
        counts.add(&c);
        tasks += t;
    }
    Ok((counts, tasks))
}

/// Lane values back to counts, and the tasks they count.
pub fn counts_of(v: &[u64]) -> Result<(Counts, u64), String> {
    let &[nodes, leaves, depth, tasks] = v else {
        return Err(format!("UTS lanes are 4 values, not {}", v.len()));
    };
    let max_depth = u32::try_from(depth).map_err(|_| format!("a depth of {depth}"))?;
    Ok((
        Counts {
            nodes,
            leaves,
            max_depth,
        },
        tasks,
    ))
}

/// Nodes back to back, as a payload.
pub fn encode_nodes(nodes: &[Node]) -> Vec<u8> {
    let mut v = Vec::with_capacity(nodes.len() * NODE_BYTES);
    for n in nodes {
        v.extend_from_slice(&n.state);
        v.extend_from_slice(&n.depth.to_le_bytes());
    }
    v
}

/// The stack a task starts with room for (a reallocation per task showed).
const STACK_ROOM: usize = 512;

/// A payload's nodes (whole 24-byte nodes, at least one), with room to grow a stack.
pub fn decode_nodes(b: &[u8]) -> Result<Vec<Node>, String> {
    if b.is_empty() || !b.len().is_multiple_of(NODE_BYTES) {
        return Err(format!(
            "a UTS task carries whole {NODE_BYTES}-byte nodes, not {} bytes",
            b.len()
        ));
    }
    let mut nodes = Vec::with_capacity(STACK_ROOM.max(b.len() / NODE_BYTES));
    for c in b.chunks_exact(NODE_BYTES) {
        nodes.push(Node {
            state: c[..20].try_into().expect("20 bytes"),
            depth: u32::from_le_bytes(c[20..24].try_into().expect("4 bytes")),
        });
    }
    Ok(nodes)
}

/// A balanced traversal's figures, as `uts-bench` and `titus sim --uts` report them.
#[derive(Debug, Clone, Copy)]
pub struct Traversal {
    /// What it counted.
    pub counts: Counts,
    /// The tasks that ran.
    pub tasks: u64,
    /// Its time, s (from the first rank's epoch call to the last rank's end).
    pub seconds: f64,
    /// The sequential traversal's time, s.
    pub sequential_s: f64,
    /// Ranks and their workers.
    pub ranks: u32,
    /// Workers per rank.
    pub workers: usize,
}

impl Traversal {
    /// Nodes a second, the job's.
    pub fn nodes_per_s(&self) -> f64 {
        self.counts.nodes as f64 / self.seconds
    }

    /// The sequential time over the job's threads' time.
    pub fn efficiency(&self) -> f64 {
        self.sequential_s / (self.seconds * f64::from(self.ranks) * self.workers as f64)
    }

    /// The JSON keys both programs report: `nodes`, `leaves`, `max_depth`,
    /// `nodes_per_s`, `nodes_per_s_per_rank`, `efficiency`, `seconds`, `sequential_s`,
    /// `tasks`, `ranks`, `workers`.
    pub fn json(&self) -> serde_json::Map<String, serde_json::Value> {
        let v = serde_json::json!({
            "nodes": self.counts.nodes,
            "leaves": self.counts.leaves,
            "max_depth": self.counts.max_depth,
            "nodes_per_s": self.nodes_per_s(),
            "nodes_per_s_per_rank": self.nodes_per_s() / f64::from(self.ranks),
            "efficiency": self.efficiency(),
            "seconds": self.seconds,
            "sequential_s": self.sequential_s,
            "tasks": self.tasks,
            "ranks": self.ranks,
            "workers": self.workers,
        });
        match v {
            serde_json::Value::Object(m) => m,
            _ => unreachable!("an object"),
        }
    }
}

/// What one task did: the nodes it visited, and the payloads of the tasks it spawns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expansion {
    /// Its counts.
    pub counts: Counts,
    /// Its children's payloads, the newest nodes first.
    pub spawn: Vec<Vec<u8>>,
}

/// Visits up to `chunk` nodes of `tree` depth first from `stack` (the last node first),
/// and splits what is left into the payloads of the tasks to spawn. When the rank's queue
/// held nothing (`queued` 0), after [`HUNGRY_CHUNK`] nodes the older half of the stack
/// goes to `give` (with the nodes visited so far), to be handed over at once.
pub fn expand(
    tree: &Tree,
    mut stack: Vec<Node>,
    chunk: u32,
    queued: usize,
    give: &mut dyn FnMut(u32, Vec<Vec<u8>>),
) -> Expansion {
    let mut counts = Counts::default();
    let mut visited = 0;
    while visited < chunk
        && let Some(n) = stack.pop()
    {
        if queued == 0 && visited == HUNGRY_CHUNK.min(chunk) && stack.len() >= 2 {
            let half: Vec<Node> = stack.drain(..stack.len() / 2).collect();
            give(
                visited,
                half.rchunks(NODES_PER_TASK).map(encode_nodes).collect(),
            );
        }
        visited += 1;
        let k = tree.visit(&n, &mut counts);
        stack.extend((0..k).map(|i| tree.child(&n, i)));
    }
    Expansion {
        counts,
        spawn: stack.rchunks(NODES_PER_TASK).map(encode_nodes).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::uts::{GeoShape, TreeKind};

    #[test]
    fn tasks_that_spawn_count_the_whole_tree() {
        // T1 five levels shallower, in tasks of 100 nodes, half a stack given away
        // whenever the bag is empty: every node once.
        let tree = Tree {
            kind: TreeKind::Geometric,
            shape: GeoShape::Fixed,
            d: 5,
            b: 4.0,
            seed: 19,
            ..Tree::default()
        };
        let want = tree.traverse(tree.root());
        let (mut got, mut tasks) = (Counts::default(), 0);
        let mut bag = vec![encode_nodes(&[tree.root()])];
        while let Some(p) = bag.pop() {
            let mut given = Vec::new();
            let e = expand(
                &tree,
                decode_nodes(&p).unwrap(),
                100,
                bag.len(),
                &mut |_, g| given.extend(g),
            );
            bag.extend(given);
            got.add(&e.counts);
            tasks += 1;
            assert!(
                e.spawn
                    .iter()
                    .all(|p| p.len() <= NODES_PER_TASK * NODE_BYTES)
            );
            bag.extend(e.spawn);
        }
        assert_eq!(got, want);
        assert!(tasks > want.nodes / 100, "{tasks} tasks");
        let (c, t) = decode_counts(&encode_counts(&want, 1)).unwrap();
        assert_eq!((c, t), (want, 1));
        assert!(decode_counts(&[0; 24]).is_err());
        assert!(decode_nodes(&[0; 23]).is_err());
        assert!(decode_nodes(&[]).is_err());
    }
}
