//! Layers 3–6 of fsoc: segment log, copy-on-write B+trees, transactions and the POSIX-like
//! file system API. Builds without the standard library (`no_std` + `alloc`).
//!
//! Module map (each is a layer of ARCHITECTURE.md): `segment` (layer 3), `btree` (layer 4),
//! `txn` (layer 5), `fs` (layer 6). `address` is shared vocabulary; the flash seam, the byte
//! codec and CRC-32C come from fsoc-flash, the only crate the core depends on for flash.
#![no_std]
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

pub mod address;
pub mod btree;
pub mod fs;
pub mod segment;
pub mod txn;

pub use fs::api::{FileHandle, OpenFlags, Whence};
pub use fs::{CommitTriggers, FileSystem, FsConfig, FsError};
/// The rest of a commit whose flush was left running (`FileSystem::begin_commit`, `begin_fsync`).
pub use fsoc_flash::FlushWait;
pub use txn::VolumeConfig;
