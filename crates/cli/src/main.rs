//! `titus`: the Titus command-line tool.
#![forbid(unsafe_code)]

mod calibrate;
mod fabric_bench;
mod launch;
mod limits;
mod overlay_cmd;
mod sim_cmd;
mod sim_uts;
mod trace_clocks;
mod trace_cmd;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Titus: distributed dynamic load balancing by work stealing over a small-world overlay.
#[derive(Debug, Parser)]
#[command(
    name = "titus",
    version,
    about,
    long_about = None,
    propagate_version = true,
    arg_required_else_help = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Build the small-world overlay and print its statistics: route lengths, degrees,
    /// shortcut lengths, the Moore bound, and what it cost to compute.
    Overlay(overlay_cmd::OverlayArgs),
    /// Start N ranks of a command on this machine, with the environment Titus's bootstrap
    /// reads; prefix their output with the rank; if one fails, stop the others and fail.
    Launch(launch::LaunchArgs),
    /// Latency (p50/p99) of each fabric operation and read bandwidth between 2 ranks, next
    /// to raw libfabric in the same run: `titus launch -n 2 -- titus fabric-bench`.
    FabricBench(fabric_bench::FabricBenchArgs),
    /// DLB_Bench on the simulator: the same core at thousands of ranks on virtual time
    /// (same flags and report as dlb-bench), and deterministic simulation testing
    /// (`--check --seeds N`).
    Sim(Box<sim_cmd::SimArgs>),
    /// Merge the ranks' timelines (`TITUS_TRACE=DIR`, `dlb-bench --trace DIR`) into one
    /// trace-event file for Perfetto or chrome://tracing, and summarize where each rank's
    /// time went.
    Trace(trace_cmd::TraceArgs),
}

/// A failure to report on one line, with exit code 2.
#[derive(Debug)]
pub struct UsageError(pub String);

impl<E: std::fmt::Display> From<E> for UsageError {
    fn from(e: E) -> Self {
        Self(e.to_string())
    }
}

fn main() -> ExitCode {
    titus_workload::quiet_broken_pipe();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            return match e.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
                    let _ = e.print();
                    ExitCode::SUCCESS
                }
                // Bare `titus`: its usage, and the exit code of a usage error.
                ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
                    let _ = e.print();
                    ExitCode::from(2)
                }
                _ => {
                    eprintln!("titus: error: {}", titus_workload::dlb::clap_error_line(&e));
                    ExitCode::from(2)
                }
            };
        }
    };
    if let Err(e) = titus_workload::init_logging() {
        eprintln!("titus: error: {e}");
        return ExitCode::from(2);
    }
    // Errors carry the subcommand's name, as its own messages do (`titus sim: error: …`).
    let (program, result) = match cli.command {
        Command::Overlay(args) => ("titus overlay", overlay_cmd::run(args).map(|()| 0)),
        Command::Launch(args) => ("titus launch", launch::run(args)),
        Command::FabricBench(args) => ("titus fabric-bench", fabric_bench::run(args).map(|()| 0)),
        Command::Sim(args) => (
            "titus sim",
            sim_cmd::check(&args).and_then(|()| match &args.calibrate {
                Some(preset) => calibrate::run(preset, args.out.as_deref()),
                None => sim_cmd::run(*args),
            }),
        ),
        Command::Trace(args) => ("titus trace", trace_cmd::run(&args)),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(UsageError(msg)) => {
            eprintln!("{program}: error: {msg}");
            ExitCode::from(2)
        }
    }
}
