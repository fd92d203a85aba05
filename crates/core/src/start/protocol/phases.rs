//! The start's phases, one transition each: what a rank does when a collective or its
//! reads end, and which phase comes next.

use super::*;

impl EpochStart {
    /// Feeds the window's search the span records already read, and reads what it
    /// needs next (with what it will likely need after: `WindowSearch::read_ahead`);
    /// whether the search is done.
    pub(super) fn window_reads(&mut self, w: &mut WindowSearch) -> bool {
        loop {
            match w.poll_read() {
                None => return !self.parts_out,
                Some(WindowRead::Parts(j, bytes)) => {
                    if !self.parts_out {
                        self.parts_out = true;
                        self.read(j, Record::Parts, u64::from(bytes));
                    }
                    return false;
                }
                Some(WindowRead::Record(j)) => {
                    if let Some(rec) = self.spans.get(&j).copied() {
                        w.handle_record(j, &rec);
                        continue;
                    }
                    if !self.spans_out.contains(&j) {
                        let ahead = w.read_ahead(WINDOW_LEVELS, WINDOW_AHEAD);
                        for k in std::iter::once(j).chain(ahead) {
                            if !self.spans.contains_key(&k) && !self.spans_out.contains(&k) {
                                self.read(k, Record::Span, SPAN_RECORD_BYTES as u64);
                            }
                        }
                    }
                    return false;
                }
            }
        }
    }

    pub(super) fn after_span_scan(&mut self) -> Phase {
        let p = &self.input.profile;
        let span = p.last.span;
        let mut reach = self.reach_before;
        reach.combine(&SpanOrder {
            reach: (span.count > 0).then_some(span.hi),
        });
        let (rec, parts) = SpanRecord::published(self.seq as u32, reach.reach, &p.last);
        self.out
            .push_back(Action::Publish(Record::Span, rec.encode().to_vec()));
        self.out.push_back(Action::Publish(Record::Parts, parts));
        let rising = span.count == 0 || self.reach_before.reach.is_none_or(|h| span.lo > h);
        let up = FactsUp {
            facts: JobFacts::of(
                self.rank,
                self.input.tasks,
                self.input.refused,
                self.input.load,
                &self.input.classes,
            ),
            front: FrontSums::of(p.now, &p.last, rising, self.carry.grid),
        };
        Phase::Facts(Box::new(TreeReduce::new(
            Step::FactsUp,
            Step::FactsDown,
            self.rank,
            self.size,
            self.seq,
            up,
        )))
    }

    pub(super) fn after_facts(&mut self, down: FactsDown) -> Phase {
        self.movement = down.front.movement;
        self.carry.grid = down.front.grid;
        let nothing = down.facts.refused_by.is_some() || down.facts.tasks == 0;
        self.facts = Some(down.facts);
        self.load = self.input.load;
        if nothing {
            return Phase::Done;
        }
        if self.movement.shift != 0 && !self.input.hinted {
            return Phase::Window(WindowSearch::new(
                self.size,
                self.rank,
                self.input.profile.now,
                self.movement,
            ));
        }
        self.after_window()
    }

    pub(super) fn after_window(&mut self) -> Phase {
        let facts = self.facts.clone().expect("after the facts");
        let now = self.input.profile.now;
        let view = self.window.as_ref().map(|w| w.view(self.movement));
        self.load = view.and_then(|v| v.load(now)).or(self.input.load);
        if self.input.repartition {
            return match self.movement.shift {
                0 => self.plan_scan(facts.load),
                _ => self.loads_reduce((0, 0)),
            };
        }
        let predicted = self.input.load.is_some();
        self.split = facts.split_class().map(|c| {
            let s = match view {
                Some(v) => v.split(now, predicted, &self.input.classes, c),
                None => predicted.then(|| self.input.classes.split(c)),
            };
            (c, s)
        });
        let rec = LoadRecord {
            seq: self.seq as u32,
            load: self.load,
        };
        self.out
            .push_back(Action::Publish(Record::Load, rec.encode().to_vec()));
        if self.input.string_plan {
            if self.movement.shift != 0 {
                let split = match self.split {
                    Some((_, s)) => s.unwrap_or_default(),
                    None => (0, 0),
                };
                return self.loads_reduce(split);
            }
            let sums = StringSums {
                predicting: facts.predicting,
                loads: match facts.split_class() {
                    None => [facts.load, 0, 0],
                    Some(c) => {
                        let (d, ch) = facts.split_sums(c);
                        [facts.load, d, ch]
                    }
                },
            };
            return self.string_scan(sums);
        }
        self.neighbours()
    }

    /// The reduce of the loads after the front: this rank's, split (costly, cheap).
    pub(super) fn loads_reduce(&self, (costly, cheap): (u64, u64)) -> Phase {
        let own = StringSums {
            predicting: u64::from(self.load.is_some()),
            loads: [
                self.load.map_or(0, u128::from),
                u128::from(costly),
                u128::from(cheap),
            ],
        };
        Phase::Loads(TreeReduce::new(
            Step::LoadsUp,
            Step::LoadsDown,
            self.rank,
            self.size,
            self.seq,
            own,
        ))
    }

    /// A repartition's plan scan, the job's load after the front being `total`.
    pub(super) fn plan_scan(&self, total: u128) -> Phase {
        let own = LoadSum(self.load.map_or(0, u128::from));
        let scan = ExclusiveScan::new(Step::PlanScan, self.rank, self.size, self.seq, own);
        Phase::PlanScan(scan, total)
    }

    /// The string scan, from the job's loads per string.
    pub(super) fn string_scan(&mut self, sums: StringSums) -> Phase {
        let n = u128::from(sums.predicting);
        let mean = |x: u128| {
            x.checked_div(n)
                .map_or(0, |m| m.min(u128::from(u64::MAX)) as u64)
        };
        let (own, means) = match self.split {
            None => ([self.load, None], [mean(sums.loads[0]), 0]),
            Some((_, s)) => (
                [s.map(|x| x.0), s.map(|x| x.1)],
                [mean(sums.loads[1]), mean(sums.loads[2])],
            ),
        };
        self.means = means;
        self.own_prefix = Prefix::of(own, means);
        // (A deficit is a mean less a load: it fits 64 bits.)
        let deficits = self
            .own_prefix
            .strings
            .map(|s| s.1.min(u128::from(u64::MAX)) as u64);
        Phase::StringScan(
            ExclusiveScan::new(
                Step::StringScan,
                self.rank,
                self.size,
                self.seq,
                self.own_prefix,
            ),
            Box::new(TreeReduce::gather(
                Step::DeficitsUp,
                BLOCK_LEVELS,
                self.rank,
                self.size,
                self.seq,
                DeficitRun(vec![deficits]),
            )),
        )
    }

    /// After the string scan: `before`, the ranks' before this one; at a block's leader,
    /// `block`, its members' own deficits.
    pub(super) fn after_string_scan(&mut self, before: Prefix, block: Option<DeficitRun>) -> Phase {
        let mine = self.own_prefix;
        let mut p = Published {
            epoch: self.seq as u32,
            ..Published::default()
        };
        for s in 0..STRINGS {
            p.deficit[s] = (before.strings[s].1, mine.strings[s].1);
        }
        self.out
            .push_back(Action::Publish(Record::String, p.encode().to_vec()));
        if let Some(block) = block {
            for s in 0..STRINGS {
                let rec = BlockRecord {
                    epoch: self.seq as u32,
                    before: before.strings[s].1,
                    deficits: block.0.iter().map(|d| d[s]).collect(),
                };
                self.out
                    .push_back(Action::Publish(Record::Block(s as u8), rec.encode()));
            }
        }
        let strings = if self.split.is_some() { 2 } else { 1 };
        let searches = (0..strings)
            .map(|s| {
                let a = before.strings[s].0;
                ReceiverSearch::new(s, self.size, self.rank, a, a + mine.strings[s].0)
            })
            .collect();
        Phase::Receivers { searches, at: 0 }
    }

    pub(super) fn receivers(
        &mut self,
        mut searches: Vec<ReceiverSearch>,
        mut at: usize,
    ) -> (Phase, bool) {
        loop {
            while at < searches.len() && searches[at].poll_read().is_none() {
                at += 1;
            }
            let Some(j) = searches.get(at).and_then(ReceiverSearch::poll_read) else {
                break;
            };
            if let Some(p) = self.record_of(j, searches[at].string()) {
                searches[at].handle_record(j, &p);
                continue;
            }
            let search = &searches[at];
            let narrow = search
                .bisecting()
                .is_some_and(|(lo, hi)| hi - block_leader(lo) <= BISECT_BLOCKS * BLOCK_RANKS);
            // Walking across ranks with no deficit on its string, the search gallops:
            // its next probes, one record each, not blocks of zeros.
            let far = search.far_gallop(u64::from(BLOCK_RANKS), GALLOP_AHEAD);
            let near_walk = search.walking() && search.bisecting().is_none() && far.is_none();
            // A block its leader had not yet published (it waits for its whole block):
            // the rank's own record, published as its scan ended, instead.
            let late = self
                .blocks_unpublished
                .contains(&(block_leader(j), search.string() as u8));
            if (narrow || near_walk) && !late {
                self.read_blocks(search, j);
                return (Phase::Receivers { searches, at }, false);
            }
            let waiting = self.retry.iter().any(|r| r.1 == j);
            if !self.records_out.contains(&j) && !waiting {
                // The probe the search needs; bisecting, the next rounds' probes too
                // (`search::bisection_points`).
                let mut wanted = vec![j];
                if let Some((lo, hi)) = search.bisecting() {
                    wanted.extend(bisection_points(lo, hi, BISECTION_LEVELS));
                }
                wanted.extend(far.into_iter().flatten());
                // Walking through a late block: its next ranks too, up to its end.
                if late && near_walk {
                    let end = (block_leader(j) + BLOCK_RANKS).min(self.size);
                    wanted.extend((j + 1..end).take(LATE_AHEAD));
                }
                for k in wanted {
                    // (What read as unpublished is read again only when needed.)
                    if !self.records.contains_key(&k)
                        && !self.records_out.contains(&k)
                        && (k == j || !self.unpublished.contains(&k))
                    {
                        self.read(k, Record::String, PUBLISHED_BYTES as u64);
                    }
                }
            }
            return (Phase::Receivers { searches, at }, false);
        }
        self.figures.rounds += self.chain;
        self.chain = 0;
        let sends = |i: usize| {
            searches
                .get(i)
                .and_then(|s| s.sends())
                .map(<[_]>::to_vec)
                .unwrap_or_default()
        };
        let receives = (0..searches.len())
            .map(|s| crate::start::string::receives(&self.own_prefix, s))
            .fold(0u64, u64::saturating_add);
        self.string = Some(match self.split {
            None => RankString {
                sends: sends(0),
                receives,
                split: None,
            },
            Some((class, _)) => RankString {
                sends: Vec::new(),
                receives,
                split: Some(RankSplit {
                    class,
                    costly_sends: sends(0),
                    cheap_sends: sends(1),
                }),
            },
        });
        (self.neighbours(), true)
    }

    /// A giver's search needs rank `j`'s record, walking on from a receiver or bisecting
    /// a narrow bracket: it reads the block `j` lies in, and with it, walking, the blocks
    /// as far as the rest of its interval likely spans, with a quarter more (a pile's
    /// owner gives to hundreds in a row: read together, the blocks' first contacts
    /// overlap); bisecting, every block of the bracket (one round of first contacts for
    /// the bisection's last seven).
    fn read_blocks(&mut self, search: &ReceiverSearch, j: Rank) {
        let s = search.string() as u8;
        let lead = block_leader(j);
        if self.blocks_out.contains(&(lead, s)) {
            return;
        }
        let most = BLOCK_READS_AT_ONCE * BLOCK_RANKS;
        let at_least = search
            .ranks_at_least(self.means[search.string()])
            .min(u64::from(most)) as u32;
        let (from, to) = match search.bisecting() {
            // The bracket, and the walk from the receiver in it: at least as far.
            Some((lo, hi)) => (lo, hi.max(lo.saturating_add(at_least))),
            _ => {
                let ranks = search
                    .ranks_ahead()
                    .max(u64::from(at_least))
                    .max(self.ranks_by_density(search));
                let ahead =
                    (ranks + ranks / 4 + 1).clamp(u64::from(BLOCK_RANKS), u64::from(most)) as u32;
                // From the first rank not ruled out (a gallop past the last read-ahead
                // leaves a gap), bounded: a gallop's probe may lie far past the frontier.
                let from = search.frontier().min(j);
                (
                    from,
                    j.saturating_add(ahead).min(from.saturating_add(2 * most)),
                )
            }
        };
        let to = to.min(self.size);
        self.read(lead, Record::Block(s), BLOCK_RECORD_BYTES as u64);
        // (What read as unpublished is read again only when needed.)
        for b in (block_leader(from)..to).step_by(BLOCK_RANKS as usize) {
            if b != lead
                && !self.from_blocks.contains_key(&(b, s))
                && !self.blocks_out.contains(&(b, s))
                && !self.blocks_unpublished.contains(&(b, s))
            {
                self.read(b, Record::Block(s), BLOCK_RECORD_BYTES as u64);
            }
        }
    }

    /// Rank `j`'s deficit record as far as string `s` goes: read from it, or from its
    /// block's section for `s`.
    fn record_of(&self, j: Rank, s: usize) -> Option<Published> {
        if let Some(p) = self.records.get(&j) {
            return Some(*p);
        }
        let d = self.from_blocks.get(&(j, s as u8))?;
        let mut p = Published {
            epoch: self.seq as u32,
            ..Published::default()
        };
        p.deficit[s] = *d;
        Some(p)
    }

    /// How many ranks the rest of `search`'s interval spans at the deficit per rank
    /// between the farthest records read (its search's probes, from its own place to its
    /// receivers): a walk's first read-ahead, before its own rate says more.
    fn ranks_by_density(&self, search: &ReceiverSearch) -> u64 {
        let s = search.string();
        let lo = self.records.iter().min_by_key(|r| r.0);
        let hi = self.records.iter().max_by_key(|r| r.0);
        let (Some((&k0, p0)), Some((&k1, p1))) = (lo, hi) else {
            return 0;
        };
        let deficit = p1.deficit[s].0.saturating_sub(p0.deficit[s].0);
        if k1 <= k0 || deficit == 0 {
            return 0;
        }
        let rest = search.rest();
        (rest.saturating_mul(u128::from(k1 - k0)) / deficit).min(u128::from(u64::MAX)) as u64
    }

    pub(super) fn neighbours(&mut self) -> Phase {
        if self.input.neighbours.is_empty() {
            return Phase::Done;
        }
        let waiting = self.input.neighbours.clone();
        for &r in &waiting {
            self.read(r, Record::Load, LOAD_RECORD_BYTES as u64);
        }
        Phase::Neighbours { waiting }
    }
}
