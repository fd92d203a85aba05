//! The context every part of a node works in: the configuration, who this rank is, the
//! time, the epoch, the figures it counts, and the one way to act on the world — issuing
//! a remote operation ([`Ctx::issue`]).
//!
//! A part names what each of its operations means with its own `Pending` type; `Ctx` is
//! generic over the node's union of them (`P: From<part::Pending>`), so it knows nothing
//! of the parts and a part can be driven alone with a `Ctx` of its own `Pending`. The
//! node takes a completion back out ([`Ctx::complete`]) and hands it to the part whose
//! tag it carries. Tokens are issued in order, so the operations a node issues — the
//! driver's input — are exactly the sequence of `issue` calls.

use crate::layout::seg;
use crate::layout::signal::Signal;
use crate::{Command, Config, Loc, Op, Rank, Stats, Time, Token};
use std::collections::VecDeque;

/// Operations in flight, by token. Tokens are issued in order and mostly complete in
/// order, so a window of slots from the oldest outstanding token serves insert and remove
/// in O(1) without hashing (the simulator handles hundreds of millions of them).
#[derive(Debug)]
struct InFlight<P> {
    /// Token of `slots[0]`.
    base: u64,
    slots: VecDeque<Option<P>>,
    len: usize,
}

impl<P> InFlight<P> {
    fn new() -> Self {
        Self {
            base: 0,
            slots: VecDeque::new(),
            len: 0,
        }
    }

    /// Records `token`, the newest issued (tokens only grow).
    fn push(&mut self, token: u64, p: P) {
        if self.slots.is_empty() {
            self.base = token;
        }
        debug_assert_eq!(
            token,
            self.base + self.slots.len() as u64,
            "tokens in order"
        );
        self.slots.push_back(Some(p));
        self.len += 1;
    }

    /// Takes `token` out, if it is in flight.
    fn remove(&mut self, token: u64) -> Option<P> {
        let i = usize::try_from(token.checked_sub(self.base)?).ok()?;
        let p = self.slots.get_mut(i)?.take()?;
        self.len -= 1;
        while self.slots.front().is_some_and(Option::is_none) {
            self.slots.pop_front();
            self.base += 1;
        }
        if self.slots.is_empty() {
            shrink_drained(&mut self.slots);
        }
        Some(p)
    }
}

/// Entries a drained queue keeps room for.
const KEPT: usize = 16;

/// Gives back the room of a queue drained after a burst (an idle rank's signal to each of
/// its ~60 peers): kept, it was 8 KiB a node for good, a tenth of a simulated rank.
fn shrink_drained<T>(q: &mut VecDeque<T>) {
    if q.capacity() > 4 * KEPT {
        q.shrink_to(KEPT);
    }
}

/// A node's context, handed `&mut` to each part with every input.
#[derive(Debug)]
pub(crate) struct Ctx<P> {
    /// Tunables (the same on every rank).
    pub(crate) cfg: Config,
    /// This rank.
    pub(crate) rank: Rank,
    /// Ranks in the job.
    pub(crate) size: u32,
    /// The time of the input being handled.
    pub(crate) now: Time,
    /// The current epoch (from 1; 0 before the first).
    pub(crate) epoch: u64,
    /// When the current epoch started here.
    pub(crate) started: Time,
    /// This epoch's figures.
    pub(crate) stats: Stats,
    commands: VecDeque<Command>,
    /// Each operation's tag, when it was issued and its kind ([`crate::stats::OP_KINDS`]).
    in_flight: InFlight<(P, Time, u8)>,
    next_token: u64,
}

impl<P> Ctx<P> {
    pub(crate) fn new(cfg: Config, rank: Rank, size: u32) -> Self {
        Self {
            cfg,
            rank,
            size,
            now: Time(0),
            epoch: 0,
            started: Time(0),
            stats: Stats::default(),
            commands: VecDeque::new(),
            in_flight: InFlight::new(),
            next_token: 1,
        }
    }

    /// Queues `op`; its completion will come back tagged `pending`.
    pub(crate) fn issue(&mut self, op: Op, pending: impl Into<P>) -> Token {
        let token = Token(self.next_token);
        self.next_token += 1;
        let kind = crate::stats::op_kind(&op, self.rank) as u8;
        self.in_flight
            .push(token.0, (pending.into(), self.now, kind));
        self.commands.push_back(Command { token, op });
        self.stats.ops += 1;
        token
    }

    /// Sends `sig` (a write of nothing) to `peer`.
    pub(crate) fn signal(&mut self, peer: Rank, sig: Signal, pending: impl Into<P>) {
        self.issue(
            Op::Write {
                peer,
                remote: Loc::new(seg::INBOX, 0),
                pieces: Vec::new(),
                signal: Some(sig.pack()),
            },
            pending,
        );
    }

    /// Loads what every input reads first: the operations in flight and the commands (a
    /// cache hint, [`crate::Node::touch`]; the value means nothing).
    pub(crate) fn touch(&self) -> usize {
        let first = self.in_flight.slots.front().is_some_and(Option::is_some);
        self.in_flight.len + usize::from(first) + self.commands.len() + self.now.0 as usize
    }

    /// The next command for the driver.
    pub(crate) fn poll_command(&mut self) -> Option<Command> {
        let c = self.commands.pop_front();
        if c.is_none() {
            shrink_drained(&mut self.commands);
        }
        c
    }

    /// Whether commands wait for the driver.
    pub(crate) fn has_commands(&self) -> bool {
        !self.commands.is_empty()
    }

    /// Forgets the commands not yet polled (the epoch failed: they never run).
    pub(crate) fn drop_commands(&mut self) {
        self.commands.clear();
    }

    /// The tag of `token`'s operation, which has completed; `None` if it is not in flight.
    pub(crate) fn complete(&mut self, token: Token) -> Option<P> {
        let (p, issued, kind) = self.in_flight.remove(token.0)?;
        // This epoch's figures: an operation issued in the last one counted there.
        if issued >= self.started {
            let l = &mut self.stats.op_latency[usize::from(kind)];
            l.count += 1;
            l.ns += self.now.0.saturating_sub(issued.0);
        }
        Some(p)
    }

    /// Operations in flight.
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.len
    }

    /// Tags of the operations in flight, oldest first.
    pub(crate) fn pending(&self) -> impl Iterator<Item = &P> {
        self.in_flight.slots.iter().flatten().map(|(p, _, _)| p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SegmentId;

    /// A burst (an idle rank signals each of its peers) leaves no room behind once it
    /// drained: a simulated job holds 100,000 contexts.
    #[test]
    fn a_drained_burst_gives_its_room_back() {
        let mut cx: Ctx<u32> = Ctx::new(Config::default(), 0, 200);
        let tokens: Vec<Token> = (1..=150)
            .map(|p| {
                cx.issue(
                    Op::Write {
                        peer: p,
                        remote: Loc::new(SegmentId(1), 0),
                        pieces: Vec::new(),
                        signal: Some(0),
                    },
                    p,
                )
            })
            .collect();
        while cx.poll_command().is_some() {}
        assert!(cx.commands.capacity() <= 4 * KEPT);
        for (t, p) in tokens.into_iter().zip(1..) {
            assert_eq!(cx.complete(t), Some(p));
        }
        assert!(cx.in_flight.slots.capacity() <= 4 * KEPT);
        assert_eq!(cx.in_flight(), 0);
    }

    #[test]
    fn tokens_come_back_with_their_tags_in_any_order() {
        let mut cx: Ctx<&'static str> = Ctx::new(Config::default(), 0, 2);
        let read = |peer| Op::Read {
            peer,
            remote: Loc::new(SegmentId(0), 0),
            local: Loc::new(SegmentId(0), 0),
            len: 8,
        };
        let a = cx.issue(read(1), "a");
        let b = cx.issue(read(1), "b");
        cx.signal(1, Signal::Up { wave: 0 }, "c");
        assert_eq!(cx.stats.ops, 3);
        assert_eq!(cx.poll_command().map(|c| c.token), Some(a));
        assert_eq!(cx.complete(b), Some("b"));
        assert_eq!(cx.complete(b), None, "a token completes once");
        assert_eq!(cx.in_flight(), 2);
        assert_eq!(cx.pending().copied().collect::<Vec<_>>(), ["a", "c"]);
        cx.now = Time(5_000);
        assert_eq!(cx.complete(a), Some("a"));
        cx.drop_commands();
        assert!(!cx.has_commands());
        assert_eq!(cx.in_flight(), 1, "dropped commands stay in flight");
        // Each kind counts its completions and their time since issue (a at 0, b too).
        let read = crate::OP_KINDS.iter().position(|&k| k == "read").unwrap();
        assert_eq!(cx.stats.op_latency[read].count, 2);
        assert_eq!(cx.stats.op_latency[read].mean_ns(), 2_500.0);
        cx.issue(
            Op::FetchAdd {
                peer: 0,
                remote: Loc::new(SegmentId(0), 0),
                delta: 1,
            },
            "own",
        );
        let d = cx.poll_command().unwrap().token;
        cx.now = Time(5_700);
        cx.complete(d);
        let own = crate::OP_KINDS.iter().position(|&k| k == "own").unwrap();
        assert_eq!(
            (cx.stats.op_latency[own].count, cx.stats.op_latency[own].ns),
            (1, 700)
        );
        let signal = crate::OP_KINDS.iter().position(|&k| k == "signal").unwrap();
        assert_eq!(cx.stats.op_latency[signal].count, 0, "c is still in flight");
        // A new epoch: c, issued in the last one, completes without counting in this one.
        cx.started = Time(6_000);
        cx.now = Time(6_500);
        assert_eq!(cx.complete(Token(3)), Some("c"), "a, b, then c's token");
        assert_eq!(cx.stats.op_latency[signal].count, 0);
    }
}

/// What a part's unit tests drive it with.
#[cfg(test)]
pub(crate) mod testing {
    use crate::{Loc, Memory};
    use std::cell::RefCell;

    /// The property tests' configuration: `PROPTEST_CASES` cases (64 by default;
    /// `PROPTEST_CASES=1000000` is the long hunt by hand), no regression files written.
    pub(crate) fn proptest_config() -> proptest::test_runner::Config {
        proptest::test_runner::Config {
            cases: std::env::var("PROPTEST_CASES")
                .ok()
                .and_then(|c| c.parse().ok())
                .unwrap_or(64),
            failure_persistence: None,
            ..proptest::test_runner::Config::default()
        }
    }

    /// Segments of plain bytes.
    pub(crate) struct Mem(RefCell<Vec<Vec<u8>>>);

    impl Mem {
        /// Segments of these sizes (any left out are empty).
        pub(crate) fn new<const N: usize>(sizes: [u64; N]) -> Self {
            Self(RefCell::new(
                sizes.iter().map(|&n| vec![0; n as usize]).collect(),
            ))
        }
    }

    impl Memory for Mem {
        fn read(&self, loc: Loc, buf: &mut [u8]) {
            let at = loc.offset as usize;
            buf.copy_from_slice(&self.0.borrow()[usize::from(loc.segment.0)][at..at + buf.len()]);
        }
        fn write(&self, loc: Loc, data: &[u8]) {
            let at = loc.offset as usize;
            self.0.borrow_mut()[usize::from(loc.segment.0)][at..at + data.len()]
                .copy_from_slice(data);
        }
    }

    /// [`Mem`] that records every discard (the bytes stay as they were).
    pub(crate) struct Discards(pub(crate) Mem, pub(crate) RefCell<Vec<(Loc, u64)>>);

    impl Discards {
        pub(crate) fn new(mem: Mem) -> Self {
            Self(mem, RefCell::new(Vec::new()))
        }
    }

    impl Memory for Discards {
        fn read(&self, loc: Loc, buf: &mut [u8]) {
            self.0.read(loc, buf);
        }
        fn write(&self, loc: Loc, data: &[u8]) {
            self.0.write(loc, data);
        }
        fn discard(&self, loc: Loc, len: u64) {
            self.1.borrow_mut().push((loc, len));
        }
    }
}
