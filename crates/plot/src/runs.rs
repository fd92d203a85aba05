//! The plots of DLB_Bench's runs (`--plot DIR`, `--sweep`), drawn alike by `dlb-bench` and
//! `titus sim`: efficiency per run, per-rank load before and after balancing, a timeline of
//! steals per run (these three of each run's last epoch), efficiency and steals per epoch
//! (runs of several epochs), and a sweep's CSV and efficiency curve.

use crate::{Bars, Lines, PlotError, RankLoads, Timeline, save};
use std::path::PathBuf;
use titus_workload::dlb::{BenchArgs, CSV_HEADER, Report, csv_row};

/// Steals a timeline draws at most.
pub const MAX_DRAWN_STEALS: usize = 20_000;

/// Writes the plots of the runs (and the sweep's CSV and plot); returns the files.
/// `reports` holds a row per run and epoch, in order.
pub fn plots(args: &BenchArgs, all_epochs: &[(String, Report)]) -> Result<Vec<PathBuf>, PlotError> {
    let mut files = Vec::new();
    // The bars, loads and timelines show each run's last epoch.
    let last: Vec<(String, Report)> = all_epochs
        .iter()
        .filter(|(_, r)| r.epoch + 1 >= r.epochs)
        .cloned()
        .collect();
    let reports = &last[..];
    let label = |l: &str, r: &Report| match &r.sweep_value {
        Some(v) => format!("{l} {v}"),
        None => l.to_string(),
    };
    if let Some(dir) = &args.plot {
        let first = &reports[0].1;
        let shape = format!(
            "{} ranks, {} ({} tasks, {} ownership)",
            first.ranks, first.profile, first.tasks, first.distribution
        );
        files.extend(save(
            &Bars {
                title: format!("DLB_Bench efficiency: {shape}"),
                y_label: "efficiency".into(),
                labels: reports.iter().map(|(l, r)| label(l, r)).collect(),
                values: reports.iter().map(|(_, r)| r.efficiency).collect(),
                y_max: Some(1.1),
            },
            dir,
            "efficiency",
        )?);
        if args.sweep.is_none() {
            files.extend(save(
                &RankLoads {
                    title: format!("Per-rank load: {shape}"),
                    before: first.owned_s.clone(),
                    after: reports
                        .iter()
                        .map(|(l, r)| (l.clone(), r.busy_s.clone(), r.idle_s.clone()))
                        .collect(),
                },
                dir,
                "ranks",
            )?);
        }
        for (l, r) in reports {
            if r.steals.is_empty() {
                continue;
            }
            let stem = format!("steals-{}", label(l, r).replace(['/', ' '], "-"));
            // Thousands of ranks steal hundreds of thousands of times: draw at most
            // MAX_DRAWN_STEALS of them (evenly spaced), or the SVG weighs tens of MB.
            let stride = r.steals.len().div_ceil(MAX_DRAWN_STEALS).max(1);
            files.extend(save(
                &Timeline {
                    title: format!(
                        "Steals over time: {} ({} ranks){}",
                        label(l, r),
                        r.ranks,
                        if stride > 1 {
                            format!(", 1 in {stride} of {} steals shown", r.steals.len())
                        } else {
                            String::new()
                        }
                    ),
                    ranks: r.ranks,
                    span_s: r.resolution_s,
                    steals: r.steals.iter().step_by(stride).copied().collect(),
                },
                dir,
                &stem,
            )?);
        }
        if all_epochs.iter().any(|(_, r)| r.epochs > 1) {
            files.extend(epoch_plots(dir, &shape, all_epochs, &label)?);
        }
    }
    if let Some(spec) = &args.sweep {
        let dir = args
            .plot
            .clone()
            .unwrap_or_else(|| PathBuf::from("dlb-sweep"));
        let param = spec.split_once('=').map_or(spec.as_str(), |p| p.0);
        std::fs::create_dir_all(&dir).map_err(|source| PlotError::SweepDir {
            dir: dir.clone(),
            source,
        })?;
        let csv = dir.join("sweep.csv");
        let mut text = format!("{param},run,{CSV_HEADER}\n");
        for (l, r) in all_epochs {
            text += &format!(
                "{},{l},{}\n",
                r.sweep_value.as_deref().unwrap_or(""),
                csv_row(r)
            );
        }
        std::fs::write(&csv, text).map_err(|source| PlotError::Csv {
            path: csv.clone(),
            source,
        })?;
        files.push(csv);
        let mut series: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
        for (l, r) in reports {
            let x: f64 = r
                .sweep_value
                .as_deref()
                .and_then(|v| v.parse().ok())
                .unwrap_or(f64::NAN);
            match series.iter_mut().find(|s| &s.0 == l) {
                Some(s) => s.1.push((x, r.efficiency)),
                None => series.push((l.clone(), vec![(x, r.efficiency)])),
            }
        }
        let log_x = ["ranks", "tasks", "payload"].contains(&param);
        files.extend(save(
            &Lines {
                title: format!("DLB_Bench efficiency versus {param}"),
                x_label: param.to_string(),
                y_label: "efficiency".into(),
                series,
                log_x,
                y_max: Some(1.1),
            },
            &dir,
            "sweep-efficiency",
        )?);
    }
    Ok(files)
}

/// Efficiency and steals per epoch, one line per run: `epochs-efficiency` and
/// `epochs-steals`.
fn epoch_plots(
    dir: &std::path::Path,
    shape: &str,
    reports: &[(String, Report)],
    label: &dyn Fn(&str, &Report) -> String,
) -> Result<Vec<PathBuf>, PlotError> {
    type Series = Vec<(String, Vec<(f64, f64)>)>;
    let mut eff: Series = Vec::new();
    let mut steals: Series = Vec::new();
    for (l, r) in reports {
        let name = label(l, r);
        // A run's rows are consecutive; a new epoch 0 starts a new line.
        if r.epoch == 0 || eff.last().is_none_or(|s| s.0 != name) {
            eff.push((name.clone(), Vec::new()));
            steals.push((name, Vec::new()));
        }
        let x = f64::from(r.epoch);
        if let (Some(e), Some(s)) = (eff.last_mut(), steals.last_mut()) {
            e.1.push((x, r.efficiency));
            s.1.push((x, r.steals_ok as f64));
        }
    }
    let mut files = save(
        &Lines {
            title: format!("Efficiency per epoch: {shape}"),
            x_label: "epoch".into(),
            y_label: "efficiency".into(),
            series: eff,
            log_x: false,
            y_max: Some(1.1),
        },
        dir,
        "epochs-efficiency",
    )?;
    files.extend(save(
        &Lines {
            title: format!("Successful steals per epoch: {shape}"),
            x_label: "epoch".into(),
            y_label: "steals".into(),
            series: steals,
            log_x: false,
            y_max: None,
        },
        dir,
        "epochs-steals",
    )?);
    Ok(files)
}
