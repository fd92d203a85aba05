//! `titus overlay`: build the overlay, route sampled pairs, print the figures.

use crate::UsageError;
use clap::{Args, ValueEnum};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use titus_overlay::stats::{self, OverlayStats, StatsParams, Summary};
use titus_overlay::{
    DEFAULT_SEED, DEFAULT_SHORTCUTS, Graph, Lattice, LatticeKind, Overlay, OverlayParams, Routing,
    ShortcutDraw,
};

/// The largest `--reach`. The default is 1 (a ring's two neighbours); at 2^16 a ring row
/// already holds 2^17 lattice neighbours, twice [`titus_overlay::SHORTCUTS_MAX`], past
/// which a row only costs memory and connections. A fixed cap rather than the lattice's
/// diameter, so the bound does not move with `--ranks` and `--lattice`: a ball that is
/// large because the torus is passes the memory check in [`run`] or is refused by it.
const REACH_MAX: u32 = 1 << 16;

/// The most worker threads: more than any machine's cores, and each is a real thread
/// (stack and all) for building rows and routing.
const THREADS_MAX: usize = 1024;

/// The most `--pairs`: at about 2 µs a route (10^4 ranks, one core), 10^9 pairs is half an
/// hour of one core, and the hop histogram's printed percentages settle long before.
/// Pairs are drawn and routed as they go (a histogram per thread), so they hold no memory.
const PAIRS_MAX: u64 = 1_000_000_000;

/// Lattice under the overlay.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum LatticeArg {
    /// 1-D ring over rank numbers.
    Ring,
    /// 2-D torus, ranks in row-major order.
    Torus2,
    /// 3-D torus, ranks in row-major order.
    Torus3,
}

/// Routing rule.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum RoutingArg {
    /// Forward to the neighbour closest to the destination.
    Greedy,
    /// Neighbour-of-neighbour greedy: forward to the neighbour whose row comes closest.
    Non,
}

#[derive(Debug, Args)]
pub struct OverlayArgs {
    /// Number of ranks N.
    #[arg(long, allow_negative_numbers = true, default_value_t = 10_000)]
    ranks: u32,
    /// Shortcuts drawn per rank, k (clamped, with a note, to what N allows).
    #[arg(long, allow_negative_numbers = true, default_value_t = DEFAULT_SHORTCUTS)]
    shortcuts: u32,
    /// Kleinberg exponent p: a shortcut reaches a given rank at distance D with
    /// probability ∝ D^-p [default: the lattice dimension].
    #[arg(long, allow_negative_numbers = true)]
    exponent: Option<f64>,
    /// How shortcuts are drawn: kleinberg (each rank draws its own; in-degree as chance
    /// gives it) or paired (rounds of matchings: every shortcut goes both ways, so a
    /// rank's peers are at most its lattice neighbours plus k).
    #[arg(long, value_name = "DRAW", default_value = "kleinberg", value_parser = parse_draw)]
    shortcut_draw: ShortcutDraw,
    /// Lattice the overlay is built over.
    #[arg(long, value_enum, default_value_t = LatticeArg::Ring)]
    lattice: LatticeArg,
    /// Torus extents, e.g. 100x100 (must multiply to --ranks) [default: near-cubic].
    #[arg(long, value_parser = parse_shape)]
    shape: Option<Shape>,
    /// Lattice neighbours: every rank within this lattice distance (1 to 65,536).
    #[arg(long, allow_negative_numbers = true, default_value_t = 1)]
    reach: u32,
    /// Routing rule.
    #[arg(long, value_enum, default_value_t = RoutingArg::Non)]
    routing: RoutingArg,
    /// Route over out ∪ in edges (TITUS keeps its edges symmetric).
    #[arg(long)]
    symmetric: bool,
    /// Source-destination pairs to route (uniform over distinct ranks; at most 10^9).
    #[arg(long, allow_negative_numbers = true, default_value_t = 100_000)]
    pairs: u64,
    /// Seed of the overlay and of the pairs.
    #[arg(long, allow_negative_numbers = true, default_value_t = DEFAULT_SEED)]
    seed: u64,
    /// Worker threads, 1 to 1,024 [default: the available cores].
    #[arg(long, allow_negative_numbers = true)]
    threads: Option<usize>,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
    /// Write the graph, one line per rank: `RANK: N1 N2 ...` (out-neighbours, ascending).
    #[arg(long, value_name = "FILE")]
    export: Option<PathBuf>,
}

fn parse_draw(s: &str) -> Result<ShortcutDraw, String> {
    ShortcutDraw::parse(s).map_err(|e| e.to_string())
}

/// Torus extents from `--shape`.
#[derive(Debug, Clone)]
struct Shape(Vec<u32>);

fn parse_shape(s: &str) -> Result<Shape, String> {
    s.split(['x', 'X', ','])
        .map(|p| {
            p.trim()
                .parse::<u32>()
                .map_err(|_| format!("'{s}' is not a shape like 100x100 or 16x16x14"))
        })
        .collect::<Result<_, _>>()
        .map(Shape)
}

pub fn run(args: OverlayArgs) -> Result<(), UsageError> {
    let lattice = match args.lattice {
        LatticeArg::Ring => LatticeKind::Ring,
        LatticeArg::Torus2 => LatticeKind::Torus2,
        LatticeArg::Torus3 => LatticeKind::Torus3,
    };
    let routing = match args.routing {
        RoutingArg::Greedy => Routing::Greedy,
        RoutingArg::Non => Routing::Non,
    };
    if let Some(t) = args.threads
        && !(1..=THREADS_MAX).contains(&t)
    {
        return Err(UsageError(format!(
            "--threads {t}: expected 1..={THREADS_MAX}"
        )));
    }
    if !(1..=REACH_MAX).contains(&args.reach) {
        return Err(UsageError(format!(
            "--reach {}: expected 1..={REACH_MAX} (the lattice distance of a rank's neighbours)",
            args.reach
        )));
    }
    if args.pairs > PAIRS_MAX {
        return Err(UsageError(format!(
            "--pairs {}: expected at most {PAIRS_MAX}",
            args.pairs
        )));
    }
    if args.shortcuts > titus_overlay::SHORTCUTS_MAX {
        return Err(UsageError(format!(
            "--shortcuts {}: expected 0..={}",
            args.shortcuts,
            titus_overlay::SHORTCUTS_MAX
        )));
    }
    let shape = args.shape.map(|s| s.0);
    // Memory first: the overlay builds its lattice ball (24 bytes a neighbour) as it
    // starts, and the statistics hold every row twice (out and in): 4 bytes a neighbour
    // plus a row's vector headers, per rank. A row is at most the ball plus the shortcuts
    // (both bounded by the other ranks), counted without building either.
    let ball = Lattice::new(lattice, args.ranks, shape.as_deref())
        .map_err(|e| UsageError(format!("{e}")))?
        .ball_len(args.reach);
    let degree = ball
        .saturating_add(u64::from(args.shortcuts))
        .min(u64::from(args.ranks) - 1);
    crate::limits::check_fits(
        &format!(
            "the statistics of {} ranks of {degree} neighbours each",
            args.ranks
        ),
        u64::from(args.ranks)
            .saturating_mul(2 * 4 * degree + 64)
            .saturating_add(24 * ball),
    )?;
    let overlay = Overlay::new(OverlayParams {
        ranks: args.ranks,
        lattice,
        shape,
        reach: args.reach,
        shortcuts: args.shortcuts,
        exponent: args.exponent,
        seed: args.seed,
        draw: args.shortcut_draw,
    })
    .map_err(|e| UsageError(format!("{e}")))?;
    // Open the export file before the work, so a bad path fails at once.
    let export = match &args.export {
        Some(path) => Some(BufWriter::new(File::create(path).map_err(|e| {
            UsageError(format!(
                "cannot write --export file '{}': {e}",
                path.display()
            ))
        })?)),
        None => None,
    };
    for note in overlay.notes() {
        eprintln!("titus: note: {note}");
    }
    let sp = StatsParams {
        pairs: args.pairs,
        routing,
        symmetric: args.symmetric,
        threads: args
            .threads
            .unwrap_or_else(|| StatsParams::default().threads),
        ..StatsParams::default()
    };
    let (stats, graph) = stats::compute(&overlay, &sp);
    if let (Some(mut w), Some(path)) = (export, &args.export) {
        write_graph(&mut w, &graph)
            .and_then(|()| w.flush())
            .map_err(|e| {
                UsageError(format!(
                    "cannot write --export file '{}': {e}",
                    path.display()
                ))
            })?;
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string(&stats).map_err(|e| UsageError(e.to_string()))?
        );
    } else {
        print!("{}", table(&stats));
    }
    Ok(())
}

fn write_graph(w: &mut impl Write, graph: &Graph) -> std::io::Result<()> {
    for r in 0..graph.len() as u32 {
        write!(w, "{r}:")?;
        for v in graph.neighbours(r) {
            write!(w, " {v}")?;
        }
        writeln!(w)?;
    }
    Ok(())
}

fn summary_line(name: &str, s: &Summary) -> String {
    format!(
        "{name:<16}min {:<5} mean {:<8.2} p50 {:<5} p99 {:<5} max {}\n",
        s.min, s.mean, s.p50, s.p99, s.max
    )
}

fn table(s: &OverlayStats) -> String {
    let mut out = String::new();
    let shape: Vec<String> = s.shape.iter().map(u32::to_string).collect();
    out += &format!(
        "overlay         {} ranks, {} {}, reach {}, {} shortcuts per rank ({}, p = {}), seed {}\n",
        s.ranks,
        s.lattice,
        shape.join("x"),
        s.reach,
        s.shortcuts,
        s.draw.name(),
        s.exponent,
        s.seed
    );
    out += &format!(
        "routing         {} over {} edges, {} pairs\n",
        s.routing,
        if s.symmetric { "out ∪ in" } else { "out" },
        s.hops.pairs
    );
    out += &format!(
        "hops            mean {:.3}  p50 {}  p99 {}  max {}   (Moore bound {:.3} for mean degree {:.1})\n",
        s.hops.mean, s.hops.p50, s.hops.p99, s.hops.max, s.moore_bound, s.routing_degree
    );
    let total = s.hops.pairs.max(1) as f64;
    let hist: Vec<String> = s
        .hops
        .histogram
        .iter()
        .enumerate()
        .filter(|(_, c)| **c > 0)
        .map(|(h, c)| format!("{h}: {:.2}%", 100.0 * *c as f64 / total))
        .collect();
    out += &format!("hop histogram   {}\n", hist.join("  "));
    out += &summary_line("out-degree", &s.out_degree);
    out += &summary_line("in-degree", &s.in_degree);
    out += &summary_line("connections", &s.connections);
    out += &format!(
        "shortcut length fitted exponent {}\n",
        s.fitted_exponent
            .map_or("n/a (too few shortcuts)".to_string(), |p| format!("{p:.3}"))
    );
    out += "  distance          shortcuts   P(link to a given rank)\n";
    for b in &s.shortcut_distances {
        out += &format!(
            "  {:<17} {:<11} {:.3e}\n",
            format!("{}..{}", b.lo, b.hi),
            b.count,
            b.link_probability
        );
    }
    let t = &s.timing;
    out += &format!(
        "timing          row {:.2} µs (p99 {:.2} µs), graph {:.3} s, degrees {:.3} s, routing {:.3} s, total {:.3} s\n",
        t.row_us, t.row_p99_us, t.graph_s, t.degrees_s, t.routing_s, t.total_s
    );
    out
}
