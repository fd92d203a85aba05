//! The blacklist and advertisements: a victim found empty is left alone until it
//! advertises work again (ADVERT), and a thief that goes idle tells the victims that
//! hold it as a waiter (WAIT again), so their last queued tasks may come to it.

use super::{EPOCH_MASK, Pending, Thief};
use crate::Rank;
use crate::ctx::Ctx;
use crate::layout::signal::Signal;

/// Whether thieves blacklist empty victims and wait for their advertisements
/// ([`crate::Config::advertise`]; stealing only: a work-sharing master is never
/// blacklisted).
pub(crate) fn advertised(cfg: &crate::Config) -> bool {
    cfg.advertise && cfg.sharing.is_none()
}

impl Thief {
    /// The node's workers ran out (`workers_idle`) or got work. Running out while victims
    /// hold this rank as a waiter with busy workers, it tells them it is idle now (a WAIT
    /// again): their last queued tasks may come here.
    pub(crate) fn set_workers_idle<P: From<Pending>>(
        &mut self,
        cx: &mut Ctx<P>,
        workers_idle: bool,
    ) {
        let was = std::mem::replace(&mut self.workers_idle, workers_idle);
        if !workers_idle || was || !advertised(&cx.cfg) {
            return;
        }
        let epoch = cx.epoch & EPOCH_MASK;
        for victim in self.backoff.blacklisted_targets() {
            let peer = self.targets.at(victim);
            cx.signal(
                peer,
                Signal::Wait {
                    epoch,
                    workers_idle: true,
                },
                Pending::WaitSent { victim },
            );
        }
    }

    /// ADVERT from `from`: it has work again. Off the blacklist, and asked first if this
    /// thief has no favourite. An advertisement of another epoch is stale: ignored.
    pub(crate) fn on_advert<P>(&mut self, cx: &mut Ctx<P>, from: Rank, epoch: u64) {
        if epoch != cx.epoch & EPOCH_MASK {
            return;
        }
        if let Some(i) = self.targets.index_of(from) {
            cx.stats.adverts_received += 1;
            self.backoff.advertised(i);
            if self.last_ok.is_none() {
                self.last_ok = Some(i);
            }
        }
    }
}
