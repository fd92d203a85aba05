//! The waves ([`super::waves`]) checked against every interleaving a random walk finds:
//! ranks that run tasks spawning tasks, thieves whose stolen tasks are in flight, and
//! wave messages delivered in any order. Whenever the root ends the epoch, no task may
//! exist anywhere (queued, running or in a steal) and the reduction must count every
//! spawned task once; where results travel home instead, none may be on its way. Once the
//! tasks are gone and the messages delivered, the epoch must end everywhere.

use super::tests::Landing;
use super::*;
use crate::Config;
use crate::ctx::testing::{Mem, proptest_config};
use crate::spawn::{ReduceOp, Spawning};
use proptest::prelude::*;

/// A task: its depth; it spawns `fanout(depth, salt)` children.
#[derive(Debug, Clone, Copy)]
struct Task {
    depth: u8,
    salt: u8,
}

fn fanout(t: Task) -> u8 {
    if t.depth >= 4 {
        0
    } else {
        (t.salt ^ t.depth) % 3
    }
}

struct Peer {
    cx: Ctx<Pending>,
    term: Termination,
    mem: Mem,
    queue: Vec<Task>,
    running: Option<Task>,
    created: u64,
    completed: u64,
    /// Spawned results delivered here (results home).
    delivered: u64,
    /// The reduction's partial: spawned tasks completed here, their greatest depth.
    lanes: [u64; 2],
}

struct World {
    ranks: Vec<Peer>,
    /// Stolen tasks on their way: (thief, task).
    in_flight: Vec<(usize, Task)>,
    /// Results travel home (else they are reduced).
    home: bool,
    /// Results on their way home, by the rank they go to.
    results: Vec<usize>,
    /// Writes issued, not yet delivered: (from, command).
    wire: Vec<(usize, crate::Command)>,
    /// What every spawned task completed so far sums to.
    spawned: u64,
    deepest: u64,
    ended: bool,
}

impl World {
    fn new(n: usize, roots: &[u8], home: bool) -> Self {
        let spawning = if home {
            Spawning::home()
        } else {
            Spawning::reduced(vec![ReduceOp::Sum, ReduceOp::Max])
        };
        let ranks = (0..n)
            .map(|r| {
                let mut term = Termination::default();
                term.start(Some(Waves::new(spawning.clone(), 0)));
                let queue: Vec<Task> = roots
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| i % n == r)
                    .map(|(_, &salt)| Task { depth: 1, salt })
                    .collect();
                Peer {
                    cx: Ctx::new(Config::default(), r as Rank, n as u32),
                    term,
                    mem: Mem::new([0, 0, 0, waves::REGION]),
                    created: queue.len() as u64,
                    queue,
                    running: None,
                    completed: 0,
                    delivered: 0,
                    lanes: [0, 0],
                }
            })
            .collect();
        World {
            ranks,
            in_flight: Vec::new(),
            home,
            results: Vec::new(),
            wire: Vec::new(),
            spawned: 0,
            deepest: 0,
            ended: false,
        }
    }

    fn tasks_left(&self) -> usize {
        self.in_flight.len()
            + self
                .ranks
                .iter()
                .map(|r| r.queue.len() + usize::from(r.running.is_some()))
                .sum::<usize>()
    }

    /// Rank `r` steps its waves; the root's end is checked against the world.
    fn step(&mut self, r: usize) {
        let rk = &mut self.ranks[r];
        let ready = rk.queue.is_empty() && rk.running.is_none();
        let (created, completed, delivered) = (rk.created, rk.completed, rk.delivered);
        let lanes = if self.home { vec![] } else { rk.lanes.to_vec() };
        let own = || Report {
            created,
            completed,
            delivered,
            lanes,
        };
        let ended = rk
            .term
            .step_wave(&mut rk.cx, &rk.mem, ready, own)
            .expect("a step");
        while let Some(c) = rk.cx.poll_command() {
            self.wire.push((r, c));
        }
        if ended {
            assert_eq!(r, 0, "only the root decides");
            assert_eq!(self.tasks_left(), 0, "the epoch ended with tasks left");
            assert!(self.results.is_empty(), "the epoch ended with results away");
            assert_eq!(self.ranks[0].term.reduced(), Some(&self.reduction()[..]));
            self.ended = true;
        }
    }

    /// The reduction every rank must get: none where results travel home.
    fn reduction(&self) -> Vec<u64> {
        if self.home {
            vec![]
        } else {
            vec![self.spawned, self.deepest]
        }
    }

    fn deliver(&mut self, k: usize) {
        let (from, c) = self.wire.swap_remove(k);
        let w = Landing::of(&self.ranks[from].mem, c.op);
        let peer = w.peer as usize;
        let to = &mut self.ranks[peer];
        w.land(from as Rank, &mut to.cx, &mut to.term, &to.mem)
            .expect("a wave message in turn");
        while let Some(c) = to.cx.poll_command() {
            self.wire.push((peer, c));
        }
    }

    /// One action, chosen by `a` and `b`.
    fn act(&mut self, a: u8, b: u8) {
        let n = self.ranks.len();
        let r = usize::from(b) % n;
        match a % 6 {
            // Start a task: the newest queued.
            0 => {
                let rk = &mut self.ranks[r];
                if rk.running.is_none() {
                    rk.running = rk.queue.pop();
                }
            }
            // Finish the running task: its children first, then its completion.
            1 => {
                let rk = &mut self.ranks[r];
                if let Some(t) = rk.running.take() {
                    for i in 0..fanout(t) {
                        rk.queue.push(Task {
                            depth: t.depth + 1,
                            salt: t.salt.wrapping_mul(31).wrapping_add(i),
                        });
                        rk.created += 1;
                    }
                    rk.completed += 1;
                    if self.home {
                        // Its result leaves for some rank (its owner, which this
                        // model leaves arbitrary).
                        self.results.push(usize::from(b.wrapping_mul(13)) % n);
                    }
                    rk.lanes[0] += 1;
                    rk.lanes[1] = rk.lanes[1].max(u64::from(t.depth));
                    self.spawned += 1;
                    self.deepest = self.deepest.max(u64::from(t.depth));
                }
            }
            // A thief takes the oldest task of a victim: in flight until it lands.
            2 => {
                let thief = (r + 1 + usize::from(b / 7)) % n;
                if thief != r && !self.ranks[r].queue.is_empty() {
                    let t = self.ranks[r].queue.remove(0);
                    self.in_flight.push((thief, t));
                }
            }
            // A result gets home, or a stolen task lands.
            3 if self.home && b.is_multiple_of(2) && !self.results.is_empty() => {
                let to = self
                    .results
                    .swap_remove(usize::from(b) % self.results.len());
                self.ranks[to].delivered += 1;
            }
            3 => {
                if !self.in_flight.is_empty() {
                    let (thief, t) = self
                        .in_flight
                        .swap_remove(usize::from(b) % self.in_flight.len());
                    self.ranks[thief].queue.push(t);
                }
            }
            // A wave message arrives (any of those in flight: no order is promised).
            4 => {
                if !self.wire.is_empty() {
                    let k = usize::from(b) % self.wire.len();
                    self.deliver(k);
                }
            }
            _ => self.step(r),
        }
    }
}

proptest! {
    #![proptest_config(proptest_config())]

    #[test]
    fn waves_never_end_early_and_always_end(
        n in 1usize..8,
        roots in proptest::collection::vec(any::<u8>(), 0..12),
        actions in proptest::collection::vec((any::<u8>(), any::<u8>()), 0..400),
        home in any::<bool>(),
    ) {
        // (Every root counts as spawned here: the waves alone decide.)
        let mut w = World::new(n, &roots, home);
        for (a, b) in actions {
            w.act(a, b);
        }
        // Everything left runs, lands and is delivered; ranks step until the end.
        for _ in 0..100_000 {
            if w.ranks.iter().all(|r| r.term.is_done()) {
                break;
            }
            if let Some((thief, t)) = w.in_flight.pop() {
                w.ranks[thief].queue.push(t);
            }
            if let Some(to) = w.results.pop() {
                w.ranks[to].delivered += 1;
            }
            for r in 0..n {
                w.act(0, r as u8);
                w.act(1, r as u8);
                w.step(r);
            }
            while !w.wire.is_empty() {
                w.deliver(0);
            }
        }
        prop_assert!(w.ended, "the root never ended the epoch");
        for (r, rk) in w.ranks.iter().enumerate() {
            prop_assert!(rk.term.is_done(), "rank {} never learnt the end", r);
            prop_assert_eq!(rk.term.reduced(), Some(&w.reduction()[..]));
        }
    }
}
