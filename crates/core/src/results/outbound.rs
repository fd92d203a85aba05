//! The sending side of results routing: records buffered per next hop, and the chunk in
//! flight to each.
//!
//! A next hop's buffer leaves as one *chunk* when it is half full, when a record is due
//! (the result of a task this rank ran after `flush_delay`; a record passed on for another
//! rank after `forward_delay`), or at once when this rank has nothing else to do. Tasks pushed
//! by diffusion (`crate::diffuse`) travel the same way in chunks of their own kind
//! ([`layout::TASK_CHUNK_MAGIC`]), which leave at once and before the hop's results. A chunk is
//! assembled in one of the OUTBOX slots (`Config::outbox_slots` of `chunk_bytes`; records
//! for a next hop wait when every slot is in flight).
//!
//! # Sending a chunk (three operations instead of TITUS's five-step lock)
//!
//! 1. Fetch-add the chunk's length on the next hop's reservation word. The old value is
//!    the chunk's offset. If offset + length fits, the space is the sender's alone.
//! 2. One gathered write of the chunk from its OUTBOX slot, with
//! 3. a signal behind it: CHUNK(offset, length) (the receiver's side: `super::inbox`).
//!
//! A reservation that does not fit is an *overflow*: the sender keeps its chunk and
//! signals OVERFLOW(generation, offset), then reserves again when the receiver signals
//! RESET — or on its own after [`BLOCKED_RETRY`] (a lost race with the reset). Nothing is
//! dropped: a chunk stays in its OUTBOX slot until its write completed.

use super::inbox::RESERVED;
use crate::ctx::Ctx;
use crate::fasthash::IntMap;
use crate::layout::signal::{self, Signal};
use crate::layout::{self, PushedTask, ResultRecord, seg};
use crate::neighbours::Neighbours;
use crate::{Config, Loc, Memory, Op, Rank, Time, Transfer, TransferEvent};
use std::time::Duration;

use super::inbox::INBOX_DATA;

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
    /// A chunk of pushed tasks (else results).
    tasks: bool,
}

/// Records waiting for one next hop, and the chunk in flight to it.
#[derive(Debug, Default)]
struct Hop {
    body: Vec<u8>,
    count: u32,
    /// When the earliest of its records is due to leave.
    due: Option<Time>,
    /// Records of tasks pushed to this next hop, not yet in a chunk.
    pushed: Vec<u8>,
    pushed_count: u32,
    flight: Option<Flight>,
}

/// The sender's operations in flight.
#[derive(Debug)]
pub(crate) enum Pending {
    Reserve {
        hop: usize,
    },
    ChunkWrite {
        hop: usize,
    },
    /// OVERFLOW, to the next hop whose inbox was full.
    Overflow,
}

impl Pending {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Self::Reserve { .. } => "inbox reservation (fetch-add)",
            Self::ChunkWrite { .. } => "chunk write",
            Self::Overflow => "inbox overflow",
        }
    }

    pub(crate) fn peer(&self, victims: &Neighbours, me: Rank) -> Rank {
        match self {
            Self::Reserve { hop } | Self::ChunkWrite { hop } => victims.at(*hop),
            Self::Overflow => me,
        }
    }
}

/// Where OUTBOX slot `slot` starts.
fn outbox_offset(slot: u32, chunk_bytes: u64) -> u64 {
    u64::from(slot) * chunk_bytes
}

/// Writes a chunk (header, then `body` of `count` records) into OUTBOX slot `slot`;
/// returns its length.
fn assemble(
    mem: &dyn Memory,
    chunk_bytes: u64,
    slot: u32,
    magic: u32,
    count: u32,
    body: &[u8],
) -> u64 {
    let base = outbox_offset(slot, chunk_bytes);
    mem.write(
        Loc::new(seg::OUTBOX, base),
        &layout::chunk_header(magic, count, body.len()),
    );
    mem.write(
        Loc::new(seg::OUTBOX, base + layout::CHUNK_HEADER as u64),
        body,
    );
    (layout::CHUNK_HEADER + body.len()) as u64
}

/// The largest record a chunk holds, bytes.
pub(crate) fn max_record(cfg: &Config) -> usize {
    cfg.chunk_bytes as usize - layout::CHUNK_HEADER
}

/// Walks a chunk body: the length of the longest record prefix that fits in `limit`, and
/// how many records it holds.
/// Moves the first records of `buf` that fit a chunk into OUTBOX `slot` as a chunk with
/// `magic`; returns the chunk's length and how many records it holds.
fn launch(
    mem: &dyn Memory,
    chunk_bytes: u64,
    slot: u32,
    magic: u32,
    buf: &mut Vec<u8>,
    limit: usize,
) -> (u64, u32) {
    let rec_len = if magic == layout::CHUNK_MAGIC {
        layout::record_len
    } else {
        layout::task_record_len
    };
    let (bytes, count) = cut(buf, limit, rec_len);
    let len = assemble(mem, chunk_bytes, slot, magic, count, &buf[..bytes]);
    buf.drain(..bytes);
    (len, count)
}

/// Step 1 of a chunk of `len` bytes to next hop `hop` (rank `peer`): reserve room for it
/// in that rank's inbox.
fn reserve<P: From<Pending>>(cx: &mut Ctx<P>, peer: Rank, hop: usize, len: u64) {
    cx.issue(
        Op::FetchAdd {
            peer,
            remote: Loc::new(seg::INBOX, RESERVED),
            delta: len,
        },
        Pending::Reserve { hop },
    );
}

/// `rec_len`: a record's encoded length from its data length (results or pushed tasks).
fn cut(body: &[u8], limit: usize, rec_len: fn(usize) -> usize) -> (usize, u32) {
    let (mut at, mut n) = (0usize, 0u32);
    while at + layout::RECORD_HEADER <= body.len() {
        let len = u32::from_le_bytes(body[at + 8..at + 12].try_into().expect("4 bytes")) as usize;
        let next = at + rec_len(len);
        if next > limit {
            break;
        }
        at = next;
        n += 1;
    }
    (at, n)
}

/// Buffers and chunks per next hop (index into the victims).
#[derive(Debug)]
pub(crate) struct Outbound {
    /// Only hops with records buffered or a chunk travelling are present.
    hops: IntMap<u32, Hop>,
    /// The keys of `hops` in the order they became active.
    active: Vec<u32>,
    /// OUTBOX slots not holding a chunk in flight.
    free: Vec<u32>,
    /// OUTBOX slots in all.
    slots: usize,
}

impl Outbound {
    /// OUTBOX slots of `chunk_bytes`: one per next hop, at most `Config::outbox_slots` —
    /// one per next hop for an overlay row (~32), a pool under the complete graph (one per
    /// rank there would register N × `chunk_bytes`: 224 MiB per rank at 3,584 ranks).
    pub(crate) fn new(victims: &Neighbours, cfg: &Config) -> Self {
        let slots = victims.len().min(cfg.outbox_slots as usize).max(1);
        Self {
            hops: IntMap::default(),
            active: Vec::new(),
            free: (0..slots as u32).rev().collect(),
            slots,
        }
    }

    /// OUTBOX slots (the segment holds this many × `chunk_bytes`).
    pub(crate) fn slots(&self) -> usize {
        self.slots
    }

    /// Buffers `rec` for next hop `hop`; `hops`: hops taken so far (0: a task this rank
    /// ran), which decide when it is due (`flush_delay`, `forward_delay`).
    pub(crate) fn buffer(
        &mut self,
        cfg: &Config,
        now: Time,
        hop: usize,
        rec: &ResultRecord,
        hops: u32,
    ) {
        let active = &mut self.active;
        let o = self.hops.entry(hop as u32).or_insert_with(|| {
            active.push(hop as u32);
            Hop::default()
        });
        layout::push_record(&mut o.body, rec, hops + 1);
        o.count += 1;
        // A forwarded record never waits longer than the rank's own results would.
        let due = now.plus(if hops == 0 {
            cfg.flush_delay
        } else {
            cfg.forward_delay.min(cfg.flush_delay)
        });
        o.due = Some(o.due.map_or(due, |d| d.min(due)));
    }

    /// Queues `tasks` (with their predicted costs) to be pushed to next hop `hop`. Each
    /// record must fit in one chunk ([`max_record`]).
    pub(crate) fn push_tasks(&mut self, hop: usize, tasks: &[PushedTask]) {
        let active = &mut self.active;
        let o = self.hops.entry(hop as u32).or_insert_with(|| {
            active.push(hop as u32);
            Hop::default()
        });
        for t in tasks {
            // The record carries the task's estimate (the caller's hint where it gave
            // one, else the prediction): the receiver orders its queue by it.
            let est = if t.task.cost_ns > 0 {
                t.task.cost_ns
            } else {
                t.predicted_ns
            };
            layout::push_task_record(&mut o.pushed, &t.task, est, t.dest);
            o.pushed_count += 1;
        }
    }

    pub(crate) fn summary(&self, victims: &Neighbours) -> String {
        self.active
            .iter()
            .filter_map(|h| Some((*h, self.hops.get(h)?)))
            .map(|(h, o)| {
                format!(
                    "to {}: {} records, {} pushed tasks, chunk {:?}",
                    victims.at(h as usize),
                    o.count,
                    o.pushed_count,
                    o.flight
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// Whether nothing is buffered or travelling.
    pub(crate) fn is_empty(&self) -> bool {
        self.hops.is_empty()
    }

    pub(crate) fn deadline(&self) -> Option<Time> {
        // With every OUTBOX slot in flight, buffered records wait for a completion (an
        // input), not for a time.
        let slot_free = !self.free.is_empty();
        self.active
            .iter()
            .filter_map(|h| self.hops.get(h))
            .filter_map(|o| match o.flight {
                Some(Flight {
                    blocked_until: Some(t),
                    busy: false,
                    ..
                }) => Some(t),
                Some(_) => None,
                None if slot_free => o.due,
                None => None,
            })
            .min()
    }

    /// After any input: sends the chunks that are due, retries blocked ones. `idle`: this
    /// rank has no task queued.
    pub(crate) fn step<P: From<Pending>>(
        &mut self,
        cx: &mut Ctx<P>,
        victims: &Neighbours,
        mem: &dyn Memory,
        idle: bool,
    ) {
        let now = cx.now;
        let limit = max_record(&cx.cfg);
        // Only the next hops with records buffered or a chunk travelling (a rank has ~40;
        // most inputs find none or one).
        for &key in &self.active {
            let h = key as usize;
            // (The hop's rank is looked up only to issue: most hops have nothing to send.)
            let o = self.hops.get_mut(&key).expect("active hops are in hops");
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
                    reserve(cx, victims.at(h), h, f.len);
                    continue;
                }
                Some(_) => continue,
                None => {}
            }
            if o.pushed_count > 0 {
                // Pushed tasks leave at once: the neighbour's workers wait for them.
                let Some(slot) = self.free.pop() else {
                    continue; // Every slot in flight: a completion frees one.
                };
                // The push's last chunk says so (its receiver leaves this rank alone
                // until then): fits the rest?
                let rest = o.pushed.len() <= limit;
                let magic = if rest {
                    layout::TASK_CHUNK_LAST_MAGIC
                } else {
                    layout::TASK_CHUNK_MAGIC
                };
                let (len, count) =
                    launch(mem, cx.cfg.chunk_bytes, slot, magic, &mut o.pushed, limit);
                debug_assert!(count > 0, "a pushed task's record fits a chunk");
                o.pushed_count -= count;
                debug_assert!(!rest || o.pushed_count == 0, "the last chunk took the rest");
                o.flight = Some(Flight {
                    len,
                    slot,
                    blocked_until: None,
                    busy: true,
                    tasks: true,
                });
                reserve(cx, victims.at(h), h, len);
                continue;
            }
            if o.count == 0 {
                continue;
            }
            let due = o.body.len() >= limit / 2 || o.due.is_some_and(|d| now >= d) || idle;
            if !due {
                continue;
            }
            let Some(slot) = self.free.pop() else {
                continue; // Every slot in flight: a completion frees one.
            };
            // Assemble the chunk in OUTBOX (step 1 reserves room for it).
            let (len, count) = launch(
                mem,
                cx.cfg.chunk_bytes,
                slot,
                layout::CHUNK_MAGIC,
                &mut o.body,
                limit,
            );
            o.count -= count;
            // What stayed behind keeps the earliest due time: it leaves as soon as a
            // slot frees (the chunk was full, not early).
            if o.count == 0 {
                o.due = None;
            }
            o.flight = Some(Flight {
                len,
                slot,
                blocked_until: None,
                busy: true,
                tasks: false,
            });
            // Step 1: reserve room in the next hop's inbox.
            reserve(cx, victims.at(h), h, len);
        }
        // Keep the hops that still hold records or a chunk in flight (nothing is buffered
        // during the scan).
        let hops = &mut self.hops;
        self.active.retain(|h| {
            let keep = hops
                .get(h)
                .is_some_and(|o| o.count > 0 || o.pushed_count > 0 || o.flight.is_some());
            if !keep {
                hops.remove(h);
            }
            keep
        });
    }

    /// One of its operations completed with `value`.
    pub(crate) fn complete<P: From<Pending>>(
        &mut self,
        cx: &mut Ctx<P>,
        victims: &Neighbours,
        p: Pending,
        value: u64,
        mem: &dyn Memory,
    ) {
        match p {
            Pending::Reserve { hop } => {
                let peer = victims.at(hop);
                let o = self
                    .hops
                    .get_mut(&(hop as u32))
                    .expect("a reservation belongs to a chunk");
                let flight = o.flight.expect("a reservation belongs to a chunk");
                let (generation, offset) = ((value >> 48) as u16, value & OFFSET_MASK);
                if offset + flight.len <= cx.cfg.inbox_bytes {
                    // Steps 2 and 3: the chunk, then its signal.
                    cx.issue(
                        Op::Write {
                            peer,
                            remote: Loc::new(seg::INBOX, INBOX_DATA + offset),
                            pieces: vec![(
                                Loc::new(
                                    seg::OUTBOX,
                                    outbox_offset(flight.slot, cx.cfg.chunk_bytes),
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
                        Pending::ChunkWrite { hop },
                    );
                } else {
                    // Overflow: wait for the receiver's RESET (or retry later).
                    cx.stats.inbox_overflows += 1;
                    o.flight = Some(Flight {
                        blocked_until: Some(cx.now.plus(BLOCKED_RETRY)),
                        busy: false,
                        ..flight
                    });
                    let overflow = Signal::Overflow {
                        generation,
                        offset: offset.min((1 << signal::OVERFLOW_OFFSET_BITS) - 1),
                    };
                    cx.signal(peer, overflow, Pending::Overflow);
                }
            }
            Pending::ChunkWrite { hop } => {
                let f = self
                    .hops
                    .get_mut(&(hop as u32))
                    .and_then(|o| o.flight.take())
                    .expect("a write belongs to a chunk");
                // The chunk is in its next hop's inbox: its staging copy is dead until the
                // slot holds another (memory that costs what it holds frees it).
                let base = outbox_offset(f.slot, cx.cfg.chunk_bytes);
                mem.discard(Loc::new(seg::OUTBOX, base), f.len);
                self.free.push(f.slot);
                let at_ns = cx.now.since(cx.started).as_nanos() as u64;
                let kind = if f.tasks {
                    cx.stats.bytes_pushed += f.len;
                    cx.stats.pushed_out_at_ns = at_ns;
                    Transfer::TasksSent
                } else {
                    cx.stats.chunks_sent += 1;
                    cx.stats.bytes_results += f.len;
                    Transfer::ResultsSent
                };
                let (peer, bytes) = (hop as Rank, f.len);
                let event = TransferEvent {
                    at_ns,
                    peer,
                    bytes,
                    kind,
                };
                cx.stats.log_transfer(cx.cfg.timeline, event);
            }
            Pending::Overflow => {}
        }
    }

    /// RESET from `from`: if it is a next hop whose chunk waits, retry it now.
    pub(crate) fn on_reset(&mut self, victims: &Neighbours, from: Rank, now: Time) {
        if let Some(h) = victims.index_of(from)
            && let Some(f) = self
                .hops
                .get_mut(&(h as u32))
                .and_then(|o| o.flight.as_mut())
            && f.blocked_until.is_some()
        {
            f.blocked_until = Some(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(owner: Rank, index: u32) -> ResultRecord {
        ResultRecord {
            key: 0,
            owner,
            index,
            cost_ns: 1,
            data: vec![7; 8],
        }
    }

    /// The results of tasks this rank ran wait `flush_delay`; a record passed on for
    /// another rank makes its chunk due after `forward_delay` (a busy rank on the way
    /// home would otherwise hold the epoch's last results).
    #[test]
    fn forwarded_records_are_due_sooner_than_own_results() {
        let cfg = Config::default();
        assert!(cfg.forward_delay < cfg.flush_delay);
        let victims = Neighbours::List(vec![1, 2]);
        let mut out = Outbound::new(&victims, &cfg);
        assert_eq!(out.deadline(), None);
        let t0 = Time(1_000);
        out.buffer(&cfg, t0, 0, &record(0, 1), 0);
        assert_eq!(out.deadline(), Some(t0.plus(cfg.flush_delay)));
        let t1 = Time(2_000);
        out.buffer(&cfg, t1, 0, &record(3, 4), 1);
        assert_eq!(out.deadline(), Some(t1.plus(cfg.forward_delay)));
        // Another hop's own results do not pull that deadline in.
        out.buffer(&cfg, t1, 1, &record(0, 2), 0);
        assert_eq!(out.deadline(), Some(t1.plus(cfg.forward_delay)));
    }

    /// Once a chunk's write completed its OUTBOX copy is dead: the slot is discarded
    /// (memory that costs what it holds frees it; at scale the staged chunks of every
    /// rank's pushes stayed resident).
    #[test]
    fn a_written_chunk_leaves_its_outbox_slot_discarded() {
        use crate::Op;
        use crate::ctx::testing::{Discards, Mem};
        let cfg = Config::default();
        let mut sizes = [0u64; 16];
        sizes[usize::from(seg::OUTBOX.0)] = 4 * cfg.chunk_bytes;
        let mem = Discards::new(Mem::new(sizes));
        let victims = Neighbours::List(vec![1, 2]);
        let mut out = Outbound::new(&victims, &cfg);
        let mut cx: Ctx<Pending> = Ctx::new(cfg.clone(), 0, 3);
        out.buffer(&cfg, cx.now, 1, &record(2, 5), 0);
        out.step(&mut cx, &victims, &mem, true);
        let reserve = cx.poll_command().expect("a reservation");
        assert!(
            matches!(reserve.op, Op::FetchAdd { peer: 2, .. }),
            "{:?}",
            reserve.op
        );
        let p = cx.complete(reserve.token).unwrap();
        out.complete(&mut cx, &victims, p, 0, &mem);
        assert!(
            mem.1.borrow().is_empty(),
            "nothing dead while the chunk is unwritten"
        );
        let write = cx.poll_command().expect("the chunk's write");
        let Op::Write { pieces, .. } = write.op else {
            panic!("{:?}", write.op);
        };
        let p = cx.complete(write.token).unwrap();
        out.complete(&mut cx, &victims, p, 0, &mem);
        assert_eq!(*mem.1.borrow(), pieces, "the chunk as written, once");
    }
}
