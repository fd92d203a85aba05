//! Which `TITUS_LOG` directives can log anything: the rule libtitus and the programs
//! share, kept beside the crates whose events it names.

use tracing::level_filters::LevelFilter;

/// The first directive of `filter` (env-filter syntax, directives separated by ',')
/// whose target no event of Titus carries, if any. Events come from Titus's crates alone
/// (`titus`, `titus_*`, and their modules): no dependency logs through `tracing`, and
/// env-filter takes any other word for a target, so a typo such as `verbose` or
/// `titus-fabric` would silently log nothing. Levels, empty directives and span filters
/// of every crate (`[span]=debug`) are Titus's.
pub fn foreign_directive(filter: &str) -> Option<&str> {
    filter.split(',').map(str::trim).find(|d| {
        if d.is_empty() || d.parse::<LevelFilter>().is_ok() {
            return false;
        }
        // `target[span{field=value}]=level`: the target ends at the span or the level.
        let target = d.split(['[', '=']).next().unwrap_or("");
        let krate = target.split("::").next().unwrap_or("");
        !(target.is_empty() || krate == "titus" || krate.starts_with("titus_"))
    })
}

/// The message for a directive [`foreign_directive`] found: `source` is what the filter
/// came from (`TITUS_LOG`, the option `log`), `text` the filter.
pub fn refusal(source: &str, text: &str, directive: &str) -> String {
    format!(
        "{source}='{text}': '{directive}' is neither a level (trace, debug, info, warn, \
         error, off) nor a target of Titus (titus, titus_fabric, titus_runtime=debug, ...), \
         so it would log nothing; e.g. info, or titus_fabric_ofi=debug"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_directives_naming_titus_or_a_level_pass() {
        for ok in [
            "info",
            "WARN",
            "titus_fabric_ofi=debug,warn",
            "titus_runtime",
            "titus=trace",
            "titus_fabric::bootstrap=debug",
            "titus_runtime[epoch]=debug",
            "[epoch]=debug, info",
            "",
        ] {
            assert_eq!(foreign_directive(ok), None, "{ok}");
        }
        for (bad, d) in [
            ("verbose", "verbose"),
            ("info,verbose", "verbose"),
            ("titus-fabric=debug", "titus-fabric=debug"),
            ("tokio=debug", "tokio=debug"),
            ("titusfabric", "titusfabric"),
        ] {
            assert_eq!(foreign_directive(bad), Some(d), "{bad}");
        }
    }
}
