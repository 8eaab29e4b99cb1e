//! The values messages carry: tags, fids, qids, attribute records, lock descriptions and the
//! bounded walk lists. Plain data; the layouts are in docs/PROTOCOL.md.

use crate::constants::WALK_ELEMENT_COUNT_MAX;

/// The tag that pairs a reply with its request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Tag(pub u16);

impl Tag {
    /// NOTAG: the tag of Tversion and its reply.
    pub const NONE: Tag = Tag(u16::MAX);
}

/// A fid: the client's handle for a file on the server.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Fid(pub u32);

impl Fid {
    /// NOFID: the afid of a Tattach without authentication.
    pub const NONE: Fid = Fid(u32::MAX);
}

/// The type byte of a qid: bits that say what kind of file it names (P9_QT*).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QidType(pub u8);

impl QidType {
    pub const DIRECTORY: QidType = QidType(0x80);
    pub const APPEND: QidType = QidType(0x40);
    pub const EXCLUSIVE: QidType = QidType(0x20);
    pub const MOUNT: QidType = QidType(0x10);
    pub const AUTH: QidType = QidType(0x08);
    pub const TEMPORARY: QidType = QidType(0x04);
    pub const SYMLINK: QidType = QidType(0x02);
    pub const LINK: QidType = QidType(0x01);
    pub const FILE: QidType = QidType(0x00);
}

/// The server's identity for a file: `path` is unique per file (the inode number), `version`
/// changes when the file does (0 means "do not cache").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Qid {
    pub qid_type: QidType,
    pub version: u32,
    pub path: u64,
}

/// A time as two 8-byte fields: seconds and nanoseconds since the Unix epoch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Timestamp {
    pub seconds: u64,
    pub nanoseconds: u64,
}

/// Rgetattr's body: stat(2)'s fields, with `valid_mask` (constants::getattr) saying which
/// hold. st_ino is `qid.path`; there is no st_dev.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Attributes {
    pub valid_mask: u64,
    pub qid: Qid,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub link_count: u64,
    pub rdev: u64,
    pub size_bytes: u64,
    pub block_size_bytes: u64,
    /// In 512-byte units, as st_blocks.
    pub block_count: u64,
    pub access_time: Timestamp,
    pub modify_time: Timestamp,
    pub change_time: Timestamp,
    pub birth_time: Timestamp,
    pub generation: u64,
    pub data_version: u64,
}

/// Tsetattr's body after the fid: `valid_mask` (constants::setattr) says which fields to set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SetAttributes {
    pub valid_mask: u32,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub size_bytes: u64,
    pub access_time: Timestamp,
    pub modify_time: Timestamp,
}

/// Rstatfs's body: statfs(2)'s fields.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FsStats {
    pub fs_type: u32,
    pub block_size_bytes: u32,
    pub block_count: u64,
    pub free_block_count: u64,
    pub available_block_count: u64,
    pub file_count: u64,
    pub free_file_count: u64,
    pub fs_id: u64,
    pub name_length_max: u32,
}

/// The type of a POSIX record lock (P9_LOCK_TYPE_*).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LockType(pub u8);

impl LockType {
    pub const READ: LockType = LockType(0);
    pub const WRITE: LockType = LockType(1);
    pub const UNLOCK: LockType = LockType(2);
}

/// Rlock's answer (P9_LOCK_*).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LockStatus(pub u8);

impl LockStatus {
    pub const SUCCESS: LockStatus = LockStatus(0);
    /// Held by someone else; a blocking client asks again.
    pub const BLOCKED: LockStatus = LockStatus(1);
    pub const ERROR: LockStatus = LockStatus(2);
    pub const GRACE: LockStatus = LockStatus(3);
}

/// Tlock's body after the fid: a POSIX record lock to take or release (fcntl F_SETLK).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct LockRequest<'a> {
    pub lock_type: LockType,
    /// constants::lock_flags.
    pub flags: u32,
    pub start: u64,
    /// 0 means "to the end of the file".
    pub length: u64,
    pub proc_id: u32,
    /// The Linux client sends its host name.
    pub client_id: &'a [u8],
}

/// Tgetlock's body after the fid, and Rgetlock's body: a lock to test for (fcntl F_GETLK), and
/// the conflicting lock or the same range with type UNLOCK.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct LockQuery<'a> {
    pub lock_type: LockType,
    pub start: u64,
    pub length: u64,
    pub proc_id: u32,
    pub client_id: &'a [u8],
}

/// At most WALK_ELEMENT_COUNT_MAX items held inline, so a Twalk's names and an Rwalk's qids
/// need no heap. Slots past the count always hold `T::default()`, so the derived equality is
/// the equality of the lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WalkList<T> {
    items: [T; WALK_ELEMENT_COUNT_MAX],
    count: u8,
}

/// A Twalk's names.
pub type WalkNames<'a> = WalkList<&'a [u8]>;
/// An Rwalk's qids.
pub type WalkQids = WalkList<Qid>;

/// More than WALK_ELEMENT_COUNT_MAX items offered to a `WalkList`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{count} walk elements, at most 16")]
pub struct TooManyWalkElements {
    pub count: usize,
}

impl<T: Copy + Default> WalkList<T> {
    pub fn new() -> Self {
        WalkList { items: [T::default(); WALK_ELEMENT_COUNT_MAX], count: 0 }
    }

    /// The list of `items`, or an error when there are more than 16.
    pub fn from_slice(items: &[T]) -> Result<Self, TooManyWalkElements> {
        let mut list = Self::new();
        for &item in items {
            list.push(item)?;
        }
        Ok(list)
    }

    pub fn push(&mut self, item: T) -> Result<(), TooManyWalkElements> {
        let count = usize::from(self.count);
        let slot = self.items.get_mut(count).ok_or(TooManyWalkElements { count: count + 1 })?;
        *slot = item;
        self.count += 1;
        Ok(())
    }

    pub fn as_slice(&self) -> &[T] {
        // `count` never exceeds the array's length: `push` is the only way to raise it.
        self.items.get(..usize::from(self.count)).unwrap_or(&[])
    }

    pub fn len(&self) -> usize {
        usize::from(self.count)
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}

impl<T: Copy + Default> Default for WalkList<T> {
    fn default() -> Self {
        Self::new()
    }
}
