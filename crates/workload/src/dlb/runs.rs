//! The runs a command line asks for (balancers, protocols, seeds, sweeps), and each run's configuration.

use super::*;

/// One run: a balancer (and its protocol) over one sweep point's arguments.
#[derive(Debug, Clone)]
pub struct Run {
    /// The arguments of this run (a sweep point's).
    pub args: BenchArgs,
    /// Its balancer (hierarchical with the point's `--group-size`).
    pub balancer: Balancing,
    /// Its protocol (smallworld and random).
    pub protocol: ProtocolArg,
    /// The swept parameter's value.
    pub sweep_value: Option<String>,
    /// Diffusion before stealing ([`apply_diffusion`]).
    pub diffusion: bool,
    /// Label suffixes of the mechanism switches given more than one value
    /// (`/advertise-off`, `/cost-aware-on`, ...).
    pub switches: String,
}

impl Run {
    /// `balancer` or `balancer/protocol`, and `/no-diffusion` when a balancer runs with
    /// diffusion off.
    pub fn label(&self) -> String {
        let mut l = self.balancer.to_string();
        if self.balancer.steals() {
            l = format!("{l}/{}", name(self.protocol));
        }
        if !self.diffusion && self.balancer != Balancing::None {
            l += "/no-diffusion";
        }
        l + &self.switches
    }

    /// The protocol as reported.
    pub fn protocol_name(&self) -> &'static str {
        match self.balancer {
            Balancing::None => "none",
            b if b.steals() => name(self.protocol),
            // Work sharing answers requests through the request protocol's serving path.
            _ => "request",
        }
    }
}

/// The runs a command line asks for, in order: sweep points, then balancers (`none`
/// first, so the others can report their speed-up over it), then diffusion on/off, then
/// the other switches' values (`--advertise`, `--cost-aware`, `--priorities`), then
/// protocols. `none` runs once per point (with each switch's first value).
pub fn runs(args: &BenchArgs) -> Result<Vec<Run>, UsageError> {
    let mut balancers: Vec<Balancing> = expand(
        &args.balancer,
        BalancerArg::All,
        &Balancing::ALL.map(BalancerArg::One),
    )
    .into_iter()
    .filter_map(|b| match b {
        BalancerArg::One(b) => Some(b),
        BalancerArg::All => None,
    })
    .collect();
    if let Some(i) = balancers.iter().position(|&b| b == Balancing::None) {
        let none = balancers.remove(i);
        balancers.insert(0, none);
    }
    let diffusion: Vec<bool> = switch_values(&args.diffusion, Switch::On)
        .into_iter()
        .map(|d| d == Switch::On)
        .collect();
    let advertise = switch_values(&args.advertise, Switch::On);
    let cost_aware = switch_values(&args.cost_aware, Switch::On);
    let priorities = switch_values(&args.priorities, Switch::Off);
    let mut plans = Vec::new();
    for &p in &args.diffusion_plan {
        if !plans.contains(&p) {
            plans.push(p);
        }
    }
    if plans.is_empty() {
        plans.push(PlanArg::String);
    }
    let mut switches = Vec::new();
    for &x in &advertise {
        for &y in &cost_aware {
            for &z in &priorities {
                for &w in &plans {
                    switches.push((x, y, z, w));
                }
            }
        }
    }
    let protocols = expand(
        &args.protocol,
        ProtocolArg::All,
        &[ProtocolArg::Lock, ProtocolArg::Claim, ProtocolArg::Request],
    );
    let points: Vec<(BenchArgs, Option<String>)> = match &args.sweep {
        None => vec![(args.clone(), None)],
        Some(spec) => sweep_points(args, spec)?,
    };
    let mut out = Vec::new();
    for (a, v) in points {
        for &b in &balancers {
            let b = match b {
                Balancing::Hierarchical { .. } => Balancing::Hierarchical {
                    group_size: a.group_size,
                },
                b => b,
            };
            let ps: &[ProtocolArg] = if b.steals() {
                &protocols
            } else {
                &[ProtocolArg::Request]
            };
            let ds = if b == Balancing::None {
                &diffusion[..1]
            } else {
                &diffusion[..]
            };
            let combos = if b == Balancing::None {
                &switches[..1]
            } else {
                &switches[..]
            };
            for &d in ds {
                for (adv, cost, prio, plan) in combos {
                    if !d && *plan != plans[0] {
                        continue; // Without diffusion the plan does not matter.
                    }
                    let mut a = a.clone();
                    a.advertise = vec![*adv];
                    a.cost_aware = vec![*cost];
                    a.priorities = vec![*prio];
                    a.diffusion_plan = vec![*plan];
                    let mut suffix = String::new();
                    if plans.len() > 1 && b != Balancing::None && d {
                        suffix += if *plan == PlanArg::String {
                            "/plan-string"
                        } else {
                            "/plan-neighbours"
                        };
                    }
                    for (name, list, x) in [
                        ("advertise", &advertise, adv),
                        ("cost-aware", &cost_aware, cost),
                        ("priorities", &priorities, prio),
                    ] {
                        if list.len() > 1 && b != Balancing::None {
                            let word = if *x == Switch::On { "on" } else { "off" };
                            suffix += &format!("/{name}-{word}");
                        }
                    }
                    for &p in ps {
                        out.push(Run {
                            args: a.clone(),
                            balancer: b,
                            protocol: p,
                            sweep_value: v.clone(),
                            diffusion: d,
                            switches: suffix.clone(),
                        });
                    }
                }
            }
        }
    }
    Ok(out)
}

/// `list` with `all` replaced by `every`, duplicates dropped, order kept.
pub fn expand<T: Copy + PartialEq>(list: &[T], all: T, every: &[T]) -> Vec<T> {
    let mut out = Vec::new();
    for &x in list {
        let xs: &[T] = if x == all {
            every
        } else {
            std::slice::from_ref(&x)
        };
        for &y in xs {
            if !out.contains(&y) {
                out.push(y);
            }
        }
    }
    out
}

/// The swept parameter's name and the arguments of each point.
pub fn sweep_points(
    args: &BenchArgs,
    spec: &str,
) -> Result<Vec<(BenchArgs, Option<String>)>, UsageError> {
    let (param, values) = spec
        .split_once('=')
        .ok_or_else(|| UsageError(format!("--sweep '{spec}': expected PARAM=V1,V2,...")))?;
    let values: Vec<&str> = values
        .split(',')
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .collect();
    if values.is_empty() {
        return Err(UsageError(format!("--sweep '{spec}': no values")));
    }
    let mut out = Vec::new();
    for v in values {
        let mut a = args.clone();
        a.sweep = None;
        let bad = |what: &str| UsageError(format!("--sweep {param}: '{v}' is not {what}"));
        match param {
            "ranks" => a.ranks = v.parse().map_err(|_| bad("a rank count"))?,
            "tasks" => a.tasks = Some(v.parse().map_err(|_| bad("a task count"))?),
            "task-time" => a.task_time = Some(v.parse().map_err(|_| bad("seconds"))?),
            "payload" => a.payload = Some(v.parse().map_err(|_| bad("a byte count"))?),
            "workers" => a.workers = v.parse().map_err(|_| bad("a worker count"))?,
            "seed" => a.seed = v.parse().map_err(|_| bad("a seed"))?,
            "group-size" => a.group_size = Some(v.parse().map_err(|_| bad("a group size"))?),
            p => {
                return Err(UsageError(format!(
                    "--sweep: unknown parameter '{p}' (expected ranks, tasks, task-time, payload, workers, seed or group-size)"
                )));
            }
        }
        out.push((a, Some(v.to_string())));
    }
    Ok(out)
}

/// A run's protocol and overlay configuration (every rank the same): the runtime's and
/// the simulator's `core` and `overlay`.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// Protocol tunables.
    pub core: Config,
    /// Overlay parameters (`ranks` is set by the front end).
    pub overlay: OverlayParams,
}

/// The configuration of `run` at `ranks` ranks (exit 2 on a bad one).
pub fn config(run: &Run, ranks: u32, plan: &Plan) -> Result<RunConfig, UsageError> {
    let args = &run.args;
    let payload = plan.payload;
    let mut core = Config::default();
    let mut overlay = OverlayParams::default();
    core.protocol = run.protocol.protocol();
    core.seed = args.seed;
    overlay.seed = args.seed;
    core.advertise = on(&args.advertise);
    core.cost_aware = on(&args.cost_aware);
    core.repartition_plan = args.repartition_plan.plan();
    if let Some(m) = args.min_private {
        core.min_private = m;
    }
    if let Some(f) = args.flush_delay_ms {
        core.flush_delay = std::time::Duration::from_secs_f64(f / 1e3);
    }
    if let Some(b) = args.backoff_max_ms {
        core.backoff_max = std::time::Duration::from_secs_f64(b / 1e3).max(core.backoff_base);
    }
    core.max_payload = (task::HEADER as u64 + payload) as u32;
    core.max_result = 8;
    // The shared set holds at most ~64 MiB of slots per region.
    let slot = task::HEADER as u64 + payload + 16;
    core.shared_capacity = ((64u64 << 20) / slot).clamp(2, 1024) as u32;
    // Groups from load estimates, as YALES2 forms them from previous iterations; here the
    // estimate is the task count (costs are not known in advance).
    let loads = match run.balancer {
        Balancing::Hierarchical { .. } => {
            Some(crate::counts(&plan.spec).map_err(|e| UsageError(e.to_string()))?)
        }
        _ => None,
    };
    run.balancer
        .apply(&mut core, &mut overlay, ranks, loads.as_deref())
        .map_err(|e| UsageError(e.to_string()))?;
    if run.balancer == Balancing::Smallworld {
        if let Some(k) = args.shortcuts {
            overlay.shortcuts = k;
        }
        overlay.draw = args.shortcut_draw;
    }
    apply_diffusion(&mut core, run.diffusion);
    core.diffusion_plan = args
        .diffusion_plan
        .first()
        .map_or(titus_core::DiffusionPlan::String, |p| p.plan());
    Ok(RunConfig { core, overlay })
}

/// Each rank's accelerators from `--resources` (None without it) and the `--dispatch`
/// policy, for a job of `ranks` ranks; bad input is refused naming what is wrong.
#[allow(clippy::type_complexity)]
pub fn resources(
    args: &BenchArgs,
    ranks: u32,
) -> Result<
    (
        Option<Vec<Vec<titus_core::resources::ResourceSpec>>>,
        titus_core::resources::Dispatch,
    ),
    UsageError,
> {
    use titus_core::resources::{Dispatch, parse_description};
    let dispatch =
        Dispatch::parse(&args.dispatch).map_err(|e| UsageError(format!("--dispatch: {e}")))?;
    let per_rank = args
        .resources
        .as_ref()
        .map(|s| parse_description(s, ranks).map_err(|e| UsageError(format!("--resources: {e}"))))
        .transpose()?;
    Ok((per_rank, dispatch))
}

/// The heterogeneous ideal's capacity in worker equivalents: every rank's `workers` and
/// the accelerators' capacity × speed for kind 0 (the kind of every DLB_Bench task).
pub fn hetero_capacity(
    ranks: u32,
    workers: usize,
    described: &[Vec<titus_core::resources::ResourceSpec>],
) -> f64 {
    f64::from(ranks) * workers as f64
        + described
            .iter()
            .flatten()
            .map(|s| f64::from(s.capacity) * s.speed(0).unwrap_or(0.0))
            .sum::<f64>()
}
