//! The job's front against moving bands of costly keys.

use super::*;

/// `ranks` ranks of `per` keys each from key 1,000; a band of costly keys
/// `[at, at + band)` (cost 1,000 a key, else 10).
fn profiles(ranks: u64, per: u64, at: u64, band: u64) -> Vec<RankProfile> {
    (0..ranks)
        .map(|r| {
            let span = KeySpan {
                lo: 1_000 + r * per,
                hi: 1_000 + (r + 1) * per - 1,
                count: per,
            };
            let cost = |k: u64| {
                if (at..at + band).contains(&k) {
                    1_000
                } else {
                    10
                }
            };
            RankProfile {
                now: span,
                last: Measured::of((span.lo..=span.hi).map(|k| (k, cost(k)))),
            }
        })
        .collect()
}

#[test]
fn sees_a_front_that_crosses_ranks() {
    // 200 ranks of 50 keys; a band of 400 keys moving 700 keys (14 ranks) an epoch.
    let mut f = JobFront::default();
    f.update(&profiles(200, 50, 3_000, 400));
    assert_eq!(f.shift(), 0, "one epoch: nothing to compare");
    assert!(f.loads(&profiles(200, 50, 0, 0)).is_none());
    let now = profiles(200, 50, 3_700, 400);
    f.update(&now);
    assert!(f.shift().abs_diff(700) <= 10, "shift {}", f.shift());
    // The next epoch's loads: the band at 4,400..4,800.
    let want = profiles(200, 50, 4_400, 400);
    let got = f.loads(&now).expect("a shift");
    assert_eq!(f.shift(), 700, "the moments make the centres exact");
    for (r, (g, w)) in got.iter().zip(&want).enumerate() {
        // The first 14 ranks' sources lie before the job's keys: found round the
        // axis, which moved as a periodic one (below).
        let Some(g) = g else {
            panic!("rank {r}: no prediction");
        };
        let (g, w) = (*g as f64, w.last.load as f64);
        assert!((g - w).abs() <= 0.25 * w, "rank {r}: {g} vs {w}");
    }
    // A rank's own keys: its own cost where it knows the source, the density elsewhere.
    let keys: Vec<u64> = (4_400..4_450).collect();
    let p = f.predict(&keys, |_| None).expect("a shift");
    let costly = p.iter().filter(|&&c| c >= 900).count();
    assert!(costly >= 40, "{p:?}");
    let p = f.predict(&keys, Some).expect("a shift");
    assert_eq!(p[0], 4_400 - f.shift() as u64, "own knowledge first");
}

#[test]
fn finds_sources_round_a_periodic_axis() {
    // The band moves 700 keys; the 700 keys that enter at the axis's start cost what
    // the last 700 cost an epoch before (cheap): a periodic domain.
    let mut f = JobFront::default();
    f.update(&profiles(200, 50, 3_000, 400));
    let now = profiles(200, 50, 3_700, 400);
    f.update(&now);
    assert_eq!(f.shift(), 700);
    assert!(f.movement().period.is_some());
    let got = f.loads(&now).expect("a shift");
    for (r, g) in got.iter().enumerate().take(14) {
        assert_eq!(
            *g,
            Some(500),
            "rank {r}: 50 cheap keys, found round the axis"
        );
    }
    let keys: Vec<u64> = (1_000..1_050).collect();
    let p = f.predict(&keys, |_| None).expect("a shift");
    assert!(p.iter().all(|&c| c == 10), "{p:?}");
    // The same move, but what entered does not match what left: no period, and the
    // entering ranks' sources are unknown again.
    let mut f = JobFront::default();
    f.update(&profiles(200, 50, 3_000, 400));
    let mut entered = profiles(200, 50, 3_700, 400);
    for p in entered.iter_mut().take(14) {
        let span = p.last.span;
        p.last = Measured::of((span.lo..=span.hi).map(|k| (k, 30)));
    }
    f.update(&entered);
    assert!(f.shift() > 500, "shift {}", f.shift());
    assert!(f.movement().period.is_none());
    let got = f.loads(&entered).expect("a shift");
    assert!(got.iter().take(10).all(Option::is_none), "{got:?}");
}

#[test]
fn keeps_still_costs_and_overlapping_spans_to_the_ranks() {
    let mut f = JobFront::default();
    f.update(&profiles(50, 20, 1_300, 100));
    f.update(&profiles(50, 20, 1_300, 100));
    assert_eq!(f.shift(), 0, "the band stayed");
    assert!(f.predict(&[1_300], |_| None).is_none());
    // Random keys: spans that overlap give no density, hence no shift.
    let span = KeySpan {
        lo: 0,
        hi: u64::MAX,
        count: 4,
    };
    let p = RankProfile {
        now: span,
        last: Measured {
            span,
            load: 100,
            parts: vec![(0, 4, 100)],
            ..Measured::default()
        },
    };
    assert_eq!(p.last.check(), Ok(()));
    let two = [p.clone(), p];
    let mut f = JobFront::default();
    f.update(&two);
    f.update(&two);
    assert_eq!(f.shift(), 0);
}

#[test]
fn parts_resolve_a_rank_finer_and_remote_profiles_are_checked() {
    // One rank of 1,000 keys whose keys 302..397 are costly: parts of 8 keys (half the
    // budget by length), split where the cost jumps; of 2,000 keys or more, at most
    // 256 parts.
    let costly = |k: u64| (302..397).contains(&k);
    let m = Measured::of(
        (0..1_000u64)
            .rev()
            .map(|k| (k, if costly(k) { 100 } else { 1 })),
    );
    assert!(m.parts.len() <= 128 + 2, "{}", m.parts.len());
    assert_eq!(m.parts.iter().map(|p| p.1).sum::<u64>(), 1_000);
    let spans: Vec<(u64, u64)> = (0..m.parts.len()).map(|i| m.part_span(i)).collect();
    assert_eq!((spans[0].0, spans[spans.len() - 1].1), (0, 999));
    assert!(spans.windows(2).all(|w| w[1].0 == w[0].1 + 1), "{spans:?}");
    assert!(spans.iter().all(|s| s.1 - s.0 < 8), "{spans:?}");
    for n in [2_000u64, 100_000] {
        let long = Measured::of((0..n).map(|k| (k, 1 + k % 3 * 1_000)));
        let n_parts = long.parts.len();
        assert!(
            (PARTS_MAX - 2..=PARTS_MAX).contains(&n_parts),
            "{n} keys: {n_parts}"
        );
        let widest = (0..n_parts)
            .map(|i| long.part_span(i))
            .map(|s| s.1 - s.0 + 1);
        assert!(
            widest.max().unwrap() <= n.div_ceil(128),
            "{n} keys: the budget kept"
        );
        assert_eq!(long.check(), Ok(()));
    }
    let d = Density::new(&[RankProfile {
        now: m.span,
        last: m.clone(),
    }])
    .unwrap();
    assert_eq!(d.at(350), Some(100.0), "inside the costly keys");
    assert_eq!(
        [d.at(301), d.at(302), d.at(396), d.at(397)],
        [Some(1.0), Some(100.0), Some(100.0), Some(1.0)],
        "the band's edges to the key, wherever the parts' lengths put them"
    );
    assert_eq!(d.at(700), Some(1.0));
    assert_eq!(m.check(), Ok(()));
    // What a remote rank sent is checked.
    let mut bad = m.clone();
    bad.parts[3].1 += 1;
    assert!(
        bad.check().unwrap_err().to_string().contains("keys in"),
        "{:?}",
        bad.check()
    );
    let mut bad = m.clone();
    bad.parts[3].2 += 1;
    assert!(
        bad.check()
            .unwrap_err()
            .to_string()
            .contains("parts of 1000 keys and")
    );
    let mut bad = m.clone();
    bad.parts = (0..=PARTS_MAX as u64).map(|k| (k, 1, 1)).collect();
    assert!(
        bad.check()
            .unwrap_err()
            .to_string()
            .contains("257 parts for 1000 keys")
    );
    let mut bad = m.clone();
    bad.parts[0].0 = 1;
    assert!(
        bad.check()
            .unwrap_err()
            .to_string()
            .contains("first part starts at key 1")
    );
    let mut bad = m.clone();
    bad.parts.swap(4, 5);
    assert!(
        bad.check()
            .unwrap_err()
            .to_string()
            .contains("part 5 starts at key")
    );
    let mut bad = m.clone();
    bad.parts.last_mut().unwrap().0 = 1_000;
    assert!(bad.check().is_err(), "a part past the span");
    // More keys than a part's range holds would put keys outside it.
    let one = Measured {
        span: KeySpan {
            lo: 10,
            hi: 11,
            count: 2,
        },
        load: 5,
        parts: vec![(10, 0, 0), (11, 2, 5)],
        ..Measured::default()
    };
    assert!(
        one.check()
            .unwrap_err()
            .to_string()
            .contains("part 0 holds 0 keys")
    );
    let backwards = RankProfile {
        now: KeySpan {
            lo: 9,
            hi: 3,
            count: 2,
        },
        last: Measured::default(),
    };
    assert!(
        backwards
            .check()
            .unwrap_err()
            .to_string()
            .contains("2 keys in the span 9..=3")
    );
    let mut bad = m;
    bad.span.count = 5_000;
    assert!(
        bad.check()
            .unwrap_err()
            .to_string()
            .contains("5000 keys in the span")
    );
    assert_eq!(Measured::default().check(), Ok(()));
}

#[test]
fn densities_cover_gaps_and_spans() {
    let span = |lo, hi, count| KeySpan { lo, hi, count };
    let rank = |lo: u64, cost: u64| RankProfile {
        now: KeySpan::default(),
        last: Measured::of((lo..lo + 10).map(|k| (k, cost))),
    };
    let d = Density::new(&[rank(20, 30), rank(0, 10)]).unwrap();
    assert_eq!(
        d.centre(0),
        Some(24.5),
        "all above the floor lies in 20..=29"
    );
    assert_eq!(d.at(5), Some(10.0));
    assert_eq!(d.at(15), None);
    assert_eq!(d.at(-1), None);
    // The walk finds what a bisection does, keys rising or going back.
    let mut walk = d.walker();
    for k in [-1, 0, 5, 9, 15, 20, 29, 30, 3, 25, 2, 40, 0] {
        assert_eq!(walk(k), d.at(k), "key {k}");
    }
    // Keys 5..=24 moved by 0: 5 keys at 10, 5 at 30 covered (gap 10..20 unknown): the
    // covered mean, 20 a key, over 20 keys.
    assert_eq!(d.over(span(5, 24, 20), 0, None), Some(400));
    assert_eq!(d.over(span(40, 49, 10), 0, None), None);
    assert_eq!(d.over(span(40, 49, 10), 20, None), Some(300));
    assert_eq!(d.over(KeySpan::default(), 0, None), Some(0));
    assert_eq!(KeySpan::of(&[7, 3, 9]), span(3, 9, 3));
}
