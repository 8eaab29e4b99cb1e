//! Layer 7: the FUSE mount of an fsoc volume. `Mount::new` mounts a `FileSystem` on a
//! directory, `Mount::run` serves kernel requests until the volume is unmounted and hands the
//! file system back for a clean (committing) unmount.
//!
//! What the mount provides: files, directories, hard links and symbolic links with POSIX
//! semantics (fsoc-core's), permissions and ownership checked by the kernel
//! (`default_permissions`), creation with the caller's uid and gid and setgid-directory
//! inheritance, `allow_other` when mounted by root, fsync = fsoc commit, statfs with the
//! real free space and name length, directories of any size listed in name order.
//!
//! Every inode type (device nodes, FIFOs and sockets on format version 3 and later), extended
//! attributes and POSIX ACLs (version 4), chattr flags and the volume label, renameat2's
//! NOREPLACE, EXCHANGE and WHITEOUT, fallocate (mode 0, KEEP_SIZE, PUNCH_HOLE, ZERO_RANGE),
//! SEEK_DATA/SEEK_HOLE, copy_file_range, and access times by the mount's relatime,
//! strictatime or noatime rule.
//!
//! Known limits, each for a stated reason:
//! - Changes are serialized: one readers-writer lock guards the volume (fsoc-engine's
//!   `SharedVolume`, see `volume_lock`); lookups, attributes, reads and listings run at once.
//! - Access times change only on reads that reach the server: the kernel answers reads from
//!   its page cache without asking.
//! - O_TMPFILE (FUSE_TMPFILE) and the statx birth time (FUSE_STATX) come through the vendored
//!   fuser, which parses both (vendor/fuser/PATCHES.md); fuser 0.18 itself parses neither.
//! - On volumes older than format version 5, times before 1970 are stored as the epoch and
//!   `st_blocks` reports the size rounded up to pages (those versions count no pages).
//! - No kernel-side file locks beyond what the kernel does locally: fsoc-core has no such
//!   records.

mod adapter;
mod attributes;
mod io_uring;
pub mod logger;
mod permissions;
mod references;
mod session;
mod volume_lock;

pub use adapter::{negative_entry, FsocFuse};
/// An open directory's listing position (fsoc-engine's cursor, shared with the 9P server).
pub use fsoc_engine::DirectoryCursor as DirectoryStream;
pub use io_uring::{IoUringSwitch, IO_URING_GRANTED, IO_URING_SWITCH};
pub use session::{
    check_mount_point, fuser_config, is_mount_point, mounted_image, source_for, unescape_mount_path, BackgroundMount,
    CommitHandle, Mount, MountConfig, MountError, Served, Unmounted, Unmounter, WritableHandle, FS_NAME, FUSE_DEVICE,
};
pub use volume_lock::{MountState, VolumeLock, HANDLES_MAX};
