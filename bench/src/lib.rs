//! Titus's benchmark programs and their shared pieces: `overlay-bench`, `runtime-bench`,
//! and DLB_Bench's pieces: the workload generator (`workload`), the task (`task`) and the
//! plots (`plot`).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod dlb;
pub mod plot;
pub mod task;
pub mod workload;

/// Makes a closed standard output (`titus sim --json | head -1`) end the program quietly
/// with status 141, as a shell tool killed by SIGPIPE would, instead of a panic and a
/// backtrace from `println!`. Call first thing in `main`.
pub fn quiet_broken_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if msg.starts_with("failed printing to stdout") && msg.contains("Broken pipe") {
            std::process::exit(141);
        }
        default(info);
    }));
}

/// Encodes numbers for a job-wide all-gather of figures.
pub fn encode_f64s(v: &[f64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Decodes [`encode_f64s`]; a malformed blob gives what it holds of whole numbers.
pub fn decode_f64s(b: &[u8]) -> Vec<f64> {
    b.chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect()
}
