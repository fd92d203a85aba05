//! Whole starts of N ranks, their messages delivered in a seeded random order and their
//! reads answered from what each rank published so far (a record read before its owner
//! published it reads as the start before's), checked against the whole-job
//! computation the runtime made from an all-gather: the job's facts, each rank's load
//! after the front, its part of the string plan, its diffusion neighbours' loads.

use super::front_tests::{Field, cut, measured};
use super::tests::seed;
use super::*;
use crate::front::{Density, FrontView};
use crate::{KeySpan, LoadClasses, Measured, RankProfile, StringLoads, Time};
use std::collections::HashMap;
use titus_overlay::rng::Rng;

/// Published records, by (rank, record).
type Board = HashMap<(Rank, Record), Vec<u8>>;

struct Outcomes {
    results: Vec<Result<StartOutcome, StartError>>,
    carries: Vec<StartCarry>,
    /// Each rank's start, from its begin to its end, on the run's clock.
    spans: Vec<std::time::Duration>,
}

/// Runs one start on every rank to its end.
fn run_start(
    inputs: Vec<StartInput>,
    carries: Vec<StartCarry>,
    seq: u64,
    board: &mut Board,
    rng: &mut Rng,
) -> Outcomes {
    let size = inputs.len() as u32;
    let mut now = Time(1_000_000 * seq);
    let mut starts: Vec<Option<EpochStart>> = Vec::new();
    // Ranks begin one after another, in a random order, between deliveries.
    let mut order: Vec<usize> = (0..inputs.len()).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let mut pending: Vec<(usize, StartInput, StartCarry)> = order
        .iter()
        .map(|&r| (r, inputs[r].clone(), carries[r].clone()))
        .collect();
    starts.resize_with(inputs.len(), || None);
    let mut wire: Vec<(Rank, Rank, Vec<u8>)> = Vec::new();
    let mut reads: Vec<(Rank, Rank, Record, u64)> = Vec::new();
    let mut began = vec![now; inputs.len()];
    let mut ended: Vec<Option<Time>> = vec![None; inputs.len()];
    let mut steps = 0u64;
    loop {
        steps += 1;
        if steps >= 1_000_000 {
            let states: Vec<String> = starts.iter().flatten().map(|s| s.describe()).collect();
            panic!(
                "a start that does not end: {} messages and {} reads in flight, {} to begin\n{}",
                wire.len(),
                reads.len(),
                pending.len(),
                states.join("\n")
            );
        }
        // Collect every rank's actions.
        for (r, s) in starts.iter_mut().enumerate() {
            let Some(s) = s else { continue };
            while let Some(a) = s.poll_action() {
                match a {
                    Action::Send(o) => wire.push((r as Rank, o.to, o.bytes)),
                    Action::Publish(rec, bytes) => {
                        board.insert((r as Rank, rec), bytes);
                    }
                    Action::Read { peer, record, len } => {
                        reads.push((r as Rank, peer, record, len))
                    }
                }
            }
        }
        for (r, s) in starts.iter().enumerate() {
            if s.as_ref().is_some_and(EpochStart::is_over) && ended[r].is_none() {
                ended[r] = Some(now);
            }
        }
        let live = starts.iter().flatten().filter(|s| !s.is_over()).count();
        if pending.is_empty() && live == 0 {
            break;
        }
        let choice = rng.below(4);
        if choice == 0 && !pending.is_empty() {
            let (r, input, carry) = pending.pop().unwrap();
            starts[r] = Some(EpochStart::new(now, r as Rank, size, seq, input, carry));
            began[r] = now;
        } else if choice == 1 && !wire.is_empty() {
            let (from, to, bytes) = wire.swap_remove(rng.below(wire.len() as u64) as usize);
            // A message for a rank that has not begun waits (in the runtime: its slot).
            match &mut starts[to as usize] {
                Some(s) => {
                    s.handle_message(from, &bytes);
                    s.note_time(now);
                }
                None => wire.push((from, to, bytes)),
            }
        } else if choice == 2 && !reads.is_empty() {
            let (by, peer, record, len) = reads.swap_remove(rng.below(reads.len() as u64) as usize);
            let bytes = board
                .get(&(peer, record))
                .cloned()
                .unwrap_or_else(|| vec![0; len as usize]);
            assert_eq!(
                bytes.len() as u64,
                len,
                "rank {by} reads {record:?} of rank {peer} at its length"
            );
            let s = starts[by as usize].as_mut().unwrap();
            s.handle_read(now, peer, record, &bytes);
            s.note_time(now);
        } else if wire.is_empty() && reads.is_empty() && !pending.is_empty() {
            continue;
        } else {
            // Time passes: timers fire.
            now = now.plus(std::time::Duration::from_micros(10));
            for s in starts.iter_mut().flatten() {
                if s.poll_timeout().is_some_and(|t| t <= now) {
                    s.handle_timeout(now);
                    s.note_time(now);
                }
            }
        }
    }
    let mut results = Vec::new();
    let mut carries = Vec::new();
    for s in starts {
        let (r, c) = s.unwrap().finish();
        results.push(r);
        carries.push(c);
    }
    let spans = ended
        .iter()
        .zip(&began)
        .map(|(e, b)| e.expect("every start ended").since(*b))
        .collect();
    Outcomes {
        results,
        carries,
        spans,
    }
}

/// A rank's prediction from its own history: the last cost of each of its keys it
/// measured (0: unknown).
fn own_costs(now: KeySpan, last: &Measured, f: &Field, at_last: i64) -> Vec<u64> {
    (now.lo..now.lo + now.count)
        .map(
            |k| match last.span.count > 0 && (last.span.lo..=last.span.hi).contains(&k) {
                true => f.cost(k, at_last),
                false => 0,
            },
        )
        .collect()
}

/// Each rank's profile: its keys now, what it measured last.
fn profiles_of(spans: &[KeySpan], last: &[Measured]) -> Vec<RankProfile> {
    spans
        .iter()
        .zip(last)
        .map(|(&now, last)| RankProfile {
            now,
            last: last.clone(),
        })
        .collect()
}

#[test]
#[allow(clippy::needless_range_loop)] // Ranks index several arrays at once.
fn starts_by_collectives_give_each_rank_the_all_gathers_plan() {
    let s = seed(41);
    let mut rng = Rng::from_keys(&[s]);
    let (mut checked, mut split_checked) = (0, 0);
    let (mut plans_checked, mut plans_moved) = (0, 0);
    for round in 0..40 {
        let ranks = 1 + rng.below(if round % 8 == 0 { 70 } else { 24 }) as usize;
        let field = Field {
            lo: 500 + rng.below(500),
            len: 100 + rng.below(8_000),
            band: 0,
            costly: 20_000 + rng.below(100_000),
            cheap: 1_000 + rng.below(2_000),
            periodic: rng.below(2) == 0,
        };
        let field = Field {
            band: 1 + rng.below(field.len / 3),
            ..field
        };
        let speed = rng.below(field.len / 10 + 1) as i64 * if rng.below(2) == 0 { 1 } else { -1 };
        let string_plan = rng.below(3) > 0;
        let mut at = rng.below(field.len) as i64;
        let mut spans = cut(&field, ranks, &mut rng, round % 5 == 0);
        let mut last: Vec<Measured> = vec![Measured::default(); ranks];
        let mut carries = vec![StartCarry::default(); ranks];
        let mut plan_carries = vec![StartCarry::default(); ranks];
        let mut seq = 0u64;
        let mut board = Board::new();
        let neighbours = |r: usize| -> Vec<Rank> {
            let mut v: Vec<Rank> = [r + ranks - 1, r + 1]
                .iter()
                .map(|x| (x % ranks) as Rank)
                .filter(|&x| x as usize != r)
                .collect();
            v.sort_unstable();
            v.dedup();
            v
        };
        let mut whole_last: Option<Density> = None;
        for _ in 1..=5u64 {
            seq += 1;
            let profiles = profiles_of(&spans, &last);
            let costs: Vec<Vec<u64>> = (0..ranks)
                .map(|r| own_costs(spans[r], &last[r], &field, at - speed))
                .collect();
            let loads: Vec<Option<u64>> = costs.iter().map(|c| crate::predicted_load(c)).collect();
            let classes: Vec<LoadClasses> = costs.iter().map(|c| LoadClasses::of(c)).collect();
            let inputs: Vec<StartInput> = (0..ranks)
                .map(|r| StartInput {
                    tasks: spans[r].count as usize,
                    refused: false,
                    load: loads[r],
                    classes: classes[r].clone(),
                    profile: profiles[r].clone(),
                    string_plan,
                    neighbours: if string_plan {
                        Vec::new()
                    } else {
                        neighbours(r)
                    },
                    timeout: None,
                    repartition: false,
                    hinted: false,
                })
                .collect();
            let out = run_start(inputs, carries, seq, &mut board, &mut rng);
            carries = out.carries;
            let outcomes: Vec<StartOutcome> = out
                .results
                .into_iter()
                .enumerate()
                .map(|(r, o)| {
                    o.unwrap_or_else(|e| {
                        panic!("seed {s} round {round} start {seq}: rank {r}: {e}")
                    })
                })
                .collect();
            let ctx = format!(
                "seed {s} round {round} start {seq}: {ranks} ranks, {field:?}, string {string_plan}"
            );
            // One movement and one set of facts on every rank.
            let movement = outcomes[0].movement;
            let tasks: u64 = spans.iter().map(|x| x.count).sum();
            for (r, o) in outcomes.iter().enumerate() {
                assert_eq!(o.movement, movement, "{ctx}: rank {r}");
                assert_eq!(o.facts.tasks, tasks, "{ctx}: rank {r}");
            }
            // The whole-job reference with the same movement.
            let full = Density::new(&profiles);
            let view = FrontView {
                last: full.as_ref(),
                movement,
            };
            let planned: Vec<Option<u64>> = (0..ranks)
                .map(|r| view.load(spans[r]).or(loads[r]))
                .collect();
            if tasks > 0 {
                for r in 0..ranks {
                    assert_eq!(outcomes[r].load, planned[r], "{ctx}: rank {r}'s load");
                }
                if string_plan {
                    let ranks_predicting = loads.iter().flatten().count();
                    let want = match crate::split_class(&classes, ranks_predicting) {
                        None => StringLoads::new(&planned),
                        Some(class) => {
                            split_checked += 1;
                            let split: Vec<Option<(u64, u64)>> = (0..ranks)
                                .map(|r| {
                                    view.split(spans[r], loads[r].is_some(), &classes[r], class)
                                })
                                .collect();
                            StringLoads::with_split(&split, class)
                        }
                    };
                    for r in 0..ranks {
                        assert_eq!(
                            outcomes[r].string.as_ref(),
                            Some(&want.rank_string(r as Rank)),
                            "{ctx}: rank {r}'s string"
                        );
                    }
                } else {
                    for r in 0..ranks {
                        let want: Vec<(Rank, u64)> = neighbours(r)
                            .into_iter()
                            .filter_map(|j| Some((j, planned[j as usize]?)))
                            .collect();
                        assert_eq!(
                            outcomes[r].neighbour_loads, want,
                            "{ctx}: rank {r}'s neighbours"
                        );
                    }
                }
                checked += 1;
            }
            let _ = whole_last.replace(full.unwrap_or_default());
            last = (0..ranks).map(|r| measured(&field, spans[r], at)).collect();
            at += speed;
            if rng.below(2) == 0 {
                // A repartition plan between the epochs: its place in the string.
                seq += 1;
                let profiles = profiles_of(&spans, &last);
                let loads: Vec<Option<u64>> = (0..ranks)
                    .map(|r| {
                        crate::predicted_load(&own_costs(spans[r], &last[r], &field, at - speed))
                    })
                    .collect();
                let inputs: Vec<StartInput> = (0..ranks)
                    .map(|r| StartInput {
                        tasks: spans[r].count as usize,
                        load: loads[r],
                        profile: profiles[r].clone(),
                        repartition: true,
                        ..StartInput::default()
                    })
                    .collect();
                // As the node begins one (`part.rs`): on the epochs' grid where it has none.
                let seeded = plan_carries
                    .into_iter()
                    .zip(&carries)
                    .map(|(p, c)| p.with_grid_of(c))
                    .collect();
                let out = run_start(inputs, seeded, seq, &mut board, &mut rng);
                plan_carries = out.carries;
                let ctx = format!("seed {s} round {round} plan {seq}: {ranks} ranks, {field:?}");
                let outcomes: Vec<StartOutcome> = out
                    .results
                    .into_iter()
                    .enumerate()
                    .map(|(r, o)| o.unwrap_or_else(|e| panic!("{ctx}: rank {r}: {e}")))
                    .collect();
                let movement = outcomes[0].movement;
                let full = Density::new(&profiles);
                let view = FrontView {
                    last: full.as_ref(),
                    movement,
                };
                let planned: Vec<u64> = (0..ranks)
                    .map(|r| view.load(spans[r]).or(loads[r]).unwrap_or(0))
                    .collect();
                let tasks: u64 = spans.iter().map(|x| x.count).sum();
                for (r, o) in outcomes.iter().enumerate() {
                    assert_eq!(o.movement, movement, "{ctx}: rank {r}");
                    assert!(o.string.is_none() && o.neighbour_loads.is_empty(), "{ctx}");
                    let want = (tasks > 0).then(|| {
                        crate::repartition::StringPosition::of(&planned, r as Rank).unwrap()
                    });
                    assert_eq!(o.position, want, "{ctx}: rank {r}'s place in the string");
                }
                plans_checked += 1;
                plans_moved += usize::from(movement.shift != 0);
            }
            if rng.below(3) == 0 {
                spans = cut(&field, ranks, &mut rng, round % 5 == 0);
            }
        }
    }
    assert!(
        checked > 100 && split_checked > 10 && plans_checked > 40 && plans_moved > 10,
        "{checked} starts checked, {split_checked} split, {plans_checked} plans ({plans_moved} moved)"
    );
}

/// One start of `ranks` ranks (seeded by `s`) at the mean load but rank 0, 1,000 above
/// it, and the two `receivers`, 500 below each: the loads and the outcomes.
fn one_giver_two_receivers(
    s: u64,
    ranks: usize,
    receivers: [usize; 2],
) -> (Vec<Option<u64>>, Outcomes) {
    let mut rng = Rng::from_keys(&[s]);
    let mean = 1_000_000u64;
    let mut loads = vec![Some(mean); ranks];
    loads[0] = Some(mean + 1_000);
    for r in receivers {
        loads[r] = Some(mean - 500);
    }
    let inputs: Vec<StartInput> = loads
        .iter()
        .map(|&load| StartInput {
            tasks: 1,
            load,
            string_plan: true,
            ..StartInput::default()
        })
        .collect();
    let carries = vec![StartCarry::default(); ranks];
    let out = run_start(inputs, carries, 1, &mut Board::new(), &mut rng);
    (loads, out)
}

/// A giver whose two receivers lie 1,700 ranks apart: walking on from the first, its
/// search gallops far past its read-ahead, and the read it needs next lies beyond the
/// read-ahead's bound; it is read all the same, and the start ends with the plan.
#[test]
fn a_giver_whose_receivers_lie_far_apart_finds_both() {
    let s = seed(43);
    let (loads, out) = one_giver_two_receivers(s, 2_500, [300, 2_000]);
    let want = crate::StringLoads::new(&loads);
    for (r, o) in out.results.into_iter().enumerate() {
        let o = o.unwrap_or_else(|e| panic!("seed {s}: rank {r}: {e}"));
        let got = o.string.expect("the string plan ran");
        assert_eq!(got, want.rank_string(r as Rank), "seed {s}: rank {r}");
    }
    assert_eq!(want.rank_string(0).sends, vec![(300, 500), (2_000, 500)]);
}

/// A start's phases account for its whole time and bytes, each in the phase it waited in: the
/// giver of the test above spends its search's time among the string's receivers; a
/// rank with nothing to give passes through that phase in no time.
#[test]
fn a_start_s_phases_account_for_its_time() {
    let s = seed(47);
    let (_, out) = one_giver_two_receivers(s, 600, [300, 500]);
    let receivers = START_PHASES.iter().position(|p| *p == "receivers").unwrap();
    for (r, (o, span)) in out.results.iter().zip(&out.spans).enumerate() {
        let f = o
            .as_ref()
            .unwrap_or_else(|e| panic!("seed {s}: rank {r}: {e}"))
            .figures;
        let total: u64 = f.phase_ns.iter().sum();
        assert_eq!(
            total,
            span.as_nanos() as u64,
            "seed {s}: rank {r}: {:?}",
            f.phase_ns
        );
        assert_eq!(
            f.phase_bytes.iter().sum::<u64>(),
            f.bytes,
            "seed {s}: rank {r}: {:?}",
            f.phase_bytes
        );
        if r != 0 {
            assert_eq!(f.phase_ns[receivers], 0, "seed {s}: rank {r} gives nothing");
            assert_eq!(
                f.phase_bytes[receivers], 0,
                "seed {s}: rank {r} gives nothing"
            );
        }
    }
    let giver = out.results[0].as_ref().unwrap().figures;
    assert!(
        giver.phase_ns[receivers] > 0 && giver.phase_bytes[receivers] > 0,
        "seed {s}: the giver's search took no time or read nothing: {giver:?}"
    );
}
