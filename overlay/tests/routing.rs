//! Property tests: every row is well formed, and every route ends, with each hop strictly
//! decreasing the routing rule's potential (lattice distance for greedy, Φ for non; see
//! `route`'s module doc), so that a route is never longer than the lattice distance.
//!
//! proptest prints the smallest failing parameters (seed included) on failure; set
//! PROPTEST_CASES to run more cases.

use proptest::prelude::*;
use titus_overlay::route::{self, Routing};
use titus_overlay::{Graph, LatticeKind, Overlay, OverlayParams, ShortcutDraw};

fn lattice_kind() -> impl Strategy<Value = LatticeKind> {
    prop_oneof![
        Just(LatticeKind::Ring),
        Just(LatticeKind::Torus2),
        Just(LatticeKind::Torus3)
    ]
}

fn overlay_params() -> impl Strategy<Value = OverlayParams> {
    (
        1u32..2500,
        lattice_kind(),
        1u32..4,
        0u32..70,
        prop_oneof![Just(None), (0.0f64..4.0).prop_map(Some)],
        any::<u64>(),
        prop_oneof![Just(ShortcutDraw::Kleinberg), Just(ShortcutDraw::Paired)],
    )
        .prop_map(
            |(ranks, lattice, reach, shortcuts, exponent, seed, draw)| OverlayParams {
                ranks,
                lattice,
                shape: None,
                reach,
                shortcuts,
                exponent,
                seed,
                draw,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(64),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn rows_are_well_formed(params in overlay_params(), probe in any::<u32>()) {
        let o = Overlay::new(params).unwrap();
        let n = o.ranks();
        let r = probe % n;
        let row = o.row(r);
        if o.params().draw == ShortcutDraw::Kleinberg || o.is_complete() {
            prop_assert_eq!(row.len() as u32, o.out_degree().min(n - 1));
        } else {
            // Paired: at most k shortcuts, and every one goes both ways.
            prop_assert!(row.len() as u32 <= o.out_degree());
            for &v in &row {
                prop_assert!(o.row(v).contains(&r), "{} -> {} but not back", r, v);
            }
        }
        prop_assert!(row.windows(2).all(|w| w[0] < w[1]), "row not strictly ascending: {:?}", row);
        prop_assert!(!row.contains(&r), "self-loop");
        prop_assert!(row.iter().all(|&v| v < n));
        let reach = o.params().reach;
        for v in 0..n {
            if v != r && o.lattice().distance(r, v) <= reach {
                prop_assert!(row.contains(&v), "lattice neighbour {} missing from row of {}", v, r);
            }
        }
        prop_assert_eq!(row, o.row(r), "rows must be deterministic");
    }

    #[test]
    fn every_route_ends_and_each_hop_makes_progress(
        params in overlay_params(),
        routing in prop_oneof![Just(Routing::Greedy), Just(Routing::Non)],
        symmetric in any::<bool>(),
        pairs in proptest::collection::vec((any::<u32>(), any::<u32>()), 1..40),
    ) {
        let o = Overlay::new(params).unwrap();
        let n = o.ranks();
        let out = Graph::build(&o, 2);
        let g = if symmetric { out.symmetrized() } else { out };
        let l = o.lattice();
        for (a, b) in pairs {
            let (src, dst) = (a % n, b % n);
            let mut cur = src;
            let mut hops = 0;
            while cur != dst {
                let before = route::potential(l, &g, routing, cur, dst);
                let next = route::next_hop(l, &g, routing, cur, dst);
                prop_assert!(next.is_some(), "rank {} has no next hop to {}", cur, dst);
                let next = next.unwrap();
                prop_assert!(g.neighbours(cur).contains(&next), "hop {} -> {} is not an edge", cur, next);
                let after = route::potential(l, &g, routing, next, dst);
                prop_assert!(after < before, "potential {} -> {} does not decrease ({} -> {})", cur, next, before, after);
                cur = next;
                hops += 1;
            }
            let d = l.distance(src, dst);
            prop_assert!(hops <= d, "{} hops for distance {}", hops, d);
            prop_assert_eq!(hops, route::hops(l, &g, routing, src, dst));
        }
    }
}
