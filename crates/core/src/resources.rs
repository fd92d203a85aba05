//! Resources on a node and the dispatch policy that picks one for each ready task.
//!
//! A rank runs tasks on *resources*: its CPU workers are one (resource 0, capacity: the
//! workers), and an application may add others — any executor that accepts submissions and
//! completes them later (an accelerator's queue). A task kind runs on a resource when it has
//! a *variant* there; each resource states, per kind it can run, its speed relative to one
//! CPU worker (a hint: the simulator charges cost / speed, the emulated accelerator sleeps
//! accordingly, the heterogeneous ideal counts it).
//!
//! Dispatch follows oneDPL's dynamic selection (`dynamic_load_policy`): each ready task goes
//! to the capable resource with room (unfinished < capacity) that has the fewest unfinished
//! submissions ([`Dispatch::LeastLoaded`]); [`Dispatch::RoundRobin`] cycles over the capable
//! resources with room and [`Dispatch::Fixed`] takes the last capable one with room in
//! table order (the baselines). The table is plain data: the runtime's workers and the simulator's worker
//! model drive the same [`Resources`] (submit on dispatch, complete on completion).
//!
//! Per-type work requests: the job's *resource types* are kind sets
//! ([`KindSet`], `Config::resource_types`, the same on every rank; [`type_table`] derives
//! them from the ranks' resources). A rank tells its node which types it has and which
//! have an idle instance; a type whose idle instances find no queued task they can run is
//! *starved*, and under `request` its thief asks victims for work of that type only.

use std::fmt;

/// The kinds a resource type has a variant for (None: every kind).
pub type KindSet = Option<Vec<u16>>;

/// Whether a resource of kinds `set` runs `kind`.
pub fn runs(set: &KindSet, kind: u16) -> bool {
    set.as_ref().is_none_or(|k| k.contains(&kind))
}

/// Most resource types a job may declare (a rank's types are a 64-bit mask).
pub const TYPES_MAX: usize = 64;

/// The job's resource types from every rank's resources (CPU workers first): each
/// distinct kind set once, in order of first appearance, so every rank that computes it
/// from the same description agrees. Errors beyond [`TYPES_MAX`] types.
pub fn type_table<'a>(
    ranks: impl IntoIterator<Item = &'a [ResourceSpec]>,
) -> Result<Vec<KindSet>, ResourceError> {
    let mut out: Vec<KindSet> = Vec::new();
    for specs in ranks {
        for s in specs {
            let set = s.kind_set();
            if !out.contains(&set) {
                out.push(set);
            }
        }
    }
    if out.len() > TYPES_MAX {
        return Err(ResourceError(format!(
            "{} resource types (distinct kind sets); at most {TYPES_MAX}",
            out.len()
        )));
    }
    Ok(out)
}

/// Which capable resource a ready task goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Dispatch {
    /// The one with the fewest unfinished submissions (ties: the lowest index).
    #[default]
    LeastLoaded,
    /// The next one after the last chosen, cyclically.
    RoundRobin,
    /// A fixed preference: the last one in table order (oneDPL's `fixed_resource_policy`
    /// with its index the application's last resource; the drivers put the CPU workers
    /// first, so this offloads to the accelerator whenever it has room and falls back to
    /// the workers).
    Fixed,
}

impl Dispatch {
    /// Every policy's name, as [`Dispatch::parse`] takes it.
    pub const NAMES: [&'static str; 3] = ["least-loaded", "round-robin", "fixed"];

    /// The policy named `s` (one of [`Dispatch::NAMES`]).
    pub fn parse(s: &str) -> Result<Self, ResourceError> {
        match s {
            "least-loaded" => Ok(Self::LeastLoaded),
            "round-robin" => Ok(Self::RoundRobin),
            "fixed" => Ok(Self::Fixed),
            _ => Err(ResourceError(format!(
                "unknown dispatch policy {s:?} (expected one of {})",
                Self::NAMES.join(", ")
            ))),
        }
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Self::LeastLoaded => "least-loaded",
            Self::RoundRobin => "round-robin",
            Self::Fixed => "fixed",
        }
    }
}

/// Bad resource input, naming what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceError(pub String);

impl fmt::Display for ResourceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ResourceError {}

/// Which kinds a resource can run, with its speed for each (relative to one CPU worker).
#[derive(Debug, Clone, PartialEq)]
pub enum Variants {
    /// Every kind, at this speed.
    All(f64),
    /// These kinds (kind, speed); any other has no variant here.
    Kinds(Vec<(u16, f64)>),
}

/// One resource of a rank.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceSpec {
    /// Its name (in errors and statistics).
    pub name: String,
    /// Submissions it holds at once (at least 1).
    pub capacity: u32,
    /// The kinds it has a variant for, and their speeds.
    pub variants: Variants,
}

impl ResourceSpec {
    /// The CPU workers: every kind at speed 1, `workers` at once.
    pub fn cpu(workers: u32) -> Self {
        Self {
            name: "cpu".into(),
            capacity: workers,
            variants: Variants::All(1.0),
        }
    }

    /// The kinds it has a variant for, sorted (None: every kind): its resource type.
    pub fn kind_set(&self) -> KindSet {
        match &self.variants {
            Variants::All(_) => None,
            Variants::Kinds(k) => {
                let mut v: Vec<u16> = k.iter().map(|(x, _)| *x).collect();
                v.sort_unstable();
                v.dedup();
                Some(v)
            }
        }
    }

    /// Its speed for `kind` (None: no variant).
    pub fn speed(&self, kind: u16) -> Option<f64> {
        match &self.variants {
            Variants::All(s) => Some(*s),
            Variants::Kinds(k) => k.iter().find(|(x, _)| *x == kind).map(|(_, s)| *s),
        }
    }

    /// Checks capacity and speeds: a capacity in 1..=[`CAPACITY_MAX`], speeds in
    /// [[`SPEED_MIN`], [`SPEED_MAX`]] (a task's time divided by a speed must stay a time).
    pub fn validate(&self) -> Result<(), ResourceError> {
        if self.capacity == 0 {
            return Err(ResourceError(format!(
                "resource {:?} has capacity 0 (it could never take a task)",
                self.name
            )));
        }
        if self.capacity > CAPACITY_MAX {
            return Err(ResourceError(format!(
                "resource {:?} has capacity {} (at most {CAPACITY_MAX} tasks at once)",
                self.name, self.capacity
            )));
        }
        let bad = |s: f64| !(s.is_finite() && (SPEED_MIN..=SPEED_MAX).contains(&s));
        match &self.variants {
            Variants::All(s) if bad(*s) => Err(ResourceError(format!(
                "resource {:?} has speed {s:?} (must be in [{SPEED_MIN:e}, {SPEED_MAX:e}])",
                self.name
            ))),
            Variants::Kinds(k) => match k.iter().find(|(_, s)| bad(*s)) {
                Some((kind, s)) => Err(ResourceError(format!(
                    "resource {:?} has speed {s:?} for kind {kind} (must be in [{SPEED_MIN:e}, {SPEED_MAX:e}])",
                    self.name
                ))),
                None => Ok(()),
            },
            _ => Ok(()),
        }
    }
}

/// Per-resource figures of an epoch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResourceCounts {
    /// The resource's name.
    pub name: String,
    /// Tasks submitted to it.
    pub submitted: u64,
    /// Tasks it completed.
    pub completed: u64,
}

/// A rank's resource table: what each can run, how much it holds, what it has unfinished.
#[derive(Debug, Clone, PartialEq)]
pub struct Resources {
    specs: Vec<ResourceSpec>,
    unfinished: Vec<u32>,
    submitted: Vec<u64>,
    completed: Vec<u64>,
    dispatch: Dispatch,
    /// Round-robin: the resource chosen last.
    last: usize,
}

impl Resources {
    /// A table of `specs` (index = resource id), dispatched by `dispatch`.
    pub fn new(specs: Vec<ResourceSpec>, dispatch: Dispatch) -> Result<Self, ResourceError> {
        if specs.is_empty() {
            return Err(ResourceError("a rank needs at least one resource".into()));
        }
        for s in &specs {
            s.validate()?;
        }
        let n = specs.len();
        Ok(Self {
            specs,
            unfinished: vec![0; n],
            submitted: vec![0; n],
            completed: vec![0; n],
            dispatch,
            last: n - 1,
        })
    }

    /// The resources.
    pub fn specs(&self) -> &[ResourceSpec] {
        &self.specs
    }

    /// The policy.
    pub fn dispatch(&self) -> Dispatch {
        self.dispatch
    }

    /// Whether some resource has a variant of `kind`.
    pub fn can_run(&self, kind: u16) -> bool {
        self.specs.iter().any(|s| s.speed(kind).is_some())
    }

    /// Whether resource `id` has room for another submission.
    pub fn has_room(&self, id: usize) -> bool {
        self.room(id) > 0
    }

    /// How many more submissions resource `id` has room for.
    pub fn room(&self, id: usize) -> u32 {
        self.specs[id].capacity.saturating_sub(self.unfinished[id])
    }

    /// The type bits (`bits`, from [`type_bits`]) of the resources from index
    /// `from` on that have room.
    pub fn room_types(&self, bits: &[u64], from: usize) -> u64 {
        (from..self.specs.len())
            .filter(|&i| self.has_room(i))
            .fold(0, |a, i| a | bits[i])
    }

    /// The kinds the resources from index `from` on with room run together (None: every
    /// kind; an empty set when none has room).
    pub fn room_kinds(&self, from: usize) -> KindSet {
        let mut out: Vec<u16> = Vec::new();
        for (i, s) in self.specs.iter().enumerate().skip(from) {
            if !self.has_room(i) {
                continue;
            }
            match s.kind_set() {
                None => return None,
                Some(k) => out.extend(k),
            }
        }
        out.sort_unstable();
        out.dedup();
        Some(out)
    }

    /// Whether any resource has room.
    pub fn any_room(&self) -> bool {
        (0..self.specs.len()).any(|i| self.has_room(i))
    }

    /// Unfinished submissions of resource `id`.
    pub fn unfinished(&self, id: usize) -> u32 {
        self.unfinished[id]
    }

    /// The kinds named by some resource's variants, sorted (resources that run every kind
    /// are not listed): what a thief will ask for by type.
    pub fn kinds(&self) -> Vec<u16> {
        let mut k: Vec<u16> = self
            .specs
            .iter()
            .filter_map(|s| match &s.variants {
                Variants::Kinds(k) => Some(k.iter().map(|(x, _)| *x)),
                Variants::All(_) => None,
            })
            .flatten()
            .collect();
        k.sort_unstable();
        k.dedup();
        k
    }

    /// The resource a ready task of `kind` goes to under the policy, among those with a
    /// variant of it and room; None when all of those are full (or none has a variant).
    /// Does not submit ([`Resources::submit`]).
    pub fn select(&self, kind: u16) -> Option<usize> {
        let n = self.specs.len();
        let ok = |i: usize| self.specs[i].speed(kind).is_some() && self.has_room(i);
        match self.dispatch {
            Dispatch::Fixed => (0..n).rev().find(|&i| ok(i)),
            Dispatch::RoundRobin => (1..=n).map(|k| (self.last + k) % n).find(|&i| ok(i)),
            Dispatch::LeastLoaded => (0..n)
                .filter(|&i| ok(i))
                .min_by_key(|&i| self.unfinished[i]),
        }
    }

    /// A task was submitted to resource `id`.
    pub fn submit(&mut self, id: usize) {
        self.unfinished[id] += 1;
        self.submitted[id] += 1;
        self.last = id;
    }

    /// Resource `id` completed a submission.
    pub fn complete(&mut self, id: usize) {
        debug_assert!(self.unfinished[id] > 0, "completion without a submission");
        self.unfinished[id] = self.unfinished[id].saturating_sub(1);
        self.completed[id] += 1;
    }

    /// [`Resources::select`] then [`Resources::submit`].
    pub fn dispatch_task(&mut self, kind: u16) -> Option<usize> {
        let id = self.select(kind)?;
        self.submit(id);
        Some(id)
    }

    /// Submission and completion counts per resource since the last reset.
    pub fn counts(&self) -> Vec<ResourceCounts> {
        self.specs
            .iter()
            .enumerate()
            .map(|(i, s)| ResourceCounts {
                name: s.name.clone(),
                submitted: self.submitted[i],
                completed: self.completed[i],
            })
            .collect()
    }

    /// Zeroes the counts (not the unfinished submissions) for a new epoch.
    pub fn reset_counts(&mut self) {
        self.submitted.iter_mut().for_each(|x| *x = 0);
        self.completed.iter_mut().for_each(|x| *x = 0);
    }

    /// The rank's capacity for `kind` in CPU-worker equivalents: Σ capacity × speed over the
    /// resources with a variant (the heterogeneous ideal's denominator).
    pub fn capacity_for(&self, kind: u16) -> f64 {
        self.specs
            .iter()
            .filter_map(|s| Some(f64::from(s.capacity) * s.speed(kind)?))
            .sum()
    }
}

/// Each of `specs`' bit among the job's `types` (0 for a kind set that is no type): what
/// a driver states to its node (`Node::set_resource_types`).
pub fn type_bits(specs: &[ResourceSpec], types: &[KindSet]) -> Vec<u64> {
    specs
        .iter()
        .map(|s| {
            let set = s.kind_set();
            types.iter().position(|t| *t == set).map_or(0, |t| 1 << t)
        })
        .collect()
}

/// Checks that every kind in `kinds` has a variant on some rank's resources.
pub fn check_kinds(ranks: &[Resources], kinds: &[u16]) -> Result<(), ResourceError> {
    match kinds.iter().find(|&&k| !ranks.iter().any(|r| r.can_run(k))) {
        Some(k) => Err(ResourceError(format!(
            "task kind {k} has no variant on any rank's resources"
        ))),
        None => Ok(()),
    }
}

/// The most tasks one resource holds at once (a GPU's streams, a pool's slots).
pub const CAPACITY_MAX: u32 = 1 << 20;
/// The slowest and fastest a resource may be, against a CPU worker.
pub const SPEED_MIN: f64 = 1e-6;
/// See [`SPEED_MIN`].
pub const SPEED_MAX: f64 = 1e6;
/// The most accelerators a rank has, over every group that names it (every one is a queue
/// and a thread's worth of state: a billion is a typo).
pub const ACCELS_MAX: u64 = 1_024;
/// The most accelerators a description gives the whole job: each is a spec in memory
/// (about 100 bytes), so a group over 100,000 ranks of 1,024 each would need 10 GB.
pub const JOB_ACCELS_MAX: u64 = 1 << 22;

/// The syntax of a resource description ([`parse_description`]), for help texts.
pub const DESCRIPTION_SYNTAX: &str = "GROUP[;GROUP...], GROUP = ranks=A-B|A:accel=N[:speed=S][:capacity=C][:kinds=K,K...] (N accelerators on each rank A..=B, each S times a CPU worker (default 1) holding C tasks at once (default 1), running the kinds listed (default every kind))";

/// The accelerators of each of `ranks` ranks from a description such as
/// `ranks=0-895:accel=1:speed=8:capacity=1` ([`DESCRIPTION_SYNTAX`]); a rank no group
/// names has none. A rank named twice gets both groups' accelerators.
pub fn parse_description(s: &str, ranks: u32) -> Result<Vec<Vec<ResourceSpec>>, ResourceError> {
    let mut out = vec![Vec::new(); ranks as usize];
    let mut job_accels = 0u64;
    for group in s.split(';').map(str::trim).filter(|g| !g.is_empty()) {
        let bad = |why: String| ResourceError(format!("resource group {group:?}: {why}"));
        let (mut range, mut count, mut speed, mut capacity, mut kinds) =
            (None, None, 1.0f64, 1u32, None::<Vec<u16>>);
        for field in group.split(':') {
            let (k, v) = field
                .split_once('=')
                .ok_or_else(|| bad(format!("{field:?} is not key=value")))?;
            let num = |v: &str| {
                v.trim()
                    .parse::<u64>()
                    .map_err(|_| bad(format!("{k}={v:?} is not a number")))
            };
            match k.trim() {
                "ranks" => {
                    let (a, b) = v.split_once('-').unwrap_or((v, v));
                    range = Some((num(a)?, num(b)?));
                }
                "accel" => count = Some(num(v)?),
                "speed" => {
                    speed = v
                        .trim()
                        .parse()
                        .map_err(|_| bad(format!("speed={v:?} is not a number")))?
                }
                "capacity" => {
                    capacity = u32::try_from(num(v)?)
                        .map_err(|_| bad(format!("capacity {v} too large")))?
                }
                "kinds" => {
                    kinds = Some(
                        v.split(',')
                            .map(|x| {
                                x.trim()
                                    .parse::<u16>()
                                    .map_err(|_| bad(format!("kind {x:?} is not a kind number")))
                            })
                            .collect::<Result<_, _>>()?,
                    )
                }
                other => {
                    return Err(bad(format!(
                        "unknown key {other:?} (expected ranks, accel, speed, capacity, kinds)"
                    )));
                }
            }
        }
        let (a, b) = range.ok_or_else(|| bad("no ranks=".into()))?;
        let count = count.ok_or_else(|| bad("no accel=".into()))?;
        if count > ACCELS_MAX {
            return Err(bad(format!(
                "accel={count}: at most {ACCELS_MAX} accelerators a rank"
            )));
        }
        if a > b {
            return Err(bad(format!("rank range {a}-{b} is empty")));
        }
        if b >= u64::from(ranks) {
            return Err(bad(format!(
                "names rank {b}, but the job has {ranks} ranks (0-{})",
                ranks.saturating_sub(1)
            )));
        }
        job_accels = job_accels.saturating_add((b - a + 1).saturating_mul(count));
        if job_accels > JOB_ACCELS_MAX {
            return Err(bad(format!(
                "{job_accels} accelerators in the job so far: at most {JOB_ACCELS_MAX}"
            )));
        }
        for r in a..=b {
            let list = &mut out[r as usize];
            if list.len() as u64 + count > ACCELS_MAX {
                return Err(bad(format!(
                    "rank {r} would have {} accelerators over its groups: at most {ACCELS_MAX} a rank",
                    list.len() as u64 + count
                )));
            }
            for _ in 0..count {
                let spec = ResourceSpec {
                    name: format!("accel{}", list.len()),
                    capacity,
                    variants: match &kinds {
                        Some(k) => Variants::Kinds(k.iter().map(|&k| (k, speed)).collect()),
                        None => Variants::All(speed),
                    },
                };
                spec.validate().map_err(|e| bad(e.0))?;
                list.push(spec);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accel(name: &str, capacity: u32, kinds: Vec<(u16, f64)>) -> ResourceSpec {
        ResourceSpec {
            name: name.into(),
            capacity,
            variants: Variants::Kinds(kinds),
        }
    }

    fn table(d: Dispatch) -> Resources {
        Resources::new(
            vec![
                ResourceSpec::cpu(2),
                accel("a", 2, vec![(0, 8.0)]),
                accel("b", 1, vec![(0, 4.0), (1, 4.0)]),
            ],
            d,
        )
        .unwrap()
    }

    #[test]
    fn least_loaded_picks_fewest_unfinished_among_capable() {
        let mut r = table(Dispatch::LeastLoaded);
        assert_eq!(r.dispatch_task(0), Some(0));
        assert_eq!(r.dispatch_task(0), Some(1));
        assert_eq!(r.dispatch_task(0), Some(2));
        // 1, 1, 1 (b full): the lowest index with room.
        assert_eq!(r.dispatch_task(0), Some(0));
        assert_eq!(r.dispatch_task(0), Some(1));
        assert_eq!(r.dispatch_task(0), None, "everything full");
        r.complete(2);
        // Kind 1: only cpu and b; cpu full, b has room.
        assert_eq!(r.dispatch_task(1), Some(2));
        r.complete(1);
        r.complete(1);
        assert_eq!(r.select(0), Some(1));
        // Kind 7: only the CPU, which is full.
        assert_eq!(r.select(7), None);
        r.complete(0);
        assert_eq!(r.select(7), Some(0));
        let c = r.counts();
        assert_eq!((c[1].submitted, c[1].completed), (2, 2));
        assert_eq!((c[2].submitted, c[2].completed), (2, 1));
    }

    #[test]
    fn round_robin_cycles_over_capable() {
        let mut r = table(Dispatch::RoundRobin);
        let picks: Vec<_> = (0..3).map(|_| r.dispatch_task(1)).collect();
        // Kind 1: cpu, b, (a cannot) cpu.
        assert_eq!(picks, vec![Some(0), Some(2), Some(0)]);
        r.complete(0);
        r.complete(0);
        r.complete(2);
        let picks: Vec<_> = (0..4)
            .map(|_| {
                let p = r.dispatch_task(0);
                r.complete(p.unwrap());
                p
            })
            .collect();
        assert_eq!(picks, vec![Some(1), Some(2), Some(0), Some(1)]);
    }

    #[test]
    fn fixed_picks_last_capable() {
        let mut r = Resources::new(
            vec![ResourceSpec::cpu(1), accel("a", 1, vec![(0, 8.0)])],
            Dispatch::Fixed,
        )
        .unwrap();
        assert_eq!(r.dispatch_task(0), Some(1));
        assert_eq!(r.dispatch_task(0), Some(0));
        assert_eq!(r.dispatch_task(0), None);
        r.complete(1);
        assert_eq!(
            r.dispatch_task(3),
            None,
            "the cpu is full, a cannot run kind 3"
        );
        assert_eq!(r.select(0), Some(1));
    }

    #[test]
    fn accelerators_are_bounded_per_rank_over_groups_and_per_job() {
        let per_rank = "ranks=0:accel=1024;ranks=0-1:accel=1";
        let e = parse_description(per_rank, 2).unwrap_err();
        assert!(e.0.contains("rank 0 would have 1025"), "{e}");
        assert_eq!(
            parse_description("ranks=0:accel=1024;ranks=1:accel=1", 2).unwrap()[0].len(),
            1024
        );
        let e = parse_description("ranks=0-99999:accel=1024", 100_000).unwrap_err();
        assert!(e.0.contains("at most 4194304"), "{e}");
    }

    #[test]
    fn bad_input_names_what_is_wrong() {
        let e = Resources::new(
            vec![accel("gpu0", 0, vec![(0, 2.0)])],
            Dispatch::LeastLoaded,
        )
        .unwrap_err();
        assert!(e.0.contains("gpu0") && e.0.contains("capacity 0"), "{e}");
        let e = Resources::new(
            vec![accel("gpu0", 1, vec![(3, 0.0)])],
            Dispatch::LeastLoaded,
        )
        .unwrap_err();
        assert!(e.0.contains("speed 0") && e.0.contains("kind 3"), "{e}");
        let e = Resources::new(
            vec![ResourceSpec {
                name: "x".into(),
                capacity: 1,
                variants: Variants::All(-1.0),
            }],
            Dispatch::LeastLoaded,
        )
        .unwrap_err();
        assert!(e.0.contains("speed -1"), "{e}");
        let ranks = vec![table(Dispatch::Fixed)];
        assert!(
            check_kinds(&ranks, &[0, 1, 5]).is_ok(),
            "cpu runs every kind"
        );
        let only =
            vec![Resources::new(vec![accel("a", 1, vec![(0, 1.0)])], Dispatch::Fixed).unwrap()];
        let e = check_kinds(&only, &[0, 2]).unwrap_err();
        assert!(e.0.contains("kind 2"), "{e}");
        assert!(
            Dispatch::parse("random")
                .unwrap_err()
                .0
                .contains("least-loaded")
        );
        for n in Dispatch::NAMES {
            assert_eq!(Dispatch::parse(n).unwrap().name(), n);
        }
    }

    #[test]
    fn descriptions() {
        let d = parse_description(
            "ranks=0-1:accel=1:speed=8:capacity=2; ranks=3:accel=2:kinds=0,4",
            4,
        )
        .unwrap();
        assert_eq!(
            d[0],
            vec![ResourceSpec {
                name: "accel0".into(),
                capacity: 2,
                variants: Variants::All(8.0)
            }]
        );
        assert!(d[2].is_empty());
        assert_eq!(d[3].len(), 2);
        assert_eq!(d[3][1].name, "accel1");
        assert_eq!(d[3][1].variants, Variants::Kinds(vec![(0, 1.0), (4, 1.0)]));
        assert!(parse_description("", 4).unwrap().iter().all(Vec::is_empty));
        for (s, want) in [
            ("ranks=0-4:accel=1", "job has 4 ranks"),
            ("ranks=0:accel=1:capacity=0", "capacity 0"),
            ("ranks=0:accel=1:speed=0", "speed 0"),
            ("ranks=0:accel=1:speed=-2", "speed -2"),
            ("ranks=0:accel=1:colour=red", "unknown key"),
            ("ranks=0", "no accel="),
            ("ranks=2-1:accel=1", "empty"),
        ] {
            let e = parse_description(s, 4).unwrap_err();
            assert!(e.0.contains(want), "{s}: {e}");
        }
    }

    #[test]
    fn capacity_and_kinds() {
        let r = table(Dispatch::LeastLoaded);
        assert_eq!(r.capacity_for(0), 2.0 + 16.0 + 4.0);
        assert_eq!(r.capacity_for(1), 2.0 + 4.0);
        assert_eq!(r.kinds(), vec![0, 1]);
    }
}

#[cfg(test)]
mod fuzz;
