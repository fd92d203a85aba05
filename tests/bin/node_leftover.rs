//! A rank killed before it could unlink its node-backend object: creates
//! `/dev/shm/titus-<tag>-<rank>` (the tag from `TITUS_JOB_SECRET`, as the node backend
//! names it), says so, and sleeps until `titus launch` kills it — which must then remove
//! the object.
#![forbid(unsafe_code)]

fn main() {
    let secret = std::env::var("TITUS_JOB_SECRET").expect("run under titus launch");
    let rank = std::env::var("TITUS_RANK").expect("run under titus launch");
    let name = format!(
        "{}{rank}",
        titus_fabric_node::object_prefix(&titus_fabric_node::job_tag(&secret))
    );
    std::fs::write(format!("/dev/shm/{name}"), b"left behind").expect("create the object");
    println!("created {name}");
    std::thread::sleep(std::time::Duration::from_secs(60));
}
