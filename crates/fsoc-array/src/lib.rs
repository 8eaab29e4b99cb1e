//! Layer 2: chip arrays. `ThreadedFlash` is a `Flash` of p chips kept in p image files (one
//! per chip, `BASE.chip0` … `BASE.chip{p-1}`), with one worker thread per chip that performs
//! that chip's page and metadata I/O from a bounded FIFO queue, so operations on different
//! chips run in parallel in real time.
//!
//! Striping itself (stripe = erase block s on every chip, stripe page k on chip k mod p) is
//! the segment layout's job in fsoc-core; this crate only supplies chips that really work in
//! parallel. Virtual time is the simulator's: the NAND model (`SimFlash`: rules, ECC outcomes,
//! faults, per-chip clocks, counters) runs on the caller's thread in operation order, and only
//! the storage behind it is split per chip, so a `ThreadedFlash` and a RAM `SimFlash` given the
//! same configuration and the same operations return identical results, contents, counters and
//! virtual times, whatever the thread scheduling.
//!
//! Invariants: each chip's operations reach its file in the order they were issued (one FIFO
//! queue and one thread per chip); a read returns the chip's contents after every earlier
//! operation on that chip; a prefetched read is discarded as soon as any later operation could
//! change what it read; queues are bounded (`ArrayConfig::queue_depth_max` batches of bounded
//! size), so a slow file blocks the caller instead of growing memory. Requests reach a worker
//! in batches: the caller gathers a chip's changes (their bytes already serve reads from the
//! in-flight table) and hands them over with the next read, fence or flush of that chip, or
//! when the batch is full, so a worker wakes once per batch rather than once per page.
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

mod chip_files;
mod store;
mod threaded;
mod worker;

pub use chip_files::{chip_file_path, chip_file_paths, create_blank_chip_file, ArrayError, CHIP_FILE_SUFFIX};
pub use store::ChipArrayStore;
pub use threaded::{ArrayConfig, ChipControl, ThreadedFlash};
