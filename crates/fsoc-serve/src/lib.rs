//! Layer 7: `fsoc serve`, the device side of the file system on chip. A 9P2000.L server
//! (docs/PROTOCOL.md, "What fsoc serve implements") over fsoc-engine's `SharedVolume`, so any
//! Linux host (`mount -t 9p -o trans=tcp,version=9p2000.L`) or 9P client uses the volume with
//! no fsoc software of its own.
//!
//! - `Server::run` accepts connections on a `Listener` (TCP or a Unix socket) until a
//!   `Stopper` stops it, then finishes what is in flight and hands the file system back for
//!   the caller's clean (committing) unmount.
//! - `connection`: per connection one reader thread that frames messages and a small pool of
//!   worker threads; up to `ServeConfig::requests_in_flight_max` requests in flight, replies
//!   out of order under one write lock, Tflush honoured.
//! - `fids`: the per-connection fid table (bounded).
//! - `operations`: one function per 9P message, each one engine call.
//!
//! Bounds (all from `ServeConfig`): connections, requests in flight per connection (and the
//! buffer bytes they hold), worker threads per connection, fids per connection, msize. A
//! malformed message gets Rlerror or a clean disconnect, never a panic, a hang or an
//! allocation the limits do not bound.
#![forbid(unsafe_code)]
// The storage crates' lint set: no unwrap, expect, panic!, unchecked indexing or truncating
// `as` in product code (unit tests are exempt); each remaining allowance says why at its item.
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

mod attributes;
mod config;
mod connection;
mod fids;
mod listen;
mod operations;
pub mod raw_protocol;
mod raw_server;
mod remote_flash;
mod secret;
mod server;
mod trace;
mod wire_counters;

pub use config::{ServeConfig, MSIZE_FLOOR_BYTES, POLL_BEFORE_SLEEP_DEFAULT};
pub use listen::{ListenAddress, ListenError, Listener};
pub use raw_server::RawServer;
pub use remote_flash::{raw_operation_name, RemoteFlash};
pub use secret::{read_secret_file, SECRET_LENGTH_MIN_BYTES};
pub use server::{ServeError, Served, Server, Stopper};
pub use wire_counters::{WireCount, WireCounters};
