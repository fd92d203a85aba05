//! A worker's clock for its tasks' times: the node's clock, read through the CPU's cycle
//! counter where it keeps time ([`titus_proc::Cycles`]).
//!
//! A worker reads the clock once a task. Through `clock_gettime` that reading cost about a
//! third of a tiny task's overhead on a KVM guest (34 ns of ~100); the cycle counter costs
//! 11. Its times are the node's: the counter is scaled by its rate since the node clock's
//! origin and anchored to a reading of the node's clock every [`ANCHOR_NS`], so traces,
//! grains and measured costs keep one time base.

use crate::shared::Shared;

/// How long one anchor serves before the node's clock is read again (ns): the rate's
/// error (a reading's tens of ns over the time since the origin) adds up to nanoseconds
/// over it.
const ANCHOR_NS: u64 = 1_000_000;

/// How long after the origin the rate is first taken (ns): before, every reading is the
/// node clock's.
const CALIBRATE_NS: u64 = 1_000_000;

/// One worker's clock (ns on the node's clock).
#[derive(Debug, Default)]
pub(crate) struct TaskClock {
    /// The node's clock and the counter, read together at the last anchor, and the
    /// counter's nanoseconds per cycle over the time since the origin.
    anchor: Option<(u64, u64, f64)>,
}

impl TaskClock {
    /// The node's clock now, ns.
    #[inline]
    pub(crate) fn now(&mut self, sh: &Shared) -> u64 {
        if let (Some((cycles, _)), Some((at_ns, at_cycles, ns_per_cycle))) =
            (sh.cycle_origin, self.anchor)
        {
            // (A counter behind the anchor wraps to a huge span: the node's clock then.)
            let since = (cycles.read().wrapping_sub(at_cycles) as f64 * ns_per_cycle) as u64;
            if since < ANCHOR_NS {
                return at_ns + since;
            }
        }
        self.anchor(sh)
    }

    /// Reads the node's clock and, past the calibration, anchors the counter to it.
    fn anchor(&mut self, sh: &Shared) -> u64 {
        let now = sh.now().0;
        if let Some((cycles, origin)) = sh.cycle_origin {
            let at = cycles.read();
            let span = at.wrapping_sub(origin);
            if now >= CALIBRATE_NS && span > 0 && span < u64::MAX / 2 {
                self.anchor = Some((now, at, now as f64 / span as f64));
            }
        }
        now
    }
}
