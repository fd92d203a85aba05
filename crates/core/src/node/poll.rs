//! The node's outputs: the next command and the next deadline, and the drive after every
//! input (termination, owner, thief, results, sharing, termination again).

use super::*;

impl Node {
    /// The next command to perform, if any.
    pub fn poll_command(&mut self) -> Option<Command> {
        self.cx.poll_command()
    }

    /// When [`Node::handle_timeout`] should next be called.
    pub fn poll_timeout(&self) -> Option<Time> {
        if self.failed.is_none() && self.start.is_running() {
            return self.start.poll_timeout();
        }
        if !self.running || self.failed.is_some() || self.term.is_done() {
            return None;
        }
        let cfg = &self.cx.cfg;
        [
            self.steals()
                .then(|| {
                    self.thief
                        .deadline(self.queue.len(), self.starved_types(), cfg)
                })
                .flatten(),
            self.owner
                .deadline(&self.queue, cfg, self.thief.push_hold(self.cx.now)),
            self.results.deadline(),
            self.term.grace_deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// The epoch failed, ended here, or is not running: no new work to hand out.
    pub(super) fn closed(&self) -> bool {
        self.failed.is_some() || self.term.is_done() || !self.running
    }

    /// Decides what to do next after any input.
    pub(super) fn drive(&mut self, mem: &dyn Memory) {
        if self.failed.is_some() || !self.running {
            return;
        }
        self.termination_step(mem);
        if self.term.is_done() {
            return;
        }
        let closed = self.closed();
        let cx = &mut self.cx;
        self.thief.set_workers_idle(cx, self.queue.workers_idle);
        let hold = self.thief.push_hold(cx.now);
        self.owner.step(cx, &mut self.queue, mem, closed, hold);
        let steals = self.steals();
        let short = self.starved_types();
        let cx = &mut self.cx;
        if steals
            && let Some(seq) = self
                .thief
                .step(cx, self.queue.len(), short, &mut *self.queue.mapper)
        {
            // This rank is its group's master and brokers its own request; nobody to ask
            // ends the attempt at once.
            if self.share.broker(cx, cx.rank, seq, &self.queue) != Decision::Forwarded {
                self.thief.end_unanswered(cx);
            }
        }
        // A rank whose queue ran dry while a steal is under way is not idle yet: its
        // results wait for the answer (flushing now, a thief sent a chunk per batch it
        // stole, and each chunk's three operations cost a tcp victim's core ~50 µs).
        let idle = self.queue.is_empty() && !self.thief.is_stealing();
        self.results.step(cx, &self.router, mem, idle);
        self.share
            .step(cx, self.queue.len(), self.thief.has_targets());
        self.termination_step(mem);
    }

    /// Whether the thief may look for work now. After a balanced start (diffusion from
    /// predictions) its own published tasks are this rank's reserve: it takes them back
    /// when its workers run dry, and steals only once they are gone — two ranks with
    /// equal work would otherwise trade their published halves. Without predictions it
    /// steals ahead as before: a loaded owner's set is mostly claimed by then, and
    /// waiting for its next look at the word cost 1% at 3,584 simulated ranks. Its
    /// deadline counts only when it may ([`Node::poll_timeout`]): a thief that would
    /// steal but may not must not wake the rank over and over.
    pub(super) fn steals(&self) -> bool {
        !(self.balanced_start && self.owner.has_published())
    }
}
