//! Test oracle for fsoc: a deliberately simple in-memory POSIX-like file system
//! ([`ModelFs`]), the operations both it and fsoc accept ([`Operation`]), generators of
//! realistic operation sequences ([`OperationGenerator`], [`operation_strategy`]), and the
//! runner that drives both and reports the first disagreement ([`run_and_compare`]).
//!
//! Nothing here knows how fsoc stores anything: fsoc's test adapter implements
//! [`FsUnderTest`] by mapping each [`Operation`] onto its API, and can build its
//! [`Listing`] with [`listing_through_calls`].
//!
//! # Semantics the file system under test must match
//!
//! The method comments of [`ModelFs`] give the exact check order of each call; in short:
//!
//! - **Paths** ([`path`]): absolute; `/` alone is the root; no empty, `.` or `..`
//!   component and no NUL (`EINVAL`); components ≤ 255 bytes and paths ≤ 4095 bytes
//!   (`ENAMETOOLONG`). All syntax checks of all path arguments come before any lookup.
//!   A missing intermediate directory is `ENOENT`, a file or symlink there `ENOTDIR`.
//!   Symlinks are never followed, final component included (`stat` is `lstat`, `open` of
//!   a symlink is `ELOOP`, `truncate` of one `EINVAL`, `chmod`/`chown`/`utimens` change the
//!   link itself).
//! - **Descriptors**: the lowest unused number from 3; at most `open_fd_count_max`
//!   (`EMFILE`, checked right after the flags). Flags: neither read nor write, or create
//!   with directory, is `EINVAL`; truncate acts only with write; exclusive only with
//!   create. Directories open read-only only.
//! - **Data**: reads return exactly `min(len, size - offset)` bytes (empty at or past
//!   EOF), holes read as zeros; writes are all-or-nothing and return the full length;
//!   `EFBIG` when a write would end, or a truncate would reach, past
//!   `file_size_max_bytes`; a seek there (or below 0) is `EINVAL`. Zero-length writes
//!   return 0 and change nothing. Append writes (and `pwrite` on an append descriptor) go
//!   to the end. `ftruncate` on a descriptor not open for writing is `EINVAL`.
//! - **Attributes**: `mode` is the permission bits (`& 0o7777`); new files and
//!   directories get `uid` 0, `gid` 0; symlinks mode 0o777 and size = target length;
//!   directories size 0 and `nlink` 2 + subdirectories; the root is inode 1, mode 0o755,
//!   with all times `format_time_ns` (0 by default). An open-unlinked file (or removed
//!   directory) reports `nlink` 0 through `fstat`.
//! - **Timestamps** (logical `now_ns` from the runner; noatime): creating, linking,
//!   unlinking or renaming stamps mtime+ctime of the parent directories involved; the new
//!   inode gets all three; a write with data, any successful (f)truncate and `open` with
//!   truncate+write stamp the file's mtime+ctime (even without a size change); link,
//!   unlink, rmdir, rename, chmod, chown and utimens stamp the inode's ctime; utimens sets
//!   atime and mtime literally. Nothing else changes a timestamp; a same-inode rename
//!   changes nothing at all.
//! - **Commits**: after a successful `fsync` (any descriptor), `transact`, and `Remount`
//!   (clean unmount). `PowerCut` closes all descriptors and reverts to the last commit;
//!   both harness events free open-unlinked files. Other commits the file system makes on
//!   its own must be reported through [`FsUnderTest::extra_commits`].
//! - **Not modelled**: `statfs` numbers (only success is compared) and running out of
//!   space: the model never returns `ENOSPC`, so volumes under test must be big enough.

pub mod generator;
pub mod listing;
pub mod model;
pub mod operation;
pub mod path;
pub mod replay;
pub mod runner;
pub mod strategy;
pub mod types;

pub use generator::{GeneratorConfig, OperationGenerator, OperationWeights};
pub use listing::{listing_through_calls, Listing, ListingContent, ListingDifference, ListingEntry};
pub use model::{ModelConfig, ModelFs, OpenFileInfo, PathInfo};
pub use operation::{comparable_outcome, display_outcome, Operation, OperationKind, Outcome, Output};
pub use runner::{run_and_compare, ExtraCommits, FsUnderTest, Mismatch, MismatchKind, RunOptions};
pub use strategy::{operation_sequence_strategy, operation_strategy};
pub use types::{errno, Attributes, DirectoryEntry, Errno, Fd, FileKind, OpenFlags, Whence};
