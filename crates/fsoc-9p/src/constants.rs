//! The numbers of 9P2000.L: message type codes, sizes and limits, and the bit masks and flag
//! values carried in message fields, as the Linux v9fs client (include/net/9p/9p.h) and diod's
//! protocol.md define them. docs/PROTOCOL.md tabulates them.

/// The 9P2000.L message type codes (the `type[1]` byte of the header). A reply's code is its
/// request's plus one. `TLERROR` (6) and the 9P2000 codes that 9P2000.L replaced (Terror,
/// Topen, Tcreate, Tstat, Twstat) are not part of 9P2000.L: the codec treats them as unknown.
pub mod message_type {
    pub const RLERROR: u8 = 7;
    pub const TSTATFS: u8 = 8;
    pub const RSTATFS: u8 = 9;
    pub const TLOPEN: u8 = 12;
    pub const RLOPEN: u8 = 13;
    pub const TLCREATE: u8 = 14;
    pub const RLCREATE: u8 = 15;
    pub const TSYMLINK: u8 = 16;
    pub const RSYMLINK: u8 = 17;
    pub const TMKNOD: u8 = 18;
    pub const RMKNOD: u8 = 19;
    pub const TRENAME: u8 = 20;
    pub const RRENAME: u8 = 21;
    pub const TREADLINK: u8 = 22;
    pub const RREADLINK: u8 = 23;
    pub const TGETATTR: u8 = 24;
    pub const RGETATTR: u8 = 25;
    pub const TSETATTR: u8 = 26;
    pub const RSETATTR: u8 = 27;
    pub const TXATTRWALK: u8 = 30;
    pub const RXATTRWALK: u8 = 31;
    pub const TXATTRCREATE: u8 = 32;
    pub const RXATTRCREATE: u8 = 33;
    pub const TREADDIR: u8 = 40;
    pub const RREADDIR: u8 = 41;
    pub const TFSYNC: u8 = 50;
    pub const RFSYNC: u8 = 51;
    pub const TLOCK: u8 = 52;
    pub const RLOCK: u8 = 53;
    pub const TGETLOCK: u8 = 54;
    pub const RGETLOCK: u8 = 55;
    pub const TLINK: u8 = 70;
    pub const RLINK: u8 = 71;
    pub const TMKDIR: u8 = 72;
    pub const RMKDIR: u8 = 73;
    pub const TRENAMEAT: u8 = 74;
    pub const RRENAMEAT: u8 = 75;
    pub const TUNLINKAT: u8 = 76;
    pub const RUNLINKAT: u8 = 77;
    pub const TVERSION: u8 = 100;
    pub const RVERSION: u8 = 101;
    pub const TAUTH: u8 = 102;
    pub const RAUTH: u8 = 103;
    pub const TATTACH: u8 = 104;
    pub const RATTACH: u8 = 105;
    pub const TFLUSH: u8 = 108;
    pub const RFLUSH: u8 = 109;
    pub const TWALK: u8 = 110;
    pub const RWALK: u8 = 111;
    pub const TREAD: u8 = 116;
    pub const RREAD: u8 = 117;
    pub const TWRITE: u8 = 118;
    pub const RWRITE: u8 = 119;
    pub const TCLUNK: u8 = 120;
    pub const RCLUNK: u8 = 121;
    pub const TREMOVE: u8 = 122;
    pub const RREMOVE: u8 = 123;

    /// Every request type this codec knows, in code order.
    #[rustfmt::skip]
    pub const REQUESTS: [u8; 28] = [
        TSTATFS, TLOPEN, TLCREATE, TSYMLINK, TMKNOD, TRENAME, TREADLINK, TGETATTR, TSETATTR, TXATTRWALK,
        TXATTRCREATE, TREADDIR, TFSYNC, TLOCK, TGETLOCK, TLINK, TMKDIR, TRENAMEAT, TUNLINKAT, TVERSION, TAUTH,
        TATTACH, TFLUSH, TWALK, TREAD, TWRITE, TCLUNK, TREMOVE,
    ];
    /// Every reply type this codec knows, in code order (Rlerror first).
    #[rustfmt::skip]
    pub const REPLIES: [u8; 29] = [
        RLERROR, RSTATFS, RLOPEN, RLCREATE, RSYMLINK, RMKNOD, RRENAME, RREADLINK, RGETATTR, RSETATTR, RXATTRWALK,
        RXATTRCREATE, RREADDIR, RFSYNC, RLOCK, RGETLOCK, RLINK, RMKDIR, RRENAMEAT, RUNLINKAT, RVERSION, RAUTH,
        RATTACH, RFLUSH, RWALK, RREAD, RWRITE, RCLUNK, RREMOVE,
    ];

    /// The message's name as the protocol documents write it ("Twalk"), or "unknown".
    pub fn name(message_type: u8) -> &'static str {
        match message_type {
            RLERROR => "Rlerror",
            TSTATFS => "Tstatfs",
            RSTATFS => "Rstatfs",
            TLOPEN => "Tlopen",
            RLOPEN => "Rlopen",
            TLCREATE => "Tlcreate",
            RLCREATE => "Rlcreate",
            TSYMLINK => "Tsymlink",
            RSYMLINK => "Rsymlink",
            TMKNOD => "Tmknod",
            RMKNOD => "Rmknod",
            TRENAME => "Trename",
            RRENAME => "Rrename",
            TREADLINK => "Treadlink",
            RREADLINK => "Rreadlink",
            TGETATTR => "Tgetattr",
            RGETATTR => "Rgetattr",
            TSETATTR => "Tsetattr",
            RSETATTR => "Rsetattr",
            TXATTRWALK => "Txattrwalk",
            RXATTRWALK => "Rxattrwalk",
            TXATTRCREATE => "Txattrcreate",
            RXATTRCREATE => "Rxattrcreate",
            TREADDIR => "Treaddir",
            RREADDIR => "Rreaddir",
            TFSYNC => "Tfsync",
            RFSYNC => "Rfsync",
            TLOCK => "Tlock",
            RLOCK => "Rlock",
            TGETLOCK => "Tgetlock",
            RGETLOCK => "Rgetlock",
            TLINK => "Tlink",
            RLINK => "Rlink",
            TMKDIR => "Tmkdir",
            RMKDIR => "Rmkdir",
            TRENAMEAT => "Trenameat",
            RRENAMEAT => "Rrenameat",
            TUNLINKAT => "Tunlinkat",
            RUNLINKAT => "Runlinkat",
            TVERSION => "Tversion",
            RVERSION => "Rversion",
            TAUTH => "Tauth",
            RAUTH => "Rauth",
            TATTACH => "Tattach",
            RATTACH => "Rattach",
            TFLUSH => "Tflush",
            RFLUSH => "Rflush",
            TWALK => "Twalk",
            RWALK => "Rwalk",
            TREAD => "Tread",
            RREAD => "Rread",
            TWRITE => "Twrite",
            RWRITE => "Rwrite",
            TCLUNK => "Tclunk",
            RCLUNK => "Rclunk",
            TREMOVE => "Tremove",
            RREMOVE => "Rremove",
            _ => "unknown",
        }
    }
}

/// The header every message starts with: size[4] type[1] tag[2].
pub const HEADER_SIZE_BYTES: usize = 7;
/// An Rread or Rreaddir up to its data: header, count[4].
pub const READ_HEADER_SIZE_BYTES: usize = HEADER_SIZE_BYTES + 4;
/// A Twrite up to its data: header, fid[4] offset[8] count[4].
pub const WRITE_HEADER_SIZE_BYTES: usize = HEADER_SIZE_BYTES + 4 + 8 + 4;
/// P9_IOHDRSZ: what the Linux client subtracts from msize for the largest read or write count
/// (its iounit when the server sends 0). It is a round number above both I/O headers.
pub const IO_HEADER_SIZE_BYTES: usize = 24;
/// P9_READDIRHDRSZ: what the Linux client subtracts from msize for a Treaddir count.
pub const READDIR_HEADER_SIZE_BYTES: usize = 24;
const _: () = assert!(READ_HEADER_SIZE_BYTES <= IO_HEADER_SIZE_BYTES);
const _: () = assert!(WRITE_HEADER_SIZE_BYTES <= IO_HEADER_SIZE_BYTES);
const _: () = assert!(READ_HEADER_SIZE_BYTES <= READDIR_HEADER_SIZE_BYTES);

/// A qid on the wire: type[1] version[4] path[8].
pub const QID_SIZE_BYTES: usize = 13;
/// A directory entry in Rreaddir data, without its name's bytes: qid[13] offset[8] type[1]
/// and the name's length[2].
pub const DIRECTORY_ENTRY_FIXED_SIZE_BYTES: usize = QID_SIZE_BYTES + 8 + 1 + 2;

/// P9_MAXWELEM: the most names one Twalk carries, and so the most qids in an Rwalk.
pub const WALK_ELEMENT_COUNT_MAX: usize = 16;
/// The longest file name component the codec accepts (Linux NAME_MAX), in every field that
/// names one entry of a directory: Twalk, Tlcreate, Tmkdir, Tsymlink (the name), Tmknod, Tlink,
/// Trename, Trenameat, Tunlinkat, Rreaddir entries; and extended attribute names (Linux
/// XATTR_NAME_MAX is also 255).
pub const NAME_LENGTH_MAX_BYTES: usize = 255;
/// The longest symbolic link target the codec accepts (Tsymlink target, Rreadlink): Linux
/// PATH_MAX (4096) less the terminating NUL that 9P does not send.
pub const SYMLINK_TARGET_LENGTH_MAX_BYTES: usize = 4095;
/// Any other string is bounded only by its two-byte length.
pub const STRING_LENGTH_MAX_BYTES: usize = u16::MAX as usize;

/// The smallest msize the Linux client accepts in an Rversion (net/9p/client.c refuses a
/// smaller one with EREMOTEIO). The codec does not negotiate; a server uses this to refuse.
pub const MSIZE_MIN_BYTES: u32 = 4096;

/// The version string of this protocol in Tversion and Rversion.
pub const VERSION_9P2000_L: &[u8] = b"9P2000.L";
/// fsoc's ordered variant of 9P2000.L: the same messages, and the server runs requests in the
/// order they arrive (docs/PROTOCOL.md section 6.3.1), so a client may pipeline requests that
/// depend on each other.
pub const VERSION_9P2000_L_FSOC: &[u8] = b"9P2000.L.fsoc";
/// The version string an Rversion carries when the server speaks none the client offered.
pub const VERSION_UNKNOWN: &[u8] = b"unknown";

/// P9_NONUNAME: the n_uname of Tauth and Tattach when the client names the user by uname only.
pub const NO_UID: u32 = u32::MAX;

/// Tgetattr's request mask and Rgetattr's valid mask (P9_GETATTR_*).
pub mod getattr {
    pub const MODE: u64 = 0x0000_0001;
    pub const NLINK: u64 = 0x0000_0002;
    pub const UID: u64 = 0x0000_0004;
    pub const GID: u64 = 0x0000_0008;
    pub const RDEV: u64 = 0x0000_0010;
    pub const ATIME: u64 = 0x0000_0020;
    pub const MTIME: u64 = 0x0000_0040;
    pub const CTIME: u64 = 0x0000_0080;
    pub const INO: u64 = 0x0000_0100;
    pub const SIZE: u64 = 0x0000_0200;
    pub const BLOCKS: u64 = 0x0000_0400;
    pub const BTIME: u64 = 0x0000_0800;
    pub const GEN: u64 = 0x0000_1000;
    pub const DATA_VERSION: u64 = 0x0000_2000;
    /// Every field up to BLOCKS: what stat(2) needs.
    pub const BASIC: u64 = 0x0000_07ff;
    pub const ALL: u64 = 0x0000_3fff;
    const _: () = assert!(BASIC == MODE | NLINK | UID | GID | RDEV | ATIME | MTIME | CTIME | INO | SIZE | BLOCKS);
    const _: () = assert!(ALL == BASIC | BTIME | GEN | DATA_VERSION);
}

/// Tsetattr's valid mask (P9_SETATTR_*). A time bit without its `_SET` bit means "now, by
/// the server's clock"; with it, the time in the message.
pub mod setattr {
    pub const MODE: u32 = 0x0000_0001;
    pub const UID: u32 = 0x0000_0002;
    pub const GID: u32 = 0x0000_0004;
    pub const SIZE: u32 = 0x0000_0008;
    pub const ATIME: u32 = 0x0000_0010;
    pub const MTIME: u32 = 0x0000_0020;
    pub const CTIME: u32 = 0x0000_0040;
    pub const ATIME_SET: u32 = 0x0000_0080;
    pub const MTIME_SET: u32 = 0x0000_0100;
}

/// Tlopen and Tlcreate flags (P9_DOTL_*): the Linux generic O_* values. The Linux client
/// translates its own architecture's O_* flags into these, so they are the same from every host.
pub mod open_flags {
    /// The access mode is the low two bits, a value rather than flags.
    pub const ACCESS_MODE_MASK: u32 = 0o3;
    pub const READ_ONLY: u32 = 0o0;
    pub const WRITE_ONLY: u32 = 0o1;
    pub const READ_WRITE: u32 = 0o2;
    pub const NO_ACCESS: u32 = 0o3;
    pub const CREATE: u32 = 0o100;
    pub const EXCLUSIVE: u32 = 0o200;
    pub const NO_CONTROLLING_TTY: u32 = 0o400;
    pub const TRUNCATE: u32 = 0o1000;
    pub const APPEND: u32 = 0o2000;
    pub const NONBLOCK: u32 = 0o4000;
    pub const DATA_SYNC: u32 = 0o10000;
    pub const ASYNC: u32 = 0o20000;
    pub const DIRECT: u32 = 0o40000;
    pub const LARGE_FILE: u32 = 0o100000;
    pub const DIRECTORY: u32 = 0o200000;
    pub const NO_FOLLOW: u32 = 0o400000;
    pub const NO_ACCESS_TIME: u32 = 0o1000000;
    pub const CLOSE_ON_EXEC: u32 = 0o2000000;
    pub const SYNC: u32 = 0o4000000;
}

/// Tunlinkat flags: AT_REMOVEDIR, the only one (remove a directory, as rmdir(2)).
pub const UNLINKAT_REMOVE_DIRECTORY: u32 = 0x200;

/// Txattrcreate flags, as setxattr(2).
pub mod xattr_flags {
    /// Fail with EEXIST if the attribute exists.
    pub const CREATE: u32 = 1;
    /// Fail with ENODATA if the attribute does not exist.
    pub const REPLACE: u32 = 2;
}

/// Tlock flags (P9_LOCK_FLAGS_*).
pub mod lock_flags {
    /// The client waits (F_SETLKW): it resends while the reply says BLOCKED.
    pub const BLOCK: u32 = 1;
    /// Reserved.
    pub const RECLAIM: u32 = 2;
}

/// The type byte of a Rreaddir entry: the Linux `d_type` values (DT_*).
pub mod dirent_type {
    pub const UNKNOWN: u8 = 0;
    pub const FIFO: u8 = 1;
    pub const CHARACTER_DEVICE: u8 = 2;
    pub const DIRECTORY: u8 = 4;
    pub const BLOCK_DEVICE: u8 = 6;
    pub const REGULAR: u8 = 8;
    pub const SYMLINK: u8 = 10;
    pub const SOCKET: u8 = 12;
}
