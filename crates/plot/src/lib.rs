//! Plots of Titus's benchmark runs, as PNG and SVG: the charts (`charts.rs`: bars, per-rank
//! loads, a steal timeline, lines; plotters with the DejaVu Sans font embedded, so a fresh
//! machine needs no font packages), DLB_Bench's plots of its reports (`runs.rs`), the
//! one place both of its front ends — `dlb-bench` and `titus sim` — draw them, and a
//! traced run's timeline (`rank_timeline.rs`, `titus trace`).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod charts;
mod plot_error;
mod rank_timeline;
mod runs;

pub use charts::{Bars, Chart, Lines, RankLoads, Timeline, save, save_as};
pub use plot_error::PlotError;
pub use rank_timeline::{Activity, ROWS_MAX, RankTimeline, WorkerRow};
pub use runs::{MAX_DRAWN_STEALS, plots};
