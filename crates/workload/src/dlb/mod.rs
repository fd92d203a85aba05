//! DLB_Bench's command line, runs and reports, shared by `dlb-bench` (runs on the real
//! runtime) and `titus sim` (the same runs on the simulator): the flags, the profiles, the
//! list of runs (balancers × protocols × sweep points), the core and overlay
//! configuration of each run, and the report with its table, JSON and CSV (the plots of
//! the reports: `titus-plot`).

mod figures;
mod flags;
mod plan;
mod profile;
mod program;
mod report;
mod runs;

pub use figures::*;
pub use flags::*;
pub use plan::*;
pub use profile::*;
pub use program::*;
pub use report::*;
pub use runs::*;

use crate::{Cost, Distribution, Spec, TaskSpec, task};
use clap::ValueEnum;
use clap::builder::PossibleValue;
use serde::Serialize;
use std::path::PathBuf;
use titus_core::{Balancing, Config};
use titus_overlay::OverlayParams;

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        bench: BenchArgs,
    }

    fn args(a: &[&str]) -> BenchArgs {
        Cli::try_parse_from(std::iter::once("dlb-bench").chain(a.iter().copied()))
            .unwrap()
            .bench
    }

    #[test]
    fn none_runs_first_and_diffusion_doubles_the_balancers() {
        let rs = runs(&args(&[
            "--balancer",
            "master,none,smallworld",
            "--diffusion",
            "on,off",
        ]))
        .unwrap();
        let labels: Vec<String> = rs.iter().map(Run::label).collect();
        assert_eq!(
            labels,
            [
                "none",
                "master",
                "master/no-diffusion",
                "smallworld/claim",
                "smallworld/claim/no-diffusion"
            ]
        );
        assert_eq!(
            rs.iter().map(|r| r.diffusion).collect::<Vec<_>>(),
            [true, true, false, true, false]
        );
        assert!(runs(&args(&[])).unwrap().iter().all(|r| r.diffusion));
    }

    #[test]
    fn profiles_set_defaults_and_flags_override_them() {
        let p = plan(&args(&["--profile", "chem"]), 2).unwrap();
        assert_eq!((p.epochs, p.drift, p.payload), (8, 0.03, 48));
        assert_eq!(
            (p.cost, p.distribution),
            (CostArg::Bimodal, DistArg::Uniform)
        );
        assert_eq!(p.spec.tasks, 8192);
        assert!((p.spec.task_time - 12e-6).abs() < 1e-15);
        let p = plan(
            &args(&["--profile", "chem", "--epochs", "3", "--cost", "constant"]),
            2,
        )
        .unwrap();
        assert_eq!((p.epochs, p.cost), (3, CostArg::Constant));
        let q = plan(&args(&[]), 4).unwrap();
        assert_eq!((q.epochs, q.drift, q.cost), (1, 0.0, CostArg::Constant));
    }

    fn row(balancer: &'static str, epoch: u32, resolution_s: f64) -> Report {
        let run = runs(&args(&[])).unwrap()[0].clone();
        let plan = plan(&run.args, 2).unwrap();
        let all = crate::generate(&plan.spec).unwrap();
        let figs = vec![
            RankFigures {
                busy: resolution_s,
                session: resolution_s,
                ..RankFigures::default()
            };
            2
        ];
        let mut r = report(&run, &plan, epoch, &all, &figs, 0.0);
        r.balancer = balancer;
        r
    }

    #[test]
    fn speedup_is_over_none_on_the_same_epoch_and_the_summary_skips_epoch_0() {
        let none: Vec<(String, Report)> = (0..3)
            .map(|e| ("none".to_string(), row("none", e, 2.0 + f64::from(e))))
            .collect();
        let sw = row("smallworld", 1, 1.5);
        assert_eq!(speedup(&none, &sw), Some(2.0), "3.0 s / 1.5 s");
        assert_eq!(speedup(&none[..1], &sw), None, "no epoch 1 of none");
        assert_eq!(speedup(&[], &sw), None);
        // Nominal efficiency: the drawn costs (the quick profile at 2 ranks: 200 tasks of
        // 2.5 ms) over ranks × resolution.
        let total: f64 = 200.0 * 0.0025;
        assert!((sw.nominal_efficiency - total / (2.0 * 1.5)).abs() < 1e-9);
        assert!((sw.efficiency - 1.0).abs() < 1e-12, "busy = session");
        let mut rows: Vec<Report> = (0..3).map(|e| row("smallworld", e, 1.0)).collect();
        rows[0].steals_ok = 100;
        rows[1].steals_ok = 4;
        rows[2].steals_ok = 6;
        let s = summarize(&rows).unwrap();
        assert_eq!((s.epochs, s.steals_per_epoch), (2, 5.0));
        assert_eq!(s.speedup, None);
        assert!(summarize(&rows[..1]).is_none(), "one epoch, no summary");
        assert!(epoch_summary(&rows).unwrap().contains("5.0 steals"));
    }

    #[test]
    fn connections_join_both_directions_and_count_opened_peers() {
        // Rank 0 contacted 1 and 2 lazily; rank 2 contacted 3 lazily; rank 3 opened
        // eagerly to 1 and 2 and contacted nobody.
        let lazy = |c: Vec<u32>| RankConnections {
            contacted: c,
            opened: Vec::new(),
            connect_s: 0.5,
            lazy: true,
            bytes_per_connection: 1024.0,
        };
        let all = vec![
            lazy(vec![1, 2]),
            lazy(vec![]),
            lazy(vec![3, 2]),
            RankConnections {
                opened: vec![1, 2],
                lazy: false,
                ..lazy(vec![])
            },
        ];
        let back: Vec<RankConnections> = all
            .iter()
            .map(|c| RankConnections::decode(&c.encode(), 4))
            .collect();
        assert_eq!(back, all);
        let l = connection_figures(&back);
        let peers: Vec<u32> = l.iter().map(|x| x.peers).collect();
        assert_eq!(peers, [2, 1, 2, 1], "2 itself is not a peer of 2");
        // Rank 3 holds its opened peers 1 and 2 (2 also exchanged): two connections.
        assert_eq!(l[3].bytes, 2048.0);
        assert_eq!(l[0].bytes, 2048.0);
        // A blob naming ranks outside the job loses them.
        let mut bad = all[0].clone();
        bad.contacted = vec![1, 99];
        assert_eq!(RankConnections::decode(&bad.encode(), 4).contacted, [1]);
    }

    #[test]
    fn a_rank_s_operations_by_kind_travel_and_reach_the_report() {
        let mut f = RankFigures {
            busy: 1.0,
            session: 1.0,
            ops: 7,
            ..RankFigures::default()
        };
        f.op_latency[0] = titus_core::OpLatency {
            count: 4,
            ns: 100_000,
        };
        f.op_latency[4] = titus_core::OpLatency {
            count: 3,
            ns: 90_000,
        };
        f.between = 0.004;
        f.betweens = 2_000;
        f.grains = 700;
        let back = RankFigures::decode(&f.encode());
        assert_eq!((back.ops, back.op_latency), (7, f.op_latency));
        assert_eq!(
            (back.between, back.betweens, back.grains),
            (0.004, 2_000, 700)
        );
        // A blob of an older encoding (no kinds) reads as none completed.
        let old = encode_f64s(&decode_f64s(&f.encode())[..17]);
        assert_eq!(
            RankFigures::decode(&old).op_latency,
            [titus_core::OpLatency::default(); 6]
        );
        let run = runs(&args(&[])).unwrap()[0].clone();
        let plan = plan(&run.args, 2).unwrap();
        let all = crate::generate(&plan.spec).unwrap();
        let r = report(&run, &plan, 0, &all, &[back, RankFigures::default()], 0.0);
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["op_latency"][0]["read"]["count"], 4);
        assert_eq!(v["op_latency"][0]["read"]["mean_us"], 25.0);
        assert_eq!(v["op_latency"][0]["fetch-add"]["mean_us"], 30.0);
        assert!(
            v["op_latency"][0].get("cas").is_none(),
            "kinds not issued are left out"
        );
        assert_eq!(v["op_latency"][1], serde_json::json!({}));
        // The time between tasks: 4 ms over 2,000 gaps; none where no gap was counted.
        assert_eq!(v["between_tasks_us"], serde_json::json!([2.0, 0.0]));
        assert_eq!(v["grains"], serde_json::json!([700, 0]));
    }
}
