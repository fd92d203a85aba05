//! The receiving side of results routing: one inbox area per rank behind a *reservation
//! word* — generation (16 bits, high) and bytes reserved (48 bits, low) — that senders
//! fetch-add (`super::outbound`).
//!
//! A CHUNK(offset, length) signal says a chunk is in place: the receiver parses it (every
//! length and owner bounds-checked), hands each record on to be stored or forwarded, and
//! counts the bytes consumed.
//!
//! # Backpressure
//!
//! Reservations only grow, so the space that did fit is the prefix up to the smallest
//! overflowing offset P that senders report (OVERFLOW), and all of it was reserved by
//! senders whose chunks will arrive.
//! 1. Once the receiver has consumed exactly P bytes, it reads its word and
//! 2. swaps it to (generation + 1, 0) — a compare-and-swap, retried while late overflows
//!    move the word —
//! 3. then signals RESET to the blocked senders, who reserve again.
//!
//! The swap takes effect before the receiver hears of it, so what arrives meanwhile (new
//! chunks, overflows naming the next generation) is booked to the next generation.
//! Overflow signals of an older generation are stale and ignored.

use crate::ctx::Ctx;
use crate::fasthash::IntSet;
use crate::layout::signal::Signal;
use crate::layout::{self, Chunk, seg};
use crate::{CoreError, Loc, Memory, Op, Rank};
use crate::{Transfer, TransferEvent};

/// Offset of the reservation word in INBOX.
pub(crate) const RESERVED: u64 = 0;
/// Where inbox data starts.
pub(crate) const INBOX_DATA: u64 = 64;

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

/// The receiver's operations in flight.
#[derive(Debug)]
pub(crate) enum Pending {
    ReadReserved,
    ResetSwap {
        expected: u64,
    },
    /// RESET, to a blocked sender.
    Reset,
}

impl Pending {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Self::ReadReserved => "inbox reservation read",
            Self::ResetSwap { .. } => "inbox reset (compare-swap)",
            Self::Reset => "inbox reset",
        }
    }
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

impl Inbox {
    pub(crate) fn summary(&self) -> String {
        format!(
            "generation {} {:?} resetting {} next {:?}",
            self.generation, self.cur, self.resetting, self.next
        )
    }

    /// After any input: step 1 of a reset once the valid prefix is consumed.
    pub(crate) fn step<P: From<Pending>>(&mut self, cx: &mut Ctx<P>) {
        if !self.resetting && self.cur.overflow_at == Some(self.cur.consumed) {
            self.resetting = true;
            cx.issue(
                Op::FetchAdd {
                    peer: cx.rank,
                    remote: Loc::new(seg::INBOX, RESERVED),
                    delta: 0,
                },
                Pending::ReadReserved,
            );
        }
    }

    /// One of its operations completed with `value`.
    pub(crate) fn complete<P: From<Pending>>(&mut self, cx: &mut Ctx<P>, p: Pending, value: u64) {
        match p {
            Pending::ReadReserved => self.reset_swap(cx, value),
            Pending::ResetSwap { expected } => {
                if value != expected {
                    // Late overflows moved the word; swap against what it is now.
                    self.reset_swap(cx, value);
                    return;
                }
                self.generation = self.generation.wrapping_add(1);
                self.resetting = false;
                let ended = std::mem::replace(&mut self.cur, std::mem::take(&mut self.next));
                // Step 3.
                for r in ended.blocked {
                    cx.signal(r, Signal::Reset, Pending::Reset);
                }
            }
            Pending::Reset => {}
        }
    }

    /// Step 2: (generation + 1, 0) if the word still is `current`.
    fn reset_swap<P: From<Pending>>(&mut self, cx: &mut Ctx<P>, current: u64) {
        let next = u64::from(self.generation.wrapping_add(1)) << 48;
        cx.issue(
            Op::Cas {
                peer: cx.rank,
                remote: Loc::new(seg::INBOX, RESERVED),
                expected: current,
                desired: next,
            },
            Pending::ResetSwap { expected: current },
        );
    }

    /// CHUNK(`offset`, `len`) from `from`: the chunk's result records with their hop
    /// counts, or the tasks it pushes here.
    pub(crate) fn on_chunk<P>(
        &mut self,
        cx: &mut Ctx<P>,
        from: Rank,
        offset: u64,
        len: u64,
        mem: &dyn Memory,
    ) -> Result<Chunk, CoreError> {
        if len < layout::CHUNK_HEADER as u64 || offset.saturating_add(len) > cx.cfg.inbox_bytes {
            return Err(CoreError::Malformed {
                from,
                what: format!(
                    "chunk at {offset}+{len} outside the {}-byte inbox",
                    cx.cfg.inbox_bytes
                ),
            });
        }
        let mut buf = vec![0u8; len as usize];
        let at = Loc::new(seg::INBOX, INBOX_DATA + offset);
        mem.read(at, &mut buf);
        // Read once: the bytes are dead until a later generation's chunk overwrites them.
        mem.discard(at, len);
        let chunk =
            layout::decode_chunk(&buf, from, cx.size, cx.cfg.max_result, cx.cfg.max_payload)?;
        let spawning = cx.cfg.spawning.is_some();
        match &chunk {
            Chunk::Results(records) => records
                .iter()
                .try_for_each(|(r, _)| layout::refuse_spawned(r.index, from, spawning))?,
            Chunk::Tasks { tasks, .. } => tasks
                .iter()
                .try_for_each(|t| layout::refuse_spawned(t.task.index, from, spawning))?,
        }
        if self.resetting {
            &mut self.next
        } else {
            &mut self.cur
        }
        .consumed += len;
        // Pushed tasks count where they stay (the node), not where they pass.
        let kind = match &chunk {
            Chunk::Results(_) => {
                cx.stats.chunks_received += 1;
                Transfer::ResultsReceived
            }
            _ => Transfer::TasksReceived,
        };
        let at_ns = cx.now.since(cx.started).as_nanos() as u64;
        let event = TransferEvent {
            at_ns,
            peer: from,
            bytes: len,
            kind,
        };
        cx.stats.log_transfer(cx.cfg.timeline, event);
        Ok(chunk)
    }

    /// OVERFLOW(`generation`, `offset`) from `from`: it waits for a RESET.
    pub(crate) fn on_overflow(&mut self, from: Rank, generation: u16, offset: u64) {
        let g = if generation == self.generation {
            &mut self.cur
        } else if self.resetting && generation == self.generation.wrapping_add(1) {
            &mut self.next
        } else {
            return; // An older generation's report: stale.
        };
        g.overflow_at = Some(g.overflow_at.map_or(offset, |p| p.min(offset)));
        if g.blocked_set.insert(from) {
            g.blocked.push(from);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;

    #[test]
    fn resets_once_the_prefix_before_the_overflow_is_consumed() {
        let mut cx: Ctx<Pending> = Ctx::new(Config::default(), 0, 4);
        let mut ib = Inbox::default();
        ib.on_overflow(2, 0, 100);
        ib.on_overflow(3, 0, 80);
        ib.on_overflow(2, 0, 120);
        ib.on_overflow(1, 7, 10); // Another generation's: stale.
        ib.step(&mut cx);
        assert!(cx.poll_command().is_none(), "80 bytes not consumed yet");
        ib.cur.consumed = 80;
        ib.step(&mut cx);
        let read = cx.poll_command().expect("step 1");
        let p = cx.complete(read.token).unwrap();
        ib.complete(&mut cx, p, 200);
        let swap = cx.poll_command().expect("step 2");
        assert!(matches!(swap.op, Op::Cas { expected: 200, desired, .. } if desired == 1 << 48));
        // A late overflow moved the word: swap again against it.
        let p = cx.complete(swap.token).unwrap();
        ib.complete(&mut cx, p, 260);
        let swap = cx.poll_command().expect("step 2 again");
        let p = cx.complete(swap.token).unwrap();
        ib.complete(&mut cx, p, 260);
        let to: Vec<Op> = std::iter::from_fn(|| cx.poll_command())
            .map(|c| c.op)
            .collect();
        let peers: Vec<Rank> = to
            .iter()
            .map(|op| match op {
                Op::Write {
                    peer,
                    signal: Some(s),
                    ..
                } if *s == Signal::Reset.pack() => *peer,
                op => panic!("{op:?}"),
            })
            .collect();
        assert_eq!(peers, [2, 3], "step 3: each blocked sender once, in order");
        assert_eq!(ib.generation, 1);
    }
}
