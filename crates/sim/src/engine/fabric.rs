//! The fabric model: an operation's latency, bytes and target CPU, connections, and
//! its arrival and completion.

use super::*;

impl<'a> Sim<'a> {
    /// When rank `node`'s progress thread can handle an event that is due at `t`: once
    /// it is free, and after a stall (a fault) that covers `t`.
    pub(super) fn ready(&self, node: u32, t: u64, stall: Option<(u32, u64, u64)>) -> u64 {
        let free = self.per[node as usize].cpu_free.max(t);
        match stall {
            Some((r, from, len)) if r == node && t >= from && t < from + len => {
                free.max(from + len)
            }
            _ => free,
        }
    }

    /// Loads what handling a later event will need first (its rank's state, the event),
    /// so that those cache misses overlap with this event's work instead of following it.
    pub(super) fn touch(&self, slot: u32, rank: u32) {
        let r = rank as usize;
        let p = &self.per[r];
        std::hint::black_box((
            p.cpu_free,
            p.wake,
            p.timer_at,
            p.grain.len(),
            p.unreported.len(),
        ));
        std::hint::black_box(self.mems[r].touch());
        std::hint::black_box(self.nodes[r].touch());
        if slot & MARKER == 0 {
            std::hint::black_box(self.slab[(slot & !PARKED) as usize].is_some());
        }
    }

    pub(super) fn take(&mut self, slot: u32) -> Ev {
        self.free.push(slot);
        self.slab[slot as usize].take().expect("a queued event")
    }

    /// The model between `from` and `peer`: the node model between ranks of one node
    /// (a hybrid job), except for atomics, which the hybrid sends through the fabric.
    pub(super) fn model(&self, from: u32, peer: u32, atomic: bool) -> &Model {
        self.job.model.between(from, peer, atomic)
    }

    pub(super) fn latency(&mut self, from: u32, peer: u32, atomic: bool) -> u64 {
        let j = if self.job.faults.jitter > 0.0 {
            1.0 + self.rng.unit() * self.job.faults.jitter
        } else {
            1.0
        };
        (self.model(from, peer, atomic).latency_ns * j) as u64
    }

    pub(super) fn transfer(&self, from: u32, peer: u32, bytes: u64, tasks_segment: bool) -> u64 {
        if self.own_whole(from, peer) {
            return 0;
        }
        let b = if tasks_segment {
            bytes as f64 * self.job.task_bytes_scale
        } else {
            bytes as f64
        };
        (b / self.model(from, peer, false).bandwidth * 1e9) as u64
    }

    /// Records that `a` and `b` exchange an operation (complete graph); true the first
    /// time.
    pub(super) fn contact(&mut self, a: u32, b: u32) -> bool {
        let Err(i) = self.contacts[a as usize].binary_search(&b) else {
            return false;
        };
        self.contacts[a as usize].insert(i, b);
        if let Err(j) = self.contacts[b as usize].binary_search(&a) {
            self.contacts[b as usize].insert(j, a);
        }
        true
    }

    /// Issues `op` from `from` at `t`.
    pub(super) fn issue(
        &mut self,
        from: u32,
        t: u64,
        token: Token,
        op: Op,
    ) -> Result<(), Violation> {
        self.activity += 1;
        let peer = target(&op);
        let mut t = t;
        if peer != from {
            let lazy = match &mut self.peers {
                Some(peers) => {
                    let checked = &mut self.per[from as usize].peer_checked;
                    let known = *checked == peer || peers.mark(from, peer);
                    if known {
                        *checked = peer;
                    } else if !on_start_segment(&op) {
                        return Err(Violation::Broken(format!(
                            "rank {from} operated on rank {peer}, which is not among its fabric peers (the runtime has no address for it): {op:?}"
                        )));
                    }
                    // The start's searches read where their data leads: first contact
                    // connects.
                    !known
                }
                // Over the complete graph, the first operation between two ranks connects.
                None => true,
            };
            if lazy {
                {
                    if self.contact(from, peer) {
                        let c = self.model(from, peer, false).connect_ns as u64;
                        t += c;
                        self.connect_ns[from as usize] += c;
                        self.connect_ns[peer as usize] += c;
                    }
                }
            }
            t += self.latency(
                from,
                peer,
                matches!(op, Op::Cas { .. } | Op::FetchAdd { .. }),
            );
        } else {
            // CPU atomics and copies on this rank's own memory, or the node model's
            // measured time through the provider ([`Self::own_whole`]).
            t += self
                .job
                .model
                .cpu
                .as_ref()
                .map_or(model::OWN_OP_NS, |c| c.own_op_ns) as u64;
        }
        if let Op::Write { remote, pieces, .. } = &op {
            let bytes: u64 = pieces.iter().map(|p| p.1).sum();
            t += self.transfer(from, peer, bytes, remote.segment == seg::TASKS);
        }
        self.at(t, Ev::Arrive { from, token, op });
        Ok(())
    }

    pub(super) fn arrive(
        &mut self,
        now: u64,
        from: u32,
        token: Token,
        op: Op,
    ) -> Result<(), Violation> {
        let peer = target(&op);
        if self.job.faults.exit_after_end
            && self.epoch == self.job.later_count()
            && peer != from
            && self.per[peer as usize].end.is_some()
        {
            // The target's process exited: nothing happens there, the issuer learns it
            // after a round trip.
            let d = self.back(from, peer, false);
            self.at(
                now + d,
                Ev::Failed {
                    node: from,
                    token,
                    peer,
                },
            );
            return Ok(());
        }
        // The target's progress serves it — an operation on a rank's own memory too: over
        // libfabric it goes through the provider. (The calibration, on two ranks, cannot
        // tell those apart: it counts each of a rank's operations as the other's to serve.)
        self.op_cpu(peer, |c| c.op_serve_ns);
        let late = self.busy_op_ns(
            from,
            peer,
            matches!(op, Op::Cas { .. } | Op::FetchAdd { .. }),
        );
        match op {
            Op::Read {
                peer,
                remote,
                local,
                len,
            } => {
                if self.lock_check && peer != from && remote.segment == seg::TASKS {
                    let mut w = [0u8; 8];
                    self.mems[peer as usize].copy_out(layout_loc(tasks::LOCK), &mut w);
                    if remote.offset >= tasks::COUNT
                        && u64::from_le_bytes(w) != layout::lock::held_by(from)
                    {
                        return Err(Violation::Broken(format!(
                            "rank {from} read rank {peer}'s shared set at offset {} without holding its lock (word {})",
                            remote.offset,
                            u64::from_le_bytes(w)
                        )));
                    }
                }
                let mut buf = vec![0u8; len as usize];
                self.mems[peer as usize].copy_out(remote, &mut buf);
                self.mems[from as usize].copy_in(local, &buf);
                let d = self.back(from, peer, false)
                    + self.transfer(from, peer, len, remote.segment == seg::TASKS);
                self.complete(now + late + d, from, token, 0);
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
                    self.mems[from as usize].copy_out(l, &mut buf);
                    self.mems[peer as usize]
                        .copy_in(titus_core::Loc::new(remote.segment, at), &buf);
                    at += len;
                }
                if remote.segment == seg::START
                    && signal.is_some()
                    && self.job.faults.corrupt_start == Some(from)
                    && !std::mem::replace(&mut self.corrupted, true)
                {
                    // The message lands with another format version (its header's byte 2).
                    let version = titus_core::Loc::new(seg::START, remote.offset + 2);
                    let mut v = [0u8];
                    self.mems[peer as usize].copy_out(version, &mut v);
                    self.mems[peer as usize].copy_in(version, &[v[0].wrapping_add(1)]);
                }
                if let Some(value) = signal {
                    let s = self.model(from, peer, false).signal_ns as u64;
                    self.at(
                        now + s,
                        Ev::Signal {
                            node: peer,
                            from,
                            value,
                        },
                    );
                }
                let d = self.back(from, peer, false);
                self.complete(now + late + d, from, token, 0);
            }
            Op::Cas {
                peer,
                remote,
                expected,
                desired,
            } => {
                let old = self.mems[peer as usize].word(remote);
                if old == expected {
                    self.mems[peer as usize].copy_in(remote, &desired.to_le_bytes());
                }
                self.atomic_done(now, late, from, peer, token, old);
            }
            Op::FetchAdd {
                peer,
                remote,
                delta,
            } => {
                let old = self.mems[peer as usize].word(remote);
                self.mems[peer as usize].copy_in(remote, &old.wrapping_add(delta).to_le_bytes());
                self.atomic_done(now, late, from, peer, token, old);
            }
        }
        Ok(())
    }

    /// An operation's CPU on `rank`'s progress thread (the node model's `op_serve_ns` or
    /// `op_issue_ns`), owed by its next task while its workers all run tasks (their cores
    /// are taken: the runtime binds a rank's threads to its cores).
    pub(super) fn op_cpu(&mut self, rank: u32, ns: fn(&model::Cpu) -> f64) {
        let Some(ns) = self.job.model.cpu.as_ref().map(|c| ns(c) as u64) else {
            return;
        };
        let p = &mut self.per[rank as usize];
        p.op_cpu += ns;
        if p.idle == 0 {
            p.op_debt += ns;
        }
    }

    /// The node model's CPU for the bytes rank `i`'s node moved through its segments since
    /// the last call ([`model::Cpu::byte_ns`]): while its workers all run tasks, owed by
    /// its next task (the progress thread takes it from one) — or, where the workers serve
    /// the node ([`Model::workers_serve`]), spent by the next task's worker before that
    /// task starts —; else returned: the thread that drives the node does it before the
    /// node's next commands and tasks start.
    pub(super) fn byte_cpu(&mut self, i: usize) -> u64 {
        let (slots, other) = self.mems[i].take_moved();
        let Some(c) = self.job.model.cpu.as_ref() else {
            return 0;
        };
        let bytes = slots as f64 * self.job.task_bytes_scale + other as f64;
        let ns = (bytes * c.byte_ns) as u64;
        let p = &mut self.per[i];
        if p.idle > 0 {
            ns
        } else if self.job.model.workers_serve {
            p.serve_debt += ns;
            0
        } else {
            p.op_debt += ns;
            0
        }
    }

    /// Whether an operation from `from` on `peer` is on the issuer's own memory and the
    /// node model's measured [`model::Cpu::own_op_ns`], charged at issue, is its whole
    /// time: no atomic's service and no bytes' transfer on top.
    pub(super) fn own_whole(&self, from: u32, peer: u32) -> bool {
        from == peer && self.job.model.cpu.is_some()
    }

    /// What an operation from `from` waits at `peer` beyond the fabric's cost, with the
    /// node model on: the [`model::Cpu::busy_op_ns`] of the fabric between them where
    /// `peer`'s workers all run tasks and its progress does not poll (a polled target's
    /// wait is [`Self::atomic_done`]'s).
    pub(super) fn busy_op_ns(&self, from: u32, peer: u32, atomic: bool) -> u64 {
        let m = self.model(from, peer, atomic);
        match &m.cpu {
            Some(c)
                if self.job.model.cpu.is_some()
                    && peer != from
                    && !m.polled
                    && self.per[peer as usize].idle == 0 =>
            {
                c.busy_op_ns as u64
            }
            _ => 0,
        }
    }

    /// The time a completion takes back to the issuer: none on its own memory.
    pub(super) fn back(&mut self, from: u32, peer: u32, atomic: bool) -> u64 {
        if peer == from {
            0
        } else {
            self.latency(from, peer, atomic)
        }
    }

    /// `node`'s operation `token` completes at `t` with `value`.
    pub(super) fn complete(&mut self, t: u64, node: u32, token: Token, value: u64) {
        self.at(t, Ev::Complete { node, token, value });
    }

    /// An atomic's service at its target: one at a time, `atomic_ns` each (the measured
    /// cost, an idle target's progress naps included). On a polled fabric a target whose
    /// workers all run tasks (they serve its node between tasks while its progress thread
    /// takes the long nap: the runtime's driver) serves it in the first worker's poll at
    /// its task's end — or when that nap ends ([`titus_core::BUSY_NAP_NS`];
    /// [`titus_core::OPEN_OPS_WAIT_NS`] with operations of its own in flight; sooner at
    /// the rank's deadline) —, at the cost of handling an input; `late`
    /// ([`Self::busy_op_ns`]) delays its completion, not the unit. (The runtime's
    /// worker polls at a task's end only 20 µs after its last poll: tasks shorter than
    /// that may hold the atomic one task longer than here.)
    pub(super) fn atomic_done(
        &mut self,
        now: u64,
        late: u64,
        from: u32,
        peer: u32,
        token: Token,
        value: u64,
    ) {
        let p = peer as usize;
        let busy_until = match self.task_ends.get(p) {
            Some(ends) if peer != from && self.per[p].idle == 0 => {
                // Its progress thread's next turn, as the runtime's driver waits
                // (workers serving, no commands: the model issues them at once).
                let nap = now
                    + self.policy.progress_wait_ns(
                        self.nodes[p]
                            .poll_timeout()
                            .map(|t| t.0.saturating_sub(now)),
                        true,
                        false,
                        self.nodes[p].in_flight() > 0,
                    );
                ends.iter().map(|e| e.0).min().map(|end| end.min(nap))
            }
            _ => None,
        };
        let start = now.max(self.per[p].atomic_free);
        let served = match busy_until {
            Some(end) => start.max(end) + self.job.model.event_ns as u64,
            None if self.own_whole(from, peer) => start,
            None => start + self.job.model.atomic_ns as u64,
        };
        self.per[p].atomic_free = served;
        let d = self.back(from, peer, true);
        self.complete(served + late + d, from, token, value);
    }
}
