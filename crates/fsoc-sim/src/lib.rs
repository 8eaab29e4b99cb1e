//! Seeded simulation of fsoc on the NAND simulator: visible-state listings, crash-test
//! workloads, and the power-cut-everywhere runner. One `u64` seed chooses everything; a failure
//! prints the line that replays it.

pub mod crash;
pub mod listing;
pub mod workloads;

pub use crash::{
    bad_block_test, chip_loss_test, crash_test, BadBlockReport, ChipLossReport, CrashConfig, CrashOutcome, CutPoint,
    FailureSites, WorkloadReport,
};
pub use listing::{listing, Listing};
pub use workloads::{Step, Workload};
