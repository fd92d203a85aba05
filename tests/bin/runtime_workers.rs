//! One rank that says how many workers the runtime's default gave it (started by `titus
//! launch`): an epoch without tasks, then `rank R workers W`. Exits 1 on any failure.
#![forbid(unsafe_code)]

use titus_runtime::{Backend, Runtime, RuntimeConfig};

fn main() {
    let run = || -> Result<String, String> {
        let rt = Runtime::from_env(RuntimeConfig::default(), Backend::default_fabric(None))
            .map_err(|e| e.to_string())?;
        let out = rt.run_epoch(Vec::new()).map_err(|e| e.to_string())?;
        Ok(format!("rank {} workers {}", rt.rank(), out.stats.workers))
    };
    match run() {
        Ok(line) => println!("{line}"),
        Err(e) => {
            eprintln!("runtime-workers: {e}");
            std::process::exit(1);
        }
    }
}
