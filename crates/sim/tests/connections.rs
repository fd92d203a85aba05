//! Connections at their price in the simulator: over the complete graph (`random`) ranks
//! connect on first contact, so each first operation between two ranks pays the model's
//! connect cost and charges it to both ends; over the small-world overlay they connect
//! to their fabric peers at open (charged outside the epoch) and never address anyone
//! else. Each rank's figures say how many ranks it exchanged operations with, how many
//! connections it holds and what they cost.

use titus_core::{Balancing, Config};
use titus_overlay::OverlayParams;
use titus_sim::{Job, Model, Outcome, SimTask, simulate};

const RANKS: u32 = 64;

/// Everything on the first 8 ranks: 1,600 tasks of 100 µs.
fn tasks() -> Vec<Vec<SimTask>> {
    (0..RANKS)
        .map(|r| {
            if r >= 8 {
                return Vec::new();
            }
            (0..200u64)
                .map(|i| SimTask {
                    kind: 0,
                    key: i,
                    cost_ns: 100_000,
                    payload: (u64::from(r) << 32 | i).to_le_bytes().to_vec(),
                    hint_ns: 0,
                    priority: 0,
                })
                .collect()
        })
        .collect()
}

fn run(balancing: Balancing, connect_ns: f64) -> Outcome {
    let mut core = Config::default();
    let mut overlay = OverlayParams {
        ranks: RANKS,
        shortcuts: 6,
        ..OverlayParams::default()
    };
    balancing
        .apply(&mut core, &mut overlay, RANKS, None)
        .unwrap();
    let mut model = Model::preset("ib-hdr").unwrap();
    model.connect_ns = connect_ns;
    model.connection_bytes = 1000.0;
    let job = Job {
        seed: 11,
        ..Job::new(core, overlay, model, tasks())
    };
    simulate(&job).unwrap_or_else(|v| panic!("{balancing:?}: {v}"))
}

#[test]
fn random_pays_each_first_contact_on_both_ends() {
    let c = 200_000.0;
    let out = run(Balancing::Random, c);
    let mut contacted = 0;
    for (r, o) in out.ranks.iter().enumerate() {
        // Lazily connected: the connections held are the ranks exchanged with, and each
        // pair's first contact was charged once to each end.
        assert_eq!(o.connections, o.peers, "rank {r}");
        assert_eq!(o.connect_ns, u64::from(o.peers) * c as u64, "rank {r}");
        assert_eq!(o.connection_bytes, f64::from(o.peers) * 1000.0, "rank {r}");
        assert!(o.peers < RANKS, "rank {r}");
        contacted += o.peers;
    }
    assert!(contacted > RANKS, "work moved: {contacted} contacts");
    // Free connections end the epoch sooner (virtual time: same seed, same job).
    let free = run(Balancing::Random, 0.0);
    assert!(free.ranks.iter().all(|o| o.connect_ns == 0));
    assert!(
        free.end_ns < out.end_ns,
        "{} ns free vs {} ns paying",
        free.end_ns,
        out.end_ns
    );
}

#[test]
fn smallworld_connects_its_peers_at_open_and_no_one_else() {
    let c = 200_000.0;
    let out = run(Balancing::Smallworld, c);
    let free = run(Balancing::Smallworld, 0.0);
    for (r, o) in out.ranks.iter().enumerate() {
        // Every fabric peer connected at open; the ranks exchanged with are among them.
        assert!(o.peers <= o.connections, "rank {r}");
        assert_eq!(
            o.connect_ns,
            u64::from(o.connections) * c as u64,
            "rank {r}"
        );
        assert_eq!(o.connection_bytes, f64::from(o.connections) * 1000.0);
    }
    // Connecting at open costs the epoch nothing: the same events, the same end.
    assert_eq!(out.end_ns, free.end_ns);
    assert_eq!(out.trace, free.trace);
}
