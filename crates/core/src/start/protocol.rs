//! One rank's epoch start, end to end: the phases in order, each a collective or a
//! search from this module's parts, and what they hand the epoch.
//!
//! 1. **Span scan** ([`Step::SpanScan`], ⌈log₂ N⌉ rounds): the greatest key the ranks
//!    before this one measured. The rank then publishes its span record and parts (for
//!    others' front windows) and knows whether its span rises.
//! 2. **Facts** ([`Step::FactsUp`] / [`Step::FactsDown`], 2·⌈log₂ N⌉ rounds): the job's
//!    facts and the front's summary reduce to rank 0, which decides the front's movement
//!    and sends both down. A refusal or an empty job ends the start here, alike on
//!    every rank.
//! 3. **Window** (reads, only where the costs moved): the parts the rank's sources lie in;
//!    its load (and split) follow the front.
//! 4. **Loads** ([`Step::LoadsUp`] / [`Step::LoadsDown`], only where the costs moved and
//!    the string plan runs): the job's loads after the front, for the string's means.
//! 5. **String** ([`Step::StringScan`] and reads): the prefix scan, the rank's deficit
//!    record published, and a giver's receivers found. Alongside the scan, each block's
//!    own deficits gather at its leader ([`Step::DeficitsUp`], `start/block.rs`), which
//!    publishes them as one record for the givers' walks.
//! 6. **Neighbours** (reads, the neighbours' diffusion plan): each diffusion neighbour's
//!    published load.
//!
//! A repartition start ([`StartInput::repartition`], `crate::repartition`) runs 1–3,
//! then the loads after the front where the costs moved (4, as a barrier too: every
//! rank's window reads are done before any rank leaves, so the next start's records
//! cannot overwrite a record still to be read), and ends with the **plan scan**
//! ([`Step::PlanScan`], ⌈log₂ N⌉ rounds): the loads before this rank, so its
//! [`StringPosition`].
//!
//! Sans-IO: messages in through [`EpochStart::handle_message`], reads' bytes through
//! [`EpochStart::handle_read`], time through [`EpochStart::handle_timeout`]; what to
//! send, publish or read out through [`EpochStart::poll_action`]. A record read before
//! its owner published it (another start's) is read again a little later; a start not
//! done within its input's timeout fails naming the ranks it waits for.

use super::block::{
    BLOCK_LEVELS, BLOCK_RANKS, BLOCK_READS_AT_ONCE, BLOCK_RECORD_BYTES, BlockRecord, DeficitRun,
    block_leader,
};
use super::front::{
    FrontDecision, FrontRoot, FrontSums, Grid, SPAN_RECORD_BYTES, SpanOrder, SpanRecord,
    WindowRead, WindowSearch, decode_measured,
};
use super::search::bisection_points;
use super::string::{
    PUBLISHED_BYTES, Prefix, Published, RankSplit, RankString, ReceiverSearch, STRINGS,
};
use super::wire::{BodyReader, BodyWriter, FieldError, Message, Step};
use super::{Combine, ExclusiveScan, JobFacts, Outgoing, StartError, TreeReduce, Wire};
use crate::repartition::StringPosition;
use crate::{FrontWindow, LoadClasses, Movement, Rank, RankProfile, Time};
use std::collections::VecDeque;
use std::time::Duration;

mod phases;
mod records;

pub use records::*;

/// The first wait before a record read too early is read again; it doubles up to
/// [`RETRY_MAX`]: a record whose owner is late by W is read about log₂(W / 20 µs) + W / 2 ms
/// times (32 processes on 2 cores wait tens of milliseconds for one: at 50 µs a giver
/// read one record 90 times, 6 KB of its start).
const RETRY_FIRST: Duration = Duration::from_micros(20);
const RETRY_MAX: Duration = Duration::from_millis(2);
/// Probes of a walk's gallop read at once, across ranks with no deficit: a gap of up to
/// 2^8 blocks in one round.
const GALLOP_AHEAD: u32 = 8;
/// Records a walk reads at once, rank by rank, through a block its leader had not yet
/// published.
const LATE_AHEAD: usize = 8;
/// A bisection whose bracket lies within this many deficit blocks reads them all at once.
const BISECT_BLOCKS: u32 = 4;
/// Rounds of a search's bisection read at once: 15 reads, one round trip for four
/// rounds (the bisection's probes are first contacts: at 1,024 simulated ranks a pile's
/// giver made 9 of them one after another, 9 ms of a 14 ms start).
const BISECTION_LEVELS: u32 = 4;
/// A window's search reads further ahead: its bisection six rounds at once (63 span
/// records, within the start's landings), its walk 32 records. The slowest window of a
/// start holds up every rank's loads (a reduce over the tree): at 3,584 simulated ranks,
/// read four rounds and 8 records at a time, one took 6.2 ms, six rounds of first
/// contacts.
const WINDOW_LEVELS: u32 = 6;
const WINDOW_AHEAD: u32 = 32;

/// What a rank brings to its start.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StartInput {
    /// Its tasks.
    pub tasks: usize,
    /// It refused them (a key given twice).
    pub refused: bool,
    /// Its predicted load from its own history (`None`: none).
    pub load: Option<u64>,
    /// Its predicted load per cost class.
    pub classes: LoadClasses,
    /// Its keys now, and what it measured in the epoch before.
    pub profile: RankProfile,
    /// The string plan runs (diffusion on, `DiffusionPlan::String`).
    pub string_plan: bool,
    /// Its diffusion neighbours, for the neighbours' plan (empty: none wanted).
    pub neighbours: Vec<Rank>,
    /// How long the start may wait for its peers before it fails naming them (`None`:
    /// as long as they live; the driver's liveness sweeps name a dead one).
    pub timeout: Option<Duration>,
    /// It plans a repartition instead of starting an epoch: it ends with the rank's
    /// place in the string ([`StartOutcome::position`]), with no string plan and no
    /// neighbours' loads. Every rank's start of the same number must agree.
    pub repartition: bool,
    /// Its caller gave cost hints: it predicts from its own costs where the job's costs
    /// moved, with no window over the front (`drive::own_costs`).
    pub hinted: bool,
}

/// What a rank keeps from one start to the next: the grid the next summary samples on,
/// and at rank 0 the front's summary of the epoch before.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StartCarry {
    grid: Option<Grid>,
    root: FrontRoot,
}

impl StartCarry {
    /// This carry, sampling on `other`'s grid where it has none of its own: a kind of
    /// start's first summary (a repartition's after the epochs' first) is then on the
    /// grid of the keys the ranks held, so the next one of its kind can compare with it.
    pub(crate) fn with_grid_of(mut self, other: &StartCarry) -> Self {
        if self.grid.is_none() {
            self.grid = other.grid;
        }
        self
    }
}

/// A start's phases, in order, as [`StartFigures::phase_ns`] counts them.
pub const START_PHASES: [&str; 8] = [
    "span scan",
    "facts",
    "window",
    "loads",
    "string scan",
    "plan scan",
    "receivers",
    "neighbours",
];

/// The phases that took any time of `phase_ns` ([`StartFigures::phase_ns`]), named, in
/// order.
pub fn phases_named(
    phase_ns: &[u64; START_PHASES.len()],
) -> impl Iterator<Item = (&'static str, u64)> + '_ {
    START_PHASES
        .into_iter()
        .zip(phase_ns.iter().copied())
        .filter(|p| p.1 > 0)
}

/// A start's figures (the JSON keys `start_bytes`, `start_messages`, `start_rounds`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StartFigures {
    /// Bytes sent, received and read.
    pub bytes: u64,
    /// Messages sent and records read.
    pub messages: u64,
    /// Rounds on this rank's longest chain: the collectives' rounds and its reads one
    /// after another (reads issued together, a search's read-ahead, are one round).
    pub rounds: u64,
    /// Time in each phase ([`START_PHASES`]), ns, on the driver's clock: from the input
    /// that moved the start into it to the one that moved it on. Which phase a slow
    /// start waited in (a search's first contacts, a collective held up by a late rank).
    pub phase_ns: [u64; START_PHASES.len()],
    /// Of `bytes`, those in each phase ([`START_PHASES`]): which step carried a heavy
    /// start's bytes (a giver's receivers, a window's reads).
    pub phase_bytes: [u64; START_PHASES.len()],
}

/// What a start hands the epoch: with what the rank brought to it, enough to hold every
/// rank's start to the whole job's plan (a test over real ranks does).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StartOutcome {
    /// What the rank brought.
    pub input: StartInput,
    /// The job's facts (from the ranks' own predictions).
    pub facts: JobFacts,
    /// How the job's costs moved.
    pub movement: Movement,
    /// The last densities over this rank's sources, where the costs moved.
    pub window: Option<FrontWindow>,
    /// This rank's predicted load after the front.
    pub load: Option<u64>,
    /// Its part of the string plan.
    pub string: Option<RankString>,
    /// Its diffusion neighbours' loads (those that predicted one).
    pub neighbour_loads: Vec<(Rank, u64)>,
    /// A repartition start's: where the rank stands in the string, its load after the
    /// front (0 where it predicted none) among every rank's (`None`: every rank empty).
    pub position: Option<StringPosition>,
    /// The figures.
    pub figures: StartFigures,
}

/// A record a rank publishes in its own segment for others to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Record {
    /// Its span record ([`SpanRecord`]).
    Span,
    /// Its parts, after the span record.
    Parts,
    /// Its deficit intervals ([`Published`]).
    String,
    /// Its predicted load ([`LoadRecord`]).
    Load,
    /// A block leader's: its block's deficit intervals on one string ([`BlockRecord`]).
    Block(u8),
}

/// What the start asks its driver to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Write this message to its receiver's slot and signal it.
    Send(Outgoing),
    /// Write these bytes to this rank's own record.
    Publish(Record, Vec<u8>),
    /// Read `len` bytes of `peer`'s record; hand them back with
    /// [`EpochStart::handle_read`].
    Read {
        /// Whose.
        peer: Rank,
        /// Which.
        record: Record,
        /// How many bytes.
        len: u64,
    },
}

/// Where a start is.
#[derive(Debug)]
enum Phase {
    SpanScan(ExclusiveScan<SpanOrder>),
    Facts(Box<TreeReduce<FactsUp, FactsDown>>),
    Window(WindowSearch),
    Loads(TreeReduce<StringSums>),
    /// The scan, and the block's gather of own deficits.
    StringScan(ExclusiveScan<Prefix>, Box<TreeReduce<DeficitRun>>),
    /// The scan, and the job's load after the front it places this rank's within.
    PlanScan(ExclusiveScan<LoadSum>, u128),
    Receivers {
        searches: Vec<ReceiverSearch>,
        at: usize,
    },
    Neighbours {
        waiting: Vec<Rank>,
    },
    Done,
}

/// One rank's start (module docs).
#[derive(Debug)]
pub struct EpochStart {
    rank: Rank,
    size: u32,
    seq: u64,
    input: StartInput,
    carry: StartCarry,
    phase: Phase,
    began: Time,
    /// The phase being timed ([`START_PHASES`]; None once over) and since when.
    timed: Option<usize>,
    timed_since: Time,
    out: VecDeque<Action>,
    /// Messages that came for a later phase.
    early: Vec<(Rank, Vec<u8>)>,
    /// Reads to issue again at the time given.
    retry: Vec<(Time, Rank, Record, u64)>,
    backoff: Duration,
    // What the phases found.
    reach_before: SpanOrder,
    facts: Option<JobFacts>,
    movement: Movement,
    window: Option<FrontWindow>,
    load: Option<u64>,
    split: Option<(u8, Option<(u64, u64)>)>,
    means: [u64; STRINGS],
    own_prefix: Prefix,
    string: Option<RankString>,
    neighbour_loads: Vec<(Rank, u64)>,
    /// A repartition's: the rank's place in the string.
    position: Option<StringPosition>,
    figures: StartFigures,
    /// Rounds of reads one after another in the current search.
    chain: u64,
    /// Reads issued and not yet back.
    reads_out: u32,
    /// Deficit records read this start, and those on their way: a giver walking on from
    /// one receiver to the next reads the next few at once.
    records: std::collections::HashMap<Rank, Published>,
    records_out: std::collections::HashSet<Rank>,
    /// Deficit intervals read from blocks, by rank and string (a block was read where its
    /// leader's is here); the blocks (by leader and string) on their way, and those that
    /// read as not yet published.
    from_blocks: std::collections::HashMap<(Rank, u8), (u128, u128)>,
    blocks_out: std::collections::HashSet<(Rank, u8)>,
    blocks_unpublished: std::collections::HashSet<(Rank, u8)>,
    /// Ranks whose deficit record read as not yet published: a read-ahead leaves them
    /// until a search needs them (then the retry's back-off paces the reads).
    unpublished: std::collections::HashSet<Rank>,
    /// Span records read this start (a window's), and those on their way.
    spans: std::collections::HashMap<Rank, SpanRecord>,
    spans_out: std::collections::HashSet<Rank>,
    /// A window's parts read is out.
    parts_out: bool,
    error: Option<StartError>,
}

impl EpochStart {
    /// Rank `rank` of `size` begins its `seq`-th start at `now` with `input`, carrying
    /// `carry` from the start before.
    pub fn new(
        now: Time,
        rank: Rank,
        size: u32,
        seq: u64,
        input: StartInput,
        carry: StartCarry,
    ) -> Self {
        let last = &input.profile.last.span;
        let own_reach = SpanOrder {
            reach: (last.count > 0).then_some(last.hi),
        };
        let mut s = Self {
            rank,
            size,
            seq,
            phase: Phase::SpanScan(ExclusiveScan::new(
                Step::SpanScan,
                rank,
                size,
                seq,
                own_reach,
            )),
            input,
            carry,
            began: now,
            timed: Some(0),
            timed_since: now,
            out: VecDeque::new(),
            early: Vec::new(),
            retry: Vec::new(),
            backoff: RETRY_FIRST,
            reach_before: SpanOrder::default(),
            facts: None,
            movement: Movement::default(),
            window: None,
            load: None,
            split: None,
            means: [0; STRINGS],
            own_prefix: Prefix::default(),
            string: None,
            neighbour_loads: Vec::new(),
            position: None,
            figures: StartFigures::default(),
            chain: 0,
            reads_out: 0,
            records: Default::default(),
            records_out: Default::default(),
            from_blocks: Default::default(),
            blocks_out: Default::default(),
            blocks_unpublished: Default::default(),
            unpublished: Default::default(),
            spans: Default::default(),
            spans_out: Default::default(),
            parts_out: false,
            error: None,
        };
        s.pump();
        s.note_time(now);
        s
    }

    /// The driver's clock after an input: the time since the last phase change goes to
    /// the phase the start was in, if it has moved on (to the next or past several).
    pub fn note_time(&mut self, now: Time) {
        let phase = self.phase_index();
        if phase == self.timed {
            return;
        }
        if let Some(i) = self.timed {
            self.figures.phase_ns[i] += now.since(self.timed_since).as_nanos() as u64;
        }
        self.timed = phase;
        self.timed_since = now;
    }

    /// Counts `len` bytes sent, received or read, in the current phase.
    fn count_bytes(&mut self, len: usize) {
        self.figures.bytes += len as u64;
        if let Some(i) = self.phase_index() {
            self.figures.phase_bytes[i] += len as u64;
        }
    }

    /// The current phase's place in [`START_PHASES`] (None: over).
    fn phase_index(&self) -> Option<usize> {
        if self.error.is_some() {
            return None;
        }
        Some(match self.phase {
            Phase::SpanScan(_) => 0,
            Phase::Facts(_) => 1,
            Phase::Window(_) => 2,
            Phase::Loads(_) => 3,
            Phase::StringScan(..) => 4,
            Phase::PlanScan(..) => 5,
            Phase::Receivers { .. } => 6,
            Phase::Neighbours { .. } => 7,
            Phase::Done => return None,
        })
    }

    /// The next thing for the driver to do.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.out.pop_front()
    }

    /// Whether it plans a repartition ([`StartInput::repartition`]).
    pub fn is_repartition(&self) -> bool {
        self.input.repartition
    }

    /// Whether the start is over (done or failed).
    pub fn is_over(&self) -> bool {
        self.error.is_some() || matches!(self.phase, Phase::Done)
    }

    /// The outcome, once over; the carry goes back to the driver with it.
    pub fn finish(self) -> (Result<StartOutcome, StartError>, StartCarry) {
        if let Some(e) = self.error {
            return (Err(e), self.carry);
        }
        let out = StartOutcome {
            input: self.input,
            facts: self.facts.unwrap_or_default(),
            movement: self.movement,
            window: self.window,
            load: self.load,
            string: self.string,
            neighbour_loads: self.neighbour_loads,
            position: self.position,
            figures: self.figures,
        };
        (Ok(out), self.carry)
    }

    /// When [`Self::handle_timeout`] should next be called.
    pub fn poll_timeout(&self) -> Option<Time> {
        if self.is_over() {
            return None;
        }
        let deadline = self.input.timeout.map(|t| self.began.plus(t));
        self.retry.iter().map(|r| r.0).chain(deadline).min()
    }

    /// The time is `now`: records read too early are read again, and a start past its
    /// deadline fails naming whom it waits for.
    pub fn handle_timeout(&mut self, now: Time) {
        if self.is_over() {
            return;
        }
        if self
            .input
            .timeout
            .is_some_and(|t| now >= self.began.plus(t))
        {
            self.error = Some(StartError::Silent {
                peers: self.waiting_for(),
                phase: self.phase_name(),
                waited: now.since(self.began),
            });
            return;
        }
        let (due, later): (Vec<_>, Vec<_>) = self.retry.drain(..).partition(|r| r.0 <= now);
        self.retry = later;
        for (_, peer, record, len) in due {
            self.read(peer, record, len);
        }
    }

    /// A message `bytes` from `from` arrived (its slot's bytes, as far as its signal
    /// said).
    pub fn handle_message(&mut self, from: Rank, bytes: &[u8]) {
        if self.is_over() {
            return;
        }
        if let Err(e) = self.message(from, bytes) {
            self.error = Some(e);
            return;
        }
        self.pump();
    }

    fn message(&mut self, from: Rank, bytes: &[u8]) -> Result<(), StartError> {
        let m = Message::decode(from, self.seq, bytes)?;
        if self.phase_steps().contains(&m.step) {
            self.count_bytes(bytes.len());
            return self.feed(&m);
        }
        if m.step.code() >= self.phase_order() {
            self.early.push((from, bytes.to_vec()));
            return Ok(());
        }
        Err(StartError::Unexpected {
            from,
            step: m.step.name(),
            detail: format!(
                "it came after this rank finished that step (now in {})",
                self.phase_name()
            ),
        })
    }

    fn feed(&mut self, m: &Message<'_>) -> Result<(), StartError> {
        match &mut self.phase {
            Phase::SpanScan(x) => x.handle_message(m),
            Phase::Facts(x) => x.handle_message(m),
            Phase::Loads(x) => x.handle_message(m),
            Phase::StringScan(x, _) if m.step == Step::StringScan => x.handle_message(m),
            Phase::StringScan(_, g) => g.handle_message(m),
            Phase::PlanScan(x, _) => x.handle_message(m),
            _ => unreachable!("a phase without messages has no steps"),
        }
    }

    /// The bytes of `peer`'s `record` that a [`Action::Read`] asked for.
    pub fn handle_read(&mut self, now: Time, peer: Rank, record: Record, bytes: &[u8]) {
        if self.is_over() {
            return;
        }
        self.count_bytes(bytes.len());
        self.reads_out = self.reads_out.saturating_sub(1);
        if let Err(e) = self.read_arrived(now, peer, record, bytes) {
            self.error = Some(e);
            return;
        }
        self.pump();
    }

    fn read_arrived(
        &mut self,
        now: Time,
        peer: Rank,
        record: Record,
        bytes: &[u8],
    ) -> Result<(), StartError> {
        let bad = |e: FieldError| StartError::Malformed {
            from: peer,
            field: e.field,
            detail: format!("{} (its published {record:?} record)", e.detail),
        };
        let seq = self.seq as u32;
        match (&mut self.phase, record) {
            (Phase::Window(_), Record::Span) => {
                let rec = SpanRecord::decode(bytes).map_err(bad)?;
                self.spans_out.remove(&peer);
                if rec.epoch != seq {
                    return Err(bad(FieldError::new(
                        "start",
                        format!("start {} in a record read in start {seq}", rec.epoch),
                    )));
                }
                // (The search takes it from here: `Self::window_reads`.)
                self.spans.insert(peer, rec);
            }
            (Phase::Window(w), Record::Parts) if self.parts_out => {
                self.parts_out = false;
                let rec = w.wanted().expect("parts are read after their record");
                let m = decode_measured(&rec, bytes).map_err(bad)?;
                w.handle_parts(peer, m);
            }
            (Phase::Receivers { searches, at }, Record::String) => {
                let p = Published::decode(bytes).map_err(bad)?;
                self.records_out.remove(&peer);
                let Some(p) = p.filter(|p| p.epoch == seq) else {
                    // Not published yet (or caught half written): read again where the
                    // search needs it.
                    self.unpublished.insert(peer);
                    if searches[*at].poll_read() == Some(peer) {
                        self.read_later(now, peer, record, bytes.len() as u64);
                    }
                    return Ok(());
                };
                self.unpublished.remove(&peer);
                self.records.insert(peer, p);
            }
            (Phase::Receivers { .. }, Record::Block(s)) => {
                let rec = BlockRecord::decode(bytes, peer, self.size, seq).map_err(bad)?;
                self.blocks_out.remove(&(peer, s));
                let Some(rec) = rec else {
                    // Not published yet: the search reads its members' own records.
                    self.blocks_unpublished.insert((peer, s));
                    return Ok(());
                };
                self.blocks_unpublished.remove(&(peer, s));
                for (r, d) in rec.intervals(peer) {
                    self.from_blocks.insert((r, s), d);
                }
            }
            (Phase::Neighbours { waiting }, Record::Load) => {
                let l = LoadRecord::decode(bytes).map_err(bad)?;
                let Some(l) = l.filter(|l| l.seq == seq) else {
                    // Another start's, or caught half written: read again.
                    self.read_later(now, peer, record, bytes.len() as u64);
                    return Ok(());
                };
                waiting.retain(|&r| r != peer);
                if let Some(load) = l.load {
                    self.neighbour_loads.push((peer, load));
                }
            }
            // Read ahead and not needed after all: the phase moved on without it.
            (_, Record::Span) if self.spans_out.remove(&peer) => {}
            (_, Record::String) if self.records_out.remove(&peer) => {}
            (_, Record::Block(s)) if self.blocks_out.remove(&(peer, s)) => {}
            (_, record) => {
                return Err(StartError::Unexpected {
                    from: peer,
                    step: "a read",
                    detail: format!("its {record:?} record came in {}", self.phase_name()),
                });
            }
        }
        Ok(())
    }

    fn read_later(&mut self, now: Time, peer: Rank, record: Record, len: u64) {
        self.retry.push((now.plus(self.backoff), peer, record, len));
        self.backoff = (self.backoff * 2).min(RETRY_MAX);
    }

    fn read(&mut self, peer: Rank, record: Record, len: u64) {
        match record {
            Record::String => self.records_out.insert(peer),
            Record::Span => self.spans_out.insert(peer),
            Record::Block(s) => self.blocks_out.insert((peer, s)),
            Record::Parts | Record::Load => false,
        };
        self.figures.messages += 1;
        // A read issued while another is out overlaps it: a round trip begins only
        // with the first read of a batch (a search's read-ahead is one round).
        if self.reads_out == 0 {
            self.chain += 1;
        }
        self.reads_out += 1;
        self.out.push_back(Action::Read { peer, record, len });
    }

    /// The steps whose messages the current phase takes.
    fn phase_steps(&self) -> &'static [Step] {
        match self.phase {
            Phase::SpanScan(_) => &[Step::SpanScan],
            Phase::Facts(_) => &[Step::FactsUp, Step::FactsDown],
            Phase::Loads(_) => &[Step::LoadsUp, Step::LoadsDown],
            Phase::StringScan(..) => &[Step::StringScan, Step::DeficitsUp],
            Phase::PlanScan(..) => &[Step::PlanScan],
            // Reads: messages of the loads and the string scan may come early.
            Phase::Window(_) => &[],
            _ => &[],
        }
    }

    /// The code of the first step this phase or a later one takes messages for: a
    /// message of a step after it came early.
    fn phase_order(&self) -> u8 {
        match self.phase {
            Phase::SpanScan(_) => Step::SpanScan.code(),
            Phase::Facts(_) => Step::FactsUp.code(),
            Phase::Window(_) | Phase::Loads(_) => Step::LoadsUp.code(),
            Phase::StringScan(..) => Step::StringScan.code(),
            Phase::PlanScan(..) => Step::PlanScan.code(),
            Phase::Receivers { .. } | Phase::Neighbours { .. } | Phase::Done => u8::MAX,
        }
    }

    fn phase_name(&self) -> &'static str {
        match self.phase {
            Phase::SpanScan(_) => "the span scan",
            Phase::Facts(_) => "the job's facts",
            Phase::Window(_) => "the front's window",
            Phase::Loads(_) => "the loads after the front",
            Phase::StringScan(..) => "the string scan",
            Phase::PlanScan(..) => "the plan scan",
            Phase::Receivers { .. } => "the string's receivers",
            Phase::Neighbours { .. } => "the neighbours' loads",
            Phase::Done => "done",
        }
    }

    /// One line for a stall's message: the phase and whom it waits for.
    pub fn describe(&self) -> String {
        format!(
            "rank {}: start {} in {}, waiting for {:?} ({} reads out, {} retries, {} early){}",
            self.rank,
            self.seq,
            self.phase_name(),
            self.waiting_for(),
            self.reads_out,
            self.retry.len(),
            self.early.len(),
            self.error
                .as_ref()
                .map_or(String::new(), |e| format!("; failed: {e}"))
        )
    }

    /// Whom the start waits for now.
    pub fn waiting_for(&self) -> Vec<Rank> {
        match &self.phase {
            Phase::SpanScan(x) => x.waiting_for(),
            Phase::Facts(x) => x.waiting_for(),
            Phase::Loads(x) => x.waiting_for(),
            Phase::StringScan(x, g) => {
                let mut w = x.waiting_for();
                w.extend(g.waiting_for());
                w
            }
            Phase::PlanScan(x, _) => x.waiting_for(),
            Phase::Window(_) | Phase::Receivers { .. } => {
                let mut r: Vec<Rank> = self.retry.iter().map(|r| r.1).collect();
                r.extend(self.out.iter().filter_map(|a| match a {
                    Action::Read { peer, .. } => Some(*peer),
                    _ => None,
                }));
                r
            }
            Phase::Neighbours { waiting } => waiting.clone(),
            Phase::Done => Vec::new(),
        }
    }

    /// Moves what the current phase sends out, and on to the next phase while one is
    /// done.
    fn pump(&mut self) {
        while self.error.is_none() {
            self.drain_sends();
            if !self.advance() {
                return;
            }
            // Messages that came early for the new phase.
            let steps = self.phase_steps();
            let (now, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.early)
                .into_iter()
                .partition(|(_, b)| {
                    b.get(3)
                        .and_then(|&c| Step::of(c))
                        .is_some_and(|s| steps.contains(&s))
                });
            self.early = later;
            for (from, bytes) in now {
                if let Err(e) = self.message(from, &bytes) {
                    self.error = Some(e);
                    return;
                }
            }
        }
    }

    fn drain_sends(&mut self) {
        let mut sent = Vec::new();
        match &mut self.phase {
            Phase::SpanScan(x) => sent.extend(std::iter::from_fn(|| x.poll_send())),
            Phase::Facts(x) => {
                if let Some(sum) = x.take_sum() {
                    let movement = self.carry.root.decide(&sum.front, self.carry.grid);
                    let grid = sum.front.now_range.map(|(lo, hi)| Grid { lo, hi });
                    x.broadcast(FactsDown {
                        facts: sum.facts,
                        front: FrontDecision { movement, grid },
                    });
                }
                sent.extend(std::iter::from_fn(|| x.poll_send()));
            }
            Phase::Loads(x) => {
                if let Some(sum) = x.take_sum() {
                    x.broadcast(sum);
                }
                sent.extend(std::iter::from_fn(|| x.poll_send()));
            }
            Phase::StringScan(x, g) => {
                sent.extend(std::iter::from_fn(|| x.poll_send()));
                sent.extend(std::iter::from_fn(|| g.poll_send()));
            }
            Phase::PlanScan(x, _) => sent.extend(std::iter::from_fn(|| x.poll_send())),
            _ => {}
        }
        for o in sent {
            self.figures.messages += 1;
            self.count_bytes(o.bytes.len());
            self.out.push_back(Action::Send(o));
        }
    }

    /// Ends the current phase where it is done and begins the next; whether it did.
    fn advance(&mut self) -> bool {
        let phase = std::mem::replace(&mut self.phase, Phase::Done);
        let (next, moved) = match phase {
            Phase::SpanScan(x) if x.is_done() => {
                self.figures.rounds += u64::from(x.rounds());
                self.reach_before = x.result().flatten().copied().unwrap_or_default();
                (self.after_span_scan(), true)
            }
            Phase::Facts(x) if x.result().is_some() => {
                self.figures.rounds += u64::from(x.rounds());
                let down = x.result().cloned().expect("checked");
                (self.after_facts(down), true)
            }
            Phase::Window(mut w) => match self.window_reads(&mut w) {
                true => {
                    self.figures.rounds += self.chain;
                    self.chain = 0;
                    self.window = w.window();
                    (self.after_window(), true)
                }
                false => (Phase::Window(w), false),
            },
            Phase::Loads(x) if x.result().is_some() => {
                self.figures.rounds += u64::from(x.rounds());
                let sums = *x.result().expect("checked");
                match self.input.repartition {
                    true => (self.plan_scan(sums.loads[0]), true),
                    false => (self.string_scan(sums), true),
                }
            }
            Phase::StringScan(x, mut g) if x.is_done() && g.gathered() => {
                // (The gather ran alongside the scan: no rounds of its own on the chain.)
                self.figures.rounds += u64::from(x.rounds());
                let before = x.result().flatten().copied().unwrap_or_default();
                (self.after_string_scan(before, g.take_sum()), true)
            }
            Phase::PlanScan(x, total) if x.is_done() => {
                self.figures.rounds += u64::from(x.rounds());
                let before = x.result().flatten().copied().unwrap_or_default();
                self.position = Some(StringPosition {
                    rank: self.rank,
                    ranks: self.size,
                    before: before.0,
                    load: self.load.unwrap_or(0),
                    total,
                });
                (Phase::Done, true)
            }
            Phase::Receivers { searches, at } => self.receivers(searches, at),
            Phase::Neighbours { waiting } if waiting.is_empty() && self.retry.is_empty() => {
                self.neighbour_loads.sort_unstable();
                self.figures.rounds += 1;
                (Phase::Done, true)
            }
            other => (other, false),
        };
        self.phase = next;
        moved
    }
}
