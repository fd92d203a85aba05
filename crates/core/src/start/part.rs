//! The epoch start inside a node: where its messages and records live in the rank's
//! START segment, the START signal that announces a message, and the operations that
//! carry them. [`super::EpochStart`] decides; this part only moves bytes.
//!
//! A message is written into the slot its receiver keeps for the message's step and
//! round (every rank computes every rank's layout from the job's size), then signalled.
//! A slot is written once a start, by one sender, and never before its owner read it:
//! an epoch start begins only after the epoch before ended everywhere, and a start that
//! follows a repartition start directly passes its facts' reduce only once every rank
//! began it, while the steps before that reduce wrote slots their owners had read before
//! their own facts of the start before (docs/design.md, "A repartition start").
//! Messages that come before this rank began the start they belong to (a rank that saw
//! the epoch end first starts first) wait, as signals, for it.

use super::block::{BLOCK_LEVELS, BLOCK_RANKS, BLOCK_READS_AT_ONCE, BLOCK_RECORD_BYTES};
use super::front::{PARTS_BYTES_MAX, SPAN_RECORD_BYTES};
use super::string::{PUBLISHED_BYTES, STRINGS};
use super::wire::{HEADER, Step, VARINT_BYTES_MAX};
use super::{
    Action, EpochStart, LOAD_RECORD_BYTES, Record, StartCarry, StartError, StartInput,
    StartOutcome, scan_rounds,
};
use crate::layout::seg;
use crate::{CoreError, Loc, Memory, Op, Rank, Time};

/// A scan's or the loads' message at most: header and body.
const SMALL: u64 = 128;
/// The facts' message up the tree at most: header, the job's facts (64 classes) and the
/// front's sums (every sample in a run of its own).
const FACTS_UP: u64 = 7_424;
/// The facts' message down the tree at most.
const FACTS_DOWN: u64 = 1_200;
/// Small records read at once, each into a landing of its own (more wait for one): a
/// diffusion neighbour's load, a giver's read-ahead of deficit records, a span record.
const LANDINGS: u64 = 64;
/// A small record's landing.
const LANDING: u64 = 128;
/// Deficit blocks read at once, each into a landing of its own.
const BLOCK_LANDINGS: u64 = BLOCK_READS_AT_ONCE as u64;
/// A block's gather message up at most: header, the members' count and half a block's
/// deficits.
const DEFICITS_UP: u64 =
    (HEADER + 1 + (BLOCK_RANKS as usize / 2) * STRINGS * VARINT_BYTES_MAX) as u64;

/// Where everything of the start lies in a rank's START segment, the same on every rank
/// of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StartLayout {
    rounds: u64,
}

impl StartLayout {
    pub(crate) fn new(size: u32) -> Self {
        Self {
            rounds: u64::from(scan_rounds(size).max(1)),
        }
    }

    /// Per step: (slots a rank receives, their size; slots it sends from, their size).
    fn shape(&self, step: Step) -> (u64, u64, u64) {
        let l = self.rounds;
        match step {
            Step::SpanScan | Step::StringScan | Step::PlanScan => (l, SMALL, l),
            Step::FactsUp => (l, FACTS_UP, 1),
            Step::FactsDown => (1, FACTS_DOWN, 1),
            Step::LoadsUp => (l, SMALL, 1),
            Step::LoadsDown => (1, SMALL, 1),
            Step::DeficitsUp => (u64::from(BLOCK_LEVELS), DEFICITS_UP, 1),
        }
    }

    /// The receiving slots of `step` (at `round`): offset and room; `None` outside them.
    pub(crate) fn slot(&self, step: Step, round: u8) -> Option<(u64, u64)> {
        let mut at = 0;
        for s in super::wire::STEPS {
            let (n, size, _) = self.shape(s);
            if s == step {
                return (u64::from(round) < n).then(|| (at + u64::from(round) * size, size));
            }
            at += n * size;
        }
        None
    }

    fn inbox_bytes(&self) -> u64 {
        super::wire::STEPS
            .iter()
            .map(|&s| {
                let (n, size, _) = self.shape(s);
                n * size
            })
            .sum()
    }

    /// The sending buffer of `step` at `round` (the down steps' one buffer serves every
    /// child: the same bytes go to each).
    fn outbox(&self, step: Step, round: u8) -> (u64, u64) {
        let mut at = self.inbox_bytes();
        for s in super::wire::STEPS {
            let (_, size, m) = self.shape(s);
            if s == step {
                let i = u64::from(round).min(m - 1);
                return (at + i * size, size);
            }
            at += m * size;
        }
        unreachable!("every step has a buffer")
    }

    fn outbox_bytes(&self) -> u64 {
        super::wire::STEPS
            .iter()
            .map(|&s| {
                let (_, size, m) = self.shape(s);
                m * size
            })
            .sum()
    }

    /// A published record: offset and length at most.
    pub(crate) fn record(&self, r: Record) -> (u64, u64) {
        let base = self.inbox_bytes() + self.outbox_bytes();
        let span = SPAN_RECORD_BYTES as u64;
        let parts = PARTS_BYTES_MAX as u64;
        let string = PUBLISHED_BYTES as u64;
        let load = LOAD_RECORD_BYTES as u64;
        match r {
            Record::Span => (base, span),
            Record::Parts => (base + span, parts),
            Record::String => (base + span + parts, string),
            Record::Load => (base + span + parts + string, load),
            Record::Block(s) => (
                base + span + parts + string + load + u64::from(s) * BLOCK_RECORD_BYTES as u64,
                BLOCK_RECORD_BYTES as u64,
            ),
        }
    }

    fn records_end(&self) -> u64 {
        let (at, len) = self.record(Record::Block(STRINGS as u8 - 1));
        (at + len).next_multiple_of(8)
    }

    /// Where a read of `r` lands here (`i`: which of the small landings, or for a block
    /// [`LANDINGS`] on, which of the blocks'; the parts have one of their own, read one
    /// rank at a time).
    fn landing(&self, r: Record, i: u64) -> (u64, u64) {
        let base = self.records_end();
        let (_, len) = self.record(r);
        let small = base + PARTS_BYTES_MAX as u64;
        match r {
            Record::Parts => (base, len),
            Record::Block(_) => (
                small + LANDINGS * LANDING + (i - LANDINGS) * BLOCK_RECORD_BYTES as u64,
                len,
            ),
            _ => (small + i * LANDING, len),
        }
    }

    /// The segment's bytes.
    pub(crate) fn bytes(&self) -> u64 {
        self.records_end()
            + PARTS_BYTES_MAX as u64
            + LANDINGS * LANDING
            + BLOCK_LANDINGS * BLOCK_RECORD_BYTES as u64
    }
}

/// What a start's operation means.
#[derive(Debug)]
pub(crate) enum Pending {
    /// A message written and signalled, from the outbox at `outbox`.
    Send { to: Rank, outbox: u64 },
    /// A record read into a landing (`load`: which of the small landings it holds).
    Read {
        peer: Rank,
        record: Record,
        landing: u64,
        len: u64,
        load: Option<u64>,
        /// The start that asked (`StartPart::seq`): one that ended leaves reads ahead
        /// still out, and their bytes are not the next start's.
        start: u64,
    },
}

impl Pending {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Self::Send { .. } => "start message",
            Self::Read { .. } => "start record read",
        }
    }

    pub(crate) fn peer(&self) -> Rank {
        match self {
            Self::Send { to: p, .. } | Self::Read { peer: p, .. } => *p,
        }
    }
}

/// The node's start: the layout, what one start carries to the next, the start under
/// way, and its outcome until the driver takes it.
#[derive(Debug)]
pub(crate) struct StartPart {
    layout: StartLayout,
    /// What epoch starts carry from one to the next, and what repartition starts do
    /// (each follows the job's front from its own kind's last: a repartition's summary
    /// must not stand in for the epoch's before it).
    carry: StartCarry,
    plan_carry: StartCarry,
    /// Starts begun, the one under way included.
    seq: u64,
    /// (Boxed, as the outcome: a start's state is kilobytes, and a node spends most of
    /// its life outside one; the simulator holds 100,000 nodes.)
    current: Option<Box<EpochStart>>,
    outcome: Option<Box<Result<StartOutcome, CoreError>>>,
    /// START signals for a start this rank has not begun: (from, start, step, round, len).
    early: Vec<(Rank, u8, u8, u8, u16)>,
    /// Small landings free.
    free: Vec<u64>,
    /// Block landings free.
    free_blocks: Vec<u64>,
    /// Reads waiting for a load landing, in the order asked (the one a search needs
    /// comes before its read-ahead), and of which start.
    waiting: std::collections::VecDeque<(Rank, Record, u64, u64)>,
    /// Outboxes with writes in flight: (offset, writes, the longest message's length).
    /// Once the last write from one completed its bytes are dead until the next message
    /// from it: the simulator frees their pages (a facts-up outbox alone holds kilobytes,
    /// on each of 100,000 simulated ranks).
    sending: Vec<(u64, u32, u64)>,
}

/// What the part wants the node to issue.
pub(crate) type Issue = (Op, Pending);

impl StartPart {
    pub(crate) fn new(size: u32) -> Self {
        Self {
            layout: StartLayout::new(size),
            carry: StartCarry::default(),
            plan_carry: StartCarry::default(),
            seq: 0,
            current: None,
            outcome: None,
            early: Vec::new(),
            free: (0..LANDINGS).rev().collect(),
            free_blocks: (LANDINGS..LANDINGS + BLOCK_LANDINGS).rev().collect(),
            waiting: Default::default(),
            sending: Vec::new(),
        }
    }

    pub(crate) fn bytes(&self) -> u64 {
        self.layout.bytes()
    }

    pub(crate) fn is_running(&self) -> bool {
        self.current.is_some()
    }

    /// The start under way, for a stall's message.
    pub(crate) fn describe(&self) -> Option<String> {
        self.current.as_deref().map(EpochStart::describe)
    }

    /// Begins the next start.
    pub(crate) fn begin(
        &mut self,
        now: Time,
        rank: Rank,
        size: u32,
        input: StartInput,
        mem: &dyn Memory,
        out: &mut Vec<Issue>,
    ) -> Result<(), CoreError> {
        if self.current.is_some() || self.outcome.is_some() {
            return Err(CoreError::Usage(
                "an epoch start while another is under way",
            ));
        }
        self.seq += 1;
        let carry = match input.repartition {
            true => std::mem::take(&mut self.plan_carry).with_grid_of(&self.carry),
            false => std::mem::take(&mut self.carry),
        };
        self.current = Some(Box::new(EpochStart::new(
            now, rank, size, self.seq, input, carry,
        )));
        let early: Vec<_> = std::mem::take(&mut self.early);
        for (from, start, step, round, len) in early {
            self.on_signal(now, from, start, step, round, len, mem, out)?;
        }
        self.pump(mem, out);
        Ok(())
    }

    /// A START signal from `from`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn on_signal(
        &mut self,
        now: Time,
        from: Rank,
        start: u8,
        step: u8,
        round: u8,
        len: u16,
        mem: &dyn Memory,
        out: &mut Vec<Issue>,
    ) -> Result<(), CoreError> {
        let here = self.current.is_some().then_some(self.seq as u8);
        if here != Some(start) {
            if start == (self.seq + 1) as u8 {
                self.early.push((from, start, step, round, len));
                return Ok(());
            }
            return Err(StartError::Malformed {
                from,
                field: "start",
                detail: format!(
                    "a START signal of start {start} (this rank is at {})",
                    self.seq as u8
                ),
            }
            .into());
        }
        let bad = |detail: String| -> CoreError {
            StartError::Malformed {
                from,
                field: "signal",
                detail,
            }
            .into()
        };
        let s = Step::of(step).ok_or_else(|| bad(format!("step {step}")))?;
        let (at, room) = self
            .layout
            .slot(s, round)
            .ok_or_else(|| bad(format!("{} round {round}: no such slot", s.name())))?;
        let len = u64::from(len);
        if len > room || len < HEADER as u64 {
            return Err(bad(format!(
                "a {len}-byte {} message for a {room}-byte slot",
                s.name()
            )));
        }
        let mut bytes = vec![0u8; len as usize];
        mem.read(Loc::new(seg::START, at), &mut bytes);
        // The slot is dead until this sender's message of the next start (which cannot
        // come before this rank ends this one): the simulator frees its pages.
        mem.discard(Loc::new(seg::START, at), len);
        let cur = self.current.as_mut().expect("checked");
        cur.handle_message(from, &bytes);
        cur.note_time(now);
        self.pump(mem, out);
        Ok(())
    }

    /// A start operation completed.
    pub(crate) fn on_complete(
        &mut self,
        now: Time,
        p: Pending,
        mem: &dyn Memory,
        out: &mut Vec<Issue>,
    ) {
        if let Pending::Send { outbox, .. } = p
            && let Some(i) = self.sending.iter().position(|s| s.0 == outbox)
        {
            self.sending[i].1 -= 1;
            if self.sending[i].1 == 0 {
                let (at, _, len) = self.sending.swap_remove(i);
                mem.discard(Loc::new(seg::START, at), len);
            }
        }
        if let Pending::Read {
            peer,
            record,
            landing,
            len,
            load,
            start,
        } = p
        {
            let mut bytes = vec![0u8; len as usize];
            mem.read(Loc::new(seg::START, landing), &mut bytes);
            // Only this rank's next read lands there.
            mem.discard(Loc::new(seg::START, landing), len);
            if let Some(i) = load {
                let block = i >= LANDINGS;
                match block {
                    true => self.free_blocks.push(i),
                    false => self.free.push(i),
                }
                // The next read that waits for a landing of this kind (reads an ended
                // start queued are dropped).
                self.waiting
                    .retain(|w| w.3 == self.seq && self.current.is_some());
                let next = self
                    .waiting
                    .iter()
                    .position(|w| matches!(w.1, Record::Block(_)) == block);
                if let Some((peer, record, len, _)) = next.and_then(|k| self.waiting.remove(k)) {
                    self.issue_read(peer, record, len, out);
                }
            }
            if let Some(cur) = self.current.as_mut().filter(|_| start == self.seq) {
                cur.handle_read(now, peer, record, &bytes);
                cur.note_time(now);
            }
        }
        self.pump(mem, out);
    }

    /// When the start's timer is due.
    pub(crate) fn poll_timeout(&self) -> Option<Time> {
        self.current.as_deref().and_then(EpochStart::poll_timeout)
    }

    /// Timers.
    pub(crate) fn on_timeout(&mut self, now: Time, mem: &dyn Memory, out: &mut Vec<Issue>) {
        if let Some(cur) = self.current.as_mut() {
            cur.handle_timeout(now);
            cur.note_time(now);
        }
        self.pump(mem, out);
    }

    /// The start fails with `e` (the node failed, or another rank's ABORT came).
    pub(crate) fn fail(&mut self, e: CoreError) {
        if let Some(cur) = self.current.take() {
            let plan = cur.is_repartition();
            let (_, carry) = cur.finish();
            *self.carry_of(plan) = carry;
            self.outcome = Some(Box::new(Err(e)));
        }
    }

    fn carry_of(&mut self, repartition: bool) -> &mut StartCarry {
        match repartition {
            true => &mut self.plan_carry,
            false => &mut self.carry,
        }
    }

    /// The start's outcome, once it ended (once).
    pub(crate) fn take_outcome(&mut self) -> Option<Result<StartOutcome, CoreError>> {
        self.outcome.take().map(|o| *o)
    }

    /// The outcome, left in place.
    pub(crate) fn peek_outcome(&self) -> Option<&Result<StartOutcome, CoreError>> {
        self.outcome.as_deref()
    }

    fn issue_read(&mut self, peer: Rank, record: Record, len: u64, out: &mut Vec<Issue>) {
        // Small records land each in a landing of its own (several are read at once);
        // the parts, read one rank at a time, in theirs.
        let free = match record {
            Record::Block(_) => &mut self.free_blocks,
            _ => &mut self.free,
        };
        let load = match record {
            Record::Parts => None,
            _ => match free.pop() {
                Some(i) => Some(i),
                None => {
                    self.waiting.push_back((peer, record, len, self.seq));
                    return;
                }
            },
        };
        let (landing, _) = self.layout.landing(record, load.unwrap_or(0));
        let (remote, _) = self.layout.record(record);
        out.push((
            Op::Read {
                peer,
                remote: Loc::new(seg::START, remote),
                local: Loc::new(seg::START, landing),
                len,
            },
            Pending::Read {
                peer,
                record,
                landing,
                len,
                load,
                start: self.seq,
            },
        ));
    }

    /// Moves the start's actions out as operations; ends the start once it is over.
    fn pump(&mut self, mem: &dyn Memory, out: &mut Vec<Issue>) {
        let Some(cur) = self.current.as_mut() else {
            return;
        };
        let seq = self.seq as u8;
        let mut reads = Vec::new();
        while let Some(a) = cur.poll_action() {
            match a {
                Action::Send(o) => {
                    let (at, room) = self.layout.outbox(o.step, o.round);
                    let (to, _) = self.layout.slot(o.step, o.round).expect("a step's slot");
                    debug_assert!(
                        o.bytes.len() as u64 <= room,
                        "{} bytes for {room}",
                        o.bytes.len()
                    );
                    mem.write(Loc::new(seg::START, at), &o.bytes);
                    let len = o.bytes.len() as u64;
                    match self.sending.iter_mut().find(|s| s.0 == at) {
                        Some(s) => *s = (at, s.1 + 1, s.2.max(len)),
                        None => self.sending.push((at, 1, len)),
                    }
                    let sig = crate::layout::signal::Signal::Start {
                        start: seq,
                        step: o.step.code(),
                        round: o.round,
                        len: o.bytes.len() as u16,
                    };
                    out.push((
                        Op::Write {
                            peer: o.to,
                            remote: Loc::new(seg::START, to),
                            pieces: vec![(Loc::new(seg::START, at), o.bytes.len() as u64)],
                            signal: Some(sig.pack()),
                        },
                        Pending::Send {
                            to: o.to,
                            outbox: at,
                        },
                    ));
                }
                Action::Publish(r, bytes) => {
                    let (at, room) = self.layout.record(r);
                    debug_assert!(bytes.len() as u64 <= room);
                    mem.write(Loc::new(seg::START, at), &bytes);
                }
                Action::Read { peer, record, len } => reads.push((peer, record, len)),
            }
        }
        for (peer, record, len) in reads {
            self.issue_read(peer, record, len, out);
        }
        let cur = self.current.as_ref().expect("checked");
        if cur.is_over() {
            let plan = cur.is_repartition();
            let (r, carry) = self.current.take().expect("checked").finish();
            *self.carry_of(plan) = carry;
            self.outcome = Some(Box::new(r.map_err(CoreError::from)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ctx::testing::{Discards, Mem};
    use crate::layout::signal::Signal;

    /// A start message's slot is dead once read (until its sender's message of the next
    /// start), a record's landing once its read completed, and a message's outbox once
    /// its write completed: all are discarded, so memory that costs what it holds frees
    /// them. Two ranks run a whole start over plain memory; every slot and landing read
    /// and every outbox written from is discarded, with its length.
    #[test]
    fn read_slots_landings_and_sent_outboxes_are_discarded() {
        let mut parts = [StartPart::new(2), StartPart::new(2)];
        let bytes = parts[0].bytes();
        let mems = [0, 1].map(|_| Discards::new(Mem::new([0, 0, 0, bytes])));
        let mut outs: [Vec<Issue>; 2] = Default::default();
        for (r, part) in parts.iter_mut().enumerate() {
            let input = StartInput {
                tasks: 3 + r,
                ..StartInput::default()
            };
            part.begin(Time(0), r as Rank, 2, input, &mems[r], &mut outs[r])
                .unwrap();
        }
        // What each rank read (its slots and landings) and sent from (its outboxes), to
        // find among its discards.
        let mut read: [Vec<(Loc, u64)>; 2] = Default::default();
        let mut now = 0;
        while parts.iter().any(StartPart::is_running) {
            now += 1;
            let Some(r) = (0..2).find(|&r| !outs[r].is_empty()) else {
                let r = (0..2).find(|&r| parts[r].is_running()).unwrap();
                let at = parts[r]
                    .poll_timeout()
                    .expect("a waiting start has a timer");
                now = now.max(at.0);
                parts[r].on_timeout(Time(now), &mems[r], &mut outs[r]);
                continue;
            };
            let (op, pending) = outs[r].remove(0);
            let from = r as Rank;
            match op {
                Op::Write {
                    peer,
                    remote,
                    pieces,
                    signal,
                } => {
                    let p = peer as usize;
                    let mut at = remote.offset;
                    for (l, len) in pieces {
                        let mut b = vec![0u8; len as usize];
                        mems[r].read(l, &mut b);
                        read[r].push((l, len));
                        mems[p].write(Loc::new(remote.segment, at), &b);
                        at += len;
                    }
                    parts[r].on_complete(Time(now), pending, &mems[r], &mut outs[r]);
                    let Ok(Signal::Start {
                        start,
                        step,
                        round,
                        len,
                    }) = Signal::unpack(signal.expect("signalled"), from)
                    else {
                        panic!("a START signal");
                    };
                    read[p].push((remote, u64::from(len)));
                    parts[p]
                        .on_signal(
                            Time(now),
                            from,
                            start,
                            step,
                            round,
                            len,
                            &mems[p],
                            &mut outs[p],
                        )
                        .unwrap();
                }
                Op::Read {
                    peer,
                    remote,
                    local,
                    len,
                } => {
                    let mut b = vec![0u8; len as usize];
                    mems[peer as usize].read(remote, &mut b);
                    mems[r].write(local, &b);
                    read[r].push((local, len));
                    parts[r].on_complete(Time(now), pending, &mems[r], &mut outs[r]);
                }
                op => panic!("a start issues writes and reads, not {op:?}"),
            }
        }
        for r in 0..2 {
            assert!(
                matches!(parts[r].peek_outcome(), Some(Ok(_))),
                "rank {r}: {:?}",
                parts[r].peek_outcome()
            );
            assert!(!read[r].is_empty(), "rank {r} read something");
            let mut discarded = mems[r].1.take();
            let mut wanted = read[r].clone();
            discarded.sort_by_key(|&(l, n)| (l.offset, n));
            wanted.sort_by_key(|&(l, n)| (l.offset, n));
            assert_eq!(
                discarded, wanted,
                "rank {r}: each read's and sent bytes, once"
            );
        }
    }

    /// A read that an ended start left out (read ahead, not needed) comes back during
    /// the next start: its bytes are the old start's, and the new one must not take
    /// them (here it would fail: a span record in its span scan is out of turn).
    #[test]
    fn a_read_an_ended_start_left_out_is_not_handed_to_the_next() {
        let mut part = StartPart::new(2);
        let mem = Mem::new([0, 0, 0, part.bytes()]);
        let mut out = Vec::new();
        let input = StartInput {
            tasks: 1,
            ..StartInput::default()
        };
        part.begin(Time(0), 0, 2, input, &mem, &mut out).unwrap();
        assert!(part.is_running(), "rank 0 waits for rank 1's scan message");
        let (landing, len) = part.layout.landing(Record::Span, 0);
        let stale = Pending::Read {
            peer: 1,
            record: Record::Span,
            landing,
            len,
            load: None,
            start: part.seq - 1,
        };
        part.on_complete(Time(1), stale, &mem, &mut out);
        assert!(part.is_running(), "{:?}", part.peek_outcome());
        assert!(part.peek_outcome().is_none());
        // The same read of this start's is taken, and refused: a span record is not read
        // in the span scan.
        let fresh = Pending::Read {
            peer: 1,
            record: Record::Span,
            landing,
            len,
            load: None,
            start: part.seq,
        };
        part.on_complete(Time(2), fresh, &mem, &mut out);
        assert!(
            matches!(part.peek_outcome(), Some(Err(_))),
            "{:?}",
            part.peek_outcome()
        );
    }
}
