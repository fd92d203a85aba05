//! What a driver may ask a node without changing it.

use super::*;

impl Node {
    /// This rank's mapper.
    pub fn mapper(&self) -> &dyn Mapper {
        &*self.queue.mapper
    }

    /// This rank.
    pub fn rank(&self) -> Rank {
        self.cx.rank
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cx.cfg
    }

    /// The ranks this rank sends operations to: out-neighbours, its tree parent and
    /// children, the epoch start's partners (`crate::start::partners`: the ranks 2^i
    /// before and after it), and the ranks that steal from it or send it results, `in_neighbours`
    /// (`request` victims answer their thieves; an inbox reset is signalled to the senders
    /// that overflowed it, under every protocol) — which the driver computes once
    /// (`Overlay::in_neighbours`, O(N·k)) and also uses for segment exposure.
    pub fn peers(&self, in_neighbours: &[Rank]) -> Vec<Rank> {
        let (rank, size) = (self.cx.rank, self.cx.size);
        let mut p: Vec<Rank> = self.router.victims.to_vec();
        p.extend(tree_parent(rank));
        p.extend(tree_children(rank, size));
        p.extend(crate::start::partners(rank, size));
        p.extend_from_slice(in_neighbours);
        if let Some(sh) = &self.cx.cfg.sharing {
            p.extend_from_slice(sh.members(rank));
        }
        p.sort_unstable();
        p.dedup();
        p.retain(|&r| r != rank);
        p
    }

    /// Bytes of each segment, in [`layout::seg`] order.
    pub fn segment_sizes(&self) -> [u64; 4] {
        [
            self.area.bytes(),
            inbox::INBOX_DATA + self.cx.cfg.inbox_bytes,
            self.results.out.slots() as u64 * self.cx.cfg.chunk_bytes,
            self.start.bytes()
                + if self.cx.cfg.spawning.is_some() {
                    crate::termination::waves::REGION
                } else {
                    0
                },
        ]
    }

    /// Whether an epoch start is under way.
    pub fn starting(&self) -> bool {
        self.start.is_running()
    }

    /// Whether this node diffuses: `Config::diffusion`, with balancing on (`steal_below`
    /// > 0).
    pub fn diffusion_enabled(&self) -> bool {
        self.cx.cfg.diffusion && self.cx.cfg.steal_below > 0
    }

    /// The ranks whose predicted loads [`Node::start_epoch_predicted`] needs: the overlay
    /// row, or the rank-string neighbours i±1 under the complete graph (O(1)); none when
    /// diffusion is off.
    pub fn diffusion_neighbours(&self) -> Vec<Rank> {
        if !self.diffusion_enabled() {
            return Vec::new();
        }
        diffuse::neighbours(&self.router.victims, self.cx.rank, self.cx.size)
    }

    /// Whether the epoch is over here: termination was detected and this rank's last
    /// operations completed (or the epoch failed).
    pub fn is_done(&self) -> bool {
        self.failed.is_some()
            || (self.term.is_done() && self.cx.in_flight() == 0 && !self.cx.has_commands())
    }

    /// Whether this rank learned that the epoch is over (DONE reached it, or it is the
    /// root and saw every rank complete); its last operations may still be in flight.
    pub fn termination_detected(&self) -> bool {
        self.running && self.term.is_done()
    }

    /// Results of this rank's own tasks that are home, and how many tasks it owns.
    pub fn results_home(&self) -> (u32, u32) {
        self.results.home.counts()
    }

    /// The error that ended the epoch, if one did.
    pub fn error(&self) -> Option<&CoreError> {
        self.failed.as_ref()
    }

    /// This epoch's figures so far.
    pub fn stats(&self) -> &Stats {
        &self.cx.stats
    }

    /// This epoch's figures, taken, for a driver that keeps them once the epoch ended:
    /// the node starts the next epoch's afresh anyway, and a copy held every rank's steal
    /// log twice in a simulator of thousands.
    pub fn take_stats(&mut self) -> Stats {
        std::mem::take(&mut self.cx.stats)
    }

    /// One sentence for a user whose epoch did not end: what this rank still waits for
    /// (its own tasks' results, its termination-tree children's reports, the end announced
    /// by rank 0, or its last remote operations). [`Node::debug_summary`] has the details.
    pub fn stall(&self) -> String {
        use crate::termination::Waiting;
        let me = self.cx.rank;
        if let Some(e) = &self.failed {
            return format!("rank {me} failed: {e}");
        }
        if let Some(s) = self.start.describe() {
            return s;
        }
        if !self.running {
            return format!("rank {me} is not in an epoch");
        }
        let (home, own) = self.results.home.counts();
        let ops: Vec<&str> = self.cx.pending().map(|p| self.describe(p).0).collect();
        let ops = if ops.is_empty() {
            String::new()
        } else {
            let mut names = ops.clone();
            names.sort_unstable();
            names.dedup();
            format!(
                "; {} of its remote operations are in flight ({})",
                ops.len(),
                names.join(", ")
            )
        };
        let waiting = self.term.waiting_for(me, self.cx.size);
        let what = if home < own {
            format!(
                "rank {me} waits for the results of {} of its {own} tasks (not run yet, or run elsewhere and not home)",
                own - home
            )
        } else {
            match waiting {
                Waiting::Nothing => {
                    format!("rank {me} saw the epoch end and waits for its last remote operations")
                }
                Waiting::Done(p) => format!(
                    "rank {me} and the ranks below it have finished; it waits for the end to reach it through rank {p}, so other ranks have not finished"
                ),
                Waiting::Up(c) if c.is_empty() => {
                    format!("rank {me} has all its results and is about to report")
                }
                Waiting::Up(c) => format!(
                    "rank {me} has all its results but waits for {} {} to report finishing (each for the ranks below it in the termination tree)",
                    if c.len() == 1 { "rank" } else { "ranks" },
                    c.iter()
                        .map(|r| r.to_string())
                        .collect::<Vec<_>>()
                        .join(" and ")
                ),
            }
        };
        format!("{what}{ops}")
    }

    /// Loads the state that handling an input reads first, for a driver that holds many
    /// nodes and knows which comes next (the simulator: at 100,000 ranks each event's node
    /// is out of the cache, and touching it an event or two early overlaps the misses with
    /// other work). The value means nothing.
    pub fn touch(&self) -> usize {
        self.cx.touch()
            + self.queue.len()
            + usize::from(self.running)
            + usize::from(self.term.is_done())
            + self.results.home.counts().0 as usize
    }

    /// One line of state, for diagnosing a stalled epoch.
    pub fn debug_summary(&self) -> String {
        let (home, own) = self.results.home.counts();
        format!(
            "rank {}: epoch {} running {} done {} failed {} home {}/{} queue {} workers_idle {} {} in-flight {:?} {}{} outs [{}] inbox {}",
            self.cx.rank,
            self.cx.epoch,
            self.running,
            self.term.is_done(),
            self.failed.is_some(),
            home,
            own,
            self.queue.len(),
            self.queue.workers_idle,
            self.term.summary(),
            self.cx
                .pending()
                .map(|p| self.describe(p).0)
                .collect::<Vec<_>>(),
            self.thief.summary(),
            self.owner.summary(),
            self.results.out.summary(&self.router.victims),
            self.results.inbox.summary(),
        )
    }

    /// What this rank's remote activity asks of its driver, in one value (a driver
    /// polling a fabric keeps its naps short while either holds).
    pub fn hints(&self) -> DriverHints {
        let live = self.running && !self.term.is_done() && self.failed.is_none();
        DriverHints {
            expects_remote_ops: live
                && (self.owner.is_sharing(&self.queue, &self.cx.cfg)
                    || self.share.is_master(&self.cx)),
            awaits_remote: live && self.thief.is_stealing(),
        }
    }

    /// Whether commands wait to be polled.
    pub fn has_commands(&self) -> bool {
        self.cx.has_commands()
    }

    /// Operations in flight.
    pub fn in_flight(&self) -> usize {
        self.cx.in_flight()
    }

    /// Tasks queued here now.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }
}
