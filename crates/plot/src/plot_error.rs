//! Why a plot, or a sweep's CSV, could not be written ([`crate::save`], [`crate::plots`]).
//! The runs are over by then: the message names the file so its data can be recovered
//! from the reports.

use std::path::PathBuf;

/// A plot or sweep file that could not be written.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// The plot directory could not be created.
    #[error("cannot create plot directory '{}': {source}", .dir.display())]
    PlotDir {
        /// The directory.
        dir: PathBuf,
        /// What creating it gave.
        source: std::io::Error,
    },
    /// A sweep's directory could not be created.
    #[error("cannot create '{}': {source}", .dir.display())]
    SweepDir {
        /// The directory.
        dir: PathBuf,
        /// What creating it gave.
        source: std::io::Error,
    },
    /// A chart failed to draw ([`crate::Chart::draw`]'s words).
    #[error("{0}")]
    Draw(String),
    /// A drawn PNG or SVG could not be written out.
    #[error("cannot write '{}': {detail}", .path.display())]
    Present {
        /// The file.
        path: PathBuf,
        /// The plotting backend's words.
        detail: String,
    },
    /// A sweep's CSV could not be written.
    #[error("cannot write '{}': {source}", .path.display())]
    Csv {
        /// The file.
        path: PathBuf,
        /// What writing it gave.
        source: std::io::Error,
    },
}
