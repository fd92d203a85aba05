//! Results: routed to their owners hop by hop along the overlay, aggregated per next hop.
//!
//! A finished task's result goes to its owner if that is this rank, else into the buffer
//! of its next hop (the overlay's routing rule, computed locally). A buffer leaves as one
//! *chunk* when it is half full, when its oldest record waited `flush_delay`, or at once
//! when this rank has nothing else to do. Records of the same owner that meet at a rank
//! travel together from there on (TITUS_DLB §4.2).
//!
//! # Sending a chunk (three operations instead of TITUS's five-step lock)
//!
//! The inbox is one area per rank with a *reservation word*: generation (16 bits, high)
//! and bytes reserved (48 bits, low).
//! 1. Fetch-add the chunk's length on the next hop's reservation word. The old value is
//!    the chunk's offset. If offset + length fits, the space is the sender's alone.
//! 2. One gathered write of the chunk (assembled in this rank's OUTBOX), with
//! 3. a signal behind it: CHUNK(offset, length). The receiver parses the chunk (every
//!    length and owner bounds-checked), stores or forwards each record, and counts the
//!    bytes consumed.
//!
//! # Backpressure
//!
//! A reservation that does not fit is an *overflow*: the sender keeps its chunk and
//! signals OVERFLOW(generation, offset). Reservations only grow, so the space that did fit
//! is the prefix up to the smallest overflowing offset P, and all of it was reserved by
//! senders whose chunks will arrive. Once the receiver has consumed exactly P bytes, it
//! swaps the word to (generation + 1, 0) — a compare-and-swap, retried while late
//! overflows move the word — and signals RESET to the blocked senders, who reserve again.
//! The swap takes effect before the receiver hears of it, so what arrives meanwhile (new
//! chunks, overflows naming the next generation) is booked to the next generation.
//! Overflow signals of an older generation are stale and ignored; a blocked sender also
//! retries on its own after a while. Nothing is dropped: a chunk stays in its sender's
//! OUTBOX until its write completed.

use crate::fasthash::IntSet;
use crate::layout::signal::{self, Signal};
use crate::layout::{self, ResultRecord, seg};
use crate::neighbours::Neighbours;
use crate::node::{Node, Pending as NodePending};
use crate::{CoreError, Loc, Memory, Op, Rank, Time};
use std::time::Duration;

/// Offset of the reservation word in INBOX.
pub(crate) const RESERVED: u64 = 0;
/// Where inbox data starts.
pub(crate) const INBOX_DATA: u64 = 64;
const OFFSET_MASK: u64 = (1 << 48) - 1;
/// A blocked sender retries on its own after this long (a lost race with the reset).
const BLOCKED_RETRY: Duration = Duration::from_millis(5);

/// A chunk on its way.
#[derive(Debug, Clone, Copy)]
struct Flight {
    len: u64,
    /// Its OUTBOX slot.
    slot: u32,
    /// Waiting for a RESET (or the retry time) after an overflow.
    blocked_until: Option<Time>,
    /// Its reservation (fetch-add) or write is in flight.
    busy: bool,
}

/// Records waiting for one next hop, and the chunk in flight to it.
#[derive(Debug, Default)]
pub(crate) struct Outbound {
    body: Vec<u8>,
    count: u32,
    first: Option<Time>,
    flight: Option<Flight>,
}

/// What the receiver knows of one generation of its reservation word.
#[derive(Debug, Default)]
struct Generation {
    /// Bytes of valid chunks consumed.
    consumed: u64,
    /// Smallest overflowing offset reported.
    overflow_at: Option<u64>,
    /// Senders waiting for the RESET that ends it, in the order they reported (the set
    /// answers membership: under the complete graph they can be many).
    blocked: Vec<Rank>,
    blocked_set: IntSet<Rank>,
}

/// The receiving side.
#[derive(Debug, Default)]
pub(crate) struct Inbox {
    /// The reservation word's generation, as this rank set it.
    generation: u16,
    cur: Generation,
    /// A reset is in flight. It takes effect when its compare-and-swap executes, before
    /// this rank hears of it: every chunk of the current generation was consumed before
    /// the reset began, so chunks that arrive meanwhile belong to the next generation, as
    /// do overflow reports that name it.
    resetting: bool,
    next: Generation,
}

/// Result commands in flight.
#[derive(Debug)]
pub(crate) enum Pending {
    Reserve { hop: usize },
    ChunkWrite { hop: usize },
    ReadReserved,
    ResetSwap { expected: u64 },
}

impl Pending {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Self::Reserve { .. } => "inbox reservation (fetch-add)",
            Self::ChunkWrite { .. } => "result chunk write",
            Self::ReadReserved => "inbox reservation read",
            Self::ResetSwap { .. } => "inbox reset (compare-swap)",
        }
    }

    pub(crate) fn peer(&self, victims: &Neighbours, me: Rank) -> Rank {
        match self {
            Self::Reserve { hop } | Self::ChunkWrite { hop } => victims.at(*hop),
            _ => me,
        }
    }
}

/// Where OUTBOX slot `slot` starts.
fn outbox_offset(slot: u32, chunk_bytes: u64) -> u64 {
    u64::from(slot) * chunk_bytes
}

/// Walks a chunk body: the length of the longest record prefix that fits in `limit`, and
/// how many records it holds.
fn cut(body: &[u8], limit: usize) -> (usize, u32) {
    let (mut at, mut n) = (0usize, 0u32);
    while at + layout::RECORD_HEADER <= body.len() {
        let len = u32::from_le_bytes(body[at + 8..at + 12].try_into().expect("4 bytes")) as usize;
        let next = at + layout::record_len(len);
        if next > limit {
            break;
        }
        at = next;
        n += 1;
    }
    (at, n)
}

impl Node {
    /// OUTBOX slots of `chunk_bytes`: one per next hop, at most `Config::outbox_slots` —
    /// one per next hop for an overlay row (~32), a pool under the complete graph (one per
    /// rank there would register N × `chunk_bytes`: 224 MiB per rank at 3,584 ranks).
    pub(crate) fn outbox_slots(&self) -> usize {
        self.victims
            .len()
            .min(self.cfg.outbox_slots as usize)
            .max(1)
    }

    /// Delivers a result here or queues it for its next hop. `hops`: hops taken so far.
    pub(crate) fn route_result(
        &mut self,
        rec: ResultRecord,
        hops: u32,
        from: Rank,
    ) -> Result<(), CoreError> {
        if rec.owner == self.rank {
            return self.store_result(rec.index, rec.data, from, hops);
        }
        let Some(h) = self.next_hop(rec.owner) else {
            return Err(CoreError::Config(format!(
                "no route from rank {} to rank {}",
                self.rank, rec.owner
            )));
        };
        if from != self.rank {
            self.stats.records_forwarded += 1;
        }
        let now = self.now;
        let o = self.outs.entry(h as u32).or_insert_with(|| {
            self.active_outs.push(h as u32);
            Outbound::default()
        });
        layout::push_record(&mut o.body, &rec, hops + 1);
        o.count += 1;
        o.first.get_or_insert(now);
        Ok(())
    }

    pub(crate) fn outs_summary(&self) -> String {
        self.active_outs
            .iter()
            .filter_map(|h| Some((*h, self.outs.get(h)?)))
            .map(|(h, o)| {
                format!(
                    "to {}: {} records, chunk {:?}",
                    self.victims.at(h as usize),
                    o.count,
                    o.flight
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    pub(crate) fn inbox_summary(&self) -> String {
        let i = &self.inbox;
        format!(
            "generation {} {:?} resetting {} next {:?}",
            i.generation, i.cur, i.resetting, i.next
        )
    }

    pub(crate) fn results_deadline(&self) -> Option<Time> {
        // With every OUTBOX slot in flight, buffered records wait for a completion (an
        // input), not for a time.
        let slot_free = !self.outbox_free.is_empty();
        self.active_outs
            .iter()
            .filter_map(|h| self.outs.get(h))
            .filter_map(|o| match o.flight {
                Some(Flight {
                    blocked_until: Some(t),
                    busy: false,
                    ..
                }) => Some(t),
                Some(_) => None,
                None if slot_free => o.first.map(|f| f.plus(self.cfg.flush_delay)),
                None => None,
            })
            .min()
    }

    pub(crate) fn results_step(&mut self, mem: &dyn Memory) -> Result<(), CoreError> {
        let now = self.now;
        let idle = self.queue.is_empty();
        let limit = self.cfg.chunk_bytes as usize - layout::CHUNK_HEADER;
        // Only the next hops with records buffered or a chunk travelling (a rank has ~40;
        // most inputs find none or one).
        let active = std::mem::take(&mut self.active_outs);
        for &key in &active {
            let h = key as usize;
            let peer = self.victims.at(h);
            let o = self.outs.get_mut(&key).expect("active hops are in outs");
            match o.flight {
                Some(
                    f @ Flight {
                        blocked_until: Some(t),
                        busy: false,
                        ..
                    },
                ) if now >= t => {
                    // Retry the reservation of the chunk still in OUTBOX.
                    o.flight = Some(Flight {
                        blocked_until: None,
                        busy: true,
                        ..f
                    });
                    let len = f.len;
                    self.issue(
                        Op::FetchAdd {
                            peer,
                            remote: Loc::new(seg::INBOX, RESERVED),
                            delta: len,
                        },
                        NodePending::Results(Pending::Reserve { hop: h }),
                    );
                    continue;
                }
                Some(_) => continue,
                None => {}
            }
            if o.count == 0 {
                continue;
            }
            let due = o.body.len() >= limit / 2
                || o.first.is_some_and(|f| now >= f.plus(self.cfg.flush_delay))
                || idle;
            if !due {
                continue;
            }
            let Some(slot) = self.outbox_free.pop() else {
                continue; // Every slot in flight: a completion frees one.
            };
            // Assemble the chunk in OUTBOX (step 1 reserves room for it).
            let (bytes, count) = cut(&o.body, limit);
            let header = layout::chunk_header(count, bytes);
            let base = outbox_offset(slot, self.cfg.chunk_bytes);
            mem.write(Loc::new(seg::OUTBOX, base), &header);
            mem.write(
                Loc::new(seg::OUTBOX, base + layout::CHUNK_HEADER as u64),
                &o.body[..bytes],
            );
            o.body.drain(..bytes);
            o.count -= count;
            o.first = (o.count > 0).then_some(now);
            let len = (layout::CHUNK_HEADER + bytes) as u64;
            o.flight = Some(Flight {
                len,
                slot,
                blocked_until: None,
                busy: true,
            });
            self.issue(
                Op::FetchAdd {
                    peer,
                    remote: Loc::new(seg::INBOX, RESERVED),
                    delta: len,
                },
                NodePending::Results(Pending::Reserve { hop: h }),
            );
        }
        // Keep the hops that still hold records or a chunk in flight (nothing was buffered
        // during the scan: only `route_result` lists hops).
        debug_assert!(self.active_outs.is_empty());
        let mut active = active;
        let outs = &mut self.outs;
        active.retain(|h| {
            let keep = outs
                .get(h)
                .is_some_and(|o| o.count > 0 || o.flight.is_some());
            if !keep {
                outs.remove(h);
            }
            keep
        });
        self.active_outs = active;
        // The inbox: reset once the valid prefix is consumed (module doc).
        let ib = &self.inbox;
        if !ib.resetting && ib.cur.overflow_at == Some(ib.cur.consumed) {
            self.inbox.resetting = true;
            self.issue(
                Op::FetchAdd {
                    peer: self.rank,
                    remote: Loc::new(seg::INBOX, RESERVED),
                    delta: 0,
                },
                NodePending::Results(Pending::ReadReserved),
            );
        }
        Ok(())
    }

    pub(crate) fn results_completion(
        &mut self,
        p: Pending,
        value: u64,
        mem: &dyn Memory,
    ) -> Result<(), CoreError> {
        let _ = mem;
        match p {
            Pending::Reserve { hop } => {
                let peer = self.victims.at(hop);
                let flight = self
                    .outs
                    .get(&(hop as u32))
                    .and_then(|o| o.flight)
                    .expect("a reservation belongs to a chunk");
                let (generation, offset) = ((value >> 48) as u16, value & OFFSET_MASK);
                if offset + flight.len <= self.cfg.inbox_bytes {
                    // Steps 2 and 3: the chunk, then its signal.
                    self.issue(
                        Op::Write {
                            peer,
                            remote: Loc::new(seg::INBOX, INBOX_DATA + offset),
                            pieces: vec![(
                                Loc::new(
                                    seg::OUTBOX,
                                    outbox_offset(flight.slot, self.cfg.chunk_bytes),
                                ),
                                flight.len,
                            )],
                            signal: Some(
                                Signal::Chunk {
                                    offset,
                                    len: flight.len,
                                }
                                .pack(),
                            ),
                        },
                        NodePending::Results(Pending::ChunkWrite { hop }),
                    );
                } else {
                    // Overflow: wait for the receiver's RESET (or retry later).
                    self.stats.inbox_overflows += 1;
                    let o = self.outs.get_mut(&(hop as u32)).expect("checked above");
                    o.flight = Some(Flight {
                        blocked_until: Some(self.now.plus(BLOCKED_RETRY)),
                        busy: false,
                        ..flight
                    });
                    let overflow = Signal::Overflow {
                        generation,
                        offset: offset.min((1 << signal::OVERFLOW_OFFSET_BITS) - 1),
                    };
                    self.send_signal(peer, overflow.pack(), "inbox overflow");
                }
            }
            Pending::ChunkWrite { hop } => {
                let f = self
                    .outs
                    .get_mut(&(hop as u32))
                    .and_then(|o| o.flight.take())
                    .expect("a write belongs to a chunk");
                self.outbox_free.push(f.slot);
                self.stats.chunks_sent += 1;
                self.stats.bytes_results += f.len;
            }
            Pending::ReadReserved => self.reset_swap(value),
            Pending::ResetSwap { expected } => {
                if value != expected {
                    // Late overflows moved the word; swap against what it is now.
                    self.reset_swap(value);
                    return Ok(());
                }
                let ib = &mut self.inbox;
                ib.generation = ib.generation.wrapping_add(1);
                ib.resetting = false;
                let ended = std::mem::replace(&mut ib.cur, std::mem::take(&mut ib.next));
                for r in ended.blocked {
                    self.send_signal(r, Signal::Reset.pack(), "inbox reset");
                }
            }
        }
        Ok(())
    }

    fn reset_swap(&mut self, current: u64) {
        let next = u64::from(self.inbox.generation.wrapping_add(1)) << 48;
        self.issue(
            Op::Cas {
                peer: self.rank,
                remote: Loc::new(seg::INBOX, RESERVED),
                expected: current,
                desired: next,
            },
            NodePending::Results(Pending::ResetSwap { expected: current }),
        );
    }

    pub(crate) fn results_signal(
        &mut self,
        from: Rank,
        sig: Signal,
        mem: &dyn Memory,
    ) -> Result<(), CoreError> {
        match sig {
            Signal::Chunk { offset, len } => {
                if len < layout::CHUNK_HEADER as u64
                    || offset.saturating_add(len) > self.cfg.inbox_bytes
                {
                    return Err(CoreError::Malformed {
                        from,
                        what: format!(
                            "result chunk at {offset}+{len} outside the {}-byte inbox",
                            self.cfg.inbox_bytes
                        ),
                    });
                }
                let mut buf = vec![0u8; len as usize];
                mem.read(Loc::new(seg::INBOX, INBOX_DATA + offset), &mut buf);
                let records = layout::decode_chunk(&buf, from, self.size, self.cfg.max_result)?;
                let ib = &mut self.inbox;
                if ib.resetting {
                    &mut ib.next
                } else {
                    &mut ib.cur
                }
                .consumed += len;
                self.stats.chunks_received += 1;
                for (rec, hops) in records {
                    self.route_result(rec, hops, from)?;
                }
            }
            Signal::Overflow { generation, offset } => {
                let ib = &mut self.inbox;
                let g = if generation == ib.generation {
                    &mut ib.cur
                } else if ib.resetting && generation == ib.generation.wrapping_add(1) {
                    &mut ib.next
                } else {
                    return Ok(()); // An older generation's report: stale.
                };
                g.overflow_at = Some(g.overflow_at.map_or(offset, |p| p.min(offset)));
                if g.blocked_set.insert(from) {
                    g.blocked.push(from);
                }
            }
            Signal::Reset => {
                // RESET from a next hop: retry its chunk now.
                if let Some(h) = self.victims.index_of(from)
                    && let Some(f) = self
                        .outs
                        .get_mut(&(h as u32))
                        .and_then(|o| o.flight.as_mut())
                    && f.blocked_until.is_some()
                {
                    f.blocked_until = Some(self.now);
                }
            }
            // Steal and termination signals go elsewhere (`Node::handle_signal`).
            _ => {}
        }
        Ok(())
    }
}
