//! File-system errors and their one mapping onto errno values.

use crate::segment::SegmentError;
use crate::txn::{TxnError, WornOut};
use fsoc_flash::codec::DecodeError;

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FsError {
    #[error("no such file or directory")]
    NotFound,
    #[error("file exists")]
    Exists,
    #[error("not a directory")]
    NotDirectory,
    #[error("is a directory")]
    IsDirectory,
    #[error("directory not empty")]
    NotEmpty,
    #[error("no space left on the volume")]
    NoSpace,
    #[error("name too long")]
    NameTooLong,
    #[error("invalid argument: {0}")]
    InvalidArgument(&'static str),
    #[error("bad file descriptor")]
    BadDescriptor,
    #[error("operation not permitted")]
    NotPermitted,
    /// A default ACL set on an inode other than a directory (EACCES, as Linux answers).
    #[error("permission denied")]
    AccessDenied,
    #[error("file too large")]
    FileTooBig,
    #[error("device or resource busy")]
    Busy,
    #[error("too many levels of symbolic links")]
    Loop,
    #[error("too many links")]
    TooManyLinks,
    #[error("read-only volume")]
    ReadOnly,
    /// End of life: the flash can no longer guarantee writes, so the volume takes no more
    /// changes (EROFS, as `ReadOnly`); everything committed stays readable, and a remount finds
    /// the state again (docs/DESIGN.md, "End of life").
    #[error("read-only: the flash is worn out ({0})")]
    WornOut(WornOut),
    #[error("too many open files")]
    TooManyOpenFiles,
    /// A feature this volume's format or this file system does not have (an attribute flag
    /// fsoc does not keep, or flags and labels on a volume older than format version 3).
    #[error("operation not supported")]
    NotSupported,
    /// lseek's SEEK_DATA or SEEK_HOLE from an offset at or past the end (or no data after it).
    #[error("no such device or address (offset past the data)")]
    NoSuchOffset,
    /// getxattr or removexattr of an extended attribute the inode does not have (ENODATA).
    #[error("no such attribute")]
    NoAttribute,
    /// An extended attribute name empty or longer than 255 bytes (ERANGE, as Linux answers).
    #[error("attribute name out of range")]
    OutOfRange,
    /// An extended attribute value over 64 KiB, or an attribute list over 64 KiB (E2BIG).
    #[error("argument list too long")]
    TooBig,
    #[error("I/O error: {0}")]
    Io(TxnError),
    #[error("corrupt volume: {0}")]
    Corrupt(&'static str),
    /// One file's records are inconsistent; the rest of the volume is usable.
    #[error("file {inode} is corrupt: {reason}")]
    CorruptFile { inode: u64, reason: &'static str },
}

pub mod errno {
    pub const EPERM: i32 = 1;
    pub const ENOENT: i32 = 2;
    pub const EIO: i32 = 5;
    pub const ENXIO: i32 = 6;
    pub const E2BIG: i32 = 7;
    pub const EBADF: i32 = 9;
    pub const EACCES: i32 = 13;
    pub const EBUSY: i32 = 16;
    pub const EEXIST: i32 = 17;
    pub const ENOTDIR: i32 = 20;
    pub const EISDIR: i32 = 21;
    pub const EINVAL: i32 = 22;
    pub const EMFILE: i32 = 24;
    pub const EFBIG: i32 = 27;
    pub const ENOSPC: i32 = 28;
    pub const EROFS: i32 = 30;
    pub const EMLINK: i32 = 31;
    pub const ERANGE: i32 = 34;
    pub const ENAMETOOLONG: i32 = 36;
    pub const ENOTEMPTY: i32 = 39;
    pub const ELOOP: i32 = 40;
    pub const ENODATA: i32 = 61;
    pub const EOPNOTSUPP: i32 = 95;
}

impl FsError {
    /// The errno value of this error (Linux numbering). The only such mapping in fsoc.
    pub fn errno(&self) -> i32 {
        use errno::*;
        match self {
            FsError::NotFound => ENOENT,
            FsError::Exists => EEXIST,
            FsError::NotDirectory => ENOTDIR,
            FsError::IsDirectory => EISDIR,
            FsError::NotEmpty => ENOTEMPTY,
            FsError::NoSpace => ENOSPC,
            FsError::NoSuchOffset => ENXIO,
            FsError::NoAttribute => ENODATA,
            FsError::OutOfRange => ERANGE,
            FsError::TooBig => E2BIG,
            FsError::NameTooLong => ENAMETOOLONG,
            FsError::InvalidArgument(_) => EINVAL,
            FsError::BadDescriptor => EBADF,
            FsError::NotPermitted => EPERM,
            FsError::AccessDenied => EACCES,
            FsError::FileTooBig => EFBIG,
            FsError::Busy => EBUSY,
            FsError::Loop => ELOOP,
            FsError::TooManyLinks => EMLINK,
            FsError::ReadOnly | FsError::WornOut(_) => EROFS,
            FsError::TooManyOpenFiles => EMFILE,
            FsError::NotSupported => EOPNOTSUPP,
            FsError::Io(_) | FsError::Corrupt(_) | FsError::CorruptFile { .. } => EIO,
        }
    }
}

impl From<TxnError> for FsError {
    fn from(error: TxnError) -> Self {
        match error {
            TxnError::Segment(SegmentError::NoFreeSegment) => FsError::NoSpace,
            TxnError::ReadOnly => FsError::ReadOnly,
            TxnError::WornOut(worn) => FsError::WornOut(worn),
            other => FsError::Io(other),
        }
    }
}

impl From<SegmentError> for FsError {
    fn from(error: SegmentError) -> Self {
        FsError::from(TxnError::Segment(error))
    }
}

impl From<DecodeError> for FsError {
    fn from(_: DecodeError) -> Self {
        FsError::Corrupt("undecodable tree record")
    }
}
