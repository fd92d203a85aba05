//! A discrete-event simulator of a Titus job: the unchanged sans-IO core
//! ([`titus_core::Node`]) of every rank, driven on virtual time over a modelled fabric
//! ([`model::Model`]), with workers that "run" each task for its drawn duration.
//!
//! The driver does what the runtime's progress thread and workers do: it hands the
//! node's commands to the (simulated) fabric, feeds completions, signals and timers back,
//! gives idle workers tasks — a grain at a time through `take_grain`, as the runtime's
//! workers take them (a rank with resources: one at a time through `take_tasks_for`) —
//! and reports results with `task_done`, a grain's together as the runtime's workers do.
//! Nothing of the protocol lives here: if the simulator needed a path the runtime lacks,
//! the boundary would be wrong.
//!
//! Every run checks invariants (see [`Violation`]): every task runs exactly once to
//! completion, every result reaches its owner exactly once and is right, a thief reads a
//! locked shared set only while it holds the lock, termination is declared only when
//! every result is home, and the run ends (routes end, nothing stalls). Faults
//! ([`Faults`]) — jittered (hence reordered) operations, slow ranks, a rank whose
//! progress stops for a while, ranks that exit as soon as they ended the last epoch —
//! are drawn from the seed. The same seed gives the same
//! event trace ([`Outcome::trace`]).
//!
//! A job may run several epochs ([`Job::later_epochs`]), each starting once every rank
//! ended the one before. As the runtime does, each rank keeps the measured cost of each
//! of its tasks (by [`SimTask::key`], which a job keeps with the task across epochs;
//! measured cost: its simulated duration, carried home in the result record) and hands
//! the next epoch's predictions and its diffusion neighbours' predicted loads to its node
//! (diffusion, `titus_core::Config::diffusion`); the first epoch has no history. Between
//! epochs a driver may change the next epoch's tasks ([`simulate_with`]), e.g. apply
//! every rank's repartition plan ([`Between::repartition_plan`]: a repartition start
//! over the simulated fabric, as the runtime's). Ranks may start each epoch at different times
//! ([`Job::start_skew_ns`]), as after a real barrier. At the end of every epoch nothing of
//! it may still be travelling but what the core leaves to the next one: steal requests
//! and empty replies, load reports, forwarded requests and refill hints (a thief that
//! learned of the end does not wait for them); the next epoch must answer them with
//! nothing and ignore the answers.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod check;
mod engine;
mod job;
mod mem;
pub mod model;
mod queue;
mod repartition_error;
pub mod time;

pub use engine::{Between, simulate_each, simulate_with};
pub use job::*;
pub use model::Model;
pub use repartition_error::RepartitionError;

/// What a driver does between epochs ([`simulate_with`]): given [`Between`], the next
/// epoch's task lists (one per rank) to run instead of the job's, or `None` to run the
/// job's; an error ends the run.
pub type BetweenEpochs<'f> =
    dyn FnMut(&Between<'_>) -> Result<Option<Vec<Vec<SimTask>>>, String> + 'f;

/// What a driver does with each epoch's outcome as it ends ([`simulate_each`]): given
/// the epoch's number (from 0) and every rank's outcome; an error ends the run.
pub type EachEpoch<'f> = dyn FnMut(usize, Vec<RankOutcome>) -> Result<(), String> + 'f;

/// Runs every epoch of `job` to its end and checks every invariant.
pub fn simulate(job: &Job<'_>) -> Result<Outcome, Violation> {
    simulate_with(job, &mut |_| Ok(None))
}
