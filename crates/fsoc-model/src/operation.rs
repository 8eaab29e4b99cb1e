//! One call of the file system API as data, and what it returned: the unit the runner and
//! the generators trade in.

use std::fmt;

use crate::path::display_bytes;
use crate::types::{errno, Attributes, Errno, Fd, FileKind, OpenFlags, Whence};

/// One call of the API, or one harness event (`Remount`, `PowerCut`).
///
/// Paths are absolute byte strings. `Debug` abbreviates long data (length, hash and the
/// first bytes) so a failing sequence stays printable; replay comes from the seed.
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum Operation {
    Open {
        path: Vec<u8>,
        flags: OpenFlags,
        mode: u32,
    },
    Read {
        fd: Fd,
        size_bytes: u64,
    },
    Write {
        fd: Fd,
        data: Vec<u8>,
    },
    Pread {
        fd: Fd,
        offset: u64,
        size_bytes: u64,
    },
    Pwrite {
        fd: Fd,
        offset: u64,
        data: Vec<u8>,
    },
    Seek {
        fd: Fd,
        offset: i64,
        whence: Whence,
    },
    Ftruncate {
        fd: Fd,
        size_bytes: u64,
    },
    Fsync {
        fd: Fd,
    },
    Close {
        fd: Fd,
    },
    Fstat {
        fd: Fd,
    },
    Stat {
        path: Vec<u8>,
    },
    Truncate {
        path: Vec<u8>,
        size_bytes: u64,
    },
    Mkdir {
        path: Vec<u8>,
        mode: u32,
    },
    Rmdir {
        path: Vec<u8>,
    },
    Unlink {
        path: Vec<u8>,
    },
    /// `rename(source_path, target_path)`.
    Rename {
        source_path: Vec<u8>,
        target_path: Vec<u8>,
    },
    Readdir {
        path: Vec<u8>,
    },
    /// `link(existing_path, new_path)`: a second name for an existing non-directory.
    Link {
        existing_path: Vec<u8>,
        new_path: Vec<u8>,
    },
    /// `symlink(target, link_path)`: `target` is stored verbatim and never followed.
    Symlink {
        target: Vec<u8>,
        link_path: Vec<u8>,
    },
    Readlink {
        path: Vec<u8>,
    },
    Chmod {
        path: Vec<u8>,
        mode: u32,
    },
    Chown {
        path: Vec<u8>,
        uid: u32,
        gid: u32,
    },
    Utimens {
        path: Vec<u8>,
        atime_ns: i64,
        mtime_ns: i64,
    },
    Statfs,
    /// Commit everything now.
    Transact,
    /// Harness: clean unmount (commits) and mount again; every descriptor is closed.
    Remount,
    /// Harness: power fails between operations; mount again finds the last commit.
    PowerCut,
}

/// The variant of an [`Operation`] without its arguments, for weights and statistics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OperationKind {
    Open,
    Read,
    Write,
    Pread,
    Pwrite,
    Seek,
    Ftruncate,
    Fsync,
    Close,
    Fstat,
    Stat,
    Truncate,
    Mkdir,
    Rmdir,
    Unlink,
    Rename,
    Readdir,
    Link,
    Symlink,
    Readlink,
    Chmod,
    Chown,
    Utimens,
    Statfs,
    Transact,
    Remount,
    PowerCut,
}

impl OperationKind {
    pub const COUNT: usize = 27;
    /// Every kind, in declaration order (`ALL[kind.index()] == kind`).
    pub const ALL: [OperationKind; Self::COUNT] = [
        OperationKind::Open,
        OperationKind::Read,
        OperationKind::Write,
        OperationKind::Pread,
        OperationKind::Pwrite,
        OperationKind::Seek,
        OperationKind::Ftruncate,
        OperationKind::Fsync,
        OperationKind::Close,
        OperationKind::Fstat,
        OperationKind::Stat,
        OperationKind::Truncate,
        OperationKind::Mkdir,
        OperationKind::Rmdir,
        OperationKind::Unlink,
        OperationKind::Rename,
        OperationKind::Readdir,
        OperationKind::Link,
        OperationKind::Symlink,
        OperationKind::Readlink,
        OperationKind::Chmod,
        OperationKind::Chown,
        OperationKind::Utimens,
        OperationKind::Statfs,
        OperationKind::Transact,
        OperationKind::Remount,
        OperationKind::PowerCut,
    ];

    pub fn index(self) -> usize {
        self as usize
    }

    /// `Remount` and `PowerCut` are harness events, not calls of the API.
    pub fn is_harness_event(self) -> bool {
        matches!(self, OperationKind::Remount | OperationKind::PowerCut)
    }
}

const _: () = assert!(OperationKind::PowerCut as usize + 1 == OperationKind::COUNT);

impl Operation {
    pub fn kind(&self) -> OperationKind {
        match self {
            Operation::Open { .. } => OperationKind::Open,
            Operation::Read { .. } => OperationKind::Read,
            Operation::Write { .. } => OperationKind::Write,
            Operation::Pread { .. } => OperationKind::Pread,
            Operation::Pwrite { .. } => OperationKind::Pwrite,
            Operation::Seek { .. } => OperationKind::Seek,
            Operation::Ftruncate { .. } => OperationKind::Ftruncate,
            Operation::Fsync { .. } => OperationKind::Fsync,
            Operation::Close { .. } => OperationKind::Close,
            Operation::Fstat { .. } => OperationKind::Fstat,
            Operation::Stat { .. } => OperationKind::Stat,
            Operation::Truncate { .. } => OperationKind::Truncate,
            Operation::Mkdir { .. } => OperationKind::Mkdir,
            Operation::Rmdir { .. } => OperationKind::Rmdir,
            Operation::Unlink { .. } => OperationKind::Unlink,
            Operation::Rename { .. } => OperationKind::Rename,
            Operation::Readdir { .. } => OperationKind::Readdir,
            Operation::Link { .. } => OperationKind::Link,
            Operation::Symlink { .. } => OperationKind::Symlink,
            Operation::Readlink { .. } => OperationKind::Readlink,
            Operation::Chmod { .. } => OperationKind::Chmod,
            Operation::Chown { .. } => OperationKind::Chown,
            Operation::Utimens { .. } => OperationKind::Utimens,
            Operation::Statfs => OperationKind::Statfs,
            Operation::Transact => OperationKind::Transact,
            Operation::Remount => OperationKind::Remount,
            Operation::PowerCut => OperationKind::PowerCut,
        }
    }
}

/// What a successful call returned.
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum Output {
    /// Calls that return nothing (close, mkdir, rename, transact, remount, ...).
    Unit,
    /// `open`.
    Fd(Fd),
    /// `read`, `pread`, `readlink`.
    Bytes(Vec<u8>),
    /// `write`, `pwrite` (bytes written) and `seek` (the new offset).
    Count(u64),
    /// `stat`, `fstat`. The runner compares them without `ino`.
    Attributes(Attributes),
    /// `readdir`: names sorted bytewise, without `.` and `..`.
    Entries(Vec<(Vec<u8>, FileKind)>),
    /// `statfs`: the numbers are not modelled, so only success is compared.
    Statfs,
}

/// The result of one operation: what it returned, or the errno.
pub type Outcome = Result<Output, Errno>;

/// `outcome` as the runner compares it: `ino` zeroed, and timestamps too unless compared.
pub fn comparable_outcome(outcome: &Outcome, compare_timestamps: bool) -> Outcome {
    match outcome {
        Ok(Output::Attributes(attributes)) => Ok(Output::Attributes(attributes.comparable(compare_timestamps))),
        other => other.clone(),
    }
}

/// Renders an outcome with errno names and abbreviated bytes: `Err(ENOENT)`, `Ok(Fd(3))`.
pub fn display_outcome(outcome: &Outcome) -> String {
    match outcome {
        Ok(output) => format!("Ok({output:?})"),
        Err(errno) => format!("Err({} {errno})", errno::name(*errno)),
    }
}

/// Data longer than this is shown as length, hash and a prefix.
const DATA_DISPLAY_SIZE_MAX_BYTES: usize = 24;

struct DataSummary<'a>(&'a [u8]);

impl fmt::Debug for DataSummary<'_> {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bytes = self.0;
        if bytes.len() <= DATA_DISPLAY_SIZE_MAX_BYTES {
            write!(formatter, "b\"{}\"", display_bytes(bytes))
        } else {
            let prefix = &bytes[..DATA_DISPLAY_SIZE_MAX_BYTES / 2];
            write!(
                formatter,
                "<{} bytes fnv1a64={:016x} starting b\"{}\">",
                bytes.len(),
                crate::listing::fnv1a_64(bytes),
                display_bytes(prefix)
            )
        }
    }
}

struct PathDisplay<'a>(&'a [u8]);

impl fmt::Debug for PathDisplay<'_> {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "\"{}\"", display_bytes(self.0))
    }
}

struct FlagsDisplay(OpenFlags);

impl fmt::Debug for FlagsDisplay {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let flags = self.0;
        let names = [
            (flags.read, "read"),
            (flags.write, "write"),
            (flags.create, "create"),
            (flags.exclusive, "exclusive"),
            (flags.truncate, "truncate"),
            (flags.append, "append"),
            (flags.directory, "directory"),
        ];
        let set: Vec<&str> = names.iter().filter(|(on, _)| *on).map(|(_, name)| *name).collect();
        if set.is_empty() {
            write!(formatter, "none")
        } else {
            write!(formatter, "{}", set.join("|"))
        }
    }
}

impl fmt::Debug for Operation {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        use Operation as O;
        let path = PathDisplay;
        match self {
            O::Open { path: p, flags, mode } => formatter
                .debug_struct("Open")
                .field("path", &path(p))
                .field("flags", &FlagsDisplay(*flags))
                .field("mode", &format_args!("{mode:#o}"))
                .finish(),
            O::Read { fd, size_bytes } => {
                formatter.debug_struct("Read").field("fd", fd).field("size_bytes", size_bytes).finish()
            }
            O::Write { fd, data } => {
                formatter.debug_struct("Write").field("fd", fd).field("data", &DataSummary(data)).finish()
            }
            O::Pread { fd, offset, size_bytes } => formatter
                .debug_struct("Pread")
                .field("fd", fd)
                .field("offset", offset)
                .field("size_bytes", size_bytes)
                .finish(),
            O::Pwrite { fd, offset, data } => formatter
                .debug_struct("Pwrite")
                .field("fd", fd)
                .field("offset", offset)
                .field("data", &DataSummary(data))
                .finish(),
            O::Seek { fd, offset, whence } => {
                formatter.debug_struct("Seek").field("fd", fd).field("offset", offset).field("whence", whence).finish()
            }
            O::Ftruncate { fd, size_bytes } => {
                formatter.debug_struct("Ftruncate").field("fd", fd).field("size_bytes", size_bytes).finish()
            }
            O::Fsync { fd } => formatter.debug_struct("Fsync").field("fd", fd).finish(),
            O::Close { fd } => formatter.debug_struct("Close").field("fd", fd).finish(),
            O::Fstat { fd } => formatter.debug_struct("Fstat").field("fd", fd).finish(),
            O::Stat { path: p } => formatter.debug_struct("Stat").field("path", &path(p)).finish(),
            O::Truncate { path: p, size_bytes } => {
                formatter.debug_struct("Truncate").field("path", &path(p)).field("size_bytes", size_bytes).finish()
            }
            O::Mkdir { path: p, mode } => formatter
                .debug_struct("Mkdir")
                .field("path", &path(p))
                .field("mode", &format_args!("{mode:#o}"))
                .finish(),
            O::Rmdir { path: p } => formatter.debug_struct("Rmdir").field("path", &path(p)).finish(),
            O::Unlink { path: p } => formatter.debug_struct("Unlink").field("path", &path(p)).finish(),
            O::Rename { source_path, target_path } => formatter
                .debug_struct("Rename")
                .field("source_path", &path(source_path))
                .field("target_path", &path(target_path))
                .finish(),
            O::Readdir { path: p } => formatter.debug_struct("Readdir").field("path", &path(p)).finish(),
            O::Link { existing_path, new_path } => formatter
                .debug_struct("Link")
                .field("existing_path", &path(existing_path))
                .field("new_path", &path(new_path))
                .finish(),
            O::Symlink { target, link_path } => formatter
                .debug_struct("Symlink")
                .field("target", &path(target))
                .field("link_path", &path(link_path))
                .finish(),
            O::Readlink { path: p } => formatter.debug_struct("Readlink").field("path", &path(p)).finish(),
            O::Chmod { path: p, mode } => formatter
                .debug_struct("Chmod")
                .field("path", &path(p))
                .field("mode", &format_args!("{mode:#o}"))
                .finish(),
            O::Chown { path: p, uid, gid } => {
                formatter.debug_struct("Chown").field("path", &path(p)).field("uid", uid).field("gid", gid).finish()
            }
            O::Utimens { path: p, atime_ns, mtime_ns } => formatter
                .debug_struct("Utimens")
                .field("path", &path(p))
                .field("atime_ns", atime_ns)
                .field("mtime_ns", mtime_ns)
                .finish(),
            O::Statfs => write!(formatter, "Statfs"),
            O::Transact => write!(formatter, "Transact"),
            O::Remount => write!(formatter, "Remount"),
            O::PowerCut => write!(formatter, "PowerCut"),
        }
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, formatter)
    }
}

impl fmt::Debug for Output {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Output::Unit => write!(formatter, "Unit"),
            Output::Fd(fd) => write!(formatter, "Fd({fd})"),
            Output::Bytes(bytes) => write!(formatter, "Bytes({:?})", DataSummary(bytes)),
            Output::Count(count) => write!(formatter, "Count({count})"),
            Output::Attributes(attributes) => write!(
                formatter,
                "Attributes {{ ino: {}, kind: {:?}, mode: {:#o}, uid: {}, gid: {}, nlink: {}, \
                 size: {}, atime_ns: {}, mtime_ns: {}, ctime_ns: {} }}",
                attributes.ino,
                attributes.kind,
                attributes.mode,
                attributes.uid,
                attributes.gid,
                attributes.nlink,
                attributes.size,
                attributes.atime_ns,
                attributes.mtime_ns,
                attributes.ctime_ns
            ),
            Output::Entries(entries) => {
                let rendered: Vec<String> =
                    entries.iter().map(|(name, kind)| format!("{}:{kind:?}", display_bytes(name))).collect();
                write!(formatter, "Entries[{}]", rendered.join(", "))
            }
            Output::Statfs => write!(formatter, "Statfs"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_indices_match_all() {
        for (index, kind) in OperationKind::ALL.iter().enumerate() {
            assert_eq!(kind.index(), index, "{kind:?}");
        }
    }

    #[test]
    fn debug_abbreviates_long_data() {
        let operation = Operation::Write { fd: 3, data: vec![7; 4096] };
        let text = format!("{operation:?}");
        assert!(text.contains("<4096 bytes"), "{text}");
        assert!(text.len() < 200, "{text}");
        let short = Operation::Write { fd: 3, data: b"hi".to_vec() };
        assert_eq!(format!("{short:?}"), "Write { fd: 3, data: b\"hi\" }");
    }

    #[test]
    fn display_outcome_names_errno() {
        assert_eq!(display_outcome(&Err(errno::ENOENT)), "Err(ENOENT 2)");
        assert_eq!(display_outcome(&Ok(Output::Fd(3))), "Ok(Fd(3))");
    }
}
