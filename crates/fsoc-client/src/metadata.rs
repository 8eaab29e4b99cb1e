//! What the client reports about files: `Metadata` (Rgetattr), `FileType`, `DirEntry` (one
//! Rreaddir entry) and `StatFs` (Rstatfs), shaped after `std::fs`.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fsoc_9p::constants::dirent_type;
use fsoc_9p::{Attributes, FsStats, Timestamp};

const FORMAT_MASK: u32 = 0o170_000;
const FORMAT_DIRECTORY: u32 = 0o040_000;
const FORMAT_REGULAR: u32 = 0o100_000;
const FORMAT_SYMLINK: u32 = 0o120_000;

/// The kind of a file: st_mode's format bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FileType {
    format: u32,
}

impl FileType {
    pub fn is_dir(&self) -> bool {
        self.format == FORMAT_DIRECTORY
    }
    pub fn is_file(&self) -> bool {
        self.format == FORMAT_REGULAR
    }
    pub fn is_symlink(&self) -> bool {
        self.format == FORMAT_SYMLINK
    }
    /// The S_IFMT bits.
    pub fn format_bits(&self) -> u32 {
        self.format
    }

    pub(crate) fn from_dirent(kind: u8) -> FileType {
        let format = match kind {
            dirent_type::DIRECTORY => FORMAT_DIRECTORY,
            dirent_type::REGULAR => FORMAT_REGULAR,
            dirent_type::SYMLINK => FORMAT_SYMLINK,
            other => u32::from(other) << 12,
        };
        FileType { format }
    }
}

/// A file's attributes, from Rgetattr.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Metadata {
    attributes: Attributes,
}

fn system_time(time: Timestamp) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(time.seconds) + Duration::from_nanos(time.nanoseconds.min(999_999_999))
}

impl Metadata {
    pub(crate) fn new(attributes: Attributes) -> Metadata {
        Metadata { attributes }
    }
    pub fn file_type(&self) -> FileType {
        FileType { format: self.attributes.mode & FORMAT_MASK }
    }
    pub fn is_dir(&self) -> bool {
        self.file_type().is_dir()
    }
    pub fn is_file(&self) -> bool {
        self.file_type().is_file()
    }
    pub fn is_symlink(&self) -> bool {
        self.file_type().is_symlink()
    }
    pub fn len(&self) -> u64 {
        self.attributes.size_bytes
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The permission bits (and set-id, sticky), as `std::fs::Permissions`.
    pub fn permissions(&self) -> std::fs::Permissions {
        std::fs::Permissions::from_mode(self.attributes.mode & 0o7777)
    }
    /// st_mode: format and permission bits.
    pub fn mode(&self) -> u32 {
        self.attributes.mode
    }
    pub fn modified(&self) -> SystemTime {
        system_time(self.attributes.modify_time)
    }
    pub fn accessed(&self) -> SystemTime {
        system_time(self.attributes.access_time)
    }
    /// ctime: the last change of the attributes or contents.
    pub fn changed(&self) -> SystemTime {
        system_time(self.attributes.change_time)
    }
    /// st_ino (the server's qid.path: fsoc's inode number).
    pub fn ino(&self) -> u64 {
        self.attributes.qid.path
    }
    pub fn nlink(&self) -> u64 {
        self.attributes.link_count
    }
    pub fn uid(&self) -> u32 {
        self.attributes.uid
    }
    pub fn gid(&self) -> u32 {
        self.attributes.gid
    }
    /// st_blocks, in 512-byte units.
    pub fn blocks(&self) -> u64 {
        self.attributes.block_count
    }
    pub fn blksize(&self) -> u64 {
        self.attributes.block_size_bytes
    }
    /// The whole Rgetattr record.
    pub fn attributes(&self) -> &Attributes {
        &self.attributes
    }
}

/// One entry of a directory listing (never `.` or `..`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    pub(crate) directory: PathBuf,
    pub(crate) name: Vec<u8>,
    pub(crate) file_type: FileType,
    pub(crate) ino: u64,
}

impl DirEntry {
    pub fn file_name(&self) -> OsString {
        OsString::from_vec(self.name.clone())
    }
    /// The listed directory's path joined with the name.
    pub fn path(&self) -> PathBuf {
        self.directory.join(self.file_name())
    }
    pub fn file_type(&self) -> FileType {
        self.file_type
    }
    pub fn ino(&self) -> u64 {
        self.ino
    }
}

/// The volume's usage, from Rstatfs: the codec's own type (statfs(2)'s fields).
pub type StatFs = FsStats;
