//! The start's collectives over N in-process ranks whose messages arrive in a seeded
//! random order, each encoded and decoded on the way, checked exactly against a plain
//! computation over every rank's value.

use super::string::{Prefix, Published, RankSplit, RankString, ReceiverSearch, STRINGS};
use super::wire::{BodyReader, BodyWriter, FieldError, Message, Step};
use super::*;
use crate::{LoadClasses, StringLoads};
use titus_overlay::rng::Rng;

/// The sizes the conformance suite runs at, and a few more.
const SIZES: [u32; 9] = [1, 2, 3, 4, 5, 8, 17, 31, 64];

/// The seed of a randomized test: `TITUS_SEED`'s first where set, else `default`.
pub(super) fn seed(default: u64) -> u64 {
    crate::seed::one(default)
}

/// A sum, or a string of rank numbers in order (not commutative: the scan must keep the
/// lower ranks on the left).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Runs {
    sum: u64,
    ranks: Vec<u32>,
}

impl Combine for Runs {
    fn combine(&mut self, right: &Self) {
        self.sum += right.sum;
        self.ranks.extend_from_slice(&right.ranks);
    }
}

impl Wire for Runs {
    fn encode(&self, w: &mut BodyWriter) {
        w.u64(self.sum);
        w.u32(self.ranks.len() as u32);
        for &r in &self.ranks {
            w.u32(r);
        }
    }
    fn decode(r: &mut BodyReader<'_>) -> Result<Self, FieldError> {
        let sum = r.u64("sum")?;
        let n = r.u32("ranks")?;
        let ranks = (0..n).map(|_| r.u32("rank")).collect::<Result<_, _>>()?;
        Ok(Self { sum, ranks })
    }
}

/// Delivers every message of `parts` (one collective a rank) in a random order until
/// none is left; `send` takes one message out of a part, `handle` feeds one in.
pub(super) fn run<P>(
    parts: &mut [P],
    rng: &mut Rng,
    epoch: u64,
    mut send: impl FnMut(&mut P) -> Option<Outgoing>,
    mut handle: impl FnMut(&mut P, &Message<'_>) -> Result<(), StartError>,
) {
    let mut wire: Vec<(u32, Outgoing)> = Vec::new();
    loop {
        for (r, p) in parts.iter_mut().enumerate() {
            while let Some(o) = send(p) {
                wire.push((r as u32, o));
            }
        }
        if wire.is_empty() {
            return;
        }
        let (from, o) = wire.swap_remove(rng.below(wire.len() as u64) as usize);
        let m = Message::decode(from, epoch, &o.bytes).expect("a message decodes");
        assert_eq!(
            (m.step, m.round),
            (o.step, o.round),
            "the slot says the header's step"
        );
        handle(&mut parts[o.to as usize], &m).expect("a message in turn");
    }
}

/// A reduce's input, and at the root the sum broadcast as it is (an all-reduce).
fn handle_and_broadcast<V: Combine>(
    t: &mut TreeReduce<V>,
    m: &Message<'_>,
) -> Result<(), StartError> {
    t.handle_message(m)?;
    if let Some(sum) = t.take_sum() {
        t.broadcast(sum);
    }
    Ok(())
}

/// A reduce of one rank: the root from the start.
fn lone_root<V: Combine>(mut t: TreeReduce<V>) -> TreeReduce<V> {
    if let Some(sum) = t.take_sum() {
        t.broadcast(sum);
    }
    t
}

#[test]
fn the_tree_reduce_brings_every_rank_the_jobs_sum() {
    let s = seed(11);
    let mut rng = Rng::from_keys(&[s]);
    for size in SIZES {
        for trial in 0..20 {
            let values: Vec<u64> = (0..size).map(|_| rng.below(1 << 40)).collect();
            let mut parts: Vec<TreeReduce<Runs>> = (0..size)
                .map(|r| {
                    let v = Runs {
                        sum: values[r as usize],
                        ranks: vec![r],
                    };
                    lone_root(TreeReduce::new(
                        Step::FactsUp,
                        Step::FactsDown,
                        r,
                        size,
                        3,
                        v,
                    ))
                })
                .collect();
            run(
                &mut parts,
                &mut rng,
                3,
                TreeReduce::poll_send,
                handle_and_broadcast,
            );
            let want: u64 = values.iter().sum();
            let first = parts[0].result().cloned().expect("the root has it");
            for (r, p) in parts.iter().enumerate() {
                let got = p.result().unwrap_or_else(|| {
                    panic!("seed {s} size {size} trial {trial}: rank {r} has no sum")
                });
                assert_eq!(got.sum, want, "seed {s} size {size} rank {r}");
                assert_eq!(got, &first, "one value on every rank (the root's)");
                assert_eq!(
                    got.ranks,
                    (0..size).collect::<Vec<_>>(),
                    "every rank once, in order"
                );
                let t = p.traffic();
                assert!(
                    t.messages <= u64::from(scan_rounds(size)) + 1,
                    "rank {r} sent {} messages",
                    t.messages
                );
                assert!(p.waiting_for().is_empty());
            }
        }
    }
}

#[test]
fn the_exclusive_scan_brings_each_rank_the_ranks_before_it_in_order() {
    let s = seed(12);
    let mut rng = Rng::from_keys(&[s]);
    for size in SIZES {
        for trial in 0..20 {
            let values: Vec<u64> = (0..size).map(|_| rng.below(1 << 40)).collect();
            let mut parts: Vec<ExclusiveScan<Runs>> = (0..size)
                .map(|r| {
                    let v = Runs {
                        sum: values[r as usize],
                        ranks: vec![r],
                    };
                    ExclusiveScan::new(Step::StringScan, r, size, 5, v)
                })
                .collect();
            run(
                &mut parts,
                &mut rng,
                5,
                ExclusiveScan::poll_send,
                ExclusiveScan::handle_message,
            );
            for (r, p) in parts.iter().enumerate() {
                let got = p.result().unwrap_or_else(|| {
                    panic!("seed {s} size {size} trial {trial}: rank {r} unfinished")
                });
                match got {
                    None => assert_eq!(r, 0, "only rank 0 has nothing before it"),
                    Some(v) => {
                        assert_eq!(
                            v.sum,
                            values[..r].iter().sum::<u64>(),
                            "seed {s} size {size} rank {r}"
                        );
                        assert_eq!(v.ranks, (0..r as u32).collect::<Vec<_>>(), "in rank order");
                    }
                }
                assert_eq!(p.rounds(), scan_rounds(size));
                assert!(p.traffic().messages <= u64::from(scan_rounds(size)));
            }
        }
    }
}

/// Each block's leader gathers its members' own deficits, in rank order, over the
/// block's binomial subtree; nobody else ends with a sum, and nothing crosses a block.
#[test]
fn a_block_s_deficits_gather_at_its_leader_in_rank_order() {
    use super::block::{BLOCK_LEVELS, BLOCK_RANKS, DeficitRun, block_leader, block_members};
    let s = seed(14);
    let mut rng = Rng::from_keys(&[s]);
    for size in SIZES.into_iter().chain([33, 100, 130]) {
        let values: Vec<[u64; STRINGS]> = (0..size)
            .map(|_| [rng.below(1 << 40), rng.below(3)])
            .collect();
        let mut parts: Vec<TreeReduce<DeficitRun>> = (0..size)
            .map(|r| {
                let own = DeficitRun(vec![values[r as usize]]);
                TreeReduce::gather(Step::DeficitsUp, BLOCK_LEVELS, r, size, 5, own)
            })
            .collect();
        run(
            &mut parts,
            &mut rng,
            5,
            TreeReduce::poll_send,
            TreeReduce::handle_message,
        );
        for (r, p) in parts.iter_mut().enumerate() {
            let r = r as Rank;
            assert!(p.gathered(), "seed {s} size {size}: rank {r} unfinished");
            assert!(p.waiting_for().is_empty(), "seed {s} size {size}: rank {r}");
            let sum = p.take_sum();
            if block_leader(r) != r {
                assert_eq!(sum, None, "seed {s} size {size}: rank {r} leads nothing");
                continue;
            }
            let n = block_members(r, size) as usize;
            let want = &values[r as usize..r as usize + n];
            assert_eq!(
                sum.expect("a leader's sum").0,
                want,
                "seed {s} size {size}: {r}"
            );
            assert!(p.rounds() <= BLOCK_LEVELS && n <= BLOCK_RANKS as usize);
        }
    }
    // A child whose part does not cover its subtree is refused, naming it and the field:
    // rank 2's subtree is 2 and 3.
    let mut t: TreeReduce<DeficitRun> = TreeReduce::gather(
        Step::DeficitsUp,
        BLOCK_LEVELS,
        0,
        64,
        1,
        DeficitRun::default(),
    );
    let mut w = BodyWriter::default();
    DeficitRun(vec![[1, 1]; 3]).encode(&mut w);
    let bytes = Message::encode(Step::DeficitsUp, 1, 1, 2, &w.0);
    match t.handle_message(&Message::decode(2, 1, &bytes).unwrap()) {
        Err(StartError::Malformed {
            from: 2,
            field: "block members",
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
    // Rank 32 leads a block of its own: rank 0's tree stops below it.
    let bytes = Message::encode(Step::DeficitsUp, 5, 1, 32, &w.0);
    let e = t
        .handle_message(&Message::decode(32, 1, &bytes).unwrap())
        .unwrap_err();
    assert!(matches!(e, StartError::Unexpected { from: 32, .. }), "{e}");
}

#[test]
fn rounds_are_logarithmic() {
    assert_eq!(
        [1, 2, 3, 4, 5, 8, 17].map(scan_rounds),
        [0, 1, 2, 2, 3, 3, 5]
    );
    assert_eq!(
        [1, 2, 3, 4, 7, 8, 17].map(tree_depth),
        [0, 1, 2, 2, 3, 3, 5]
    );
}

#[test]
fn a_message_out_of_turn_is_refused_naming_its_sender() {
    // Rank 0 of 4 (children 1 and 2) hears from rank 3, which is not its child.
    let mut t: TreeReduce<JobFacts> =
        TreeReduce::new(Step::FactsUp, Step::FactsDown, 0, 4, 1, JobFacts::default());
    let body = {
        let mut w = BodyWriter::default();
        JobFacts::default().encode(&mut w);
        w.0
    };
    let bytes = Message::encode(Step::FactsUp, 0, 1, 3, &body);
    let m = Message::decode(3, 1, &bytes).unwrap();
    let e = t.handle_message(&m).unwrap_err();
    assert!(matches!(e, StartError::Unexpected { from: 3, .. }), "{e}");
    // Its child 1 (place 0) at the wrong place, then twice.
    let bytes = Message::encode(Step::FactsUp, 1, 1, 1, &body);
    let e = t
        .handle_message(&Message::decode(1, 1, &bytes).unwrap())
        .unwrap_err();
    assert!(e.to_string().contains("place"), "{e}");
    let bytes = Message::encode(Step::FactsUp, 0, 1, 1, &body);
    t.handle_message(&Message::decode(1, 1, &bytes).unwrap())
        .unwrap();
    let e = t
        .handle_message(&Message::decode(1, 1, &bytes).unwrap())
        .unwrap_err();
    assert!(e.to_string().contains("twice"), "{e}");
    // A body with a value out of range names the field: rank 9 of 4 refused.
    let bad = JobFacts {
        refused_by: Some(9),
        ..JobFacts::default()
    };
    let mut w = BodyWriter::default();
    bad.encode(&mut w);
    let bytes = Message::encode(Step::FactsUp, 1, 1, 2, &w.0);
    match t.handle_message(&Message::decode(2, 1, &bytes).unwrap()) {
        Err(StartError::Malformed {
            from: 2,
            field: "refused by",
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
    // A body cut short.
    let bytes = Message::encode(Step::FactsUp, 1, 1, 2, &w.0[..7]);
    match t.handle_message(&Message::decode(2, 1, &bytes).unwrap()) {
        Err(StartError::Malformed { from: 2, .. }) => {}
        other => panic!("{other:?}"),
    }
    // A scan hears in round 1 only from r − 2.
    let mut s = ExclusiveScan::new(Step::StringScan, 3, 8, 1, Prefix::default());
    let mut w = BodyWriter::default();
    Prefix::default().encode(&mut w);
    let bytes = Message::encode(Step::StringScan, 1, 1, 2, &w.0);
    let e = s
        .handle_message(&Message::decode(2, 1, &bytes).unwrap())
        .unwrap_err();
    assert!(matches!(e, StartError::Unexpected { from: 2, .. }), "{e}");
    let bytes = Message::encode(Step::StringScan, 7, 1, 2, &w.0);
    assert!(
        s.handle_message(&Message::decode(2, 1, &bytes).unwrap())
            .is_err()
    );
}

#[test]
fn facts_decode_only_what_they_encode() {
    let mut f = JobFacts::of(
        2,
        10,
        false,
        Some(5_000),
        &LoadClasses(vec![(3, 1_000), (12, 4_000)]),
    );
    f.combine(&JobFacts::of(1, 4, true, None, &LoadClasses::default()));
    let mut w = BodyWriter::default();
    f.encode(&mut w);
    let mut r = BodyReader::new(&w.0);
    assert_eq!(JobFacts::decode(&mut r).unwrap(), f);
    r.finish().unwrap();
    assert_eq!(f.refused_by, Some(1));
    assert_eq!((f.tasks, f.predicting, f.load), (14, 1, 5_000));
    // Classes out of order, or empty.
    let mut bytes = w.0.clone();
    let n = bytes.len();
    // The second class's byte, before its load's two (4,000 ns): class 2 after class 3.
    bytes[n - 3] = 2;
    assert_eq!(
        JobFacts::decode(&mut BodyReader::new(&bytes))
            .unwrap_err()
            .field,
        "class"
    );
}

/// Every rank's part of the string plan by the collectives and the searches, as
/// [`RankString`]s: the facts' reduce, the prefix scan, then each giver's searches over
/// the published records.
fn string_by_protocol(
    loads: &[Option<u64>],
    classes: &[LoadClasses],
    rng: &mut Rng,
) -> (Vec<RankString>, u64) {
    let size = loads.len() as u32;
    let epoch = 9;
    let mut facts: Vec<TreeReduce<JobFacts>> = (0..size)
        .map(|r| {
            let f = JobFacts::of(r, 1, false, loads[r as usize], &classes[r as usize]);
            lone_root(TreeReduce::new(
                Step::FactsUp,
                Step::FactsDown,
                r,
                size,
                epoch,
                f,
            ))
        })
        .collect();
    run(
        &mut facts,
        rng,
        epoch,
        TreeReduce::poll_send,
        handle_and_broadcast,
    );
    let job: Vec<JobFacts> = facts.iter().map(|t| t.result().cloned().unwrap()).collect();
    let split = job[0].split_class();
    let own = |r: usize| -> [Option<u64>; STRINGS] {
        match split {
            None => [loads[r], None],
            Some(c) => {
                let (d, ch) = classes[r].split(c);
                [loads[r].map(|_| d), loads[r].map(|_| ch)]
            }
        }
    };
    let means = |f: &JobFacts| match split {
        None => [f.mean(), 0],
        Some(c) => {
            let (d, ch) = f.split_means(c);
            [d, ch]
        }
    };
    let mut scans: Vec<ExclusiveScan<Prefix>> = (0..size)
        .map(|r| {
            let p = Prefix::of(own(r as usize), means(&job[r as usize]));
            ExclusiveScan::new(Step::StringScan, r, size, epoch, p)
        })
        .collect();
    run(
        &mut scans,
        rng,
        epoch,
        ExclusiveScan::poll_send,
        ExclusiveScan::handle_message,
    );
    // Each rank publishes its deficit intervals.
    let mine: Vec<Prefix> = (0..size as usize)
        .map(|r| Prefix::of(own(r), means(&job[r])))
        .collect();
    let before: Vec<Prefix> = scans
        .iter()
        .map(|s| s.result().unwrap().copied().unwrap_or_default())
        .collect();
    let published: Vec<Published> = (0..size as usize)
        .map(|r| {
            let mut p = Published {
                epoch: epoch as u32,
                ..Published::default()
            };
            for s in 0..STRINGS {
                p.deficit[s] = (before[r].strings[s].1, mine[r].strings[s].1);
            }
            // Through its bytes, as a reader gets it.
            Published::decode(&p.encode()).unwrap().unwrap()
        })
        .collect();
    let mut reads = 0u64;
    let out = (0..size as usize)
        .map(|r| {
            let search = |s: usize| {
                let a = before[r].strings[s].0;
                let mut q = ReceiverSearch::new(s, size, r as u32, a, a + mine[r].strings[s].0);
                while let Some(j) = q.poll_read() {
                    q.handle_record(j, &published[j as usize]);
                }
                (q.sends().unwrap().to_vec(), q.reads())
            };
            let strings = if split.is_some() { 2 } else { 1 };
            let receives = (0..strings)
                .map(|s| string::receives(&mine[r], s))
                .fold(0u64, u64::saturating_add);
            let (first, n0) = search(0);
            reads = reads.max(n0);
            match split {
                None => RankString {
                    sends: first,
                    receives,
                    split: None,
                },
                Some(class) => {
                    let (cheap, n1) = search(1);
                    reads = reads.max(n0 + n1);
                    RankString {
                        sends: Vec::new(),
                        receives,
                        split: Some(RankSplit {
                            class,
                            costly_sends: first,
                            cheap_sends: cheap,
                        }),
                    }
                }
            }
        })
        .collect();
    (out, reads)
}

#[test]
fn the_string_plan_by_collectives_is_the_global_plan_exactly() {
    let s = seed(13);
    let mut rng = Rng::from_keys(&[s]);
    for round in 0..300 {
        let n = 1 + rng.below(if round % 10 == 0 { 300 } else { 40 }) as usize;
        let skewed = round % 3 == 0;
        let loads: Vec<Option<u64>> = (0..n)
            .map(|i| {
                (rng.below(10) > 0).then(|| match skewed {
                    true if i % 7 == 0 => rng.below(1_000_000),
                    true => rng.below(100),
                    false => rng.below(1_000),
                })
            })
            .collect();
        let classes: Vec<LoadClasses> = loads.iter().map(|_| LoadClasses::default()).collect();
        let (got, reads) = string_by_protocol(&loads, &classes, &mut rng);
        let want = StringLoads::new(&loads);
        for r in 0..n as u32 {
            assert_eq!(
                got[r as usize],
                want.rank_string(r),
                "seed {s} round {round} rank {r} of {n}"
            );
        }
        let bound = 2 * (64 - (n as u64).leading_zeros()) as u64 + 2;
        let most_sends = got.iter().map(|g| g.sends.len() as u64).max().unwrap_or(0);
        assert!(
            reads <= bound * (most_sends + 1),
            "seed {s}: {reads} reads for {most_sends} receivers at {n} ranks"
        );
    }
}

#[test]
fn the_split_string_plan_by_collectives_is_the_global_plan_exactly() {
    let s = seed(14);
    let mut rng = Rng::from_keys(&[s]);
    let mut splits = 0;
    for round in 0..200 {
        let n = 1 + rng.below(60) as usize;
        // Tasks of two kinds: many cheap (class 10–11), a few costly (class 14).
        let costs: Vec<Vec<u64>> = (0..n)
            .map(|_| {
                let k = rng.below(80) as usize;
                (0..k)
                    .map(|_| match rng.below(20) {
                        0 => (1 << 14) + rng.below(1 << 14),
                        _ => 1_500 + rng.below(1_000),
                    })
                    .collect()
            })
            .collect();
        let loads: Vec<Option<u64>> = costs.iter().map(|c| crate::predicted_load(c)).collect();
        let classes: Vec<LoadClasses> = costs.iter().map(|c| LoadClasses::of(c)).collect();
        let (got, _) = string_by_protocol(&loads, &classes, &mut rng);
        let ranks = loads.iter().flatten().count();
        let want = match crate::split_class(&classes, ranks) {
            None => StringLoads::new(&loads),
            Some(class) => {
                splits += 1;
                let split: Vec<Option<(u64, u64)>> = loads
                    .iter()
                    .zip(&classes)
                    .map(|(l, c)| l.map(|_| c.split(class)))
                    .collect();
                StringLoads::with_split(&split, class)
            }
        };
        for r in 0..n as u32 {
            assert_eq!(
                got[r as usize],
                want.rank_string(r),
                "seed {s} round {round} rank {r} of {n}"
            );
        }
    }
    assert!(
        splits > 20,
        "the split case was exercised ({splits} rounds)"
    );
}
