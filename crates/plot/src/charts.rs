//! Plots of benchmark runs, written as PNG and SVG (plotters; the font is embedded, so a
//! fresh machine needs no font packages).

use crate::PlotError;
use plotters::coord::Shift;
use plotters::coord::ranged1d::{Ranged, ValueFormatter};
use plotters::prelude::*;
use std::path::{Path, PathBuf};
use std::sync::Once;

pub(crate) const FONT: &str = "sans-serif";

/// Something drawable into a PNG and an SVG of the same size.
pub trait Chart {
    /// Width and height in pixels.
    fn size(&self) -> (u32, u32) {
        (1000, 600)
    }
    /// Draws onto `root`.
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String>;
}

pub(crate) fn err<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

/// Writes `chart` to a PNG and an SVG at the paths given (either may be left out).
pub fn save_as(
    chart: &impl Chart,
    png: Option<&Path>,
    svg: Option<&Path>,
) -> Result<(), PlotError> {
    register_font();
    let (w, h) = chart.size();
    if let Some(png) = png {
        let root = BitMapBackend::new(png, (w, h)).into_drawing_area();
        chart.draw(&root).map_err(PlotError::Draw)?;
        root.present().map_err(|e| PlotError::Present {
            path: png.to_path_buf(),
            detail: e.to_string(),
        })?;
    }
    if let Some(svg) = svg {
        let root = SVGBackend::new(svg, (w, h)).into_drawing_area();
        chart.draw(&root).map_err(PlotError::Draw)?;
        root.present().map_err(|e| PlotError::Present {
            path: svg.to_path_buf(),
            detail: e.to_string(),
        })?;
    }
    Ok(())
}

fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // DejaVu Sans (Bitstream Vera licence: assets/DejaVuSans.LICENSE).
        let bytes: &'static [u8] = include_bytes!("../assets/DejaVuSans.ttf");
        if plotters::style::register_font(FONT, FontStyle::Normal, bytes).is_err() {
            eprintln!("plot: the embedded font did not load; text will be missing");
        }
    });
}

/// Writes `chart` as `dir/stem.png` and `dir/stem.svg` (creating `dir`); returns the paths.
pub fn save(chart: &impl Chart, dir: &Path, stem: &str) -> Result<Vec<PathBuf>, PlotError> {
    register_font();
    std::fs::create_dir_all(dir).map_err(|source| PlotError::PlotDir {
        dir: dir.to_path_buf(),
        source,
    })?;
    let png = dir.join(format!("{stem}.png"));
    let svg = dir.join(format!("{stem}.svg"));
    save_as(chart, Some(&png), Some(&svg))?;
    Ok(vec![png, svg])
}

/// The charts' colours, grey left out (grey is idle time in a timeline).
pub(crate) const HUES: [RGBColor; 7] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
];

/// Series `i`'s colour: the hues, then grey.
pub(crate) fn colour(i: usize) -> RGBColor {
    HUES.get(i % (HUES.len() + 1))
        .copied()
        .unwrap_or(RGBColor(127, 127, 127))
}

/// One bar per label (e.g. efficiency per balancer).
#[derive(Debug, Clone)]
pub struct Bars {
    /// Title.
    pub title: String,
    /// Y axis description.
    pub y_label: String,
    /// Bar labels.
    pub labels: Vec<String>,
    /// Bar heights.
    pub values: Vec<f64>,
    /// Top of the y axis (None: from the data).
    pub y_max: Option<f64>,
}

impl Chart for Bars {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        root.fill(&WHITE).map_err(err)?;
        let n = self.values.len().max(1);
        let top = self
            .y_max
            .unwrap_or_else(|| self.values.iter().copied().fold(0.0, f64::max).max(1e-9) * 1.15);
        let mut chart = ChartBuilder::on(root)
            .caption(&self.title, (FONT, 22))
            .margin(15)
            .x_label_area_size(60)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..n as f64, 0.0..top)
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .disable_x_axis()
            .y_desc(self.y_label.as_str())
            .label_style((FONT, 15))
            .draw()
            .map_err(err)?;
        chart
            .draw_series(self.values.iter().enumerate().map(|(i, &v)| {
                Rectangle::new(
                    [(i as f64 + 0.15, 0.0), (i as f64 + 0.85, v)],
                    colour(i).filled(),
                )
            }))
            .map_err(err)?;
        chart
            .draw_series(self.values.iter().enumerate().map(|(i, &v)| {
                Text::new(
                    format!("{v:.3}"),
                    (i as f64 + 0.35, v + top * 0.02),
                    (FONT, 15),
                )
            }))
            .map_err(err)?;
        chart
            .draw_series(
                self.labels
                    .iter()
                    .enumerate()
                    .map(|(i, l)| Text::new(l.clone(), (i as f64 + 0.2, -top * 0.04), (FONT, 15))),
            )
            .map_err(err)?;
        Ok(())
    }
}

/// Per-rank work before balancing (what each rank owns) and busy/idle time after, for
/// one or more runs.
#[derive(Debug, Clone)]
pub struct RankLoads {
    /// Title.
    pub title: String,
    /// Seconds of work each rank owns at the start.
    pub before: Vec<f64>,
    /// Runs: label, busy seconds per rank, idle seconds per rank.
    pub after: Vec<(String, Vec<f64>, Vec<f64>)>,
}

impl Chart for RankLoads {
    fn size(&self) -> (u32, u32) {
        (1100, 320 * (1 + self.after.len() as u32))
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        root.fill(&WHITE).map_err(err)?;
        let root = root.titled(&self.title, (FONT, 22)).map_err(err)?;
        let panels = root.split_evenly((1 + self.after.len(), 1));
        let n = self.before.len().max(1);
        let top = self
            .after
            .iter()
            .flat_map(|(_, b, i)| b.iter().zip(i).map(|(b, i)| b + i))
            .chain(self.before.iter().copied())
            .fold(0.0, f64::max)
            .max(1e-9)
            * 1.1;
        for (p, panel) in panels.iter().enumerate() {
            let (label, busy, idle) = if p == 0 {
                (
                    "before balancing: work owned".to_string(),
                    &self.before,
                    None,
                )
            } else {
                let (l, b, i) = &self.after[p - 1];
                (format!("{l}: busy (solid) and idle (light)"), b, Some(i))
            };
            let mut chart = ChartBuilder::on(panel)
                .caption(label, (FONT, 17))
                .margin(8)
                .x_label_area_size(30)
                .y_label_area_size(60)
                .build_cartesian_2d(0.0..n as f64, 0.0..top)
                .map_err(err)?;
            chart
                .configure_mesh()
                .disable_x_mesh()
                .x_desc("rank")
                .y_desc("seconds")
                .x_label_formatter(&|x| format!("{}", *x as u64))
                .label_style((FONT, 13))
                .draw()
                .map_err(err)?;
            let c = colour(p);
            chart
                .draw_series(busy.iter().enumerate().map(|(r, &b)| {
                    Rectangle::new([(r as f64 + 0.1, 0.0), (r as f64 + 0.9, b)], c.filled())
                }))
                .map_err(err)?;
            if let Some(idle) = idle {
                chart
                    .draw_series(busy.iter().zip(idle).enumerate().map(|(r, (&b, &i))| {
                        Rectangle::new(
                            [(r as f64 + 0.1, b), (r as f64 + 0.9, b + i)],
                            c.mix(0.25).filled(),
                        )
                    }))
                    .map_err(err)?;
            }
        }
        Ok(())
    }
}

/// Steals over time: a segment from the victim's rank to the thief's at the moment a
/// steal ended, a dot at the thief.
#[derive(Debug, Clone)]
pub struct Timeline {
    /// Title.
    pub title: String,
    /// Ranks of the run.
    pub ranks: u32,
    /// Resolution time (s): the x range.
    pub span_s: f64,
    /// (time s, thief, victim, tasks).
    pub steals: Vec<(f64, u32, u32, u32)>,
}

impl Chart for Timeline {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        root.fill(&WHITE).map_err(err)?;
        let span = self
            .steals
            .iter()
            .map(|s| s.0)
            .fold(self.span_s, f64::max)
            .max(1e-6);
        let mut chart = ChartBuilder::on(root)
            .caption(&self.title, (FONT, 22))
            .margin(15)
            .x_label_area_size(45)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..span * 1.02, -0.5..f64::from(self.ranks) - 0.5)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("time (s)")
            .y_desc("rank (thief: dot; line from its victim)")
            .label_style((FONT, 14))
            .draw()
            .map_err(err)?;
        chart
            .draw_series(self.steals.iter().map(|&(t, thief, victim, _)| {
                PathElement::new(
                    vec![(t, f64::from(victim)), (t, f64::from(thief))],
                    colour(0).mix(0.35).stroke_width(1),
                )
            }))
            .map_err(err)?;
        chart
            .draw_series(
                self.steals.iter().map(|&(t, thief, _, _)| {
                    Circle::new((t, f64::from(thief)), 3, colour(3).filled())
                }),
            )
            .map_err(err)?;
        Ok(())
    }
}

/// Lines over a swept parameter (e.g. efficiency versus ranks, one line per balancer).
#[derive(Debug, Clone)]
pub struct Lines {
    /// Title.
    pub title: String,
    /// X axis description.
    pub x_label: String,
    /// Y axis description.
    pub y_label: String,
    /// (name, points).
    pub series: Vec<(String, Vec<(f64, f64)>)>,
    /// Logarithmic x axis.
    pub log_x: bool,
    /// Top of the y axis (None: from the data).
    pub y_max: Option<f64>,
}

impl Chart for Lines {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        root.fill(&WHITE).map_err(err)?;
        let xs = self.series.iter().flat_map(|s| s.1.iter().map(|p| p.0));
        let (mut lo, mut hi) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
            (a.min(x), b.max(x))
        });
        if !lo.is_finite() {
            (lo, hi) = (0.0, 1.0);
        }
        if hi <= lo {
            hi = lo + 1.0;
        }
        let top = self.y_max.unwrap_or_else(|| {
            self.series
                .iter()
                .flat_map(|s| s.1.iter().map(|p| p.1))
                .fold(0.0, f64::max)
                .max(1e-9)
                * 1.1
        });
        let mut builder = ChartBuilder::on(root);
        builder
            .caption(&self.title, (FONT, 22))
            .margin(15)
            .x_label_area_size(45)
            .y_label_area_size(60);
        if self.log_x && lo > 0.0 {
            let chart = builder
                .build_cartesian_2d((lo * 0.9..hi * 1.1).log_scale(), 0.0..top)
                .map_err(err)?;
            self.draw_lines(chart)
        } else {
            let pad = (hi - lo) * 0.05;
            let chart = builder
                .build_cartesian_2d(lo - pad..hi + pad, 0.0..top)
                .map_err(err)?;
            self.draw_lines(chart)
        }
    }
}

impl Lines {
    /// Mesh, one line with dots per series, legend: the same on either x axis.
    fn draw_lines<'a, DB, X>(
        &self,
        mut chart: ChartContext<'a, DB, Cartesian2d<X, plotters::coord::types::RangedCoordf64>>,
    ) -> Result<(), String>
    where
        DB: DrawingBackend + 'a,
        X: Ranged<ValueType = f64> + ValueFormatter<f64>,
    {
        let log = self.log_x;
        chart
            .configure_mesh()
            .x_desc(self.x_label.as_str())
            .y_desc(self.y_label.as_str())
            .x_label_formatter(&|x: &f64| tick(*x, log))
            .label_style((FONT, 14))
            .draw()
            .map_err(err)?;
        for (i, (name, pts)) in self.series.iter().enumerate() {
            let c = colour(i);
            chart
                .draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2)))
                .map_err(err)?
                .label(name.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                });
            chart
                .draw_series(pts.iter().map(|&p| Circle::new(p, 4, c.filled())))
                .map_err(err)?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::MiddleLeft)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .label_font((FONT, 15))
            .draw()
            .map_err(err)?;
        Ok(())
    }
}

/// An x tick's label: integers without a fraction and with thousands separators; on a
/// log axis only 1, 2 and 5 × 10^k are labelled (its 2…9 × 10^k ticks overlap).
fn tick(x: f64, log: bool) -> String {
    if log && x > 0.0 {
        let m = x / 10f64.powf(x.log10().floor());
        let lead = m.round();
        if (m - lead).abs() > 1e-6 || ![1.0, 2.0, 5.0].contains(&lead) {
            return String::new();
        }
    }
    if x.fract() != 0.0 || x.abs() >= 1e15 {
        return format!("{x}");
    }
    let digits = (x.abs() as u64).to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if x < 0.0 { format!("-{out}") } else { out }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tick_labels() {
        assert_eq!(tick(3584.0, false), "3,584");
        assert_eq!(tick(100_000.0, true), "100,000");
        assert_eq!(tick(20_000.0, true), "20,000");
        assert_eq!(tick(30_000.0, true), "");
        assert_eq!(tick(0.5, false), "0.5");
        assert_eq!(tick(28.0, false), "28");
    }

    #[test]
    fn every_chart_writes_a_png_and_an_svg_with_its_text() {
        let dir = std::env::temp_dir().join(format!("titus-plot-{}", std::process::id()));
        let bars = Bars {
            title: "efficiency per balancer".into(),
            y_label: "efficiency".into(),
            labels: vec!["none".into(), "smallworld".into()],
            values: vec![0.4, 0.95],
            y_max: Some(1.05),
        };
        let loads = RankLoads {
            title: "loads".into(),
            before: vec![3.0, 1.0, 0.0],
            after: vec![(
                "smallworld".into(),
                vec![1.3, 1.4, 1.2],
                vec![0.1, 0.0, 0.2],
            )],
        };
        let timeline = Timeline {
            title: "steals".into(),
            ranks: 3,
            span_s: 1.5,
            steals: vec![(0.1, 2, 0, 5), (0.2, 1, 0, 3)],
        };
        let lines = Lines {
            title: "sweep".into(),
            x_label: "ranks".into(),
            y_label: "efficiency".into(),
            series: vec![("smallworld".into(), vec![(2.0, 0.9), (4.0, 0.8)])],
            log_x: true,
            y_max: Some(1.05),
        };
        let mut files = save(&bars, &dir, "bars").unwrap();
        files.extend(save(&loads, &dir, "loads").unwrap());
        files.extend(save(&timeline, &dir, "timeline").unwrap());
        files.extend(save(&lines, &dir, "lines").unwrap());
        for f in &files {
            let bytes = std::fs::read(f).unwrap();
            if f.extension().unwrap() == "png" {
                assert_eq!(&bytes[1..4], b"PNG", "{}", f.display());
            } else {
                let text = String::from_utf8(bytes).unwrap();
                assert!(text.starts_with("<svg"), "{}", f.display());
            }
        }
        let svg = std::fs::read_to_string(dir.join("bars.svg")).unwrap();
        assert!(svg.contains("smallworld") && svg.contains("0.950"), "{svg}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
