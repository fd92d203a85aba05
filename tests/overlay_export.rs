//! `titus overlay --export` writes the graph the library computes, and routes over the
//! exported graph reach every destination within the lattice distance.

use std::process::Command;
use titus_overlay::route::{self, Routing};
use titus_overlay::{Graph, LatticeKind, Overlay, OverlayParams};

#[test]
fn exported_graph_is_the_librarys() {
    let dir = std::env::temp_dir().join(format!("titus-export-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (lattice, ranks, shortcuts) in [
        ("ring", 1500u32, 20u32),
        ("torus3", 1000, 9),
        ("ring", 3, 5),
    ] {
        let file = dir.join(format!("{lattice}-{ranks}.txt"));
        let out = Command::new(titus_tests::bin("titus"))
            .args([
                "overlay",
                "--lattice",
                lattice,
                "--pairs",
                "100",
                "--seed",
                "42",
            ])
            .args([
                "--ranks",
                &ranks.to_string(),
                "--shortcuts",
                &shortcuts.to_string(),
            ])
            .arg("--export")
            .arg(&file)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = std::fs::read_to_string(&file).unwrap();
        let kind: LatticeKind = lattice.parse().unwrap();
        let overlay = Overlay::new(OverlayParams {
            ranks,
            lattice: kind,
            shortcuts,
            seed: 42,
            ..OverlayParams::default()
        })
        .unwrap();
        let mut rows = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let (rank, rest) = line.split_once(':').expect("RANK: N1 N2 ...");
            assert_eq!(rank.parse::<usize>().unwrap(), i, "lines are in rank order");
            let row: Vec<u32> = rest
                .split_whitespace()
                .map(|v| v.parse().unwrap())
                .collect();
            assert_eq!(row, overlay.row(i as u32), "{lattice} rank {i}");
            rows.push(row);
        }
        assert_eq!(rows.len(), ranks as usize);
        // Route between every pair of a sample over the exported graph.
        let g = Graph::from_rows(rows);
        let l = overlay.lattice();
        for src in (0..ranks).step_by(97) {
            for dst in (0..ranks).step_by(89) {
                for routing in [Routing::Greedy, Routing::Non] {
                    assert!(route::hops(l, &g, routing, src, dst) <= l.distance(src, dst));
                }
            }
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}
