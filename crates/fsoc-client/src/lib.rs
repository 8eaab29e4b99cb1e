//! Layer 7, host side: a 9P2000.L client of `fsoc serve` (docs/PROTOCOL.md, sections 6 and 8)
//! with a `std::fs`-like API, built on the fsoc-9p codec.
//!
//! ```no_run
//! use std::io::{Read, Write};
//! use fsoc_client::{Client, ConnectOptions};
//! let client = Client::connect("tcp:127.0.0.1:5640", &ConnectOptions::default())?;
//! client.create_dir_all("logs/2026")?;
//! client.create("logs/2026/today")?.write_all(b"hello\n")?;
//! let mut text = String::new();
//! client.open("logs/2026/today")?.read_to_string(&mut text)?;
//! for entry in client.read_dir("logs")? {
//!     println!("{:?} {}", entry?.file_name(), client.metadata("logs/2026/today")?.len());
//! }
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! - `Client::connect` (tcp:HOST:PORT or unix:PATH, the syntax of `fsoc serve --listen`):
//!   version and msize negotiation, attach (with the server's secret as aname when given).
//! - `Client`'s calls by path (metadata, read_dir, create_dir_all, rename, hard_link,
//!   symlink, ...), `File` (Read, Write, Seek, read_at/write_at, set_len, sync_all),
//!   `OpenOptions`; `Node` for fid-level access (`fsoc mount --remote`).
//! - Pipelining: one connection carries many requests at once (up to
//!   `ConnectOptions::requests_in_flight_max` tags), replies matched by tag in any order, so
//!   threads sharing a `Client` overlap; a large read or write goes out as up to
//!   `ConnectOptions::pipeline_depth` Treads/Twrites in flight.
//! - Errors are `std::io::Error`: an Rlerror's errno as the OS error, a malformed reply as
//!   `InvalidData`, a lost connection as `ConnectionAborted`.
//!
//! Bounds: a reply longer than the negotiated msize ends the connection (nothing larger is
//! ever allocated for one); requests in flight are limited by the tag count.
#![forbid(unsafe_op_in_unsafe_fn)]

mod address;
mod client;
mod connection;
mod error;
mod file;
mod metadata;
mod node;

pub use address::Address;
pub use client::{Client, ConnectOptions, ReadDir};
pub use file::{File, OpenOptions};
pub use metadata::{DirEntry, FileType, Metadata, StatFs};
pub use node::{Created, Node, RawEntry};
