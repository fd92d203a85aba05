//! The cost model of fabric operations, and its presets.
//!
//! An operation issued at t reaches its target at t + latency (+ size / bandwidth for
//! writes). Connections: over an overlay the runtime connects to every configured peer
//! when the fabric opens, before the first epoch (each connection charged `connect_ns`
//! to both ends' connection time, outside the epochs), and only peers are ever addressed
//! (the simulator checks it); over the complete graph it connects on first contact, so
//! the first operation between two ranks, either way, arrives `connect_ns` later and
//! charges both ends. Each connection holds `connection_bytes` on each end. A read's
//! data leaves the target on arrival and completes a
//! latency plus size / bandwidth later.
//! Atomics serialize at the target: each occupies the target's atomic unit for
//! `atomic_ns` (software-emulated atomics on tcp and shm are the target's progress thread
//! at work, hence their cost); where that progress polls (shm, [`Model::polled`]) and the
//! node model is on, a target whose workers all run tasks serves them at a task's end. A
//! signal is seen by the target's progress `signal_ns` after
//! its data. Every input a rank's progress thread handles costs it `event_ns` of its time,
//! so a rank flooded with signals (a master) serves them one after the other.
//!
//! The node's cores ([`Cpu`], where the preset has them: `titus sim --calibrate` measures
//! them): ranks share a node's cores with their progress and provider threads, a task runs
//! slower while other cores run tasks too, a worker asleep needs time to wake, and each
//! operation costs its target's and its issuer's progress thread CPU that a rank whose
//! workers all run tasks takes from its next task; where the target's progress does not
//! poll, an operation on a rank whose workers all run tasks waits for that thread to get
//! a core, and one on the issuer's own memory takes the provider's time. Each byte a
//! rank's node moves through its own segments (tasks encoded into slots, slots decoded)
//! costs that rank's CPU as well ([`Cpu::byte_ns`]).

use serde_json::Value;

/// Costs of the simulated fabric (nanoseconds, bytes per second).
#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    /// Preset name.
    pub name: String,
    /// One-way latency.
    pub latency_ns: f64,
    /// Bandwidth, bytes per second.
    pub bandwidth: f64,
    /// Delay before the target's progress sees a signal.
    pub signal_ns: f64,
    /// Time an atomic occupies the target.
    pub atomic_ns: f64,
    /// Progress-thread time per handled input.
    pub event_ns: f64,
    /// What a first contact adds to its operation: setting the connection up.
    pub connect_ns: f64,
    /// Memory one connection holds on each end, bytes.
    pub connection_bytes: f64,
    /// A hybrid job: ranks `r / per_node` share a node, and between them reads, writes
    /// and signals cost this model's (the node backend's); atomics keep the fabric's
    /// (the hybrid sends every atomic through it).
    pub node: Option<(u32, Box<Model>)>,
    /// The node's cores and what sharing them costs (None: every worker has a core of
    /// its own, at full speed, awake at once).
    pub cpu: Option<Cpu>,
    /// The target's progress polls (libfabric's `shm`): with the node model on, an atomic
    /// that reaches a rank whose workers all run tasks is served when the first of those
    /// tasks ends (the runtime's workers poll the fabric between tasks while the progress
    /// thread naps [`titus_core::BUSY_NAP_NS`]), or when that nap ends, whichever comes
    /// first.
    pub polled: bool,
    /// A rank's workers drive its node between tasks while its progress thread naps (the
    /// node backend, libfabric's shm: fabric-bench's `workers_serve`, false where
    /// absent): with the node model on, the CPU for the bytes a handler moves while every
    /// worker runs a task ([`Cpu::byte_ns`]) is a worker's time before its next task, not
    /// the progress thread's taken out of that task.
    pub workers_serve: bool,
}

/// An operation on a rank's own memory where no measured [`Cpu::own_op_ns`] says
/// otherwise (CPU atomics and copies), ns.
pub const OWN_OP_NS: f64 = 100.0;

/// A node's cores and what sharing them costs, measured by `titus sim --calibrate`.
#[derive(Debug, Clone, PartialEq)]
pub struct Cpu {
    /// Cores of one node.
    pub cores: u32,
    /// A task's time with every core running tasks, relative to its time alone (shared
    /// caches and memory bandwidth, a lower turbo clock).
    pub busy_slowdown: f64,
    /// From a notification to a sleeping worker running, ns.
    pub wake_ns: f64,
    /// The share of a core each rank's progress and provider threads take during an
    /// epoch (polling, serving operations, the runtime's own bookkeeping).
    pub progress_share: f64,
    /// A worker's time per take from the node, outside its tasks (taking them,
    /// reporting the results it held, the clock reads, serving the node between tasks),
    /// ns: the simulator stretches it by [`Cpu::factor`] as it does the task. The next
    /// task of a worker's grain, taken from its own deque, adds none (the runtime's clock
    /// for it starts at the last task's end): [`Cpu::grain_task_ns`] charges the take.
    pub task_overhead_ns: f64,
    /// What a task run for another rank adds to that and to [`Cpu::balanced_take_ns`]
    /// (its result encoded and sent home through the overlay), ns.
    pub foreign_task_ns: f64,
    /// What a take adds while its rank balances, steals or shares (the protocol the take
    /// drives: its share of tasks kept published, its own steals, the thieves' signals
    /// served), ns.
    pub balanced_take_ns: f64,
    /// What each task of a take beyond its first adds to it: taken from the queue into
    /// the worker's deque, its result held and reported with the grain's, ns.
    pub grain_task_ns: f64,
    /// The progress thread's CPU per operation served (its target's), ns.
    pub op_serve_ns: f64,
    /// The progress thread's CPU per operation issued (its issuer's: posting it, waking
    /// for its completion), ns. Both: a rank whose workers all run tasks pays them out of
    /// its next task.
    pub op_issue_ns: f64,
    /// What a read, write or atomic takes longer, on a fabric whose target's progress
    /// does not poll, when every worker of its target runs a task: the target's progress
    /// (and provider) thread waits for a core before it serves it, ns.
    pub busy_op_ns: f64,
    /// An operation on the issuer's own memory, issued to completion, ns (through
    /// libfabric it goes through the provider like any other).
    pub own_op_ns: f64,
    /// A rank's CPU per byte its node moves through its own segments, ns: tasks encoded
    /// into slots as they are shared, the slots of a stolen batch or a take-back decoded,
    /// results written and read. Charged to the thread that drives the node: while the
    /// rank's workers all run tasks, owed by the next task — or, where the workers serve
    /// the node ([`Model::workers_serve`]), spent by that task's worker before it starts
    /// —, else before what the node does next starts.
    pub byte_ns: f64,
    /// Ranks on one node, sharing its cores (None: as many as the cores hold at the job's
    /// workers, one worker per core — a cluster's placement). All of a job's ranks where
    /// they ran on one machine, as the parity suite's real runs do (`titus sim
    /// --node-ranks`). A hybrid job's nodes ([`Model::node`]) take precedence.
    pub ranks: Option<u32>,
}

impl Cpu {
    /// How much slower than its drawn cost a task runs that starts while `busy` workers
    /// of its node (itself included) run tasks, on a node of `ranks` ranks: the shared
    /// slowdown, in proportion to the busy cores, and time-sharing once the workers and
    /// the ranks' progress threads want more than the node's cores.
    pub fn factor(&self, busy: u32, ranks: u32) -> f64 {
        let c = f64::from(self.cores.max(1));
        let b = f64::from(busy);
        let shared = 1.0 + (self.busy_slowdown - 1.0) * (b.min(c) / c);
        let demand = b + self.progress_share * f64::from(ranks);
        shared * (demand / c).max(1.0)
    }

    /// Ranks per node: [`Cpu::ranks`], else as many as the cores hold at `workers`
    /// workers each (a launcher's placement of one worker per core), at least 1.
    pub fn ranks_per_node(&self, workers: usize) -> u32 {
        self.ranks
            .unwrap_or(self.cores / (workers.max(1) as u32).max(1))
            .max(1)
    }

    /// The `node` object of a preset file.
    pub fn from_json(v: &Value, name: &str) -> Result<Cpu, PresetError> {
        let f = |k: &str, lo: f64, hi: f64| {
            v[k].as_f64()
                .filter(|x| x.is_finite() && (lo..=hi).contains(x))
                .ok_or_else(|| PresetError::NodeField {
                    preset: name.into(),
                    key: k.into(),
                    lo,
                    hi,
                })
        };
        let us = |k: &str, absent: f64| match v.get(k) {
            None => Ok(absent),
            Some(_) => f(k, 0.0, 1e6).map(|x| x * 1e3),
        };
        Ok(Cpu {
            cores: f("cores", 1.0, 65_536.0)? as u32,
            busy_slowdown: f("busy_slowdown", 0.5, 10.0)?,
            wake_ns: f("wake_us", 0.0, 1e6)? * 1e3,
            progress_share: f("progress_share", 0.0, 4.0)?,
            // Older presets have none of these µs figures: ns, or `absent` ns without.
            task_overhead_ns: us("task_overhead_us", 0.0)?,
            foreign_task_ns: us("foreign_task_us", 0.0)?,
            grain_task_ns: us("grain_task_us", 0.0)?,
            balanced_take_ns: us("balanced_take_us", 0.0)?,
            op_serve_ns: us("op_serve_us", 0.0)?,
            op_issue_ns: us("op_issue_us", 0.0)?,
            busy_op_ns: us("busy_op_us", 0.0)?,
            own_op_ns: us("own_op_us", OWN_OP_NS)?,
            byte_ns: match v.get("byte_ns") {
                None => 0.0,
                Some(_) => f("byte_ns", 0.0, 1e3)?,
            },
            ranks: None,
        })
    }
}

/// A preset's measured operation time, µs: up to a second (a slower "fabric" is a
/// mistyped file, and its products with counts would leave virtual time's range).
pub const OP_US: (f64, f64) = (1e-6, 1e6);
/// A preset's read bandwidth, GB/s: from 1 kB/s to 100 TB/s.
pub const BANDWIDTH_GBS: (f64, f64) = (1e-6, 1e5);
/// A preset's first and later contacts, µs: up to a minute.
pub const CONTACT_US: (f64, f64) = (0.0, 6e7);
/// A preset's memory per connection, KiB: up to 1 GiB.
pub const CONNECTION_KIB: (f64, f64) = (0.0, 1_048_576.0);

fn in_bounds(x: f64, (lo, hi): (f64, f64)) -> Option<f64> {
    (x.is_finite() && (lo..=hi).contains(&x)).then_some(x)
}

fn out_of_bounds(name: &str, field: &str, x: f64, (lo, hi): (f64, f64)) -> PresetError {
    PresetError::OutOfBounds {
        preset: name.into(),
        field: field.into(),
        value: x,
        lo,
        hi,
    }
}

/// A fabric model that cannot be read: a preset name or file, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PresetError {
    /// No preset of that name.
    #[error("unknown preset '{0}' (expected {list})", list = PRESETS.join(", "))]
    Unknown(String),
    /// Not the JSON `titus fabric-bench --json` prints.
    #[error("preset '{preset}': not fabric-bench JSON: {detail}")]
    NotJson {
        /// The preset.
        preset: String,
        /// The parser's words.
        detail: String,
    },
    /// A figure the model needs is absent.
    #[error("preset '{preset}': no {field}")]
    Missing {
        /// The preset.
        preset: String,
        /// What is absent.
        field: String,
    },
    /// A figure outside what a fabric can be.
    #[error("preset '{preset}': {field} is {value}, outside [{lo}, {hi}]")]
    OutOfBounds {
        /// The preset.
        preset: String,
        /// The figure.
        field: String,
        /// Its value.
        value: f64,
        /// The least it may be.
        lo: f64,
        /// The most.
        hi: f64,
    },
    /// A node figure absent or out of its range.
    #[error("preset '{preset}': node.{key} missing or not in [{lo}, {hi}]")]
    NodeField {
        /// The preset.
        preset: String,
        /// The `node` object's key.
        key: String,
        /// The least it may be.
        lo: f64,
        /// The most.
        hi: f64,
    },
    /// A flag that is not a boolean.
    #[error("preset '{preset}': {key} is not true or false")]
    NotBool {
        /// The preset.
        preset: String,
        /// The key.
        key: String,
    },
}

/// Preset names (`node` last: the checker draws among the first four).
pub const PRESETS: [&str; 5] = ["ib-hdr", "tcp-loopback", "shm", "mem", "node"];

impl Model {
    /// This model between ranks of different nodes, `node` between ranks of one node of
    /// `per_node` consecutive ranks (a hybrid job).
    pub fn with_nodes(mut self, per_node: u32, node: Model) -> Model {
        self.name = format!("{}+{}", node.name, self.name);
        self.node = Some((per_node.max(1), Box::new(node)));
        // The hybrid's workers do not serve its node (it is neither immediate nor
        // libfabric's own fabric: `Capabilities::workers_serve`).
        self.workers_serve = false;
        self
    }

    /// The costs from `from` to `peer`.
    pub fn between(&self, from: u32, peer: u32, atomic: bool) -> &Model {
        match &self.node {
            Some((k, m)) if !atomic && from / k == peer / k => m,
            _ => self,
        }
    }

    /// A named preset: `ib-hdr` (HDR InfiniBand, hardware atomics), `tcp-loopback`, `shm`
    /// (libfabric's), `node` (the node backend: CPU atomics on shared memory) and `mem`,
    /// all but the first derived from `titus fabric-bench --json` runs on the 2-core
    /// development machine (`crates/sim/presets/*.json`).
    pub fn preset(name: &str) -> Result<Model, PresetError> {
        match name {
            "ib-hdr" => Ok(Model {
                name: name.into(),
                // ~1.6 µs RDMA read round trip, 25 GB/s, hardware atomics serialized at
                // the HCA (~2 M atomics/s to one address), a progress thread woken within
                // ~5 µs.
                latency_ns: 800.0,
                bandwidth: 25e9,
                signal_ns: 5_000.0,
                atomic_ns: 500.0,
                event_ns: 1_000.0,
                // A reliable connection (RC queue pair) per peer, set up through the
                // connection manager: 1 ms and 64 KiB (queue pair, send and receive
                // rings) — assumptions on the cheap side of the literature: TITUS
                // measured 18 s of pair connections at 3,584 cores with ~47 peers a
                // rank (docs/results.md, "Connections at their price").
                connect_ns: 1e6,
                connection_bytes: 64.0 * 1024.0,
                node: None,
                cpu: None,
                polled: false,
                workers_serve: false,
            }),
            "tcp-loopback" => {
                Self::from_fabric_bench(include_str!("../presets/tcp-loopback.json"), name)
            }
            "shm" => Self::from_fabric_bench(include_str!("../presets/shm.json"), name),
            "node" => Self::from_fabric_bench(include_str!("../presets/node.json"), name),
            "mem" => Self::from_fabric_bench(include_str!("../presets/mem.json"), name),
            o => Err(PresetError::Unknown(o.into())),
        }
    }

    /// A model from the JSON that `titus fabric-bench --json` prints: latency from the
    /// 8-byte read, bandwidth from the 1 MiB reads, atomic cost from compare-swap minus
    /// read, signal delay from the write-then-signal round trip minus two writes; and,
    /// where the JSON holds a `connections` object (what `titus fabric-bench
    /// --connections --json` prints), a first contact's cost (its first read minus an
    /// established one) and the memory per connection (the fuller end's). Without one,
    /// connections are free. A `node` object (what `titus sim --calibrate` adds) gives
    /// the node's cores ([`Cpu`]); `polled_progress` and `workers_serve` (fabric-bench's,
    /// false where absent), [`Model::polled`] and [`Model::workers_serve`].
    pub fn from_fabric_bench(json: &str, name: &str) -> Result<Model, PresetError> {
        let missing = |field: String| PresetError::Missing {
            preset: name.into(),
            field,
        };
        let v: Value = serde_json::from_str(json.trim()).map_err(|e| PresetError::NotJson {
            preset: name.into(),
            detail: e.to_string(),
        })?;
        let rows = v["rows"]
            .as_array()
            .ok_or_else(|| missing("'rows' array".into()))?;
        let p50 = |op: &str, bytes: u64| -> Result<f64, PresetError> {
            rows.iter()
                .find(|r| r["op"] == op && r["bytes"] == bytes)
                .and_then(|r| r["p50_us"].as_f64())
                .ok_or_else(|| missing(format!("p50_us for {op} of {bytes} bytes")))
                .and_then(|x| {
                    in_bounds(x, OP_US).ok_or_else(|| {
                        out_of_bounds(name, &format!("p50_us of {op} of {bytes} bytes"), x, OP_US)
                    })
                })
        };
        let read = p50("read", 8)?;
        let write = p50("write", 8)?;
        let cas = p50("compare-swap", 8)?;
        let rt = p50("write-signal round trip", 8)?;
        let bw = v["read_bandwidth_gbs"]
            .as_f64()
            .ok_or_else(|| missing("read_bandwidth_gbs".into()))?;
        let bw = in_bounds(bw, BANDWIDTH_GBS)
            .ok_or_else(|| out_of_bounds(name, "read_bandwidth_gbs", bw, BANDWIDTH_GBS))?;
        let (connect_ns, connection_bytes) = match v.get("connections") {
            None => (0.0, 0.0),
            Some(c) => {
                let f = |k: &str, bounds: (f64, f64)| {
                    let x = c[k]
                        .as_f64()
                        .ok_or_else(|| missing(format!("connections.{k}")))?;
                    in_bounds(x, bounds)
                        .ok_or_else(|| out_of_bounds(name, &format!("connections.{k}"), x, bounds))
                };
                let (first, then) = (
                    f("first_contact_us", CONTACT_US)?,
                    f("contact_us", CONTACT_US)?,
                );
                let kib = f("connection_kib", CONNECTION_KIB)?
                    .max(f("peer_connection_kib", CONNECTION_KIB)?);
                ((first - then).max(0.0) * 1e3, kib * 1024.0)
            }
        };
        let flag = |key: &str| match v.get(key) {
            None => Ok(false),
            Some(b) => b.as_bool().ok_or_else(|| PresetError::NotBool {
                preset: name.into(),
                key: key.into(),
            }),
        };
        let cpu = match v.get("node") {
            None => None,
            Some(n) => Some(Cpu::from_json(n, name)?),
        };
        Ok(Model {
            name: name.into(),
            latency_ns: read * 1e3 / 2.0,
            bandwidth: bw * 1e9,
            signal_ns: ((rt - 2.0 * write) / 2.0).max(0.0) * 1e3,
            atomic_ns: (cas - read).max(0.0) * 1e3,
            event_ns: 1_000.0,
            connect_ns,
            connection_bytes,
            node: None,
            cpu,
            polled: flag("polled_progress")?,
            workers_serve: flag("workers_serve")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_load_and_order_sensibly() {
        for p in PRESETS {
            let m = Model::preset(p).unwrap();
            assert!(m.latency_ns > 0.0 && m.bandwidth > 0.0, "{m:?}");
        }
        let ib = Model::preset("ib-hdr").unwrap();
        let tcp = Model::preset("tcp-loopback").unwrap();
        let shm = Model::preset("shm").unwrap();
        let node = Model::preset("node").unwrap();
        assert!(ib.latency_ns < shm.latency_ns && shm.latency_ns < tcp.latency_ns);
        // The node backend: CPU atomics, sub-µs; a signal is a futex wake-up.
        assert!(node.latency_ns < ib.latency_ns && node.atomic_ns < 100.0);
        assert!(node.signal_ns < shm.signal_ns);
        // Software atomics on shm and tcp cost tens of µs; hardware ones well under one.
        assert!(shm.atomic_ns > 10_000.0 && ib.atomic_ns < 1_000.0);
        // Only libfabric's shm polls: its targets serve atomics between tasks.
        assert!(shm.polled && !tcp.polled && !node.polled && !ib.polled);
        // Workers serve their node where operations are immediate or progress polls; not
        // in a hybrid, even over shm.
        assert!(node.workers_serve && shm.workers_serve && !tcp.workers_serve && !ib.workers_serve);
        assert!(!shm.clone().with_nodes(2, node.clone()).workers_serve);
        assert!(
            Model::preset("carrier-pigeon")
                .unwrap_err()
                .to_string()
                .contains("ib-hdr")
        );
        assert!(
            Model::from_fabric_bench("{\"rows\": []}", "x")
                .unwrap_err()
                .to_string()
                .contains("no p50_us for read")
        );
        // This machine's presets carry its cores (measured by `titus sim --calibrate`);
        // a cluster's assumed one does not.
        for p in ["tcp-loopback", "shm", "node"] {
            let cpu = Model::preset(p).unwrap().cpu.expect(p);
            assert!(cpu.cores >= 1 && cpu.busy_slowdown >= 1.0 && cpu.progress_share >= 0.0);
        }
        assert!(ib.cpu.is_none());
        let v: Value = serde_json::from_str(r#"{"cores": 0, "busy_slowdown": 1}"#).unwrap();
        assert!(
            Cpu::from_json(&v, "x")
                .unwrap_err()
                .to_string()
                .contains("node.cores")
        );
        // The optional µs figures: checked where present, their default where absent.
        let v: Value = serde_json::from_str(
            r#"{"cores": 2, "busy_slowdown": 1, "wake_us": 1, "progress_share": 0}"#,
        )
        .unwrap();
        let cpu = Cpu::from_json(&v, "x").unwrap();
        assert_eq!(
            (cpu.busy_op_ns, cpu.own_op_ns, cpu.byte_ns),
            (0.0, 100.0, 0.0)
        );
        let mut bad = v.clone();
        bad["byte_ns"] = "0.4".into();
        assert!(
            Cpu::from_json(&bad, "x")
                .unwrap_err()
                .to_string()
                .contains("node.byte_ns")
        );
        bad["byte_ns"] = 0.4.into();
        assert_eq!(Cpu::from_json(&bad, "x").unwrap().byte_ns, 0.4);
        bad["own_op_us"] = (-1.0).into();
        assert!(
            Cpu::from_json(&bad, "x")
                .unwrap_err()
                .to_string()
                .contains("node.own_op_us")
        );
        // This machine's tcp: a busy target's wait; shm's model has its own rule for it.
        assert!(tcp.cpu.as_ref().unwrap().busy_op_ns > 0.0);
        assert_eq!(shm.cpu.as_ref().unwrap().busy_op_ns, 0.0);
    }
}

#[cfg(test)]
mod fuzz;
