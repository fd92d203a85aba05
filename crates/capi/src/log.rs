//! What libtitus logs, and where: nothing unless asked. `TITUS_LOG` (env-filter syntax,
//! e.g. `info` or `titus_fabric_ofi=debug,warn`) or the option `log` (the same filter,
//! its directives separated by `;` since commas separate options) installs a subscriber
//! that writes the libraries' `tracing` events to stderr; `TITUS_LOG` wins. The first
//! init that asks installs it, for the rest of the process (a process whose own code set
//! a `tracing` subscriber keeps that one).

use tracing_subscriber::EnvFilter;

/// The filter asked for: `TITUS_LOG` (`env`) or the option (`option`), or None. A filter
/// that would log nothing (`titus_fabric::log_targets`, the programs' rule too) is refused
/// naming its source.
pub(crate) fn filter(option: Option<&str>, env: Option<&str>) -> Result<Option<EnvFilter>, String> {
    let (text, source) = match (env, option) {
        (Some(e), _) if !e.trim().is_empty() => (e.to_string(), "TITUS_LOG"),
        (_, Some(o)) => (o.replace(';', ","), "the option log"),
        _ => return Ok(None),
    };
    let f = EnvFilter::builder().parse(&text).map_err(|e| {
        format!("{source}='{text}': not a log filter ({e}); e.g. info, or titus_fabric_ofi=debug")
    })?;
    match titus_fabric::log_targets::foreign_directive(&text) {
        None => Ok(Some(f)),
        Some(d) => Err(titus_fabric::log_targets::refusal(source, &text, d)),
    }
}

/// Installs a stderr subscriber with `filter`, unless one is installed already.
pub(crate) fn install(filter: EnvFilter) {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn silent_unless_asked_and_the_environment_wins() {
        assert!(filter(None, None).unwrap().is_none());
        assert!(filter(None, Some("  ")).unwrap().is_none());
        let f = filter(Some("titus=debug;warn"), None).unwrap().unwrap();
        assert_eq!(f.to_string(), "titus=debug,warn");
        let f = filter(Some("debug"), Some("info")).unwrap().unwrap();
        assert_eq!(f.to_string(), "info");
    }

    #[test]
    fn a_bad_filter_names_its_source() {
        let e = filter(Some("titus=loud"), None).unwrap_err();
        assert!(e.contains("the option log='titus=loud'"), "{e}");
        let e = filter(None, Some("titus=loud")).unwrap_err();
        assert!(e.contains("TITUS_LOG='titus=loud'"), "{e}");
    }

    #[test]
    fn filters_that_would_log_nothing_are_refused_naming_their_source() {
        for ok in [
            "info",
            "WARN",
            "titus_fabric_ofi=debug,warn",
            "titus_runtime=debug",
            "titus_fabric::bootstrap",
            "[epoch]=debug",
        ] {
            assert_eq!(filter(None, Some(ok)).map(|_| ()), Ok(()), "{ok}");
        }
        assert_eq!(filter(Some("titus=debug;warn"), None).map(|_| ()), Ok(()));
        assert_eq!(filter(None, None).map(|_| ()), Ok(()));
        let e = filter(None, Some("verbose")).unwrap_err();
        assert!(
            e.starts_with("TITUS_LOG='verbose': 'verbose' is neither a level"),
            "{e}"
        );
        let e = filter(Some("info;titus-fabric=debug"), None).unwrap_err();
        assert!(
            e.starts_with("the option log='info,titus-fabric=debug': 'titus-fabric=debug'"),
            "{e}"
        );
        // TITUS_LOG wins: a good one hides a bad option, as it replaces it.
        assert_eq!(filter(Some("verbose"), Some("info")).map(|_| ()), Ok(()));
    }
}
