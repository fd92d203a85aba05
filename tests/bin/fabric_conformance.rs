//! One rank of the fabric conformance suite over libfabric: bootstrap from the launcher's
//! environment, open the provider in TITUS_PROVIDER, run every case.
//!
//! `fabric-conformance [--dead-peer]`: with `--dead-peer`, rank 1 ends abruptly at the end
//! (exit without closing the fabric, as a crash would) and rank 0 must see an error
//! within the timeout.
#![forbid(unsafe_code)]

use std::sync::Arc;
use std::time::Duration;
use titus_fabric::bootstrap::{JobEnv, Rendezvous};
use titus_fabric::{Fabric, conformance};
use titus_fabric_ofi::OfiFabric;

fn main() {
    let dead_peer = std::env::args().any(|a| a == "--dead-peer");
    let fail = |what: &str, e: &dyn std::fmt::Display| -> ! {
        eprintln!("fabric-conformance: {what}: {e}");
        std::process::exit(1)
    };
    let env = JobEnv::from_env().unwrap_or_else(|e| fail("environment", &e));
    let rv = Rendezvous::join(&env).unwrap_or_else(|e| fail("rendezvous", &e));
    let config = conformance::config(env.size, Duration::from_secs(5));
    let fabric = OfiFabric::open(
        env.rank,
        env.size,
        rv.map(Rendezvous::into_exchange),
        config,
        None,
    )
    .unwrap_or_else(|e| fail("open", &e));
    let provider = fabric.caps().provider.clone();
    let connect = fabric.connect_time();
    let fabric: Arc<dyn Fabric> = Arc::new(fabric);
    let die = || std::process::exit(0);
    match conformance::run_rank(fabric, &die, dead_peer) {
        Ok(()) => println!(
            "rank {}: conformance passed on {provider} (connected in {connect:?})",
            env.rank
        ),
        Err(e) => fail("conformance", &e),
    }
}
