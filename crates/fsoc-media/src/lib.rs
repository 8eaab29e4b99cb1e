//! Layer 1: a model of raw NAND flash chips (`SimFlash`), implementing fsoc-flash's `Flash`,
//! and of a byte-addressable NVRAM beside them (`nvram::Nvram`: FeRAM, MRAM or PCM).
//!
//! A `Flash` is an array of `chip_count` identical NAND chips. Each chip has its own virtual
//! clock (`busy_until_ns`): an operation issued at virtual time `t` on chip `c` starts at
//! `max(t, busy_until(c))` and completes one latency later. Callers pass the issue time in and
//! get the completion time back, so p programs issued at the same `t` on p chips complete
//! together after one program time, while the same p programs on one chip serialize. Nothing
//! here reads a wall clock or depends on thread timing.
//!
//! Invariants enforced by the simulator (independently of what upper layers assert):
//! - a page is programmed only while erased, and pages of a block in ascending order;
//! - erase works on whole blocks and sets every bit to 1;
//! - after a power cut every operation fails with `NandError::PowerLost` until
//!   `restore_power`.
//!
//! Bit errors of programmed pages are sampled per read from a raw bit error rate that grows
//! with wear (`ecc::BitErrorModel`) and, when `SimConfig::aging` is on, with retention age and
//! reads of the block since its erase (`aging::AgingModel`; `SimFlash::advance_retention_time`
//! ages a device by shelf time).
#![cfg_attr(not(feature = "std"), no_std)]
// The storage crates' lint set (see fsoc-flash): each remaining allowance says why at its item.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing,
        clippy::cast_possible_truncation
    )
)]

extern crate alloc;

pub mod aging;
pub mod ecc;
pub mod energy;
pub mod faults;
pub mod geometry;
#[cfg(feature = "std")]
pub mod image;
pub mod nvram;
pub mod rng;
pub mod sim;
pub mod stats;
pub mod store;

pub use aging::{AgingModel, BlockAging};
pub use ecc::BitErrorModel;
pub use energy::EnergyModel;
pub use faults::FactoryBadBlocks;
pub use faults::FaultConfig;
pub use geometry::Profile;
#[cfg(feature = "std")]
pub use image::{ImageError, ImageStore};
#[cfg(feature = "std")]
pub use nvram::{FileSection, SharedNvram};
pub use nvram::{
    Nvram, NvramBacking, NvramConfig, NvramError, NvramTechnology, NvramTiming, RamBacking, TearPattern, TornWrite,
};
pub use sim::{FailureHit, SimConfig, SimFlash};
pub use stats::{BlockCounters, ChipCounters, DeviceTotals, FlashCounters, NvramCounters};
pub use store::{PageStore, RamStore};

// The seam itself lives in fsoc-flash; re-exported so the simulator's users name one crate.
pub use fsoc_flash::{convert, sync};
pub use fsoc_flash::{
    BlockAddress, ChipIndex, Completed, EraseBlockIndex, Flash, FlushWait, Geometry, NandError, Nanos, NvramDevice,
    OperationKind, PageAddress, ReadStatus, Timing,
};

/// Statistics a simulated device keeps (operations, busy time and energy per chip and block),
/// for benchmarks and tests. Apart from `Flash` on purpose: the file system never reads them
/// (it counts its own page reads), so a real device need not keep them.
pub trait FlashStats {
    /// Accounting since creation or the last `reset_counters` (a snapshot: the counters may
    /// move on while the caller looks at it).
    fn counters(&self) -> FlashCounters;
    /// Zeroes the resettable counters (not erase counts, which are physical wear).
    fn reset_counters(&mut self);
}
