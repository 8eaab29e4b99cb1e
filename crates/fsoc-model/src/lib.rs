//! Test oracle for fsoc: a deliberately simple in-memory POSIX-like file system
//! ([`ModelFs`]), the operations both it and fsoc accept ([`Operation`]), generators of
//! realistic operation sequences, and the runner that compares the two
//! ([`run_and_compare`]).
//!
//! Nothing here knows how fsoc stores anything: fsoc's test adapter implements
//! [`FsUnderTest`] by mapping each [`Operation`] onto its API.
//!
//! The semantics the real file system must match are documented on the `ModelFs` methods
//! (check order of errors, timestamps) and in the crate README section of each module:
//! path syntax in [`path`], commit points in [`ModelFs::commit`].

pub mod listing;
pub mod model;
pub mod operation;
pub mod path;
pub mod runner;
pub mod types;

pub use listing::{
    listing_through_calls, Listing, ListingContent, ListingDifference, ListingEntry,
};
pub use model::{ModelConfig, ModelFs, OpenFileInfo, PathInfo};
pub use operation::{
    comparable_outcome, display_outcome, Operation, OperationKind, Outcome, Output,
};
pub use runner::{run_and_compare, ExtraCommits, FsUnderTest, Mismatch, MismatchKind, RunOptions};
pub use types::{errno, Attributes, DirectoryEntry, Errno, Fd, FileKind, OpenFlags, Whence};
