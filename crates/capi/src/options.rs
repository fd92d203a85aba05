//! The options string of `titus_init`: `key=value` pairs separated by commas or spaces,
//! then the same syntax from `TITUS_OPTIONS` (which wins, so a job can be tuned without
//! recompiling the solver).

use std::time::Duration;
use titus_runtime::{Backend, Balancing, Protocol, RuntimeConfig, backend_names};

/// Which fabric a runtime uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum BackendChoice {
    /// In-process for a single rank, the default multi-process backend (libfabric)
    /// otherwise.
    Auto,
    /// A backend by name: `mem` (in-process, a single rank) or one of the runtime's
    /// multi-process backends (`ofi`).
    Named(Backend),
}

/// Worker threads a rank may ask for (the option `workers`): past this a rank only
/// oversubscribes its node (dlb-bench's `--workers` has the same bound).
pub(crate) const WORKERS_MAX: u32 = 1024;

/// Every option, parsed; applied once the job's size is known.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    pub(crate) cfg: RuntimeConfig,
    pub(crate) backend: BackendChoice,
    pub(crate) provider: Option<String>,
    /// The option `log`: a log filter (`log.rs`).
    pub(crate) log: Option<String>,
    balancer: Balancing,
    group_size: Option<u32>,
    /// The option `dispatch` (resources, `titus_add_resource`).
    pub(crate) dispatch: titus_runtime::Dispatch,
}

/// Every option [`Options::apply`] reads, with a hint of its values ("" for counts,
/// seconds and free text, whose own errors give their bounds). `apply` refuses a key
/// missing here before it looks at it, and the error for an unknown key lists this table,
/// so the two cannot drift apart (a test checks that each key listed reaches its own arm
/// of the parser).
const OPTIONS: &[(&str, &str)] = &[
    ("workers", ""),
    ("worker_grain", ""),
    ("balancer", ""), // `keys` lists `Balancing::ALL`'s names
    ("protocol", "claim|lock|request"),
    ("backend", ""), // `keys` lists auto and the backends' names
    ("provider", ""),
    ("max_payload", ""),
    ("max_result", ""),
    ("seed", ""),
    ("group_size", ""),
    ("op_timeout", ""),
    ("epoch_timeout", ""),
    ("min_private", ""),
    ("backoff_max", ""),
    ("check_interval", ""),
    ("flush_delay", ""),
    ("push_wait", ""),
    ("steal_below", ""),
    ("shared_capacity", ""),
    ("diffusion", "on|off"),
    ("diffusion_plan", "neighbours|string"),
    ("repartition_plan", "neighbours|recut"),
    ("advertise", "on|off"),
    ("cost_aware", "on|off"),
    ("shortcuts", ""),
    ("shortcut_draw", "kleinberg|paired"),
    ("dispatch", "least-loaded|round-robin|fixed"),
    ("resource_types", "e.g. all/1/2+3"),
    ("log", "a filter such as info; directives separated by ';'"),
    ("trace", "a directory for each rank's timeline"),
    (
        "spawn",
        "home, lanes sum|max|min joined by '+' (e.g. sum+sum+max), or custom:N",
    ),
    ("spawn_queue_max", ""),
];

/// The options of [`OPTIONS`] and what each value may be, for the error message of an
/// unknown key.
fn keys() -> String {
    let balancers: Vec<&str> = Balancing::ALL.iter().map(|b| b.name()).collect();
    let backends = format!("auto|{}", backend_names().join("|"));
    let list: Vec<String> = OPTIONS
        .iter()
        .map(|&(key, hint)| {
            let hint = match key {
                "balancer" => balancers.join("|"),
                "backend" => backends.clone(),
                _ => hint.to_string(),
            };
            if hint.is_empty() {
                key.to_string()
            } else {
                format!("{key} ({hint})")
            }
        })
        .collect();
    list.join(", ")
}

impl Options {
    /// Parses `text` and then `env` (the value of `TITUS_OPTIONS`, if set).
    pub(crate) fn parse(text: &str, env: Option<&str>) -> Result<Self, String> {
        let mut o = Options {
            cfg: RuntimeConfig::default(),
            backend: BackendChoice::Auto,
            provider: None,
            log: None,
            balancer: Balancing::default(),
            group_size: None,
            dispatch: titus_runtime::Dispatch::default(),
        };
        // A solver's cells are records of a few hundred bytes: 1 KiB slots by default.
        o.cfg.core.max_payload = 1024;
        o.cfg.core.max_result = 1024;
        // A solver's time steps are short (tens of ms) and its tasks tiny (µs): `request`
        // answers a thief from the victim's whole queue in one round trip, where `claim`
        // needs a fetch-add and a read per steal and halves a capped shared set. Measured
        // on the chemistry example (2 processes, docs/results.md): nominal efficiency
        // 0.65–0.83 against 0.60–0.75 with `claim`, on tcp and shm, at both sizes.
        o.cfg.core.protocol = Protocol::Request;
        // Diffusion's pushes cross libfabric in 1–5 ms on a node whose cores all run
        // workers; a receiver that stops waiting for one steals half of what its giver
        // kept, and a thousand cells come back by stealing. Measured on the chemistry
        // example over `tcp;ofi_rxm` (eight interleaved pairs, docs/results.md): nominal
        // efficiency 0.869 at 2 ms (three runs below 0.85), 0.890 at 5 ms (none). The
        // wait ends when the push arrives, so a fast backend (the node's) pays nothing.
        o.cfg.core.push_wait = Duration::from_millis(5);
        o.apply(text, "options")?;
        if let Some(env) = env {
            o.apply(env, "TITUS_OPTIONS")?;
        }
        Ok(o)
    }

    fn apply(&mut self, text: &str, source: &str) -> Result<(), String> {
        let items = text
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|s| !s.is_empty());
        for item in items {
            let (key, value) = item
                .split_once('=')
                .ok_or_else(|| format!("{source}: '{item}' is not key=value"))?;
            let unknown = || format!("{source}: unknown option '{key}' (known: {})", keys());
            if !OPTIONS.iter().any(|&(k, _)| k == key) {
                return Err(unknown());
            }
            let bad = |what: &str| format!("{source}: {key}='{value}': expected {what}");
            let within = |max: u32| -> Result<u32, String> {
                value
                    .parse::<u32>()
                    .ok()
                    .filter(|&v| (1..=max).contains(&v))
                    .ok_or_else(|| bad(&format!("an integer in 1..={max}")))
            };
            let positive = || within(u32::MAX);
            // At most a day: larger values would overflow deadlines.
            let seconds = || -> Result<Duration, String> {
                value
                    .parse::<f64>()
                    .ok()
                    .filter(|s| *s > 0.0 && *s <= 86_400.0)
                    .map(Duration::from_secs_f64)
                    .ok_or_else(|| bad("a number of seconds in (0, 86400]"))
            };
            match key {
                "workers" => self.cfg.workers = within(WORKERS_MAX)? as usize,
                "worker_grain" => {
                    self.cfg.worker_grain = Some(
                        value
                            .parse::<f64>()
                            .ok()
                            .filter(|s| (0.0..=1.0).contains(s))
                            .map(Duration::from_secs_f64)
                            .ok_or_else(|| bad("a number of seconds in [0, 1]"))?,
                    )
                }
                "balancer" => {
                    self.balancer = value
                        .parse::<Balancing>()
                        .map_err(|e| format!("{source}: {e}"))?
                }
                "protocol" => {
                    self.cfg.core.protocol = value
                        .parse::<Protocol>()
                        .map_err(|e| format!("{source}: {e}"))?
                }
                "backend" => {
                    self.backend = match value {
                        "auto" => BackendChoice::Auto,
                        // The provider is filled in by `backend()`, once every option is read.
                        _ => match Backend::named(value, None) {
                            Ok(b) => BackendChoice::Named(b),
                            Err(_) => {
                                let names = titus_runtime::backend_names().join(", ");
                                return Err(bad(&format!("one of: {names}")));
                            }
                        },
                    }
                }
                "provider" => self.provider = Some(value.into()),
                "spawn" => {
                    let custom = value.strip_prefix("custom:").map(|n| {
                        n.parse::<usize>()
                            .ok()
                            .filter(|n| (1..=titus_runtime::spawn::LANES_MAX).contains(n))
                    });
                    let lanes = if value == "home" {
                        Vec::new()
                    } else if let Some(n) = custom {
                        let n = n.ok_or_else(|| bad("custom:N with N from 1 to 8 lanes"))?;
                        vec![titus_runtime::ReduceOp::Custom; n]
                    } else {
                        value
                        .split('+')
                        .map(str::parse)
                        .collect::<Result<Vec<titus_runtime::ReduceOp>, _>>()
                        .ok()
                        .filter(|l| (1..=titus_runtime::spawn::LANES_MAX).contains(&l.len()))
                        .filter(|l| !l.contains(&titus_runtime::ReduceOp::Custom))
                        .ok_or_else(|| {
                            bad("home, custom:N, or 1 to 8 lanes, each sum, max or min, joined by '+' (e.g. sum+sum+max)")
                        })?
                    };
                    let queued_max = self
                        .cfg
                        .core
                        .spawning
                        .as_ref()
                        .map_or(titus_runtime::spawn::QUEUED_MAX_DEFAULT, |s| s.queued_max);
                    self.cfg.core.spawning = Some(titus_runtime::Spawning {
                        queued_max,
                        ..titus_runtime::Spawning::reduced(lanes)
                    });
                }
                "spawn_queue_max" => {
                    let max = value
                        .parse::<u64>()
                        .ok()
                        .filter(|&v| v > 0)
                        .ok_or_else(|| bad("a positive integer"))?;
                    match &mut self.cfg.core.spawning {
                        Some(s) => s.queued_max = max,
                        None => {
                            return Err(format!(
                                "{source}: spawn_queue_max needs spawn=home or spawn=LANES before it"
                            ));
                        }
                    }
                }
                "log" => self.log = Some(value.into()),
                "trace" if value.is_empty() => return Err(bad("a directory")),
                "trace" => self.cfg.trace = Some(value.into()),
                "max_payload" => self.cfg.core.max_payload = within(titus_runtime::PAYLOAD_MAX)?,
                "max_result" => self.cfg.core.max_result = within(titus_runtime::PAYLOAD_MAX)?,
                "seed" => {
                    let seed = value.parse::<u64>().map_err(|_| bad("an integer"))?;
                    self.cfg.core.seed = seed;
                    self.cfg.overlay.seed = seed;
                }
                "group_size" => self.group_size = Some(positive()?),
                "op_timeout" => self.cfg.op_timeout = seconds()?,
                "epoch_timeout" => self.cfg.epoch_timeout = Some(seconds()?),
                "min_private" => self.cfg.core.min_private = positive()?,
                "check_interval" => self.cfg.core.check_interval = seconds()?,
                "flush_delay" => self.cfg.core.flush_delay = seconds()?,
                "push_wait" => self.cfg.core.push_wait = seconds()?,
                "steal_below" => self.cfg.core.steal_below = positive()?,
                "shared_capacity" => {
                    self.cfg.core.shared_capacity = positive()
                        .ok()
                        .filter(|&v| v <= u32::from(u16::MAX))
                        .ok_or_else(|| bad("an integer from 1 to 65535"))?
                }
                "diffusion" => {
                    self.cfg.core.diffusion = match value {
                        "on" => true,
                        "off" => false,
                        _ => return Err(bad("on or off")),
                    }
                }
                "diffusion_plan" => {
                    self.cfg.core.diffusion_plan =
                        value.parse().map_err(|_| bad("neighbours or string"))?;
                }
                "repartition_plan" => {
                    self.cfg.core.repartition_plan =
                        value.parse().map_err(|_| bad("neighbours or recut"))?;
                }
                "advertise" => {
                    self.cfg.core.advertise = match value {
                        "on" => true,
                        "off" => false,
                        _ => return Err(bad("on or off")),
                    }
                }
                "cost_aware" => {
                    self.cfg.core.cost_aware = match value {
                        "on" => true,
                        "off" => false,
                        _ => return Err(bad("on or off")),
                    }
                }
                "shortcuts" => self.cfg.overlay.shortcuts = within(titus_runtime::SHORTCUTS_MAX)?,
                "resource_types" => {
                    // Types separated by '/', each `all` (every kind: the CPU workers') or
                    // kinds joined by '+', e.g. all/1/2+3.
                    let mut types = Vec::new();
                    for t in value.split('/') {
                        if t == "all" {
                            types.push(None);
                            continue;
                        }
                        let mut kinds = t
                            .split('+')
                            .map(|k| k.parse::<u16>())
                            .collect::<Result<Vec<u16>, _>>()
                            .map_err(|_| {
                                bad("types separated by '/', each 'all' or kinds 0..=65535 joined by '+' (e.g. all/1/2+3)")
                            })?;
                        kinds.sort_unstable();
                        kinds.dedup();
                        types.push(Some(kinds));
                    }
                    if types.len() > 64 {
                        return Err(bad("at most 64 types"));
                    }
                    self.cfg.core.resource_types = types;
                }
                "dispatch" => {
                    self.dispatch = titus_runtime::Dispatch::parse(value)
                        .map_err(|_| bad("least-loaded, round-robin or fixed"))?
                }
                "shortcut_draw" => {
                    self.cfg.overlay.draw = titus_runtime::ShortcutDraw::parse(value)
                        .map_err(|_| bad("kleinberg or paired"))?
                }
                "backoff_max" => {
                    self.cfg.core.backoff_max = seconds()?.max(self.cfg.core.backoff_base)
                }
                // Listed in OPTIONS without an arm here (the test of the table fails).
                _ => return Err(unknown()),
            }
        }
        Ok(())
    }

    /// The backend for a job of `ranks` ranks: `auto` is in-process for one rank and the
    /// automatic choice among the multi-process backends otherwise (shared memory when
    /// every rank shares a node and no provider is forced); `provider` goes to a
    /// multi-process one.
    pub(crate) fn backend(&self, ranks: u32) -> Backend {
        match &self.backend {
            BackendChoice::Auto if ranks == 1 => Backend::Mem,
            BackendChoice::Auto => Backend::default_fabric(self.provider.clone()),
            BackendChoice::Named(Backend::Fabric { name, .. }) => Backend::Fabric {
                name: name.clone(),
                provider: self.provider.clone(),
            },
            BackendChoice::Named(Backend::Mem) => Backend::Mem,
        }
    }

    /// The runtime configuration for a job of `ranks` ranks.
    pub(crate) fn config(&self, ranks: u32) -> Result<RuntimeConfig, String> {
        let mut cfg = self.cfg.clone();
        let balancing = match self.balancer {
            Balancing::Hierarchical { .. } => Balancing::Hierarchical {
                group_size: self.group_size,
            },
            b => b,
        };
        // No load estimates at init: every rank weighs the same.
        cfg.balance(balancing, ranks, None)
            .map_err(|e| e.to_string())?;
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every key of the table reaches its own arm of the parser, and the message for an
    /// unknown key lists them all.
    #[test]
    fn the_table_of_options_is_the_parser_s() {
        let e = Options::parse("colour=blue", None).unwrap_err();
        for &(key, _) in OPTIONS {
            // A value no option takes: the arm refuses it (or, for free text, takes it).
            match Options::parse(&format!("{key}=\u{1}"), None) {
                Ok(_) => assert!(
                    ["provider", "log", "trace"].contains(&key),
                    "{key} took \\u{{1}}"
                ),
                Err(e) => assert!(!e.contains("unknown option"), "{key}: {e}"),
            }
            assert!(e.contains(&format!(" {key}")), "{key} is not listed: {e}");
        }
        for key in ["push_wait", "repartition_plan", "worker_grain"] {
            assert!(e.contains(key), "{key}: {e}");
        }
    }

    #[test]
    fn spawning_is_home_lanes_or_custom_lanes() {
        use titus_runtime::ReduceOp;
        let spawning =
            |v: &str| Options::parse(&format!("spawn={v}"), None).map(|o| o.cfg.core.spawning);
        let home = spawning("home").unwrap().unwrap();
        assert!(home.routes_home());
        let lanes = spawning("sum+max").unwrap().unwrap().lanes;
        assert_eq!(lanes, [ReduceOp::Sum, ReduceOp::Max]);
        let custom = spawning("custom:3").unwrap().unwrap();
        assert_eq!(custom.lanes, [ReduceOp::Custom; 3]);
        assert!(
            custom.combine.is_none(),
            "given later, by titus_set_combine"
        );
        for bad in [
            "custom:0",
            "custom:9",
            "custom:x",
            "sum+custom",
            "custom",
            "",
            "avg",
        ] {
            let e = spawning(bad).unwrap_err();
            assert!(
                e.contains("spawn") && e.contains("custom:N"),
                "spawn={bad}: {e}"
            );
        }
    }

    #[test]
    fn the_push_wait_is_an_option() {
        let o = Options::parse("", None).unwrap();
        assert_eq!(o.cfg.core.push_wait, Duration::from_millis(5));
        let o = Options::parse("push_wait=0.002", None).unwrap();
        assert_eq!(o.cfg.core.push_wait, Duration::from_millis(2));
        let e = Options::parse("push_wait=0", None).unwrap_err();
        assert_eq!(
            e,
            "options: push_wait='0': expected a number of seconds in (0, 86400]"
        );
    }

    #[test]
    fn advertisement_is_a_switch() {
        assert!(Options::parse("", None).unwrap().cfg.core.advertise);
        assert!(
            !Options::parse("advertise=off", None)
                .unwrap()
                .cfg
                .core
                .advertise
        );
        let e = Options::parse("advertise=maybe", None).unwrap_err();
        assert_eq!(e, "options: advertise='maybe': expected on or off");
    }

    #[test]
    fn the_overlay_draw_is_an_option() {
        let o = Options::parse("shortcuts=60,shortcut_draw=paired", None).unwrap();
        assert_eq!(o.cfg.overlay.shortcuts, 60);
        assert_eq!(o.cfg.overlay.draw, titus_runtime::ShortcutDraw::Paired);
        let e = Options::parse("shortcut_draw=chord", None).unwrap_err();
        assert_eq!(
            e,
            "options: shortcut_draw='chord': expected kleinberg or paired"
        );
        let e = Options::parse("shortcuts=0", None).unwrap_err();
        assert_eq!(
            e,
            "options: shortcuts='0': expected an integer in 1..=65536"
        );
        // Counts that size an allocation or threads are bounded where they are read.
        for (option, bound) in [
            ("workers=1025", "1..=1024"),
            ("max_payload=67108865", "1..=67108864"),
            ("max_result=4294967295", "1..=67108864"),
            ("shortcuts=65537", "1..=65536"),
        ] {
            let e = Options::parse(option, None).unwrap_err();
            assert!(e.contains(bound), "{option}: {e}");
        }
    }

    #[test]
    fn the_worker_grain_is_an_option() {
        let mut o = Options::parse("", None).unwrap();
        assert_eq!(o.cfg.worker_grain, None);
        o.cfg.workers = 1;
        assert_eq!(o.cfg.grain(), Duration::from_micros(25));
        o.cfg.workers = 4;
        assert_eq!(o.cfg.grain(), Duration::from_micros(100));
        o.cfg.workers = 64;
        assert_eq!(o.cfg.grain(), Duration::from_micros(200));
        let o = Options::parse("worker_grain=0.00005", None).unwrap();
        assert_eq!(o.cfg.grain(), Duration::from_micros(50));
        let o = Options::parse("worker_grain=0", None).unwrap();
        assert!(o.cfg.grain().is_zero(), "one task, one report, at a time");
        for bad in ["2", "-1e-6", "fast"] {
            let e = Options::parse(&format!("worker_grain={bad}"), None).unwrap_err();
            assert_eq!(
                e,
                format!("options: worker_grain='{bad}': expected a number of seconds in [0, 1]")
            );
        }
    }

    #[test]
    fn resource_types_are_an_option() {
        let o = Options::parse("resource_types=all/1/3+2+3", None).unwrap();
        assert_eq!(
            o.cfg.core.resource_types,
            vec![None, Some(vec![1]), Some(vec![2, 3])]
        );
        for bad in [
            "resource_types=all/x",
            "resource_types=1+",
            "resource_types=70000",
        ] {
            let e = Options::parse(bad, None).unwrap_err();
            assert!(e.contains("e.g. all/1/2+3"), "{bad}: {e}");
        }
    }

    #[test]
    fn cost_aware_batches_are_a_switch() {
        assert!(Options::parse("", None).unwrap().cfg.core.cost_aware);
        let off = Options::parse("cost_aware=off", None).unwrap();
        assert!(!off.cfg.core.cost_aware);
        let e = Options::parse("cost_aware=1", None).unwrap_err();
        assert_eq!(e, "options: cost_aware='1': expected on or off");
    }

    #[test]
    fn shared_capacity_is_bounded_by_the_claim_word() {
        let o = Options::parse("shared_capacity=4096", None).unwrap();
        assert_eq!(o.cfg.core.shared_capacity, 4096);
        for bad in ["0", "65536", "many"] {
            let e = Options::parse(&format!("shared_capacity={bad}"), None).unwrap_err();
            assert!(
                e.contains(&format!("shared_capacity='{bad}'")) && e.contains("1 to 65535"),
                "{e}"
            );
        }
    }

    #[test]
    fn time_step_defaults() {
        let o = Options::parse("", None).unwrap();
        assert_eq!(o.cfg.core.protocol, Protocol::Request);
        assert!(o.cfg.core.diffusion);
        assert_eq!(o.cfg.core.max_payload, 1024);
        assert_eq!(o.cfg.core.flush_delay, Duration::from_millis(20));
        let o = Options::parse("flush_delay=0.0005", None).unwrap();
        assert_eq!(o.cfg.core.flush_delay, Duration::from_micros(500));
        let e = Options::parse("flush_delay=soon", None).unwrap_err();
        assert!(e.contains("flush_delay='soon'"), "{e}");
    }

    #[test]
    fn parses_and_environment_wins() {
        let o = Options::parse(
            "workers=3, protocol=lock balancer=none",
            Some("workers=5,provider=tcp;ofi_rxm"),
        )
        .unwrap();
        assert_eq!(o.cfg.workers, 5);
        assert_eq!(o.cfg.core.protocol, Protocol::Lock);
        assert_eq!(o.balancer, Balancing::None);
        assert_eq!(o.provider.as_deref(), Some("tcp;ofi_rxm"));
        assert_eq!(o.config(4).unwrap().core.steal_below, 0);
        // auto: in-process for one rank, the default fabric (with the provider) otherwise.
        assert_eq!(o.backend(1), Backend::Mem);
        assert_eq!(
            o.backend(4),
            Backend::default_fabric(Some("tcp;ofi_rxm".into()))
        );
        let o = Options::parse("backend=mem", Some("backend=ofi")).unwrap();
        assert_eq!(o.backend(1), Backend::ofi(None));
        let o = Options::parse("backend=mem", None).unwrap();
        assert_eq!(o.backend(4), Backend::Mem);
        assert_eq!(o.log, None);
        let o = Options::parse("log=titus=debug;warn", None).unwrap();
        assert_eq!(o.log.as_deref(), Some("titus=debug;warn"));
    }

    #[test]
    fn bad_options_name_what_is_wrong() {
        let e = Options::parse("workers=0", None).unwrap_err();
        assert!(e.contains("workers='0'"), "{e}");
        assert!(
            !Options::parse("diffusion=off", None)
                .unwrap()
                .cfg
                .core
                .diffusion
        );
        assert!(
            Options::parse("diffusion=on", None)
                .unwrap()
                .cfg
                .core
                .diffusion
        );
        let e = Options::parse("diffusion=maybe", None).unwrap_err();
        assert!(
            e.contains("diffusion='maybe'") && e.contains("on or off"),
            "{e}"
        );
        assert_eq!(
            Options::parse("diffusion_plan=string", None)
                .unwrap()
                .cfg
                .core
                .diffusion_plan,
            titus_runtime::DiffusionPlan::String
        );
        assert_eq!(
            Options::parse("repartition_plan=recut", None)
                .unwrap()
                .cfg
                .core
                .repartition_plan,
            titus_runtime::RepartitionPlan::Recut
        );
        let e = Options::parse("repartition_plan=ring", None).unwrap_err();
        assert!(
            e.contains("repartition_plan='ring'") && e.contains("neighbours or recut"),
            "{e}"
        );
        let e = Options::parse("diffusion_plan=ring", None).unwrap_err();
        assert!(
            e.contains("diffusion_plan='ring'") && e.contains("neighbours or string"),
            "{e}"
        );
        let e = Options::parse("colour=blue", None).unwrap_err();
        assert!(e.contains("unknown option 'colour'"), "{e}");
        let e = Options::parse("", Some("workers")).unwrap_err();
        assert!(
            e.contains("TITUS_OPTIONS") && e.contains("key=value"),
            "{e}"
        );
        let e = Options::parse("op_timeout=1e30", None).unwrap_err();
        assert!(e.contains("op_timeout='1e30'"), "{e}");
        let e = Options::parse("backend=pigeon", None).unwrap_err();
        assert!(
            e.contains("backend='pigeon'") && e.contains("one of: mem, auto, node, hybrid, ofi"),
            "{e}"
        );
        let e = Options::parse("protocol=fast", None).unwrap_err();
        assert!(e.contains("unknown steal protocol 'fast'"), "{e}");
        let e = Options::parse("balancer=fast", None).unwrap_err();
        assert!(
            e.contains("unknown balancer 'fast'") && e.contains("smallworld"),
            "{e}"
        );
    }
}

#[cfg(test)]
mod fuzz;
