//! The libfabric backend as the runtime opens it (`backend=ofi`).

use crate::{OfiFabric, available};
use std::sync::Arc;
use titus_fabric::backend::{AllGather, Opened, Opener};
use titus_fabric::bootstrap::Exchange;
use titus_fabric::{FabricConfig, FabricError, Rank};

/// The libfabric backend, for the runtime's table of backends: [`OfiFabric::open`] with
/// the all-gather over the rendezvous the fabric keeps.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ofi;

impl Opener for Ofi {
    fn name(&self) -> &'static str {
        "ofi"
    }

    fn available(&self) -> bool {
        available()
    }

    fn open(
        &self,
        rank: Rank,
        size: u32,
        exchange: Option<Box<dyn Exchange>>,
        config: FabricConfig,
        provider: Option<&str>,
    ) -> Result<Opened, FabricError> {
        let fabric = Arc::new(OfiFabric::open(rank, size, exchange, config, provider)?);
        let f2 = fabric.clone();
        let all_gather: AllGather = Box::new(move |blob| {
            f2.with_rendezvous(|rv| {
                rv.map_or_else(|| Ok(vec![blob.to_vec()]), |rv| rv.all_gather(blob))
            })
        });
        Ok(Opened { fabric, all_gather })
    }
}
