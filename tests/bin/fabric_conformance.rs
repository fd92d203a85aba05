//! One rank of the fabric conformance suite over a multi-process backend: bootstrap from
//! the launcher's environment, open libfabric on the provider in TITUS_PROVIDER (or the
//! node or hybrid backend when it names one), run every case.
//!
//! `fabric-conformance [--dead-peer]`: with `--dead-peer`, rank 1
//! ends abruptly at the end (exit without closing the fabric, as a crash would) and rank 0
//! must see an error within the timeout.
#![forbid(unsafe_code)]

use std::sync::Arc;
use std::time::Duration;
use titus_fabric::bootstrap::{self, JobEnv};
use titus_fabric::{Fabric, conformance};
use titus_fabric_ofi::OfiFabric;

fn main() {
    let dead_peer = std::env::args().any(|a| a == "--dead-peer");
    let provider = std::env::var("TITUS_PROVIDER").unwrap_or_default();
    let fail = |what: &str, e: &dyn std::fmt::Display| -> ! {
        eprintln!("fabric-conformance: {what}: {e}");
        std::process::exit(1)
    };
    let env = JobEnv::from_env().unwrap_or_else(|e| fail("environment", &e));
    let rv = bootstrap::join(&env).unwrap_or_else(|e| fail("bootstrap", &e));
    let config = conformance::config(env.size, Duration::from_secs(5));
    let (fabric, connect, _exchange): (Arc<dyn Fabric>, _, _) = if provider == "node" {
        let (f, x) = titus_fabric_node::open(env.rank, env.size, rv, config)
            .unwrap_or_else(|e| fail("open", &e));
        let t = f.connect_time();
        (Arc::new(f), t, x)
    } else if provider == "hybrid" {
        let f = titus_fabric_hybrid::HybridFabric::open(env.rank, env.size, rv, config, None)
            .unwrap_or_else(|e| fail("open", &e));
        let t = f.connect_time();
        (Arc::new(f), t, None)
    } else {
        let f = OfiFabric::open(env.rank, env.size, rv, config, None)
            .unwrap_or_else(|e| fail("open", &e));
        let t = f.connect_time();
        (Arc::new(f), t, None)
    };
    let provider = fabric.caps().provider.clone();
    let die = || std::process::exit(0);
    match conformance::run_rank(fabric, &die, dead_peer) {
        Ok(()) => println!(
            "rank {}: conformance passed on {provider} (connected in {connect:?})",
            env.rank
        ),
        Err(e) => fail("conformance", &e),
    }
}
