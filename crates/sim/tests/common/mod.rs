//! What several of the simulator's test files share.

use titus_core::{Balancing, Config};
use titus_overlay::OverlayParams;

/// `core` and an overlay of `ranks` ranks with default parameters, as `balancing` sets
/// them for a job.
pub fn balanced(balancing: Balancing, mut core: Config, ranks: u32) -> (Config, OverlayParams) {
    let mut overlay = OverlayParams {
        ranks,
        ..OverlayParams::default()
    };
    balancing
        .apply(&mut core, &mut overlay, ranks, None)
        .unwrap();
    (core, overlay)
}
