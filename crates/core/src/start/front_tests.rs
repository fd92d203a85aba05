//! The front at scale against the whole-job front: a band of costly keys moving along a
//! rank string whose ownership is re-cut between epochs, over several epochs.

use super::front::*;
use super::tests::{run, seed};
use super::wire::{Message, Step};
use super::*;
use crate::front::SAMPLES;
use crate::front::{Density, FrontView};
use crate::{JobFront, KeySpan, LoadClasses, Measured, RankProfile};
use titus_overlay::rng::Rng;

/// A job's costs: keys `lo..lo + len`, a costly band of `band` keys at `at` (round the
/// axis where `periodic`), cheap elsewhere, with a little noise per key.
#[derive(Debug, Clone, Copy)]
pub(super) struct Field {
    pub(super) lo: u64,
    pub(super) len: u64,
    pub(super) band: u64,
    pub(super) costly: u64,
    pub(super) cheap: u64,
    pub(super) periodic: bool,
}

impl Field {
    pub(super) fn cost(&self, k: u64, at: i64) -> u64 {
        let off = k as i64 - self.lo as i64 - at;
        let inside = match self.periodic {
            true => (off.rem_euclid(self.len as i64) as u64) < self.band,
            false => off >= 0 && (off as u64) < self.band,
        };
        let noise = (k.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 60) % 3;
        if inside {
            self.costly + noise
        } else {
            self.cheap + noise
        }
    }
}

/// Rising contiguous spans over the field's keys: `ranks` cuts, some ranks empty.
pub(super) fn cut(f: &Field, ranks: usize, rng: &mut Rng, empties: bool) -> Vec<KeySpan> {
    let mut cuts: Vec<u64> = (1..ranks).map(|_| f.lo + rng.below(f.len)).collect();
    cuts.sort_unstable();
    if !empties {
        cuts.dedup();
    }
    let mut bounds = vec![f.lo];
    bounds.extend(cuts);
    while bounds.len() < ranks {
        bounds.push(f.lo + f.len);
    }
    bounds.push(f.lo + f.len);
    (0..ranks)
        .map(|r| {
            let (a, b) = (bounds[r], bounds[r + 1]);
            match b > a {
                true => KeySpan {
                    lo: a,
                    hi: b - 1,
                    count: b - a,
                },
                false => KeySpan::default(),
            }
        })
        .collect()
}

pub(super) fn measured(f: &Field, span: KeySpan, at: i64) -> Measured {
    match span.count {
        0 => Measured::default(),
        _ => Measured::of((span.lo..=span.hi).map(|k| (k, f.cost(k, at)))),
    }
}

/// One start of the front at scale over `profiles`: the span scan, the sums' reduce, the
/// root's decision; then each rank's window, read from the published records. Returns
/// the decision, each rank's window, and the most bytes a rank moved.
fn start(
    profiles: &[RankProfile],
    grid: Option<Grid>,
    root: &mut FrontRoot,
    epoch: u64,
    rng: &mut Rng,
) -> (FrontDecision, Vec<Option<crate::FrontWindow>>, u64) {
    let size = profiles.len() as u32;
    let own_reach = |r: usize| {
        let s = profiles[r].last.span;
        SpanOrder {
            reach: (s.count > 0).then_some(s.hi),
        }
    };
    let mut scans: Vec<ExclusiveScan<SpanOrder>> = (0..size)
        .map(|r| ExclusiveScan::new(Step::StringScan, r, size, epoch, own_reach(r as usize)))
        .collect();
    run(
        &mut scans,
        rng,
        epoch,
        ExclusiveScan::poll_send,
        ExclusiveScan::handle_message,
    );
    let before: Vec<SpanOrder> = scans
        .iter()
        .map(|s| s.result().unwrap().copied().unwrap_or_default())
        .collect();
    let records: Vec<(SpanRecord, Vec<u8>)> = (0..size as usize)
        .map(|r| {
            let m = &profiles[r].last;
            let mut reach = before[r];
            reach.combine(&own_reach(r));
            let (rec, parts) = SpanRecord::published(epoch as u32, reach.reach, m);
            // Through its bytes, as a reader gets it.
            (SpanRecord::decode(&rec.encode()).unwrap(), parts)
        })
        .collect();
    let mut reduce: Vec<TreeReduce<FrontSums, FrontDecision>> = (0..size as usize)
        .map(|r| {
            let p = &profiles[r];
            let rising =
                p.last.span.count == 0 || before[r].reach.is_none_or(|h| p.last.span.lo > h);
            let sums = FrontSums::of(p.now, &p.last, rising, grid);
            TreeReduce::new(Step::FactsUp, Step::FactsDown, r as u32, size, epoch, sums)
        })
        .collect();
    let decide = |t: &mut TreeReduce<FrontSums, FrontDecision>, root: &mut FrontRoot| {
        if let Some(sum) = t.take_sum() {
            let movement = root.decide(&sum, grid);
            t.broadcast(FrontDecision {
                movement,
                grid: sum.now_range.map(|(lo, hi)| Grid { lo, hi }),
            });
        }
    };
    decide(&mut reduce[0], root);
    run(
        &mut reduce,
        rng,
        epoch,
        TreeReduce::poll_send,
        |t, m: &Message<'_>| {
            t.handle_message(m)?;
            decide(t, root);
            Ok(())
        },
    );
    let decision = *reduce[0].result().unwrap();
    let mut most = reduce.iter().map(|t| t.traffic().bytes).max().unwrap_or(0);
    let windows = (0..size as usize)
        .map(|r| {
            let mut w = WindowSearch::new(size, r as u32, profiles[r].now, decision.movement);
            let mut bytes = 0;
            while let Some(read) = w.poll_read() {
                match read {
                    WindowRead::Record(j) => {
                        bytes += SPAN_RECORD_BYTES as u64;
                        w.handle_record(j, &records[j as usize].0)
                    }
                    WindowRead::Parts(j, n) => {
                        let (rec, parts) = &records[j as usize];
                        assert_eq!(n as usize, parts.len());
                        bytes += parts.len() as u64;
                        w.handle_parts(j, decode_measured(rec, parts).unwrap())
                    }
                }
            }
            most = most.max(bytes);
            w.window()
        })
        .collect();
    (decision, windows, most)
}

#[test]
fn a_ranks_predictions_from_its_window_are_the_whole_jobs() {
    let s = seed(21);
    let mut rng = Rng::from_keys(&[s]);
    let (mut moved, mut same_shift, mut cases, mut far) = (0, 0, 0, 0);
    for round in 0..60 {
        let ranks = 1 + rng.below(48) as usize;
        let field = Field {
            lo: 1_000 + rng.below(1_000),
            len: 200 + rng.below(20_000),
            band: 0,
            costly: 1_000 + rng.below(100_000),
            cheap: 5 + rng.below(100),
            periodic: rng.below(2) == 0,
        };
        let field = Field {
            band: 1 + rng.below(field.len / 3),
            ..field
        };
        let speed = rng.below(field.len / 8 + 1) as i64 * if rng.below(2) == 0 { 1 } else { -1 };
        let empties = round % 4 == 0;
        let mut at = rng.below(field.len) as i64;
        let mut spans = cut(&field, ranks, &mut rng, empties);
        let mut last: Vec<Measured> = vec![Measured::default(); ranks];
        let (mut whole, mut root, mut grid) = (JobFront::default(), FrontRoot::default(), None);
        for epoch in 1..=5u64 {
            let profiles: Vec<RankProfile> = (0..ranks)
                .map(|r| RankProfile {
                    now: spans[r],
                    last: last[r].clone(),
                })
                .collect();
            whole.update(&profiles);
            let (decision, windows, _) = start(&profiles, grid, &mut root, epoch, &mut rng);
            grid = decision.grid;
            cases += 1;
            let (new, old) = (decision.movement, whole.movement());
            if new.shift == old.shift {
                same_shift += 1;
            } else if std::env::var("TITUS_FRONT_DIFF").is_ok() {
                eprintln!("differ: {new:?} {old:?} {ranks} ranks {field:?} speed {speed}");
            }
            let ctx = format!(
                "seed {s} round {round} epoch {epoch}: {ranks} ranks, {field:?}, speed {speed}, movement {new:?} against {old:?}"
            );
            // The shift: the whole-job front's but for the samples' resolution (design:
            // two sample steps), and rarely beyond it.
            let step = field.len / SAMPLES as u64 + 1;
            if new.shift.abs_diff(old.shift) > 2 * step {
                far += 1;
                eprintln!("{ctx}: beyond two sample steps ({step} keys)");
            }
            // With the same movement, each rank's predictions from its window are the
            // whole job's.
            let full = Density::new(&profiles);
            let whole_view = FrontView {
                last: full.as_ref(),
                movement: new,
            };
            if new.shift != 0 {
                moved += 1;
            }
            for r in 0..ranks {
                let Some(window) = &windows[r] else {
                    panic!("{ctx}: rank {r} gave up its window");
                };
                let mine = window.view(new);
                let now = spans[r];
                assert_eq!(
                    mine.load(now),
                    whole_view.load(now),
                    "{ctx}: rank {r}'s load"
                );
                let keys: Vec<u64> = (now.lo..now.lo + now.count).collect();
                assert_eq!(
                    mine.predict(&keys, |_| None),
                    whole_view.predict(&keys, |_| None),
                    "{ctx}: rank {r}"
                );
                let class = Some(10);
                assert_eq!(
                    mine.costly_keys(&keys, class),
                    whole_view.costly_keys(&keys, class),
                    "{ctx}: rank {r}"
                );
                let c = LoadClasses(vec![(3, 100)]);
                assert_eq!(
                    mine.split(now, true, &c, 10),
                    whole_view.split(now, true, &c, 10),
                    "{ctx}: rank {r}"
                );
            }
            // The epoch runs: each rank measures its keys at the band's place now; the
            // band moves and the ownership may be re-cut.
            last = (0..ranks).map(|r| measured(&field, spans[r], at)).collect();
            at += speed;
            if rng.below(3) == 0 {
                spans = cut(&field, ranks, &mut rng, empties);
            }
        }
    }
    eprintln!(
        "{same_shift} of {cases} starts found the whole-job front's shift; {moved} moved; {far} beyond two sample steps"
    );
    assert!(
        moved > cases / 4,
        "seed {s}: the band moved in enough starts: {moved} of {cases}"
    );
    assert!(
        100 * same_shift >= 95 * cases,
        "seed {s}: {same_shift} of {cases} starts found the whole-job front's shift"
    );
    assert!(
        far <= 1 + cases / 50,
        "seed {s}: {far} of {cases} shifts beyond two sample steps"
    );
}

#[test]
fn published_parts_round_trip_small_and_refuse_what_does_not_add_up() {
    let costs: Vec<(u64, u64)> = (1_000..5_096u64).map(|k| (k, 12_000 + k % 7)).collect();
    let m = Measured::of_sorted(&costs);
    let (rec, parts) = SpanRecord::published(3, Some(5_095), &m);
    let rec = SpanRecord::decode(&rec.encode()).unwrap();
    let back = decode_measured(&rec, &parts).unwrap();
    assert_eq!(
        (back.span, &back.parts, back.load),
        (m.span, &m.parts, m.load)
    );
    // Plain words took 24 bytes a part.
    assert!(
        parts.len() * 4 <= m.parts.len() * 24,
        "{} bytes",
        parts.len()
    );

    let field = |rec: &SpanRecord, b: &[u8]| decode_measured(rec, b).unwrap_err().field;
    assert_eq!(field(&rec, &parts[1..]), "parts' bytes");
    // A part's key pushed past 2^64, and one past the span.
    let mut huge = rec;
    let mut w = super::wire::BodyWriter::default();
    w.varint(0);
    w.varint(1);
    w.varint(5);
    w.varint(u64::MAX);
    w.varint(1);
    w.varint(5);
    huge.parts = 2;
    huge.parts_bytes = w.0.len() as u32;
    assert_eq!(field(&huge, &w.0), "part");
    let mut grown = parts.clone();
    grown[0] = 0x7f;
    assert_eq!(field(&rec, &grown), "parts");
    // A record announcing bytes its parts cannot take.
    let mut bad = rec;
    bad.parts_bytes = rec.parts * PART_BYTES_MAX as u32 + 1;
    assert_eq!(
        SpanRecord::decode(&bad.encode()).unwrap_err().field,
        "parts' bytes"
    );
    bad.parts_bytes = 2;
    assert_eq!(
        SpanRecord::decode(&bad.encode()).unwrap_err().field,
        "parts' bytes"
    );
}
