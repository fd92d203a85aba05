//! The job's front: how the cost pattern moved along the key axis, seen by every rank at
//! once.
//!
//! A rank's own history ([`crate::CostHistory`]) sees a front move only while the front
//! stays inside its own keys. In a job of thousands of ranks the front crosses ranks: a
//! drift of 2% of the tasks per epoch moves it by dozens of ranks' keys, onto keys whose
//! last cost only their owners know, and every rank's own prediction is wrong where it
//! matters. So each rank tells the job, at an epoch's start (the runtime's all-gather, the
//! simulator's shared table), the key span it measured in the epoch before and the cost
//! it measured there, and the key span it owns now. Every rank then sees the job's cost
//! per key at rank granularity (a rank's cost spread evenly over its span) for the last
//! two epochs, finds the translation between them (the centre of the costs above the
//! cheapest moved by c: c itself where it scores below 0.9× the score of 0, by the mean
//! difference at keys spread over the job; else the best-scoring shift around c where it
//! scores below 0.7×), and predicts the next epoch as the last moved once
//! more: each rank's load (the string plan's input, identical on every rank) and, on
//! each rank, its tasks' costs (its own last cost of the key `s` below where it knows it,
//! the job's density there otherwise). Keys whose source lies off the job's keys (the
//! first `s` where the costs move up) have none — unless the axis is periodic (a
//! periodic domain, or DLB_Bench's drift, which moves costs round the tasks): where the
//! keys that entered at one end cost what left the other end the epoch before, sources
//! are found round the axis. At 3,584 simulated ranks under a 2% drift that took the
//! re-cut plan's epoch from 0.84 to 0.97: its first ranks had been cut by a guess.
//!
//! Only where the spans of the ranks are disjoint (keys in space order, each rank a
//! contiguous piece: a domain decomposition) is there a job front; keys drawn at random,
//! or spans that overlap, give none and the ranks predict alone.

mod density;
mod movement;
mod profile;
mod profile_error;
#[cfg(test)]
mod tests;

pub(crate) use density::Density;
pub use density::Period;
pub use movement::Movement;
pub(crate) use movement::{
    CostField, SAMPLES, mean_error_under, movement as movement_between, sample_key,
};
pub use profile::{KeySpan, Measured, PARTS_MAX, RankProfile};
pub use profile_error::ProfileError;

/// The translation of the job's costs between the last two epochs, as every rank sees it
/// where every rank's profile is at hand: the reference the epoch start's bounded
/// summary (`crate::start::front`) is checked against, and the simulator's whole-job
/// view.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobFront {
    before: Option<Density>,
    last: Option<Density>,
    movement: Movement,
}

impl JobFront {
    /// Takes an epoch's profiles (every rank's, in rank order) and finds the shift between
    /// the costs measured in the epoch before and those measured in the one before that.
    pub fn update(&mut self, profiles: &[RankProfile]) {
        self.before = self.last.take();
        self.last = Density::new(profiles);
        self.movement = match (&self.before, &self.last) {
            (Some(b), Some(l)) => movement::movement(b, l),
            _ => Movement::default(),
        };
    }

    /// The keys by which the costs moved (0: they did not, or nothing clear).
    pub fn shift(&self) -> i64 {
        self.movement.shift
    }

    /// How the costs moved.
    pub fn movement(&self) -> Movement {
        self.movement
    }

    /// One rank's view: the movement and the whole job's last densities.
    fn view(&self) -> FrontView<'_> {
        FrontView {
            last: self.last.as_ref(),
            movement: self.movement,
        }
    }

    /// Every rank's predicted load (ns) for its keys now, from the last epoch's costs moved
    /// by the shift; `None` without a shift (each rank predicts alone then) or for a rank
    /// whose keys' sources nobody measured.
    pub fn loads(&self, profiles: &[RankProfile]) -> Option<Vec<Option<u64>>> {
        let view = self.view();
        view.moved()?;
        Some(profiles.iter().map(|p| view.load(p.now)).collect())
    }

    /// The loads to plan with: the job's prediction where it has one, each rank's own
    /// (`own`) otherwise — without a shift, and for the ranks marked in `alone` (empty:
    /// none), which predict alone as a rank whose window gave up does
    /// (`crate::start::front::predicting_alone`).
    pub fn plan_loads(
        &self,
        profiles: &[RankProfile],
        own: &[Option<u64>],
        alone: &[bool],
    ) -> Vec<Option<u64>> {
        let job = self.loads(profiles);
        (0..own.len())
            .map(|r| match &job {
                Some(j) if !alone.get(r).copied().unwrap_or(false) => j[r].or(own[r]),
                _ => own[r],
            })
            .collect()
    }

    /// The string plan's loads (`crate::StringLoads`): from the plan's loads, split into
    /// costly and cheap where the job's cost classes allow ([`crate::split_class`], from
    /// each rank's own `classes`) — each rank's split by the job's density its keys came
    /// from where the front moved, by its own classes otherwise.
    /// Ranks marked in `alone` plan from their own loads and classes ([`Self::plan_loads`]).
    pub fn string_loads(
        &self,
        profiles: &[RankProfile],
        own: &[Option<u64>],
        classes: &[crate::LoadClasses],
        alone: &[bool],
    ) -> crate::StringLoads {
        let ranks = own.iter().flatten().count();
        let Some(class) = crate::split_class(classes, ranks) else {
            return crate::StringLoads::new(&self.plan_loads(profiles, own, alone));
        };
        let view = self.view();
        let split: Vec<Option<(u64, u64)>> = own
            .iter()
            .zip(classes)
            .zip(profiles)
            .enumerate()
            .map(
                |(r, ((l, c), p))| match alone.get(r).copied().unwrap_or(false) {
                    true => l.map(|_| c.split(class)),
                    false => view.split(p.now, l.is_some(), c, class),
                },
            )
            .collect();
        crate::StringLoads::with_split(&split, class)
    }

    /// Whether each of `keys` counts costly ([`FrontView::costly_keys`]).
    pub fn costly_keys(&self, keys: &[u64], class: Option<u8>) -> Vec<Option<bool>> {
        self.view().costly_keys(keys, class)
    }

    /// The predicted cost of each of `keys` ([`FrontView::predict`]).
    pub fn predict(&self, keys: &[u64], own: impl Fn(u64) -> Option<u64>) -> Option<Vec<u64>> {
        self.view().predict(keys, own)
    }
}

/// The last epoch's densities over a rank's sources, as it read them from the ranks that
/// measured them (`crate::start::front::WindowSearch`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FrontWindow(pub(crate) Option<Density>);

impl FrontWindow {
    /// The rank's view with the job's `movement`.
    pub fn view(&self, movement: Movement) -> FrontView<'_> {
        FrontView {
            last: self.0.as_ref(),
            movement,
        }
    }
}

/// What one rank predicts from the front: the movement, and the last epoch's densities
/// over at least the keys its own keys came from (the whole job's, or the window the
/// epoch start read from the ranks that measured them). Every prediction is the same
/// whichever it is handed, as long as the window covers the sources.
#[derive(Debug, Clone, Copy)]
pub struct FrontView<'a> {
    pub(crate) last: Option<&'a Density>,
    pub(crate) movement: Movement,
}

impl FrontView<'_> {
    /// The densities, where the costs moved.
    fn moved(&self) -> Option<&Density> {
        self.last.filter(|_| self.movement.shift != 0)
    }

    /// The predicted load (ns) of a rank whose keys are `now`; `None` without a shift or
    /// where nobody measured their sources.
    pub fn load(&self, now: KeySpan) -> Option<u64> {
        self.moved()?
            .over(now, self.movement.shift, self.movement.period)
    }

    /// A rank's (costly, cheap) load for a string plan split at `class`: by the job's
    /// density its keys `now` came from, else by its own `classes` where it predicted
    /// (`predicted`), else none.
    pub fn split(
        &self,
        now: KeySpan,
        predicted: bool,
        classes: &crate::LoadClasses,
        class: u8,
    ) -> Option<(u64, u64)> {
        let costly = (1u64 << class) as f64;
        self.moved()
            .and_then(|last| {
                last.over_parts(now, self.movement.shift, costly, self.movement.period)
                    .map(|(d, c)| (d as u64, c as u64))
            })
            .or_else(|| predicted.then(|| classes.split(class)))
    }

    /// For the split string plan (`class`: its split class): whether each of `keys`
    /// counts costly, as that plan counted the rank's load — by the job's density where its
    /// key came from; `None` where the density does not hold it (its predicted cost
    /// says). Empty without a shift or a split.
    pub fn costly_keys(&self, keys: &[u64], class: Option<u8>) -> Vec<Option<bool>> {
        let (Some(last), Some(class)) = (self.moved(), class) else {
            return Vec::new();
        };
        let costly = (1u64 << class.min(63)) as f64;
        let mut at = last.walker();
        keys.iter()
            .map(|&k| at(self.movement.source(k)).map(|d| d >= costly))
            .collect()
    }

    /// The predicted cost (ns; 0: unknown) of each of `keys`: `own(k − shift)` where the
    /// rank knows it, the job's density there otherwise. `None` without a shift.
    pub fn predict(&self, keys: &[u64], own: impl Fn(u64) -> Option<u64>) -> Option<Vec<u64>> {
        let last = self.moved()?;
        let mut at = last.walker();
        Some(
            keys.iter()
                .map(|&k| {
                    let j = self.movement.source(k);
                    u64::try_from(j)
                        .ok()
                        .and_then(&own)
                        .or_else(|| at(j).map(|d| d.round() as u64))
                        .unwrap_or(0)
                })
                .collect(),
        )
    }
}
