//! The 9P2000.L wire codec: message types, decoding and encoding, and nothing else (no I/O, no
//! fids, no file system). docs/PROTOCOL.md gives every message's bytes.
//!
//! - `decode_request` / `decode_reply`: one whole message in, a `Request` or `Reply` that
//!   borrows its names and data from the input out. Total: any bytes give a message or a typed
//!   `DecodeError`, never a panic and never an allocation.
//! - `encode`: a `Request` or `Reply` into the caller's `&mut [u8]`; `encode_read_header` and
//!   `encode_write_header` put a header in front of data already in place (no second copy);
//!   `DirectoryEntryWriter` fills an Rreaddir up to the client's byte count.
//! - `frame_size`: from the bytes received so far, how long the next message is, refusing a size
//!   below the header or above msize.
//! - `constants`, `Errno`: type codes, masks, flags, limits, errno values.
//!
//! `no_std` without `alloc`: a microcontroller runs it with no heap. The codec checks layout
//! and the limits of docs/PROTOCOL.md (walk elements, name and symlink-target lengths), not
//! meaning: a lock type of 7 or a name containing `/` decodes, and the server refuses it.
//!
//! **Why our own codec.** Surveyed on crates.io (versions current at writing):
//! - `p9` 0.3 (crosvm / ChromiumOS): 9P2000.L messages with a derive-generated wire format, but
//!   `#![cfg(unix)]`, decodes through `std::io::Read` into owned `String`/`Vec`, and comes
//!   bundled with its pass-through server (libc). Rejected: std and heap.
//! - `jetstream_9p` 16: crosvm's message set grown into an RPC framework (QUIC, async traits);
//!   `std::io` throughout. Rejected: std, and far more than a codec.
//! - `rs9p` 0.13 (formerly rust-9p): a tokio server library; its codec is tied to `bytes`,
//!   `byteorder`, `nix` and tokio. Rejected: std/tokio-bound.
//! - `ninep` 0.6: a 9P2000 (not .L) server and client, tokio by default, std in its
//!   "sans-io" core. Rejected: wrong dialect, std.
//! - `nine` 0.5: 9P2000 as a serde format, owned `String`s, failure/std, unmaintained since
//!   2019. Rejected: wrong dialect, std, heap.
//! - `ninep-proto` 0.4 (ZeroFS): the closest fit, a `core`-only slice codec for 9P2000.L with
//!   a private extension (Trebind). Rejected: AGPL-3.0, which our MIT OR Apache-2.0 product
//!   cannot take as a dependency.
//!
//! None is no_std, heap-free and permissively licensed, and 9P2000.L's 57 messages (28
//! requests, 29 replies) are simple fixed layouts, so this crate is our own.
#![no_std]
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

pub mod constants;
mod decode;
mod directory;
mod encode;
mod errno;
mod error;
mod message;
mod reader;
mod sink;
mod types;

pub use decode::{decode_header, decode_reply, decode_request, frame_size, Header};
pub use directory::{DirectoryEntries, DirectoryEntry, DirectoryEntryIter, DirectoryEntryWriter};
pub use encode::{encode, encode_read_header, encode_write_header, Encode};
pub use errno::Errno;
pub use error::{DecodeError, EncodeError};
pub use message::{Reply, Request};
pub use types::{
    Attributes, Fid, FsStats, LockQuery, LockRequest, LockStatus, LockType, Qid, QidType, SetAttributes, Tag,
    Timestamp, TooManyWalkElements, WalkList, WalkNames, WalkQids,
};
