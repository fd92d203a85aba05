//! The sans-IO core under randomized schedules: N nodes driven by a seeded discrete-event
//! loop — random operation latencies (so effects and completions reorder), random task
//! durations, tiny shared sets and inboxes (so batches split and inboxes overflow) — for
//! every steal protocol. Each run must terminate with every result at its owner exactly
//! once and equal to the task's expected output. A failure prints the command that
//! reproduces it. TITUS_CORE_SEEDS sets the number of seeds (default 100).

use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;
use titus_core::layout::signal;
use titus_core::{Command, Config, Loc, Memory, Node, Op, Protocol, Routing, Sharing, Time, Token};
use titus_overlay::rng::Rng;
use titus_overlay::{LatticeKind, Overlay, OverlayParams};

struct Mem(Vec<RefCell<Vec<u8>>>);

impl Memory for Mem {
    fn read(&self, loc: Loc, buf: &mut [u8]) {
        let s = self.0[loc.segment as usize].borrow();
        buf.copy_from_slice(&s[loc.offset as usize..loc.offset as usize + buf.len()]);
    }
    fn write(&self, loc: Loc, data: &[u8]) {
        let mut s = self.0[loc.segment as usize].borrow_mut();
        s[loc.offset as usize..loc.offset as usize + data.len()].copy_from_slice(data);
    }
}

fn word(m: &Mem, loc: Loc) -> u64 {
    let mut b = [0u8; 8];
    m.read(loc, &mut b);
    u64::from_le_bytes(b)
}

#[derive(Debug)]
enum Ev {
    /// An operation reaches its target.
    Arrive {
        from: u32,
        token: Token,
        op: Op,
    },
    Complete {
        node: u32,
        token: Token,
        value: u64,
    },
    Signal {
        node: u32,
        from: u32,
        value: u64,
    },
    TaskDone {
        node: u32,
        owner: u32,
        index: u32,
        result: Vec<u8>,
    },
    Timer {
        node: u32,
    },
    /// A rank starts the epoch (ranks start at different times, as after a real barrier).
    Start {
        node: u32,
        tasks: Vec<(u16, Vec<u8>)>,
    },
}

fn expected(owner: u32, index: u32, payload: &[u8]) -> Vec<u8> {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ (u64::from(owner) << 32 | u64::from(index));
    for &b in payload {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    h.to_le_bytes().to_vec()
}

struct Sim {
    rng: Rng,
    now: u64,
    seq: u64,
    queue: BinaryHeap<Reverse<(u64, u64)>>,
    events: std::collections::HashMap<u64, Ev>,
    nodes: Vec<Node>,
    mems: Vec<Mem>,
    busy: Vec<bool>,
    timer_at: Vec<Option<u64>>,
    max_latency: u64,
    max_task: u64,
}

impl Sim {
    fn at(&mut self, delay: u64, ev: Ev) {
        self.seq += 1;
        self.queue.push(Reverse((self.now + delay, self.seq)));
        self.events.insert(self.seq, ev);
    }

    fn latency(&mut self) -> u64 {
        1 + self.rng.below(self.max_latency)
    }

    /// After anything happened at `n`: send its commands, feed its worker, arm its timer.
    fn settle(&mut self, n: u32) {
        while let Some(Command { token, op }) = self.nodes[n as usize].poll_command() {
            let d = self.latency();
            self.at(d, Ev::Arrive { from: n, token, op });
        }
        if !self.busy[n as usize] {
            let now = Time(self.now);
            let t = self.nodes[n as usize].take_tasks(now, 1, &self.mems[n as usize]);
            if let Some(task) = t.into_iter().next() {
                self.busy[n as usize] = true;
                let d = 1 + self.rng.below(self.max_task);
                let result = expected(task.owner, task.index, &task.payload);
                self.at(
                    d,
                    Ev::TaskDone {
                        node: n,
                        owner: task.owner,
                        index: task.index,
                        result,
                    },
                );
            }
            while let Some(Command { token, op }) = self.nodes[n as usize].poll_command() {
                let d = self.latency();
                self.at(d, Ev::Arrive { from: n, token, op });
            }
        }
        if let Some(t) = self.nodes[n as usize].poll_timeout() {
            let t = t.0.max(self.now + 1);
            if self.timer_at[n as usize].is_none_or(|old| old > t || old < self.now) {
                self.timer_at[n as usize] = Some(t);
                self.at(t - self.now, Ev::Timer { node: n });
            }
        }
    }

    /// Applies a remote operation at its target and schedules its completion (and signal).
    fn arrive(&mut self, from: u32, token: Token, op: Op) {
        let value = match op {
            Op::Read {
                peer,
                remote,
                local,
                len,
            } => {
                let mut buf = vec![0u8; len as usize];
                self.mems[peer as usize].read(remote, &mut buf);
                self.mems[from as usize].write(local, &buf);
                0
            }
            Op::Write {
                peer,
                remote,
                pieces,
                signal,
            } => {
                let mut at = remote.offset;
                for (l, len) in pieces {
                    let mut buf = vec![0u8; len as usize];
                    self.mems[from as usize].read(l, &mut buf);
                    self.mems[peer as usize].write(Loc::new(remote.segment, at), &buf);
                    at += len;
                }
                if let Some(v) = signal {
                    // The data is in place; the signal follows.
                    let d = self.latency();
                    self.at(
                        d,
                        Ev::Signal {
                            node: peer,
                            from,
                            value: v,
                        },
                    );
                }
                0
            }
            Op::Cas {
                peer,
                remote,
                expected,
                desired,
            } => {
                let m = &self.mems[peer as usize];
                let old = word(m, remote);
                if old == expected {
                    m.write(remote, &desired.to_le_bytes());
                }
                old
            }
            Op::FetchAdd {
                peer,
                remote,
                delta,
            } => {
                let m = &self.mems[peer as usize];
                let old = word(m, remote);
                m.write(remote, &old.wrapping_add(delta).to_le_bytes());
                old
            }
        };
        let d = self.latency();
        self.at(
            d,
            Ev::Complete {
                node: from,
                token,
                value,
            },
        );
    }
}

/// Totals over all runs: successful steals, failed attempts, inbox overflows, forwarded
/// records, chunks, successful steals under work sharing. The test asserts each path was
/// exercised.
static COVERAGE: std::sync::Mutex<[u64; 6]> = std::sync::Mutex::new([0; 6]);

struct Case {
    seed: u64,
    ranks: u32,
    protocol: Protocol,
    /// Work sharing instead of stealing: 1 master, 2 hierarchical.
    sharing: u8,
}

fn run(case: &Case) -> Result<u64, String> {
    let mut rng = Rng::from_keys(&[case.seed, 0xcafe]);
    let ranks = case.ranks;
    let overlay = Overlay::new(OverlayParams {
        ranks,
        lattice: LatticeKind::Ring,
        shortcuts: 1 + rng.below(4) as u32,
        seed: case.seed,
        ..OverlayParams::default()
    })
    .map_err(|e| e.to_string())?;
    let cfg = Config {
        protocol: case.protocol,
        routing: if rng.chance(0.5) {
            Routing::Non
        } else {
            Routing::Greedy
        },
        max_payload: 24,
        max_result: 8,
        shared_capacity: 2 + rng.below(8) as u32,
        min_private: rng.below(3) as u32,
        steal_below: 1 + rng.below(3) as u32,
        // Small inboxes and chunks: overflows and resets happen.
        inbox_bytes: 256 + rng.below(512),
        chunk_bytes: 64 + rng.below(128),
        // One to three OUTBOX slots: chunks wait for a free one.
        outbox_slots: 1 + rng.below(3) as u32,
        flush_delay: Duration::from_micros(rng.below(50)),
        backoff_base: Duration::from_micros(5),
        backoff_max: Duration::from_micros(200),
        check_interval: Duration::from_micros(10 + rng.below(40)),
        seed: case.seed,
        sharing: match case.sharing {
            0 => None,
            1 => Some(Sharing::master(ranks)),
            _ => {
                let est: Vec<u64> = (0..ranks).map(|_| rng.below(10)).collect();
                let size = 1 + rng.below(u64::from(ranks)) as u32;
                Some(
                    Sharing::groups(Sharing::balanced_groups(&est, size), ranks, true)
                        .map_err(|e| e.to_string())?,
                )
            }
        },
    };
    let mut nodes = Vec::new();
    let mut mems = Vec::new();
    for r in 0..ranks {
        let n = Node::new(cfg.clone(), overlay.clone(), r).map_err(|e| e.to_string())?;
        let sizes = n.segment_sizes();
        let m = Mem(sizes
            .iter()
            .map(|&s| RefCell::new(vec![0u8; s as usize]))
            .collect());
        n.init_memory(&m);
        nodes.push(n);
        mems.push(m);
    }
    let mut sim = Sim {
        rng: Rng::from_keys(&[case.seed, 0xbeef]),
        now: 0,
        seq: 0,
        queue: BinaryHeap::new(),
        events: Default::default(),
        nodes,
        mems,
        busy: vec![false; ranks as usize],
        timer_at: vec![None; ranks as usize],
        max_latency: 1 + rng.below(40),
        max_task: 1 + rng.below(100),
    };
    // Two epochs: the second starts after every rank ended the first.
    let mut total_tasks = 0u64;
    for epoch in 0..2 {
        let skew = rng.chance(0.5);
        let mut payloads = Vec::new();
        for r in 0..ranks {
            let count = if skew {
                if r == 0 {
                    20 + rng.below(60)
                } else {
                    rng.below(3)
                }
            } else {
                rng.below(20)
            };
            let tasks: Vec<(u16, Vec<u8>)> = (0..count)
                .map(|i| {
                    (
                        0,
                        format!("{epoch}-{r}-{i}-{}", rng.below(1000)).into_bytes(),
                    )
                })
                .collect();
            total_tasks += count;
            payloads.push(tasks.clone());
            let skew = sim.rng.below(3 * sim.max_latency);
            sim.at(skew, Ev::Start { node: r, tasks });
        }
        let mut steps = 0u64;
        let mut started = 0;
        while started < ranks || !(0..ranks).all(|r| sim.nodes[r as usize].is_done()) {
            let Some(Reverse((t, id))) = sim.queue.pop() else {
                let stuck: Vec<String> = (0..ranks)
                    .filter(|&r| !sim.nodes[r as usize].is_done())
                    .map(|r| {
                        format!(
                            "rank {r}: {} in flight, stats {:?}",
                            sim.nodes[r as usize].in_flight(),
                            sim.nodes[r as usize].stats()
                        )
                    })
                    .collect();
                return Err(format!(
                    "epoch {epoch}: no event left but not terminated:\n{}",
                    stuck.join("\n")
                ));
            };
            steps += 1;
            if steps > 5_000_000 {
                let states: Vec<String> = sim.nodes.iter().map(|n| n.debug_summary()).collect();
                return Err(format!(
                    "epoch {epoch}: over 5M events at t={}:\n{}",
                    sim.now,
                    states.join("\n")
                ));
            }
            sim.now = t;
            let ev = sim.events.remove(&id).expect("event");
            let now = Time(t);
            let n = match ev {
                Ev::Arrive { from, token, op } => {
                    sim.arrive(from, token, op);
                    continue;
                }
                Ev::Complete { node, token, value } => {
                    sim.nodes[node as usize].handle_completion(
                        now,
                        token,
                        Ok(value),
                        &sim.mems[node as usize],
                    );
                    node
                }
                Ev::Signal { node, from, value } => {
                    sim.nodes[node as usize].handle_signal(
                        now,
                        from,
                        value,
                        &sim.mems[node as usize],
                    );
                    node
                }
                Ev::TaskDone {
                    node,
                    owner,
                    index,
                    result,
                } => {
                    sim.busy[node as usize] = false;
                    sim.nodes[node as usize].task_done(
                        now,
                        owner,
                        index,
                        Ok(result),
                        &sim.mems[node as usize],
                    );
                    node
                }
                Ev::Start { node, tasks } => {
                    started += 1;
                    sim.nodes[node as usize]
                        .start_epoch(now, tasks, &sim.mems[node as usize])
                        .map_err(|e| e.to_string())?;
                    node
                }
                Ev::Timer { node } => {
                    sim.timer_at[node as usize] = None;
                    sim.nodes[node as usize].handle_timeout(now, &sim.mems[node as usize]);
                    node
                }
            };
            if let Some(e) = sim.nodes[n as usize].error() {
                return Err(format!("epoch {epoch}: rank {n} failed: {e}"));
            }
            sim.settle(n);
        }
        // Every result home, exactly once (a duplicate is an error inside the node), and right.
        for r in 0..ranks {
            let st = sim.nodes[r as usize].stats();
            let c = &mut *COVERAGE.lock().unwrap();
            c[0] += st.steals_ok;
            c[1] += st.steals_empty + st.steals_locked;
            c[2] += st.inbox_overflows;
            c[3] += st.records_forwarded;
            c[4] += st.chunks_received;
            if case.sharing > 0 {
                c[5] += st.steals_ok;
            }
            let res = sim.nodes[r as usize]
                .take_results()
                .map_err(|e| format!("rank {r}: {e}"))?;
            if res.len() != payloads[r as usize].len() {
                return Err(format!(
                    "rank {r}: {} results for {} tasks",
                    res.len(),
                    payloads[r as usize].len()
                ));
            }
            for (i, (got, (_, p))) in res.iter().zip(&payloads[r as usize]).enumerate() {
                if *got != expected(r, i as u32, p) {
                    return Err(format!("rank {r} task {i}: wrong result"));
                }
            }
        }
        // Quiescent: nothing of this epoch may still be travelling, except steal requests
        // (and refill hints; under work sharing, load reports and forwarded requests) and empty replies (a thief that learned of the end does not wait for them). Those
        // stay in flight into the next epoch, which must answer them with nothing and
        // ignore the answers.
        let left: Vec<(u64, u64)> = sim.queue.drain().map(|Reverse(k)| k).collect();
        for (t, id) in left {
            let ev = sim.events.remove(&id).expect("event");
            match ev {
                Ev::Timer { .. } => {}
                Ev::Signal { value, .. }
                    if [
                        signal::REQUEST,
                        signal::LOAD,
                        signal::FORWARD,
                        signal::REFILL,
                    ]
                    .contains(&signal::unpack(value).0)
                        || (signal::unpack(value).0 == signal::REPLY
                            && signal::unpack(value).1 >> 40 == 0) =>
                {
                    sim.queue.push(Reverse((t, id)));
                    sim.events.insert(id, ev);
                }
                ev => {
                    return Err(format!(
                        "epoch {epoch}: {ev:?} still in flight after termination"
                    ));
                }
            }
        }
        sim.timer_at.iter_mut().for_each(|t| *t = None);
    }
    Ok(total_tasks)
}

#[test]
fn every_result_arrives_exactly_once_under_random_schedules() {
    let seeds: u64 = std::env::var("TITUS_CORE_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100);
    let first: u64 = std::env::var("TITUS_CORE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let mut tasks = 0;
    for seed in first..first + seeds {
        let mut rng = Rng::from_keys(&[seed]);
        let ranks = 1 + rng.below(12) as u32;
        for (protocol, sharing) in [
            (Protocol::Claim, 0),
            (Protocol::Lock, 0),
            (Protocol::Request, 0),
            (Protocol::Request, 1),
            (Protocol::Request, 2),
        ] {
            let case = Case {
                seed,
                ranks,
                protocol,
                sharing,
            };
            match run(&case) {
                Ok(n) => tasks += n,
                Err(e) => panic!(
                    "{} ranks, {:?}, sharing {sharing}: {e}\nreproduce: TITUS_CORE_SEED={seed} TITUS_CORE_SEEDS=1 cargo test -p titus-core --test schedules",
                    ranks, protocol
                ),
            }
        }
    }
    assert!(tasks > 0);
    let c = *COVERAGE.lock().unwrap();
    eprintln!(
        "{tasks} tasks; steals {} ok ({} under work sharing), {} failed; {} inbox overflows; {} records forwarded; {} chunks",
        c[0], c[5], c[1], c[2], c[3], c[4]
    );
    if seeds >= 20 {
        assert!(
            c.iter().all(|&x| x > 0),
            "a path was never exercised: {c:?}"
        );
    }
}
