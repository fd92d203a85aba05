//! Titus's benchmark programs and their shared pieces: `overlay-bench`, `runtime-bench`,
//! and the DLB_Bench workload generator (`workload`), on which the `dlb-bench` program is
//! being built.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod workload;
