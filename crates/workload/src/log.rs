//! The programs' log: the libraries log through `tracing` and print nothing themselves;
//! `titus`, `dlb-bench` and `runtime-bench` write their events to stderr, filtered by
//! `TITUS_LOG` (env-filter syntax, e.g. `info` to see the fabric provider, or
//! `titus_fabric_ofi=debug`), warnings only without it.

use titus_fabric::env_var::EnvError;
use titus_fabric::log_targets::refusal;
use tracing_subscriber::EnvFilter;

/// What a program logs when `TITUS_LOG` is unset: warnings and errors.
pub const DEFAULT_FILTER: &str = "warn";

/// A `TITUS_LOG` that cannot be used: a program refuses it rather than log other than
/// asked, or nothing at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LogError {
    /// The variable is set but cannot be read.
    #[error(transparent)]
    Env(#[from] EnvError),
    /// Not env-filter syntax.
    #[error(
        "TITUS_LOG='{text}': not a log filter ({detail}); e.g. info, or titus_fabric_ofi=debug"
    )]
    Parse {
        /// The filter as given.
        text: String,
        /// The parser's words.
        detail: String,
    },
    /// A directive that names neither a level nor a Titus target, so would log nothing.
    #[error("{}", refusal("TITUS_LOG", .text, .directive))]
    Foreign {
        /// The filter as given.
        text: String,
        /// The directive at fault.
        directive: String,
    },
}

/// The filter of `TITUS_LOG` (`value`), or [`DEFAULT_FILTER`] when it is unset or empty;
/// an error naming the variable when it does not parse.
pub fn log_filter(value: Option<&str>) -> Result<EnvFilter, LogError> {
    let text = value
        .filter(|v| !v.trim().is_empty())
        .unwrap_or(DEFAULT_FILTER);
    let filter = EnvFilter::builder()
        .parse(text)
        .map_err(|e| LogError::Parse {
            text: text.into(),
            detail: e.to_string(),
        })?;
    if let Some(d) = titus_fabric::log_targets::foreign_directive(text) {
        return Err(LogError::Foreign {
            text: text.into(),
            directive: d.into(),
        });
    }
    Ok(filter)
}

/// Installs the program's stderr log (see the module): call once, first thing in `main`.
pub fn init_logging() -> Result<(), LogError> {
    let value = titus_fabric::env_var::get(titus_fabric::env_var::LOG)?;
    let filter = log_filter(value.as_deref())?;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warnings_by_default_and_bad_filters_named() {
        assert_eq!(log_filter(None).unwrap().to_string(), "warn");
        assert_eq!(log_filter(Some("")).unwrap().to_string(), "warn");
        assert_eq!(
            log_filter(Some("titus_fabric=debug,info"))
                .unwrap()
                .to_string(),
            "titus_fabric=debug,info"
        );
        let e = log_filter(Some("titus=loud")).unwrap_err().to_string();
        assert!(e.contains("TITUS_LOG='titus=loud'"), "{e}");
    }

    #[test]
    fn filters_that_would_log_nothing_are_refused() {
        // What the README shows, and the other shapes of a Titus directive.
        for ok in [
            "info",
            "WARN",
            "warn",
            "titus_fabric_ofi=debug,warn",
            "titus_runtime=debug",
            "titus_runtime",
            "titus=trace",
            "titus_fabric::bootstrap=debug",
            "titus_runtime[epoch]=debug",
            "[epoch]=debug, info",
        ] {
            assert!(log_filter(Some(ok)).is_ok(), "{ok}");
        }
        for (bad, directive) in [
            ("verbose", "verbose"),
            ("info,verbose", "verbose"),
            ("titus-fabric=debug", "titus-fabric=debug"),
            ("tokio=debug", "tokio=debug"),
            ("titusfabric", "titusfabric"),
        ] {
            let e = log_filter(Some(bad)).unwrap_err().to_string();
            assert!(
                e.contains(&format!(
                    "TITUS_LOG='{bad}': '{directive}' is neither a level"
                )),
                "{e}"
            );
        }
    }
}
