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
        if self.movement.shift != 0 {
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
        Phase::StringScan(ExclusiveScan::new(
            Step::StringScan,
            self.rank,
            self.size,
            self.seq,
            self.own_prefix,
        ))
    }

    pub(super) fn after_string_scan(&mut self, before: Prefix) -> Phase {
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
            if let Some(p) = self.records.get(&j).copied() {
                searches[at].handle_record(j, &p);
                continue;
            }
            let waiting = self.retry.iter().any(|r| r.1 == j);
            if !self.records_out.contains(&j) && !waiting {
                // Walking on from a receiver, the next ones are likely next door: read
                // ahead as far as the rest of the interval likely spans, with a quarter
                // more (a pile's owner gives to dozens in a row, each read a first
                // contact: read together, those overlap).
                let search = &searches[at];
                let ahead = match search.walking() {
                    true => {
                        let ranks = search.ranks_ahead();
                        (ranks + ranks / 4 + 1).clamp(u64::from(PREFETCH), u64::from(PREFETCH_MAX))
                            as u32
                    }
                    false => 1,
                };
                // From the first rank not ruled out: a gallop that ran past the last
                // read-ahead leaves a gap that its bisection reads next.
                let from = match search.walking() {
                    true => search.frontier().min(j),
                    false => j,
                };
                // The read the search needs first, then the read-ahead (bounded: a
                // gallop's probe may lie far past the frontier).
                let to = j
                    .saturating_add(ahead)
                    .min(from.saturating_add(2 * PREFETCH_MAX))
                    .min(self.size);
                let mut wanted = vec![j];
                wanted.extend((from..to).filter(|&k| k != j));
                // Bisecting: the next rounds' probes too (`search::bisection_points`).
                if let Some((lo, hi)) = search.bisecting() {
                    wanted.extend(bisection_points(lo, hi, BISECTION_LEVELS));
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
