//! Results: routed to their owners hop by hop along the overlay, aggregated per next hop.
//!
//! A finished task's result goes to its owner if that is this rank ([`Home`]), else into
//! the buffer of its next hop (the overlay's routing rule, computed locally:
//! [`crate::router`]). Buffers leave as chunks ([`outbound`]: one fetch-add reservation in
//! the next hop's inbox, one gathered write, one signal); the next hop's [`inbox`] parses
//! them and routes each record on the same way. Records of the same owner that meet at a
//! rank travel together from there on (TITUS_DLB §4.2). A full inbox pushes back (OVERFLOW,
//! RESET); nothing is dropped. A spawned task's result travels the same way to the owner
//! of the epoch task it descends from, with its key, when the job routes them home
//! (`crate::spawn`).

pub(crate) mod inbox;
pub(crate) mod outbound;

use crate::SpawnedResult;
use crate::ctx::Ctx;
use crate::layout::signal::Signal;
use crate::layout::{Chunk, PushedTask, ResultRecord};
use crate::router::Router;
use crate::spawn::{SPAWNED_INDEX, Spawning};
use crate::{CoreError, Memory, Rank, Stats, Time};
use inbox::Inbox;
use outbound::Outbound;

/// The results of this rank's own tasks.
#[derive(Debug, Default)]
pub(crate) struct Home {
    /// Tasks this rank owns.
    own: u32,
    results: Vec<Option<Vec<u8>>>,
    /// Each task's cost measured where it ran, ns (valid where its result is home).
    costs: Vec<u64>,
    /// How many are home.
    home: u32,
    /// The results of spawned tasks descended from this rank's tasks, as they arrived.
    spawned: Vec<SpawnedResult>,
}

impl Home {
    /// A new epoch with `own` tasks.
    pub(crate) fn start(&mut self, own: usize) {
        self.own = own as u32;
        self.results = vec![None; own];
        self.costs = vec![0; own];
        self.home = 0;
        self.spawned.clear();
    }

    /// Spawned results delivered here this epoch (the waves count them).
    pub(crate) fn spawned_delivered(&self) -> u64 {
        self.spawned.len() as u64
    }

    /// (results home, tasks owned).
    pub(crate) fn counts(&self) -> (u32, u32) {
        (self.home, self.own)
    }

    /// Whether every result of this rank's tasks is home (it stays so: results are never
    /// lost or duplicated).
    pub(crate) fn complete(&self) -> bool {
        self.home >= self.own
    }

    /// Stores the result of own task `index` (which ran for `cost_ns`), which arrived from
    /// `from` after `hops` hops.
    fn store(
        &mut self,
        stats: &mut Stats,
        index: u32,
        (data, cost_ns): (Vec<u8>, u64),
        from: Rank,
        hops: u32,
    ) -> Result<(), CoreError> {
        let count = self.own;
        // (No error value built unless it is one: this runs for every task.)
        let Some(slot) = self.results.get_mut(index as usize) else {
            return Err(CoreError::UnknownTask { index, from, count });
        };
        if slot.is_some() {
            return Err(CoreError::Duplicate { index, from });
        }
        *slot = Some(data);
        self.costs[index as usize] = cost_ns;
        self.home += 1;
        count_hops(stats, hops);
        Ok(())
    }

    /// Stores the result of a spawned task of `key` descended from one of this rank's
    /// tasks, which arrived after `hops` hops.
    fn store_spawned(&mut self, stats: &mut Stats, key: u64, data: Vec<u8>, hops: u32) {
        self.spawned.push(SpawnedResult { key, data });
        count_hops(stats, hops);
    }

    /// The spawned results home here, ordered by key (then data: the order of arrival
    /// is the run's, not the job's).
    pub(crate) fn take_spawned(&mut self) -> Vec<SpawnedResult> {
        let mut spawned = std::mem::take(&mut self.spawned);
        spawned.sort_unstable();
        spawned
    }

    /// The results and their measured costs (ns), in task order, once every one is home.
    pub(crate) fn take(&mut self) -> Result<(Vec<Vec<u8>>, Vec<u64>), CoreError> {
        let results = std::mem::take(&mut self.results);
        if results.iter().any(Option::is_none) {
            return Err(CoreError::Usage("a result is missing at termination"));
        }
        // (In the same buffer: an `Option<Vec<u8>>` is laid out as a `Vec<u8>`.)
        let results = results.into_iter().map(Option::unwrap_or_default).collect();
        Ok((results, std::mem::take(&mut self.costs)))
    }
}

/// Counts a result home after `hops` hops.
fn count_hops(stats: &mut Stats, hops: u32) {
    let h = hops as usize;
    if stats.result_hops.len() <= h {
        stats.result_hops.resize(h + 1, 0);
    }
    stats.result_hops[h] += 1;
}

/// Results routing: this rank's own results, the buffers and chunks it sends, its inbox.
#[derive(Debug)]
pub(crate) struct Results {
    pub(crate) home: Home,
    pub(crate) out: Outbound,
    pub(crate) inbox: Inbox,
}

impl Results {
    pub(crate) fn new(router: &Router, cfg: &crate::Config) -> Self {
        Self {
            home: Home::default(),
            out: Outbound::new(&router.victims, cfg),
            inbox: Inbox::default(),
        }
    }

    /// Delivers a result here or queues it for its next hop. `hops`: hops taken so far;
    /// `from`: the rank it came from (this one for a task that ran here).
    pub(crate) fn route<P>(
        &mut self,
        cx: &mut Ctx<P>,
        router: &mut Router,
        rec: ResultRecord,
        hops: u32,
        from: Rank,
    ) -> Result<(), CoreError> {
        if rec.owner == cx.rank {
            // (Where spawned results are reduced, one arriving is an unknown task.)
            let routes_home = cx.cfg.spawning.as_ref().is_some_and(Spawning::routes_home);
            if rec.index == SPAWNED_INDEX && routes_home {
                self.home
                    .store_spawned(&mut cx.stats, rec.key, rec.data, hops);
                return Ok(());
            }
            return self.home.store(
                &mut cx.stats,
                rec.index,
                (rec.data, rec.cost_ns),
                from,
                hops,
            );
        }
        let Some(h) = router.next_hop(cx.cfg.routing, cx.rank, rec.owner) else {
            return Err(crate::ConfigError::NoRoute {
                from: cx.rank,
                to: rec.owner,
            }
            .into());
        };
        if from != cx.rank {
            cx.stats.records_forwarded += 1;
        }
        self.out.buffer(&cx.cfg, cx.now, h, &rec, hops);
        Ok(())
    }

    /// When a buffer or a blocked chunk is next due.
    pub(crate) fn deadline(&self) -> Option<Time> {
        self.out.deadline()
    }

    /// After any input: chunks that are due leave, the inbox resets when it should.
    pub(crate) fn step<P: From<outbound::Pending> + From<inbox::Pending>>(
        &mut self,
        cx: &mut Ctx<P>,
        router: &Router,
        mem: &dyn Memory,
        idle: bool,
    ) {
        self.out.step(cx, &router.victims, mem, idle);
        self.inbox.step(cx);
    }

    /// CHUNK, OVERFLOW or RESET from `from`; returns the tasks a chunk of pushed tasks
    /// brought (for the queue) and whether it was the push's last chunk.
    pub(crate) fn on_signal<P>(
        &mut self,
        cx: &mut Ctx<P>,
        router: &mut Router,
        from: Rank,
        sig: Signal,
        mem: &dyn Memory,
    ) -> Result<(Vec<PushedTask>, bool), CoreError> {
        match sig {
            Signal::Chunk { offset, len } => {
                match self.inbox.on_chunk(cx, from, offset, len, mem)? {
                    Chunk::Results(records) => {
                        for (rec, hops) in records {
                            self.route(cx, router, rec, hops, from)?;
                        }
                    }
                    Chunk::Tasks { tasks, last } => return Ok((tasks, last)),
                }
            }
            Signal::Overflow { generation, offset } => {
                self.inbox.on_overflow(from, generation, offset);
            }
            Signal::Reset => self.out.on_reset(&router.victims, from, cx.now),
            // Steal and termination signals go elsewhere (`Node::handle_signal`).
            _ => {}
        }
        Ok((Vec::new(), false))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_home_in_any_order_come_out_in_task_order_once_each() {
        // In order, in reverse, and seeded shuffles.
        for (round, own) in [0usize, 1, 7, 4095, 12_289].into_iter().enumerate() {
            for order in 0..3u64 {
                let mut indices: Vec<u32> = (0..own as u32).collect();
                match order {
                    0 => {}
                    1 => indices.reverse(),
                    _ => {
                        let mut x = (round as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
                        for i in (1..indices.len()).rev() {
                            x ^= x << 13;
                            x ^= x >> 7;
                            x ^= x << 17;
                            indices.swap(i, (x % (i as u64 + 1)) as usize);
                        }
                    }
                }
                let (mut home, mut stats) = (Home::default(), Stats::default());
                home.start(own);
                for &i in &indices {
                    let data = i.to_le_bytes().to_vec();
                    home.store(&mut stats, i, (data, u64::from(i) + 1), 1, 0)
                        .unwrap();
                    assert!(
                        matches!(
                            home.store(&mut stats, i, (Vec::new(), 1), 1, 0),
                            Err(CoreError::Duplicate { index, from: 1 }) if index == i
                        ),
                        "own {own}, order {order}: task {i} twice"
                    );
                }
                assert!(
                    matches!(
                        home.store(&mut stats, own as u32, (Vec::new(), 1), 1, 0),
                        Err(CoreError::UnknownTask { .. })
                    ),
                    "own {own}: a task past the last"
                );
                assert!(home.complete());
                let (results, costs) = home.take().unwrap();
                assert_eq!(results.len(), own);
                for (i, (r, &c)) in results.iter().zip(&costs).enumerate() {
                    assert_eq!(r[..], (i as u32).to_le_bytes(), "own {own}, order {order}");
                    assert_eq!(c, i as u64 + 1, "own {own}, order {order}");
                }
            }
        }
    }

    #[test]
    fn a_missing_result_is_found_at_the_end() {
        let (mut home, mut stats) = (Home::default(), Stats::default());
        home.start(10);
        for i in [0u32, 1, 2, 4, 5, 6, 7, 8, 9] {
            home.store(&mut stats, i, (vec![1], 1), 0, 0).unwrap();
        }
        assert!(!home.complete());
        assert!(home.take().is_err(), "task 3 never came home");
    }
}
