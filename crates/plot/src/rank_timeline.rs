//! Where each worker of each rank spent a run: a row per worker, grouped by rank, each
//! task coloured by the rank that owns it, idle time in grey, and a mark where a steal
//! ended on its thief's rows (`titus trace --png/--svg`).

use crate::charts::{Chart, FONT, HUES, err};
use plotters::coord::Shift;
use plotters::prelude::*;

/// What a worker did over a span of time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activity {
    /// Ran a task owned by this rank.
    Task {
        /// The task's owner.
        owner: u32,
    },
    /// Waited for work.
    Idle,
}

/// One worker's row.
#[derive(Debug, Clone)]
pub struct WorkerRow {
    /// Its rank.
    pub rank: u32,
    /// Its worker number on the rank.
    pub worker: u32,
    /// (start s, end s, what) in any order; later ones win where they overlap.
    pub spans: Vec<(f64, f64, Activity)>,
}

/// The chart: rows in order, steals, and the x range.
#[derive(Debug, Clone)]
pub struct RankTimeline {
    /// Title.
    pub title: String,
    /// The rows, top to bottom.
    pub rows: Vec<WorkerRow>,
    /// (time s, thief rank, victim rank) of each steal drawn.
    pub steals: Vec<(f64, u32, u32)>,
    /// Epoch boundaries (s), drawn as thin vertical lines.
    pub epochs: Vec<f64>,
    /// The run's length (s): the x range.
    pub span_s: f64,
}

/// Most rows drawn: past it a row is too thin to see (the rest are left out, and the
/// title says so).
pub const ROWS_MAX: usize = 256;

/// Width of the plotting area's rasterization, columns: runs of equal columns become one
/// rectangle, so a run of a million tasks draws at most this many a row.
const COLUMNS: usize = 1600;

const IDLE: RGBColor = RGBColor(215, 215, 215);

/// An owner's colour: the charts' hues and five more, none grey (idle time's).
fn owner_colour(owner: u32) -> RGBColor {
    const MORE: [RGBColor; 5] = [
        RGBColor(188, 189, 34),
        RGBColor(23, 190, 207),
        RGBColor(31, 60, 110),
        RGBColor(160, 70, 0),
        RGBColor(20, 90, 40),
    ];
    let i = owner as usize % (HUES.len() + MORE.len());
    HUES.get(i)
        .copied()
        .unwrap_or(MORE[i.saturating_sub(HUES.len())])
}

impl RankTimeline {
    /// Each row's runs of equal activity over [`COLUMNS`] columns: (first, last + 1, what).
    fn runs(&self, row: &WorkerRow) -> Vec<(usize, usize, Activity)> {
        let mut cols: Vec<Option<Activity>> = vec![None; COLUMNS];
        let scale = COLUMNS as f64 / self.span_s.max(1e-9);
        for &(start, end, what) in &row.spans {
            let a = ((start * scale).floor().max(0.0) as usize).min(COLUMNS);
            let b = ((end * scale).ceil().max(0.0) as usize).clamp(a, COLUMNS);
            // A task shorter than a column still shows: it takes the column it starts in.
            let b = if b == a && a < COLUMNS { a + 1 } else { b };
            for c in &mut cols[a..b] {
                // A task wins a column over idle time.
                if !(what == Activity::Idle && matches!(c, Some(Activity::Task { .. }))) {
                    *c = Some(what);
                }
            }
        }
        let mut runs = Vec::new();
        let mut i = 0;
        while i < COLUMNS {
            let Some(what) = cols[i] else {
                i += 1;
                continue;
            };
            let mut j = i + 1;
            while j < COLUMNS && cols[j] == Some(what) {
                j += 1;
            }
            runs.push((i, j, what));
            i = j;
        }
        runs
    }
}

impl Chart for RankTimeline {
    fn size(&self) -> (u32, u32) {
        let rows = self.rows.len().min(ROWS_MAX) as u32;
        (1800, 140 + (rows * 14).clamp(120, 1100))
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        root.fill(&WHITE).map_err(err)?;
        let rows = &self.rows[..self.rows.len().min(ROWS_MAX)];
        let n = rows.len().max(1) as f64;
        let span = self.span_s.max(1e-9);
        let title = match self.rows.len() > ROWS_MAX {
            true => format!(
                "{} (first {ROWS_MAX} of {} rows)",
                self.title,
                self.rows.len()
            ),
            false => self.title.clone(),
        };
        let mut chart = ChartBuilder::on(root)
            .caption(&title, (FONT, 22))
            .margin(15)
            .x_label_area_size(45)
            .y_label_area_size(90)
            // Row i is centred on y = i, top to bottom.
            .build_cartesian_2d(0.0..span, (n - 0.5)..-0.5)
            .map_err(err)?;
        let labels: Vec<String> = rows
            .iter()
            .map(|r| format!("rank {} w{}", r.rank, r.worker))
            .collect();
        chart
            .configure_mesh()
            .disable_mesh()
            .x_desc("time (s): tasks coloured by their owner's rank, idle grey, steals ▲")
            .y_labels(rows.len().min(40))
            .y_label_formatter(&|y: &f64| match (y - y.round()).abs() < 1e-6 && *y >= 0.0 {
                true => labels.get(y.round() as usize).cloned().unwrap_or_default(),
                false => String::new(),
            })
            .label_style((FONT, 13))
            .draw()
            .map_err(err)?;
        let col = span / COLUMNS as f64;
        for (i, row) in rows.iter().enumerate() {
            let (top, bottom) = (i as f64 - 0.42, i as f64 + 0.42);
            chart
                .draw_series(self.runs(row).into_iter().map(|(a, b, what)| {
                    let fill = match what {
                        Activity::Task { owner } => owner_colour(owner).filled(),
                        Activity::Idle => IDLE.filled(),
                    };
                    Rectangle::new([(a as f64 * col, top), (b as f64 * col, bottom)], fill)
                }))
                .map_err(err)?;
        }
        // Epoch boundaries, then each steal on its thief's first row.
        chart
            .draw_series(self.epochs.iter().map(|&t| {
                PathElement::new(
                    vec![(t, -0.5), (t, n - 0.5)],
                    BLACK.mix(0.5).stroke_width(1),
                )
            }))
            .map_err(err)?;
        let first_row = |rank: u32| rows.iter().position(|r| r.rank == rank);
        chart
            .draw_series(self.steals.iter().filter_map(|&(t, thief, _)| {
                let y = first_row(thief)? as f64;
                Some(TriangleMarker::new((t, y), 5, BLACK.filled()))
            }))
            .map_err(err)?;
        Ok(())
    }
}
