//! The vocabulary of the file system API that both fsoc and the model implement.

/// A file descriptor: the lowest unused number starting at [`FD_FIRST`].
pub type Fd = u32;

/// A Linux errno number; the API returns them positive.
pub type Errno = i32;

/// The first descriptor number handed out (0, 1 and 2 are never used, as in a process).
pub const FD_FIRST: Fd = 3;

/// The inode number of the root directory.
pub const ROOT_INO: u64 = 1;

/// Longest name of one path component, in bytes.
pub const NAME_SIZE_MAX_BYTES: usize = 255;

/// Longest whole path or symlink target, in bytes (Linux `PATH_MAX` minus the NUL).
pub const PATH_SIZE_MAX_BYTES: usize = 4095;

/// Linux errno numbers used by the API.
pub mod errno {
    use super::Errno;

    pub const EPERM: Errno = 1;
    pub const ENOENT: Errno = 2;
    pub const EIO: Errno = 5;
    pub const EBADF: Errno = 9;
    pub const EBUSY: Errno = 16;
    pub const EEXIST: Errno = 17;
    pub const EXDEV: Errno = 18;
    pub const ENOTDIR: Errno = 20;
    pub const EISDIR: Errno = 21;
    pub const EINVAL: Errno = 22;
    pub const EMFILE: Errno = 24;
    pub const EFBIG: Errno = 27;
    pub const ENOSPC: Errno = 28;
    pub const EROFS: Errno = 30;
    pub const EMLINK: Errno = 31;
    pub const ENAMETOOLONG: Errno = 36;
    pub const ENOTEMPTY: Errno = 39;
    pub const ELOOP: Errno = 40;

    /// The symbolic name of `errno`, or `"E?"` for numbers the API never returns.
    pub fn name(errno: Errno) -> &'static str {
        match errno {
            EPERM => "EPERM",
            ENOENT => "ENOENT",
            EIO => "EIO",
            EBADF => "EBADF",
            EBUSY => "EBUSY",
            EEXIST => "EEXIST",
            EXDEV => "EXDEV",
            ENOTDIR => "ENOTDIR",
            EISDIR => "EISDIR",
            EINVAL => "EINVAL",
            EMFILE => "EMFILE",
            EFBIG => "EFBIG",
            ENOSPC => "ENOSPC",
            EROFS => "EROFS",
            EMLINK => "EMLINK",
            ENAMETOOLONG => "ENAMETOOLONG",
            ENOTEMPTY => "ENOTEMPTY",
            ELOOP => "ELOOP",
            _ => "E?",
        }
    }
}

/// How a file is opened. `read` and `write` false together is `EINVAL`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct OpenFlags {
    pub read: bool,
    pub write: bool,
    pub create: bool,
    pub exclusive: bool,
    pub truncate: bool,
    pub append: bool,
    pub directory: bool,
}

impl OpenFlags {
    pub const READ_ONLY: OpenFlags = OpenFlags {
        read: true,
        write: false,
        create: false,
        exclusive: false,
        truncate: false,
        append: false,
        directory: false,
    };
    pub const WRITE_ONLY: OpenFlags = OpenFlags { read: false, write: true, ..Self::READ_ONLY };
    pub const READ_WRITE: OpenFlags = OpenFlags { read: true, write: true, ..Self::READ_ONLY };
    /// `O_RDWR | O_CREAT`.
    pub const CREATE: OpenFlags = OpenFlags { create: true, ..Self::READ_WRITE };
    /// `O_RDONLY | O_DIRECTORY`.
    pub const DIRECTORY: OpenFlags = OpenFlags { directory: true, ..Self::READ_ONLY };

    pub fn with_create(self) -> Self {
        OpenFlags { create: true, ..self }
    }
    pub fn with_exclusive(self) -> Self {
        OpenFlags { exclusive: true, ..self }
    }
    pub fn with_truncate(self) -> Self {
        OpenFlags { truncate: true, ..self }
    }
    pub fn with_append(self) -> Self {
        OpenFlags { append: true, ..self }
    }
    pub fn with_directory(self) -> Self {
        OpenFlags { directory: true, ..self }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FileKind {
    File,
    Directory,
    Symlink,
}

/// What `stat` reports. `mode` holds permission bits (`0o7777`) only; the kind is separate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Attributes {
    pub ino: u64,
    pub kind: FileKind,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    pub size: u64,
    pub atime_ns: i64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
}

impl Attributes {
    /// These attributes as the runner compares them: inode numbers are the file system's
    /// own business, so they are zeroed; timestamps are zeroed when not compared.
    pub fn comparable(&self, compare_timestamps: bool) -> Attributes {
        let mut attributes = Attributes { ino: 0, ..*self };
        if !compare_timestamps {
            attributes.atime_ns = 0;
            attributes.mtime_ns = 0;
            attributes.ctime_ns = 0;
        }
        attributes
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DirectoryEntry {
    pub name: Vec<u8>,
    pub ino: u64,
    pub kind: FileKind,
}

/// The origin of a `seek`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Whence {
    Set,
    Current,
    End,
}
