//! `Request` and `Reply`: one variant per 9P2000.L message, borrowing names and data from the
//! buffer they were decoded from (or that the caller encodes from). Field names follow
//! docs/PROTOCOL.md, with whole words where the protocol abbreviates (`directory_fid` for dfid).

use crate::constants::message_type;
use crate::directory::DirectoryEntries;
use crate::errno::Errno;
use crate::types::{
    Attributes, Fid, FsStats, LockQuery, LockRequest, LockStatus, Qid, SetAttributes, Tag, WalkNames, WalkQids,
};

/// A T-message: what a client asks.
// Twalk's 16 names are held inline (272 bytes) because boxing them needs a heap; 280 bytes of
// stack per decoded request is affordable even on a microcontroller.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request<'a> {
    /// Sent first, with Tag::NONE: the largest message the client takes (`msize`, counting the
    /// size field) and the protocol it speaks ("9P2000.L").
    Version {
        msize: u32,
        version: &'a [u8],
    },
    Auth {
        afid: Fid,
        uname: &'a [u8],
        aname: &'a [u8],
        n_uname: u32,
    },
    /// `afid` is Fid::NONE without authentication; `n_uname` is constants::NO_UID when the
    /// user is named by `uname` only.
    Attach {
        fid: Fid,
        afid: Fid,
        uname: &'a [u8],
        aname: &'a [u8],
        n_uname: u32,
    },
    Flush {
        old_tag: Tag,
    },
    /// Walks `names` from `fid`; `new_fid` names the result. No names clones the fid.
    Walk {
        fid: Fid,
        new_fid: Fid,
        names: WalkNames<'a>,
    },
    /// `flags`: constants::open_flags.
    Lopen {
        fid: Fid,
        flags: u32,
    },
    /// Creates `name` in the directory `fid` and opens it; `fid` then names the new file.
    Lcreate {
        fid: Fid,
        name: &'a [u8],
        flags: u32,
        mode: u32,
        gid: u32,
    },
    Read {
        fid: Fid,
        offset: u64,
        count: u32,
    },
    /// The count on the wire is `data.len()`.
    Write {
        fid: Fid,
        offset: u64,
        data: &'a [u8],
    },
    Clunk {
        fid: Fid,
    },
    Remove {
        fid: Fid,
    },
    /// `request_mask`: constants::getattr.
    Getattr {
        fid: Fid,
        request_mask: u64,
    },
    Setattr {
        fid: Fid,
        attributes: SetAttributes,
    },
    /// `offset` is 0 or the offset of the last entry the previous Rreaddir returned.
    Readdir {
        fid: Fid,
        offset: u64,
        count: u32,
    },
    Mkdir {
        directory_fid: Fid,
        name: &'a [u8],
        mode: u32,
        gid: u32,
    },
    Symlink {
        directory_fid: Fid,
        name: &'a [u8],
        target: &'a [u8],
        gid: u32,
    },
    /// Links the file `fid` as `name` in `directory_fid`.
    Link {
        directory_fid: Fid,
        fid: Fid,
        name: &'a [u8],
    },
    Readlink {
        fid: Fid,
    },
    Rename {
        fid: Fid,
        directory_fid: Fid,
        name: &'a [u8],
    },
    Renameat {
        old_directory_fid: Fid,
        old_name: &'a [u8],
        new_directory_fid: Fid,
        new_name: &'a [u8],
    },
    /// `flags`: 0 or constants::UNLINKAT_REMOVE_DIRECTORY.
    Unlinkat {
        directory_fid: Fid,
        name: &'a [u8],
        flags: u32,
    },
    /// `datasync` non-zero asks for fdatasync(2).
    Fsync {
        fid: Fid,
        datasync: u32,
    },
    Statfs {
        fid: Fid,
    },
    /// An empty `name` lists the attribute names.
    Xattrwalk {
        fid: Fid,
        new_fid: Fid,
        name: &'a [u8],
    },
    /// `flags`: constants::xattr_flags.
    Xattrcreate {
        fid: Fid,
        name: &'a [u8],
        attribute_size_bytes: u64,
        flags: u32,
    },
    Lock {
        fid: Fid,
        lock: LockRequest<'a>,
    },
    Getlock {
        fid: Fid,
        query: LockQuery<'a>,
    },
    Mknod {
        directory_fid: Fid,
        name: &'a [u8],
        mode: u32,
        major: u32,
        minor: u32,
        gid: u32,
    },
}

/// An R-message: what a server answers. Any request may be answered by `Lerror`.
// Rwalk's 16 qids are held inline, as Twalk's names are (see `Request`).
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply<'a> {
    Version {
        msize: u32,
        version: &'a [u8],
    },
    Auth {
        aqid: Qid,
    },
    Attach {
        qid: Qid,
    },
    Lerror {
        errno: Errno,
    },
    Flush,
    /// One qid per name walked; fewer than asked means the walk stopped there.
    Walk {
        qids: WalkQids,
    },
    /// `iounit` 0 means "use msize less constants::IO_HEADER_SIZE_BYTES".
    Lopen {
        qid: Qid,
        iounit: u32,
    },
    Lcreate {
        qid: Qid,
        iounit: u32,
    },
    /// The count on the wire is `data.len()`; crate::encode_read_header writes the header
    /// in front of data already in place instead.
    Read {
        data: &'a [u8],
    },
    Write {
        count: u32,
    },
    Clunk,
    Remove,
    Getattr {
        attributes: Attributes,
    },
    Setattr,
    /// Empty entries mean the end of the directory.
    Readdir {
        entries: DirectoryEntries<'a>,
    },
    Mkdir {
        qid: Qid,
    },
    Symlink {
        qid: Qid,
    },
    Link,
    Readlink {
        target: &'a [u8],
    },
    Rename,
    Renameat,
    Unlinkat,
    Fsync,
    Statfs {
        stats: FsStats,
    },
    Xattrwalk {
        size_bytes: u64,
    },
    Xattrcreate,
    Lock {
        status: LockStatus,
    },
    Getlock {
        query: LockQuery<'a>,
    },
    Mknod {
        qid: Qid,
    },
}

impl Request<'_> {
    /// The type byte this request is sent with.
    pub fn message_type(&self) -> u8 {
        use message_type::*;
        match self {
            Request::Version { .. } => TVERSION,
            Request::Auth { .. } => TAUTH,
            Request::Attach { .. } => TATTACH,
            Request::Flush { .. } => TFLUSH,
            Request::Walk { .. } => TWALK,
            Request::Lopen { .. } => TLOPEN,
            Request::Lcreate { .. } => TLCREATE,
            Request::Read { .. } => TREAD,
            Request::Write { .. } => TWRITE,
            Request::Clunk { .. } => TCLUNK,
            Request::Remove { .. } => TREMOVE,
            Request::Getattr { .. } => TGETATTR,
            Request::Setattr { .. } => TSETATTR,
            Request::Readdir { .. } => TREADDIR,
            Request::Mkdir { .. } => TMKDIR,
            Request::Symlink { .. } => TSYMLINK,
            Request::Link { .. } => TLINK,
            Request::Readlink { .. } => TREADLINK,
            Request::Rename { .. } => TRENAME,
            Request::Renameat { .. } => TRENAMEAT,
            Request::Unlinkat { .. } => TUNLINKAT,
            Request::Fsync { .. } => TFSYNC,
            Request::Statfs { .. } => TSTATFS,
            Request::Xattrwalk { .. } => TXATTRWALK,
            Request::Xattrcreate { .. } => TXATTRCREATE,
            Request::Lock { .. } => TLOCK,
            Request::Getlock { .. } => TGETLOCK,
            Request::Mknod { .. } => TMKNOD,
        }
    }
}

impl Reply<'_> {
    /// The type byte this reply is sent with.
    pub fn message_type(&self) -> u8 {
        use message_type::*;
        match self {
            Reply::Version { .. } => RVERSION,
            Reply::Auth { .. } => RAUTH,
            Reply::Attach { .. } => RATTACH,
            Reply::Lerror { .. } => RLERROR,
            Reply::Flush => RFLUSH,
            Reply::Walk { .. } => RWALK,
            Reply::Lopen { .. } => RLOPEN,
            Reply::Lcreate { .. } => RLCREATE,
            Reply::Read { .. } => RREAD,
            Reply::Write { .. } => RWRITE,
            Reply::Clunk => RCLUNK,
            Reply::Remove => RREMOVE,
            Reply::Getattr { .. } => RGETATTR,
            Reply::Setattr => RSETATTR,
            Reply::Readdir { .. } => RREADDIR,
            Reply::Mkdir { .. } => RMKDIR,
            Reply::Symlink { .. } => RSYMLINK,
            Reply::Link => RLINK,
            Reply::Readlink { .. } => RREADLINK,
            Reply::Rename => RRENAME,
            Reply::Renameat => RRENAMEAT,
            Reply::Unlinkat => RUNLINKAT,
            Reply::Fsync => RFSYNC,
            Reply::Statfs { .. } => RSTATFS,
            Reply::Xattrwalk { .. } => RXATTRWALK,
            Reply::Xattrcreate => RXATTRCREATE,
            Reply::Lock { .. } => RLOCK,
            Reply::Getlock { .. } => RGETLOCK,
            Reply::Mknod { .. } => RMKNOD,
        }
    }
}
