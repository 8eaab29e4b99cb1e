//! Seed 000's experiments (section 5): the file system on the chip (fsoc serve, 9P2000.L)
//! against the conventional device (raw pages: fsoc serve --raw, the host running fsoc).
//!
//! - `traffic`: Fig. 15, bytes on the bus per file operation (counted frames).
//! - `table2`: Table 2, elapsed time of a 1 MiB read, 500 creates and an Andrew-like copy.
//! - `queue_depth`: 4 KiB random reads over 9P on 4 chips at depths 1, 4 and 32.
//! - `cost`: the bus and CPU model that turns counts into time.
//! - `harness`: the two devices, each with its chips behind a meter.
pub mod cost;
pub mod harness;
pub mod queue_depth;
pub mod table2;
pub mod traffic;

pub use traffic::{run, OnChipConfig, Regime, OPERATIONS};
