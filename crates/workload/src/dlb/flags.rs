//! DLB_Bench's flags (`dlb-bench`, `titus sim`, `parity-bench`), and their checks.

use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
/// Task cost distribution.
pub enum CostArg {
    /// Every task costs the mean (TITUS).
    Constant,
    /// Exponential around the mean.
    Exponential,
    /// Lognormal (σ = 1) with the mean.
    Lognormal,
    /// A contiguous 10% reaction zone of tasks 30× costlier.
    Bimodal,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
/// Initial ownership of the tasks.
pub enum DistArg {
    /// TITUS: 10% of the ranks hold ~70% of the tasks.
    Gaussian,
    /// Even counts.
    Uniform,
    /// Everything on rank 0.
    One,
    /// Counts per rank from --counts FILE.
    File,
}

/// A `--balancer` value: one balancer (named as [`Balancing`] names them), or `all`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BalancerArg {
    /// One balancer.
    One(Balancing),
    /// Every balancer, one after the other.
    All,
}

impl ValueEnum for BalancerArg {
    fn value_variants<'a>() -> &'a [Self] {
        const ALL: [BalancerArg; 6] = [
            BalancerArg::One(Balancing::ALL[0]),
            BalancerArg::One(Balancing::ALL[1]),
            BalancerArg::One(Balancing::ALL[2]),
            BalancerArg::One(Balancing::ALL[3]),
            BalancerArg::One(Balancing::ALL[4]),
            BalancerArg::All,
        ];
        &ALL
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(match self {
            Self::One(b) => PossibleValue::new(b.name()).help(b.about()),
            Self::All => {
                PossibleValue::new("all").help("Every balancer above, one after the other")
            }
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
/// A mechanism's switch (`--diffusion`, `--advertise`, ...).
pub enum Switch {
    /// The mechanism runs.
    On,
    /// It does not.
    Off,
}

/// Whether a run's switch is on: a run's arguments hold one value (the first of a list).
pub fn on(switch: &[Switch]) -> bool {
    switch.first() == Some(&Switch::On)
}

/// A switch's values, duplicates dropped, order kept (none given: `default`).
pub(super) fn parse_draw(s: &str) -> Result<titus_overlay::ShortcutDraw, String> {
    titus_overlay::ShortcutDraw::parse(s).map_err(|e| e.to_string())
}

pub(super) fn switch_values(list: &[Switch], default: Switch) -> Vec<Switch> {
    let mut out = Vec::new();
    for &x in list {
        if !out.contains(&x) {
            out.push(x);
        }
    }
    if out.is_empty() {
        out.push(default);
    }
    out
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
/// Where diffusion sends excess predicted load (`--diffusion-plan`,
/// `titus_core::DiffusionPlan`).
pub enum PlanArg {
    /// One round of first-order diffusion to overlay neighbours.
    Neighbours,
    /// RankDLB's string: excess matched to deficits in rank order, routed through the
    /// overlay.
    String,
}

impl PlanArg {
    /// The core's plan.
    pub fn plan(self) -> titus_core::DiffusionPlan {
        match self {
            Self::Neighbours => titus_core::DiffusionPlan::Neighbours,
            Self::String => titus_core::DiffusionPlan::String,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
/// How `--repartition` moves tasks (`titus_core::repartition::RepartitionPlan`).
pub enum RepartitionArg {
    /// Only to string neighbours, by the flows across each border.
    Neighbours,
    /// The string cut anew by predicted cost: contiguous ownership, any rank.
    Recut,
}

impl RepartitionArg {
    /// The core's plan.
    pub fn plan(self) -> titus_core::repartition::RepartitionPlan {
        match self {
            Self::Neighbours => titus_core::repartition::RepartitionPlan::Neighbours,
            Self::Recut => titus_core::repartition::RepartitionPlan::Recut,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
/// A steal protocol.
pub enum ProtocolArg {
    /// TITUS's lock protocol.
    Lock,
    /// One fetch-add claims a batch (the default).
    Claim,
    /// A request answered by the victim.
    Request,
    /// Every protocol, one after the other.
    All,
}

impl ProtocolArg {
    /// The core's protocol of one run (`all` runs `claim` first).
    pub fn protocol(self) -> titus_core::Protocol {
        match self {
            Self::Lock => titus_core::Protocol::Lock,
            Self::Claim | Self::All => titus_core::Protocol::Claim,
            Self::Request => titus_core::Protocol::Request,
        }
    }
}

/// DLB_Bench's flags (shared by `dlb-bench` and `titus sim`).
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// Ranks of an in-process run (under a launcher the launcher sets them).
    #[arg(long, default_value_t = 4, allow_negative_numbers = true)]
    pub ranks: u32,
    /// Named profile: quick, w1-s4k, w5-s1m, w10-s21m (per-rank work W/n and size S/n),
    /// or chem (a combustion code's time steps: 4,096 tasks of 12 µs mean and 48 B per
    /// rank, a bimodal front 10% wide and 30× costlier, uniform slabs, 8 epochs, drift 0.03).
    #[arg(long, default_value = "quick")]
    pub profile: String,
    /// Tasks over all ranks [default: the profile's].
    #[arg(long, allow_negative_numbers = true)]
    pub tasks: Option<u64>,
    /// Mean task duration, seconds [default: the profile's].
    #[arg(long, allow_negative_numbers = true)]
    pub task_time: Option<f64>,
    /// Task cost distribution [default: the profile's; constant but chem's bimodal].
    #[arg(long, value_enum)]
    pub cost: Option<CostArg>,
    /// Initial ownership of the tasks [default: the profile's; gaussian but chem's
    /// uniform].
    #[arg(long, value_enum)]
    pub distribution: Option<DistArg>,
    /// Epochs (time steps) each run makes, every task in each: same owner, index and
    /// payload data; its cost moves with --drift. Every epoch is verified and reported
    /// [default: the profile's; 1 but chem's 8].
    #[arg(long, value_name = "E", allow_negative_numbers = true)]
    pub epochs: Option<u32>,
    /// Drift of the cost pattern per epoch, a fraction D in [0, 1) of the global task
    /// list (tasks numbered rank by rank): epoch e's cost of task g is epoch 0's cost of
    /// task (g − round(e·D·T)) mod T over T tasks, so a bimodal reaction zone moves like a
    /// flame front over the ranks; ownership never changes [default: the profile's; 0
    /// but chem's 0.03].
    #[arg(long, value_name = "D", allow_negative_numbers = true)]
    pub drift: Option<f64>,
    /// Diffusion before stealing, from the last epoch's measured costs: on or off, or
    /// on,off to run each balancer both ways side by side.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "on")]
    pub diffusion: Vec<Switch>,
    /// Where diffusion sends a rank's excess: `neighbours` (one round of first-order
    /// diffusion to overlay neighbours) or `string` (RankDLB's rank string: every excess
    /// matched to deficits in rank order, routed through the overlay; the default); a list
    /// runs each.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "string")]
    pub diffusion_plan: Vec<PlanArg>,
    /// Blacklist and advertisement: a thief that finds a victim empty stops probing it
    /// until the victim advertises new work (`titus_core::Config::advertise`); off: the
    /// per-victim exponential backoff alone; on,off runs each balancer both ways.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "on")]
    pub advertise: Vec<Switch>,
    /// Cost-aware batches: each task carries its drawn cost as a hint, and a steal takes
    /// about half of the victim's estimated work instead of half of its tasks; what is
    /// cheaper to finish than to move stays (`titus_core::Config::cost_aware`); off: the
    /// count rule (the hints are ignored); on,off runs each balancer both ways.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "on")]
    pub cost_aware: Vec<Switch>,
    /// Priorities: tasks costlier than the mean (bimodal's reaction zone; the costly tail of
    /// the others) get priority 1, so each rank runs them first and shares its cheap ones
    /// first (longest first, as diffusion's predicted order does); off: all 0; on,off
    /// runs each balancer both ways.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "off")]
    pub priorities: Vec<Switch>,
    /// Cost hints: each task carries its drawn cost as a hint (a caller that knows its
    /// tasks), which ranks plan, order and share by; off: none, so Titus predicts every
    /// cost from the epochs it measured (a caller that knows nothing).
    #[arg(long, value_enum, default_value = "on")]
    pub hints: Switch,
    /// Every K epochs, hand tasks for good to rank-string neighbours as the runtime's
    /// repartition plan says (RankDLB's step 4: what a solver would do with its cells);
    /// ownership changes from the next epoch on (dlb-bench only).
    #[arg(long, value_name = "K", allow_negative_numbers = true)]
    pub repartition: Option<u32>,
    /// How `--repartition` moves tasks: `neighbours` (only to string neighbours, by the
    /// flows across each border) or `recut` (the string cut anew by predicted cost: each
    /// rank's tasks stay contiguous, but may go to any rank).
    #[arg(long, value_enum, default_value = "neighbours")]
    pub repartition_plan: RepartitionArg,
    /// Task counts per rank for `--distribution file` (COUNT or RANK COUNT per line).
    #[arg(long, value_name = "FILE")]
    pub counts: Option<std::path::PathBuf>,
    /// Payload bytes per task [default: the profile's].
    #[arg(long, allow_negative_numbers = true)]
    pub payload: Option<u64>,
    /// Load balancers, comma-separated (or `all`): each runs in turn, side by side.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "smallworld")]
    pub balancer: Vec<BalancerArg>,
    /// Steal protocols of smallworld and random, comma-separated (or `all`).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "claim")]
    pub protocol: Vec<ProtocolArg>,
    /// Ranks per group of the hierarchical balancer [default: ⌈√ranks⌉].
    #[arg(long, allow_negative_numbers = true)]
    pub group_size: Option<u32>,
    /// Shortcuts per rank of the smallworld overlay [default: 30]: fewer bound each
    /// rank's peers (about twice this plus the lattice's), more shorten the routes.
    #[arg(long, value_name = "K", allow_negative_numbers = true)]
    pub shortcuts: Option<u32>,
    /// How the smallworld overlay draws its shortcuts: kleinberg (each rank its own; a
    /// rank's in-neighbours as chance gives them) or paired (rounds of matchings: every
    /// shortcut goes both ways, so a rank's peers are at most 2 + the shortcuts).
    #[arg(long, value_name = "DRAW", default_value = "kleinberg", value_parser = parse_draw)]
    pub shortcut_draw: titus_overlay::ShortcutDraw,
    /// Worker threads per rank.
    #[arg(long, default_value_t = 1, allow_negative_numbers = true)]
    pub workers: usize,
    /// Accelerators beside the workers: GROUP[;GROUP...], GROUP =
    /// ranks=A-B:accel=N[:speed=S][:capacity=C][:kinds=K,...], e.g.
    /// `ranks=0-895:accel=1:speed=8:capacity=1` (N accelerators on each of ranks A..=B, S
    /// times a worker, C tasks at once). The runtime emulates each with a thread that runs
    /// the task and then sleeps to take cost/S; the simulator charges cost/S.
    #[arg(long, value_name = "SPEC")]
    pub resources: Option<String>,
    /// Which resource a ready task goes to: least-loaded (fewest unfinished submissions),
    /// round-robin or fixed (the accelerator whenever it has room).
    #[arg(long, value_name = "POLICY", default_value = "least-loaded")]
    pub dispatch: String,
    /// Seed of the workload, the overlay and victim choice.
    #[arg(long, default_value_t = 1, allow_negative_numbers = true)]
    pub seed: u64,
    /// One JSON object on one line per run and epoch (key `epoch`, 0-based).
    #[arg(long, conflicts_with = "csv")]
    pub json: bool,
    /// CSV: a header line and one row per run and epoch.
    #[arg(long)]
    pub csv: bool,
    /// Draw plots (PNG and SVG) into this directory: efficiency per run, per-rank busy and
    /// idle time before and after balancing, a timeline of steals (of each run's last
    /// epoch); with --epochs over 1, efficiency and steals per epoch, a line per run
    /// (epochs-efficiency, epochs-steals).
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
    /// Repeat the runs over values of one parameter: PARAM=V1,V2,... with PARAM one of
    /// ranks, tasks, task-time, payload, workers, seed, group-size. Writes sweep.csv and
    /// sweep-efficiency.{png,svg} into the --plot directory (default: dlb-sweep).
    #[arg(long, value_name = "PARAM=LIST")]
    pub sweep: Option<String>,
    /// No progress bar (it shows only on a terminal, on runs longer than 2 s).
    #[arg(long)]
    pub no_progress: bool,
    /// Seconds per round of the task's work instead of measuring it at start-up: the same
    /// value gives the same tasks and results on any machine (the report's
    /// `calibration_s` of an earlier run repeats it).
    #[arg(long, value_name = "SECONDS")]
    pub calibration: Option<f64>,
    /// Tuning: tasks an owner keeps private when it shares [default: the core's, 1].
    #[arg(long, allow_negative_numbers = true)]
    pub min_private: Option<u32>,
    /// Tuning: longest backoff of a thief from an empty victim, ms [default: 10].
    #[arg(long, allow_negative_numbers = true)]
    pub backoff_max_ms: Option<f64>,
    /// Tuning: how long results wait for company before their chunk travels home, ms
    /// (a chunk also leaves half full, and at once when its rank's queue is empty)
    /// [default: the core's, 20].
    #[arg(long, allow_negative_numbers = true)]
    pub flush_delay_ms: Option<f64>,
    /// Tuning: a worker's grain, µs of estimated work it takes from its rank's queue at
    /// once and runs before it reports the results (0: one task at a time) [default: 25 ×
    /// workers, at most 200]. The simulator's workers take the same grains.
    #[arg(long, value_name = "US", allow_negative_numbers = true)]
    pub worker_grain_us: Option<f64>,
}

/// The command-line name of a value.
pub fn name<T: ValueEnum>(v: T) -> &'static str {
    // ValueEnum names are 'static in practice; leak the short string once per run.
    let s = v.to_possible_value().expect("value").get_name().to_string();
    Box::leak(s.into_boxed_str())
}

/// `--worker-grain-us` as a duration (None: the runtime's default): 0 to 1 s (the
/// runtime's own bound on `worker_grain`).
pub fn worker_grain(args: &BenchArgs) -> Result<Option<std::time::Duration>, UsageError> {
    match args.worker_grain_us {
        None => Ok(None),
        Some(us) if us.is_finite() && (0.0..=1e6).contains(&us) => Ok(Some(
            std::time::Duration::from_nanos((us * 1e3).round() as u64),
        )),
        Some(us) => Err(UsageError(format!(
            "--worker-grain-us {}: expected microseconds in [0, 1000000]",
            crate::show_number(us)
        ))),
    }
}

/// Epochs one run may make: a million time steps (a run's reports and the simulator's
/// epochs are held per epoch).
pub const EPOCHS_MAX: u32 = 1_000_000;

/// Refuses impossible flags, naming them (the programs exit 2).
pub fn check_args(args: &BenchArgs) -> Result<(), UsageError> {
    if let Err(e) = titus_core::resources::Dispatch::parse(&args.dispatch) {
        return Err(UsageError(format!("--dispatch: {e}")));
    }
    // Threads per rank: past 1024 a rank only oversubscribes its node.
    if args.workers == 0 || args.workers > 1024 {
        return Err(UsageError(format!(
            "--workers must be in 1..=1024 (got {})",
            args.workers
        )));
    }
    if let Some(c) = args.calibration
        && !(c > 0.0 && c <= 3600.0)
    {
        return Err(UsageError(format!(
            "--calibration {} is not a number of seconds in (0, 3600]",
            crate::show_number(c)
        )));
    }
    for (flag, value) in [
        ("--flush-delay-ms", args.flush_delay_ms),
        ("--backoff-max-ms", args.backoff_max_ms),
    ] {
        if let Err(e) = crate::check_millis(flag, value) {
            return Err(UsageError(e.to_string()));
        }
    }
    worker_grain(args)?;
    if args.group_size == Some(0) {
        return Err(UsageError("--group-size must be at least 1".into()));
    }
    if let Some(e) = args.epochs
        && !(1..=EPOCHS_MAX).contains(&e)
    {
        return Err(UsageError(format!(
            "--epochs {e}: expected 1..={EPOCHS_MAX}"
        )));
    }
    if let Some(k) = args.shortcuts
        && k > titus_overlay::SHORTCUTS_MAX
    {
        return Err(UsageError(format!(
            "--shortcuts {k}: expected 0..={}",
            titus_overlay::SHORTCUTS_MAX
        )));
    }
    if args.repartition == Some(0) {
        return Err(UsageError(
            "--repartition must be at least 1 (epochs between plans)".into(),
        ));
    }
    if let Some(d) = args.drift
        && !(d.is_finite() && (0.0..1.0).contains(&d))
    {
        return Err(UsageError(format!(
            "--drift {d} is not a fraction of the tasks in [0, 1)"
        )));
    }
    if let Some(dir) = &args.plot
        && let Err(e) = check_plot_dir(dir)
    {
        return Err(UsageError(format!("--plot '{}': {e}", dir.display())));
    }
    Ok(())
}

/// Why plots could not be written into a `--plot` directory ([`check_plot_dir`]): found
/// before any run starts, so hours of runs do not end without their plots.
#[derive(Debug, thiserror::Error)]
pub enum PlotDirError {
    /// The path names something other than a directory.
    #[error("exists and is not a directory")]
    NotADirectory,
    /// The path has no directory name (a root, say).
    #[error("is not a directory name")]
    NoName,
    /// A new directory whose parent is missing: likely a typo.
    #[error("its parent directory '{}' does not exist", .0.display())]
    NoParent(std::path::PathBuf),
    /// The directory where the plots would go refuses a file.
    #[error("cannot write into '{}': {source}", .dir.display())]
    NotWritable {
        /// The directory.
        dir: std::path::PathBuf,
        /// What creating a file there gave.
        source: std::io::Error,
    },
}

/// Whether plots can be written into `dir` once the runs are over: an existing directory
/// this process may write into, or a new one whose parent is such a directory (a missing
/// parent is refused as a likely typo). Checked before any run starts; the probe file it
/// writes is removed at once.
pub fn check_plot_dir(dir: &std::path::Path) -> Result<(), PlotDirError> {
    let target = if dir.exists() {
        if !dir.is_dir() {
            return Err(PlotDirError::NotADirectory);
        }
        dir.to_path_buf()
    } else {
        let parent = match dir.parent() {
            Some(p) if p.as_os_str().is_empty() => std::path::PathBuf::from("."),
            Some(p) => p.to_path_buf(),
            None => return Err(PlotDirError::NoName),
        };
        if !parent.is_dir() {
            return Err(PlotDirError::NoParent(parent));
        }
        parent
    };
    let probe = target.join(format!(".titus-plot-probe-{}", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .map_err(|source| PlotDirError::NotWritable {
            dir: target.clone(),
            source,
        })?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}
