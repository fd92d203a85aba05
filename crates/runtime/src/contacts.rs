//! Which ranks this rank has operated on, and what their first contacts cost: the price
//! of connections a run reports (`Runtime::connections`).
//!
//! A rank's first operation to a peer is its first contact; where the fabric connects on
//! first contact (`FabricConfig::lazy`), that operation carries the connection's setup,
//! so its duration — submission to completion — is charged as connection time. Kept in
//! one atomic word per rank: 0 never contacted, `u64::MAX` connected, otherwise 1 + the
//! node time (ns) the first operation went out.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

const CONNECTED: u64 = u64::MAX;

/// One word per rank, and the connection time charged so far.
#[derive(Debug)]
pub(crate) struct Contacts {
    me: u32,
    state: Vec<AtomicU64>,
    connect_ns: AtomicU64,
}

impl Contacts {
    pub(crate) fn new(me: u32, size: u32) -> Self {
        Self {
            me,
            state: (0..size).map(|_| AtomicU64::new(0)).collect(),
            connect_ns: AtomicU64::new(0),
        }
    }

    /// An operation to `peer` goes out at node time `now_ns`.
    pub(crate) fn submitted(&self, peer: u32, now_ns: u64) {
        if peer == self.me {
            return;
        }
        if let Some(s) = self.state.get(peer as usize)
            && s.load(Ordering::Relaxed) == 0
        {
            let _ = s.compare_exchange(
                0,
                now_ns.saturating_add(1).min(CONNECTED - 1),
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
    }

    /// An operation to `peer` completed (or failed) at `now_ns`: the first one ends its
    /// first contact.
    pub(crate) fn completed(&self, peer: u32, now_ns: u64) {
        let Some(s) = self.state.get(peer as usize) else {
            return;
        };
        let v = s.load(Ordering::Relaxed);
        if v == 0 || v == CONNECTED {
            return;
        }
        if s.compare_exchange(v, CONNECTED, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            self.connect_ns
                .fetch_add(now_ns.saturating_sub(v - 1), Ordering::Relaxed);
        }
    }

    /// The ranks operated on so far, ascending.
    pub(crate) fn peers(&self) -> Vec<u32> {
        (0..self.state.len() as u32)
            .filter(|&p| self.state[p as usize].load(Ordering::Relaxed) != 0)
            .collect()
    }

    /// Time charged to first contacts that completed.
    pub(crate) fn connect_time(&self) -> Duration {
        Duration::from_nanos(self.connect_ns.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_first_operation_to_a_peer_is_charged() {
        let c = Contacts::new(0, 4);
        c.submitted(0, 5); // itself: never a contact
        c.submitted(2, 100);
        c.submitted(2, 150); // a second one in flight does not restart the clock
        c.completed(2, 400);
        c.completed(2, 900); // the second completion is not charged
        c.submitted(3, 1_000);
        assert_eq!(c.peers(), vec![2, 3]);
        assert_eq!(c.connect_time(), Duration::from_nanos(300));
        c.completed(3, 1_050);
        assert_eq!(c.connect_time(), Duration::from_nanos(350));
        // A rank outside the job is ignored, not a panic.
        c.submitted(9, 1);
        c.completed(9, 2);
        assert_eq!(c.peers(), vec![2, 3]);
    }
}
