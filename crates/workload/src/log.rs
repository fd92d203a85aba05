//! The programs' log: the libraries log through `tracing` and print nothing themselves;
//! `titus`, `dlb-bench` and `runtime-bench` write their events to stderr, filtered by
//! `TITUS_LOG` (env-filter syntax, e.g. `info` to see the fabric provider, or
//! `titus_fabric_ofi=debug`), warnings only without it.

use tracing_subscriber::EnvFilter;

/// What a program logs when `TITUS_LOG` is unset: warnings and errors.
pub const DEFAULT_FILTER: &str = "warn";

/// The filter of `TITUS_LOG` (`value`), or [`DEFAULT_FILTER`] when it is unset or empty;
/// an error naming the variable when it does not parse.
pub fn log_filter(value: Option<&str>) -> Result<EnvFilter, String> {
    let text = value
        .filter(|v| !v.trim().is_empty())
        .unwrap_or(DEFAULT_FILTER);
    EnvFilter::builder().parse(text).map_err(|e| {
        format!("TITUS_LOG='{text}': not a log filter ({e}); e.g. info, or titus_fabric_ofi=debug")
    })
}

/// Installs the program's stderr log (see the module): call once, first thing in `main`.
pub fn init_logging() -> Result<(), String> {
    let filter = log_filter(std::env::var("TITUS_LOG").ok().as_deref())?;
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
        let e = log_filter(Some("titus=loud")).unwrap_err();
        assert!(e.contains("TITUS_LOG='titus=loud'"), "{e}");
    }
}
