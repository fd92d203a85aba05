//! The two collectives the start is made of, each a sans-IO state machine over
//! messages: a reduce-and-broadcast up and down a binomial tree ([`TreeReduce`]),
//! and an exclusive scan along the rank string by recursive doubling ([`ExclusiveScan`]).
//!
//! Both are driven alike: a driver hands each message that arrived to `handle_message`
//! and sends what `poll_send` returns, in that order, until `result` is `Some`. Neither
//! waits on time; a peer that never answers is the driver's to name (the start's
//! deadline). Each counts what it moved ([`Traffic`]) for the epoch's figures.

use super::StartError;
use super::wire::{BodyReader, BodyWriter, FieldError, Message, Step};
use crate::Rank;
use std::collections::VecDeque;

/// A value a collective carries: its body on the wire.
pub trait Wire: Clone + std::fmt::Debug {
    /// The value's body.
    fn encode(&self, w: &mut BodyWriter);
    /// A body another rank sent, with every field's range checked.
    fn decode(r: &mut BodyReader<'_>) -> Result<Self, FieldError>;
    /// Checks what depends on the job (a rank below its size).
    fn check(&self, _size: u32) -> Result<(), FieldError> {
        Ok(())
    }
    /// Checks what depends on who sent it (how many ranks its part covers).
    fn check_sender(&self, _sender: Rank, _size: u32) -> Result<(), FieldError> {
        Ok(())
    }
}

/// A value a collective combines. `combine` must be associative, and need not be
/// commutative: both collectives combine the lower ranks' part on the left.
pub trait Combine: Wire {
    /// `self` becomes `self ⊕ right`, `right` covering ranks after `self`'s.
    fn combine(&mut self, right: &Self);
}

/// A message to send: to whom, the step and round (so the slot it lands in), the bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    /// The receiver.
    pub to: Rank,
    /// Its step.
    pub step: Step,
    /// Its round: a child's place, a scan's round.
    pub round: u8,
    /// The whole message, header first.
    pub bytes: Vec<u8>,
}

/// What a rank moved for the start: bytes sent and received (headers included), and
/// messages it sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Bytes sent and received.
    pub bytes: u64,
    /// Messages sent.
    pub messages: u64,
}

impl Traffic {
    /// Both together.
    pub fn plus(self, o: Self) -> Self {
        Self {
            bytes: self.bytes + o.bytes,
            messages: self.messages + o.messages,
        }
    }
}

fn encode_value<V: Wire>(
    step: Step,
    round: u8,
    epoch: u64,
    from: Rank,
    to: Rank,
    v: &V,
) -> Outgoing {
    let mut w = BodyWriter::default();
    v.encode(&mut w);
    Outgoing {
        to,
        step,
        round,
        bytes: Message::encode(step, round, epoch, from, &w.0),
    }
}

fn decode_value<V: Wire>(m: &Message<'_>, size: u32) -> Result<V, StartError> {
    let mut r = BodyReader::new(m.body);
    let v = V::decode(&mut r)
        .and_then(|v| r.finish().map(|()| v))
        .and_then(|v| v.check(size).map(|()| v))
        .and_then(|v| v.check_sender(m.sender, size).map(|()| v));
    v.map_err(|e| StartError::Malformed {
        from: m.sender,
        field: e.field,
        detail: format!("{} ({})", e.detail, m.step.name()),
    })
}

fn unexpected(m: &Message<'_>, detail: String) -> StartError {
    StartError::Unexpected {
        from: m.sender,
        step: m.step.name(),
        detail,
    }
}

/// Depth of the binomial tree of `size` ranks: the edges from the root to the deepest
/// rank, ⌈log₂ size⌉ (0 for one rank).
pub fn tree_depth(size: u32) -> u32 {
    scan_rounds(size)
}

/// The binomial tree's parent of `r`: `r` without its lowest set bit; in a tree cut into
/// subtrees of `levels` levels, none for a subtree's root (a rank with `levels` low
/// zero bits).
fn binomial_parent(r: Rank, levels: u32) -> Option<Rank> {
    (r > 0 && r.trailing_zeros() < levels).then(|| r & (r - 1))
}

/// The binomial tree's children of `r` in a job of `size`, by place j: r + 2^j for every
/// j below `r`'s lowest set bit (every j for the root) and below `levels`. Child j's
/// subtree is the ranks r + 2^j to r + 2^(j+1) − 1, so a rank's subtree is a run of
/// consecutive ranks.
fn binomial_children(r: Rank, size: u32, levels: u32) -> Vec<Rank> {
    let below = if r == 0 { 32 } else { r.trailing_zeros() }.min(levels);
    (0..below)
        .map(|j| u64::from(r) + (1u64 << j))
        .take_while(|&c| c < u64::from(size))
        .map(|c| c as Rank)
        .collect()
}

/// Rounds of an exclusive scan over `size` ranks: ⌈log₂ size⌉.
pub fn scan_rounds(size: u32) -> u32 {
    if size <= 1 {
        0
    } else {
        u32::BITS - (size - 1).leading_zeros()
    }
}

/// A reduce-and-broadcast over a binomial tree (parent of r: r without its lowest set
/// bit): each rank combines its own value with its children's and sends the sum up; at
/// the root the whole job's sum is the driver's ([`Self::take_sum`]), and what the root
/// makes of it ([`Self::broadcast`]: the sum itself, or a decision taken from it) comes
/// back down to every rank. 2 · ⌈log₂ N⌉ rounds on the
/// longest chain; a rank sends and receives at most ⌈log₂ N⌉ + 1 messages.
///
/// Not the termination tree's heap order, because a binomial subtree is a run of
/// consecutive ranks: combined own value first, then the children by place, a subtree's
/// sum is its ranks' in rank order, so a value that is not commutative (whether the
/// ranks' key spans rise along the string) reduces as well as a sum. The order is fixed
/// whatever order the messages come in, and every rank ends with the root's one value:
/// floating-point sums are the same on every rank.
#[derive(Debug)]
pub struct TreeReduce<V, D = V> {
    up: Step,
    /// None: a gather, up only.
    down: Option<Step>,
    /// Levels of the subtrees it reduces over (32: the whole job's tree).
    levels: u32,
    rank: Rank,
    size: u32,
    epoch: u64,
    own: V,
    children: Vec<Rank>,
    from_children: Vec<Option<V>>,
    sent_up: bool,
    /// The job's sum, at the root, until the driver takes it.
    sum: Option<V>,
    result: Option<D>,
    out: VecDeque<Outgoing>,
    traffic: Traffic,
}

impl<V: Combine, D: Wire> TreeReduce<V, D> {
    /// Rank `rank` of `size` joins with `own`, in `epoch`; `up` and `down` name its
    /// messages' steps.
    pub fn new(up: Step, down: Step, rank: Rank, size: u32, epoch: u64, own: V) -> Self {
        Self::over(up, Some(down), u32::BITS, rank, size, epoch, own)
    }

    /// A gather up the job's tree cut into subtrees of `levels` levels (runs of 2^levels
    /// ranks): each subtree's root, a rank with `levels` low zero bits, ends with its
    /// run's sum ([`Self::take_sum`]), and nothing comes down. `levels` rounds.
    pub fn gather(step: Step, levels: u32, rank: Rank, size: u32, epoch: u64, own: V) -> Self {
        Self::over(step, None, levels, rank, size, epoch, own)
    }

    fn over(
        up: Step,
        down: Option<Step>,
        levels: u32,
        rank: Rank,
        size: u32,
        epoch: u64,
        own: V,
    ) -> Self {
        let children = binomial_children(rank, size, levels);
        let mut t = Self {
            up,
            down,
            levels,
            rank,
            size,
            epoch,
            own,
            from_children: vec![None; children.len()],
            children,
            sent_up: false,
            sum: None,
            result: None,
            out: VecDeque::new(),
            traffic: Traffic::default(),
        };
        t.advance();
        t
    }

    /// At the root, once every rank's part is in: the job's sum (once).
    pub fn take_sum(&mut self) -> Option<V> {
        self.sum.take()
    }

    /// At the root: sends `d` down to every rank (this one's result too).
    pub fn broadcast(&mut self, d: D) {
        debug_assert!(self.parent().is_none() && self.sent_up && self.result.is_none());
        self.send_down(&d);
        self.result = Some(d);
    }

    /// A message of this reduce's steps, from `m.sender` (already checked against the
    /// signal's sender and epoch by [`Message::decode`]).
    pub fn handle_message(&mut self, m: &Message<'_>) -> Result<(), StartError> {
        self.traffic.bytes += (super::wire::HEADER + m.body.len()) as u64;
        if m.step == self.up {
            let Some(place) = self.children.iter().position(|&c| c == m.sender) else {
                return Err(unexpected(
                    m,
                    format!("it is not a tree child of rank {}", self.rank),
                ));
            };
            if usize::from(m.round) != place {
                return Err(unexpected(
                    m,
                    format!("it names child place {}, its place is {place}", m.round),
                ));
            }
            if self.from_children[place].is_some() {
                return Err(unexpected(m, "its part arrived twice".into()));
            }
            self.from_children[place] = Some(decode_value(m, self.size)?);
        } else if Some(m.step) == self.down {
            if self.parent() != Some(m.sender) {
                return Err(unexpected(
                    m,
                    format!("it is not the tree parent of rank {}", self.rank),
                ));
            }
            if self.result.is_some() || !self.sent_up {
                return Err(unexpected(
                    m,
                    "the job's sum came before this rank sent its part".into(),
                ));
            }
            let d: D = decode_value(m, self.size)?;
            self.send_down(&d);
            self.result = Some(d);
        } else {
            return Err(unexpected(m, "not a step of this reduce".into()));
        }
        self.advance();
        Ok(())
    }

    fn advance(&mut self) {
        if self.sent_up || self.from_children.iter().any(Option::is_none) {
            return;
        }
        let mut sum = self.own.clone();
        for c in self.from_children.iter().flatten() {
            sum.combine(c);
        }
        self.sent_up = true;
        match self.parent() {
            Some(p) => {
                let place = (self.rank - p).trailing_zeros() as u8;
                self.send(encode_value(self.up, place, self.epoch, self.rank, p, &sum));
            }
            None => self.sum = Some(sum),
        }
    }

    fn send_down(&mut self, v: &D) {
        for i in 0..self.children.len() {
            let c = self.children[i];
            let Some(down) = self.down else { return };
            let o = encode_value(down, 0, self.epoch, self.rank, c, v);
            self.send(o);
        }
    }

    fn send(&mut self, o: Outgoing) {
        self.traffic.bytes += o.bytes.len() as u64;
        self.traffic.messages += 1;
        self.out.push_back(o);
    }

    /// The next message to send.
    pub fn poll_send(&mut self) -> Option<Outgoing> {
        self.out.pop_front()
    }

    /// What the root sent down, once it is here.
    pub fn result(&self) -> Option<&D> {
        self.result.as_ref()
    }

    /// What this rank moved.
    pub fn traffic(&self) -> Traffic {
        self.traffic
    }

    /// Rounds on the longest chain.
    pub fn rounds(&self) -> u32 {
        match self.down {
            Some(_) => 2 * tree_depth(self.size),
            None => tree_depth(self.size).min(self.levels),
        }
    }

    /// The rank's parent in the tree.
    pub fn parent(&self) -> Option<Rank> {
        binomial_parent(self.rank, self.levels)
    }

    /// A gather's part is done: sent up, or at a subtree's root, summed.
    pub fn gathered(&self) -> bool {
        self.sent_up
    }

    /// Whom this rank still waits for, for a stall's message.
    pub fn waiting_for(&self) -> Vec<Rank> {
        if self.result.is_some() {
            return Vec::new();
        }
        if self.sent_up {
            if self.down.is_none() {
                return Vec::new();
            }
            return self.parent().into_iter().collect();
        }
        self.children
            .iter()
            .zip(&self.from_children)
            .filter(|(_, v)| v.is_none())
            .map(|(&c, _)| c)
            .collect()
    }
}

/// An exclusive scan along the rank string by recursive doubling (Hillis and Steele):
/// in round i a rank sends what it has combined so far, the values of ranks
/// max(0, r − 2^i + 1) to r, to rank r + 2^i, and adds what rank r − 2^i sent on its
/// left. After ⌈log₂ N⌉ rounds rank r holds the combination of ranks 0 to r − 1 (none for
/// rank 0). A rank sends and receives at most one message a round.
#[derive(Debug)]
pub struct ExclusiveScan<V> {
    step: Step,
    rank: Rank,
    size: u32,
    epoch: u64,
    rounds: u32,
    /// The round this rank waits in (`rounds`: finished).
    round: u32,
    /// Ranks max(0, r − 2^round + 1) ..= r, combined.
    partial: V,
    /// Ranks max(0, r − 2^round + 1) ..= r − 1, combined (none yet: `None`).
    before: Option<V>,
    /// What arrived for rounds not yet reached.
    early: Vec<Option<V>>,
    out: VecDeque<Outgoing>,
    traffic: Traffic,
}

impl<V: Combine> ExclusiveScan<V> {
    /// Rank `rank` of `size` joins with `own`, in `epoch`; `step` names its messages.
    pub fn new(step: Step, rank: Rank, size: u32, epoch: u64, own: V) -> Self {
        let rounds = scan_rounds(size);
        let mut s = Self {
            step,
            rank,
            size,
            epoch,
            rounds,
            round: 0,
            partial: own,
            before: None,
            early: vec![None; rounds as usize],
            out: VecDeque::new(),
            traffic: Traffic::default(),
        };
        s.send_round();
        s.advance();
        s
    }

    fn send_round(&mut self) {
        if self.round >= self.rounds {
            return;
        }
        let to = u64::from(self.rank) + (1u64 << self.round);
        if to < u64::from(self.size) {
            let o = encode_value(
                self.step,
                self.round as u8,
                self.epoch,
                self.rank,
                to as Rank,
                &self.partial,
            );
            self.traffic.bytes += o.bytes.len() as u64;
            self.traffic.messages += 1;
            self.out.push_back(o);
        }
    }

    /// A message of this scan's step.
    pub fn handle_message(&mut self, m: &Message<'_>) -> Result<(), StartError> {
        self.traffic.bytes += (super::wire::HEADER + m.body.len()) as u64;
        if m.step != self.step {
            return Err(unexpected(m, "not a step of this scan".into()));
        }
        let round = u32::from(m.round);
        if round >= self.rounds {
            return Err(unexpected(
                m,
                format!("round {round} of a scan of {} rounds", self.rounds),
            ));
        }
        if u64::from(m.sender) + (1u64 << round) != u64::from(self.rank) {
            return Err(unexpected(
                m,
                format!(
                    "in round {round} rank {} hears from rank {}",
                    self.rank,
                    i64::from(self.rank) - (1i64 << round)
                ),
            ));
        }
        if round < self.round || self.early[round as usize].is_some() {
            return Err(unexpected(m, format!("round {round} arrived twice")));
        }
        self.early[round as usize] = Some(decode_value(m, self.size)?);
        self.advance();
        Ok(())
    }

    fn advance(&mut self) {
        while self.round < self.rounds {
            let from_left = u64::from(self.rank) >= 1u64 << self.round;
            if from_left {
                let Some(mut left) = self.early[self.round as usize].take() else {
                    return;
                };
                let mut all = left.clone();
                all.combine(&self.partial);
                self.partial = all;
                if let Some(b) = &self.before {
                    left.combine(b);
                }
                self.before = Some(left);
            }
            self.round += 1;
            self.send_round();
        }
    }

    /// The next message to send.
    pub fn poll_send(&mut self) -> Option<Outgoing> {
        self.out.pop_front()
    }

    /// Whether the scan finished here.
    pub fn is_done(&self) -> bool {
        self.round >= self.rounds
    }

    /// Ranks 0 to r − 1 combined, once done (`Some(None)`: rank 0, nothing before it).
    pub fn result(&self) -> Option<Option<&V>> {
        self.is_done().then_some(self.before.as_ref())
    }

    /// What this rank moved.
    pub fn traffic(&self) -> Traffic {
        self.traffic
    }

    /// Rounds on the longest chain.
    pub fn rounds(&self) -> u32 {
        self.rounds
    }

    /// Whom this rank still waits for.
    pub fn waiting_for(&self) -> Vec<Rank> {
        if self.is_done() {
            return Vec::new();
        }
        vec![self.rank - (1 << self.round)]
    }
}
