//! Keys and values stored in the two trees (docs/FORMAT.md, "Tree records").
//!
//! Directory tree: key = parent inode (u64 big-endian) ‖ name; value = inode (u64 LE) ‖ kind.
//! Allocation tree: key = inode (u64 BE) ‖ record kind (u8) ‖ offset (u64 BE); big-endian so
//! byte order equals numeric order and all records of an inode are adjacent.
#![deny(clippy::indexing_slicing, clippy::unwrap_used)]

use alloc::vec::Vec;

use crate::address::LogAddress;
use fsoc_flash::codec::{DecodeError, Reader, Writer};
use fsoc_flash::convert::{u32_from_u64, usize_from_u64};

pub const ROOT_INODE: u64 = 1;
/// Pseudo-inode under which orphans (unlinked while open) are listed.
pub const ORPHAN_LIST_INODE: u64 = 0;
pub const NAME_BYTES_MAX: usize = 255;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum RecordKind {
    Inode = 0,
    Inline = 1,
    Extent = 2,
    Symlink = 3,
    Orphan = 4,
    /// Under inode 0 only, offset 0: the volume label (format version 3 on).
    Label = 5,
    /// One chunk of an extended attribute (format version 4 on); the offset is
    /// `xattr_offset(name hash, slot, chunk)`.
    Xattr = 6,
}

/// The offset of chunk `chunk` of the extended attribute in slot `slot` of those whose names
/// hash (CRC-32C) to `hash`: `hash u32 ‖ slot u16 ‖ chunk u16`, so an inode's attributes are
/// grouped by name hash and each one's chunks are consecutive keys (docs/FORMAT.md).
pub fn xattr_offset(hash: u32, slot: u16, chunk: u16) -> u64 {
    (u64::from(hash) << 32) | (u64::from(slot) << 16) | u64::from(chunk)
}

/// (hash, slot, chunk) of an extended attribute record's offset.
pub fn split_xattr_offset(offset: u64) -> (u32, u16, u16) {
    // Each part is masked to its width.
    ((offset >> 32) as u32, ((offset >> 16) & 0xffff) as u16, (offset & 0xffff) as u16)
}

/// The first format version with extended attributes (allocation record kind 6).
pub const FORMAT_VERSION_XATTRS: u32 = 4;

/// Longest volume label, in bytes (Linux's FSLABEL_MAX less its terminating NUL).
pub const LABEL_BYTES_MAX: usize = 255;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FileKind {
    File,
    Directory,
    Symlink,
    /// Format version 3 on: device nodes (the device number in the inode record), FIFOs and
    /// sockets. Their contents are not the file system's: the kernel serves them.
    CharDevice,
    BlockDevice,
    Fifo,
    Socket,
}

impl FileKind {
    pub fn code(self) -> u8 {
        match self {
            FileKind::File => 1,
            FileKind::Directory => 2,
            FileKind::Symlink => 3,
            FileKind::CharDevice => 4,
            FileKind::BlockDevice => 5,
            FileKind::Fifo => 6,
            FileKind::Socket => 7,
        }
    }
    pub fn from_code(code: u8) -> Option<FileKind> {
        match code {
            1 => Some(FileKind::File),
            2 => Some(FileKind::Directory),
            3 => Some(FileKind::Symlink),
            4 => Some(FileKind::CharDevice),
            5 => Some(FileKind::BlockDevice),
            6 => Some(FileKind::Fifo),
            7 => Some(FileKind::Socket),
            _ => None,
        }
    }
    /// A device node, FIFO or socket: an inode with no data of its own.
    pub fn is_special(self) -> bool {
        matches!(self, FileKind::CharDevice | FileKind::BlockDevice | FileKind::Fifo | FileKind::Socket)
    }
    /// A character or block device node (its record carries a device number).
    pub fn is_device(self) -> bool {
        matches!(self, FileKind::CharDevice | FileKind::BlockDevice)
    }
    /// The file-type bits of st_mode (Linux's S_IFMT values).
    pub fn mode_bits(self) -> u32 {
        match self {
            FileKind::Fifo => 0o010_000,
            FileKind::CharDevice => 0o020_000,
            FileKind::Directory => 0o040_000,
            FileKind::BlockDevice => 0o060_000,
            FileKind::File => 0o100_000,
            FileKind::Symlink => 0o120_000,
            FileKind::Socket => 0o140_000,
        }
    }
    /// The kind whose file-type bits `mode` carries (`S_IFMT` of it); `None` for 0 or an
    /// unknown type.
    pub fn from_mode_bits(mode: u32) -> Option<FileKind> {
        [
            FileKind::Fifo,
            FileKind::CharDevice,
            FileKind::Directory,
            FileKind::BlockDevice,
            FileKind::File,
            FileKind::Symlink,
            FileKind::Socket,
        ]
        .into_iter()
        .find(|kind| kind.mode_bits() == mode & 0o170_000)
    }
    /// The d_type a directory listing reports (Linux's DT_* values).
    pub fn dirent_type(self) -> u8 {
        match self {
            FileKind::Fifo => 1,
            FileKind::CharDevice => 2,
            FileKind::Directory => 4,
            FileKind::BlockDevice => 6,
            FileKind::File => 8,
            FileKind::Symlink => 10,
            FileKind::Socket => 12,
        }
    }
}

/// Linux's `dev_t` from a device's major and minor numbers (glibc's makedev).
pub fn make_device_number(major: u32, minor: u32) -> u64 {
    let (major, minor) = (u64::from(major), u64::from(minor));
    ((major & 0xffff_f000) << 32) | ((major & 0x0fff) << 8) | ((minor & 0xffff_ff00) << 12) | (minor & 0xff)
}

/// (major, minor) of a Linux `dev_t` (glibc's major() and minor()).
pub fn split_device_number(rdev: u64) -> (u32, u32) {
    let major = ((rdev >> 32) & 0xffff_f000) | ((rdev >> 8) & 0x0fff);
    let minor = ((rdev >> 12) & 0xffff_ff00) | (rdev & 0xff);
    // Both are masked to 32 bits above.
    (u32_from_u64(major), u32_from_u64(minor))
}

pub const ALLOCATION_KEY_BYTES: usize = 17;

pub fn allocation_key(inode: u64, kind: RecordKind, offset: u64) -> Vec<u8> {
    let mut writer = Writer::with_capacity(ALLOCATION_KEY_BYTES);
    writer.u64_be(inode);
    writer.u8(kind as u8);
    writer.u64_be(offset);
    writer.bytes
}

/// Splits an allocation key; `None` for a key of another shape (untrusted bytes).
pub fn parse_allocation_key(key: &[u8]) -> Option<(u64, u8, u64)> {
    let mut reader = Reader::new("allocation key", key);
    let inode = reader.u64_be().ok()?;
    let kind = reader.u8().ok()?;
    let offset = reader.u64_be().ok()?;
    (reader.remaining_bytes() == 0).then_some((inode, kind, offset))
}

pub fn directory_key(parent: u64, name: &[u8]) -> Vec<u8> {
    let mut writer = Writer::with_capacity(8 + name.len());
    writer.u64_be(parent);
    writer.raw(name);
    writer.bytes
}

/// Splits a directory key into parent and name.
pub fn parse_directory_key(key: &[u8]) -> Option<(u64, &[u8])> {
    let (head, name) = key.split_first_chunk::<8>()?;
    Some((u64::from_be_bytes(*head), name))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirectoryValue {
    pub inode: u64,
    pub kind: FileKind,
}

impl DirectoryValue {
    pub fn encode(&self) -> Vec<u8> {
        let mut writer = Writer::with_capacity(9);
        writer.u64_le(self.inode);
        writer.u8(self.kind.code());
        writer.bytes
    }
    pub fn decode(bytes: &[u8]) -> Result<DirectoryValue, DecodeError> {
        let mut reader = Reader::new("directory entry", bytes);
        let inode = reader.u64_le()?;
        let code = reader.u8()?;
        let kind = FileKind::from_code(code).ok_or_else(|| reader.invalid("kind", u64::from(code)))?;
        Ok(DirectoryValue { inode, kind })
    }
}

/// Flag in `InodeRecord::flags`: the file's data is in an Inline record, not in extents.
pub const INODE_FLAG_INLINE: u32 = 1;
/// Attribute flags (chattr's i, a, A, d, S; format version 3 on). Immutable: no change to the
/// inode, its data or (for a directory) its entries.
pub const INODE_FLAG_IMMUTABLE: u32 = 1 << 1;
/// Append-only: data only added at the end; no truncation, rename, unlink or link; a
/// directory's entries may be added, not removed.
pub const INODE_FLAG_APPEND: u32 = 1 << 2;
/// Access times are not updated (stored for `lsattr`; fsoc keeps atime as set).
pub const INODE_FLAG_NOATIME: u32 = 1 << 3;
/// Skipped by dump(8) (stored for backup tools).
pub const INODE_FLAG_NODUMP: u32 = 1 << 4;
/// Every change to the file is committed before the call returns, as if followed by fsync.
pub const INODE_FLAG_SYNC: u32 = 1 << 5;
/// Every attribute flag.
pub const INODE_ATTRIBUTE_FLAGS: u32 =
    INODE_FLAG_IMMUTABLE | INODE_FLAG_APPEND | INODE_FLAG_NOATIME | INODE_FLAG_NODUMP | INODE_FLAG_SYNC;
/// Bytes of an inode record from format version 5 on (`InodeRecord::encode`).
pub const INODE_RECORD_BYTES: usize = 80;
/// Bytes of an inode record of format versions 1 to 4 (`InodeRecord::encode_narrow`).
pub const INODE_RECORD_BYTES_NARROW: usize = 64;
/// The first format version whose inode records are 80 bytes: signed times (before 1970 and
/// past 2262 both), a birth time, the count of data pages the file maps (st_blocks) and the
/// generation of the mount that made the inode (stable file handles).
pub const FORMAT_VERSION_WIDE_INODES: u32 = 5;

/// Attributes of a file, directory, symlink, device node, FIFO or socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InodeRecord {
    pub kind: FileKind,
    /// Permission bits (0o7777).
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    pub flags: u32,
    pub size: u64,
    /// Times in nanoseconds since the Unix epoch, negative before it (format version 5 on;
    /// older volumes keep none before the epoch).
    pub atime_ns: i64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    /// When the inode was made (format version 5 on; 0, unknown, on older volumes).
    pub btime_ns: i64,
    /// Data pages the file's extents map: what st_blocks counts (format version 5 on; older
    /// volumes keep no count, and `FileSystem::getattr` reports the size in whole pages).
    /// 0 for inline files and for every other kind. At most 2^32 − 1 (the largest file).
    pub pages: u64,
    /// Which mount made the inode (format version 5 on; 0 on older volumes and for the root):
    /// the low 32 bits of the commit counter that mount committed before making anything. A
    /// file handle names (inode, generation), so a number handed out again after a power cut
    /// lost the file that had it never matches that file's handle (ESTALE).
    pub generation: u32,
    /// For directories: the parent directory (the root is its own parent). For device nodes:
    /// the device number (Linux's `dev_t` encoding). Otherwise 0.
    pub parent: u64,
}

impl InodeRecord {
    pub fn is_inline(&self) -> bool {
        self.flags & INODE_FLAG_INLINE != 0
    }

    /// The device number of a device node (`dev_t`, as stat's st_rdev), 0 for other kinds.
    pub fn rdev(&self) -> u64 {
        if self.kind.is_device() {
            self.parent
        } else {
            0
        }
    }

    /// A new inode of `kind` made at `now_ns` by a mount of `generation`: one link (a
    /// directory two), no size, an empty inline file for a regular file; `parent` is a
    /// directory's parent or a device node's number (0 otherwise), `size` a symlink's target
    /// length.
    pub fn new(
        kind: FileKind,
        mode: u32,
        (uid, gid): (u32, u32),
        (now_ns, generation): (i64, u32),
        (parent, size): (u64, u64),
    ) -> InodeRecord {
        InodeRecord {
            kind,
            mode: mode & 0o7777,
            uid,
            gid,
            nlink: if kind == FileKind::Directory { 2 } else { 1 },
            flags: if kind == FileKind::File { INODE_FLAG_INLINE } else { 0 },
            size,
            atime_ns: now_ns,
            mtime_ns: now_ns,
            ctime_ns: now_ns,
            btime_ns: now_ns,
            pages: 0,
            generation,
            parent,
        }
    }

    /// Bytes the inode occupies for stat's st_blocks (in 512-byte units, rounded up): its
    /// mapped data pages, or an inline file's bytes (kept in the tree); 0 for other kinds.
    pub fn allocated_bytes(&self, page_size_bytes: u64) -> u64 {
        match self.kind {
            FileKind::File if self.is_inline() => self.size,
            FileKind::File => self.pages.saturating_mul(page_size_bytes),
            _ => 0,
        }
    }

    /// The record as format version 5 on keeps it (`INODE_RECORD_BYTES`).
    pub fn encode(&self) -> Vec<u8> {
        let mut writer = self.encode_head(INODE_RECORD_BYTES, |time| time as u64);
        writer.u64_le(self.btime_ns as u64);
        // `check_inode` bounds a decoded count by the largest file's pages (< 2^32), and the
        // file system never counts more.
        assert!(self.pages <= u64::from(u32::MAX), "a file maps fewer than 2^32 pages: {}", self.pages);
        writer.u32_le(u32::try_from(self.pages).unwrap_or(u32::MAX));
        writer.u32_le(self.generation);
        assert_eq!(writer.bytes.len(), INODE_RECORD_BYTES, "inode record drifted from FORMAT.md");
        writer.bytes
    }

    /// The record as format versions 1 to 4 keep it (`INODE_RECORD_BYTES_NARROW`): unsigned
    /// times (a time before the epoch is stored as the epoch), no birth time, no page count.
    pub fn encode_narrow(&self) -> Vec<u8> {
        let writer = self.encode_head(INODE_RECORD_BYTES_NARROW, |time| time.max(0) as u64);
        assert_eq!(writer.bytes.len(), INODE_RECORD_BYTES_NARROW, "inode record drifted from FORMAT.md");
        writer.bytes
    }

    fn encode_head(&self, capacity: usize, time: impl Fn(i64) -> u64) -> Writer {
        let mut writer = Writer::with_capacity(capacity);
        writer.u8(self.kind.code());
        writer.u8(0);
        writer.u16_le(0);
        writer.u32_le(self.mode);
        writer.u32_le(self.uid);
        writer.u32_le(self.gid);
        writer.u32_le(self.nlink);
        writer.u32_le(self.flags);
        writer.u64_le(self.size);
        writer.u64_le(time(self.atime_ns));
        writer.u64_le(time(self.mtime_ns));
        writer.u64_le(time(self.ctime_ns));
        writer.u64_le(self.parent);
        writer
    }

    /// Decodes a record of either width, told by its length: 80 bytes (format version 5 on)
    /// or 64 (versions 1 to 4, whose unsigned times past 2262 read as the largest time). The
    /// file system checks the width against the volume's version (`decode_for`).
    pub fn decode(bytes: &[u8]) -> Result<InodeRecord, DecodeError> {
        let wide = bytes.len() >= INODE_RECORD_BYTES;
        let mut reader = Reader::new("inode record", bytes);
        let code = reader.u8()?;
        let kind = FileKind::from_code(code).ok_or_else(|| reader.invalid("kind", u64::from(code)))?;
        let _reserved = reader.bytes(3)?;
        let mode = reader.u32_le()?;
        if mode > 0o7777 {
            return Err(reader.invalid("mode", u64::from(mode)));
        }
        let time = |value: u64| if wide { value as i64 } else { i64::try_from(value).unwrap_or(i64::MAX) };
        let mut record = InodeRecord {
            kind,
            mode,
            uid: reader.u32_le()?,
            gid: reader.u32_le()?,
            nlink: reader.u32_le()?,
            flags: reader.u32_le()?,
            size: reader.u64_le()?,
            atime_ns: time(reader.u64_le()?),
            mtime_ns: time(reader.u64_le()?),
            ctime_ns: time(reader.u64_le()?),
            btime_ns: 0,
            pages: 0,
            generation: 0,
            parent: reader.u64_le()?,
        };
        if wide {
            record.btime_ns = reader.u64_le()? as i64;
            record.pages = u64::from(reader.u32_le()?);
            record.generation = reader.u32_le()?;
        }
        if record.flags & !(INODE_FLAG_INLINE | INODE_ATTRIBUTE_FLAGS) != 0 {
            return Err(reader.invalid("flags", u64::from(record.flags)));
        }
        Ok(record)
    }

    /// Decodes a record of exactly the width a volume keeps (`wide`: format version 5 on).
    pub fn decode_for(bytes: &[u8], wide: bool) -> Result<InodeRecord, DecodeError> {
        let width = if wide { INODE_RECORD_BYTES } else { INODE_RECORD_BYTES_NARROW };
        if bytes.len() != width {
            return Err(DecodeError::InvalidField {
                structure: "inode record",
                field: "length",
                value: bytes.len() as u64,
            });
        }
        InodeRecord::decode(bytes)
    }
}

/// What a record may say on one volume, from its geometry (trusted, never from flash).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordLimits {
    /// Largest inline file (one tree entry).
    pub inline_bytes_max: u64,
    /// Largest file (u32 page indexes).
    pub file_bytes_max: u64,
    /// Longest symlink target.
    pub symlink_bytes_max: u64,
    /// Log addresses `log_first..log_end` hold file data and nodes.
    pub log_first: u64,
    pub log_end: u64,
    pub page_size_bytes: u64,
    /// Whether the volume has format version 3's records: extents with data checksums (which
    /// they must then carry, and must not carry on an older volume), attribute flags, device
    /// nodes, FIFOs and sockets, and a label under inode 0.
    pub version3: bool,
    /// Most pages of a checksummed extent (`extent_pages_max`).
    pub extent_pages_max: u32,
    /// Whether the volume may hold extended attributes (format version 4 on).
    pub xattrs: bool,
    /// Whether inode records are 80 bytes wide (format version 5 on).
    pub wide_inodes: bool,
    /// Whether files that are not inline may keep pages as short pages (format version 13 on).
    pub short_pages: bool,
}

impl RecordLimits {
    /// Checks an inode record read from flash, so no later step sizes an allocation or a loop
    /// by a corrupt value (docs/FORMAT.md, "Inode record").
    pub fn check_inode(&self, inode: u64, record: &InodeRecord) -> Result<(), &'static str> {
        match record.kind {
            FileKind::File if record.is_inline() && record.size > self.inline_bytes_max => {
                Err("inline file larger than an inline record can hold")
            }
            FileKind::File if record.size > self.file_bytes_max => Err("file size beyond the largest file"),
            FileKind::Symlink if record.size == 0 || record.size > self.symlink_bytes_max => {
                Err("symlink target length out of range")
            }
            FileKind::Directory | FileKind::Symlink if record.is_inline() => {
                Err("inline flag on a directory or symlink")
            }
            FileKind::Directory if inode != ROOT_INODE && record.parent == inode => Err("directory is its own parent"),
            kind if kind.is_special() && !self.version3 => {
                Err("device node, FIFO or socket on a volume older than format version 3")
            }
            kind if kind.is_special() && (record.size != 0 || record.is_inline()) => {
                Err("device node, FIFO or socket with contents")
            }
            FileKind::Fifo | FileKind::Socket if record.parent != 0 => Err("FIFO or socket with a device number"),
            _ if !self.version3 && record.flags & INODE_ATTRIBUTE_FLAGS != 0 => {
                Err("attribute flags on a volume older than format version 3")
            }
            FileKind::File if record.pages > self.file_bytes_max / self.page_size_bytes.max(1) => {
                Err("more data pages than the largest file holds")
            }
            _ if record.pages != 0 && (record.kind != FileKind::File || record.is_inline()) => {
                Err("data pages counted for an inline file or a file of another kind")
            }
            _ => Ok(()),
        }
    }

    /// Checks a decoded extent against the volume: its whole run lies in the log and within
    /// the largest file, so reads, punches and fsck only ever see addresses of this volume and
    /// a page count never drives work beyond the volume's size.
    pub fn check_extent(&self, extent: &Extent) -> Result<(), &'static str> {
        let address_end = u64::from(extent.address.0) + u64::from(extent.page_count);
        if u64::from(extent.address.0) < self.log_first || address_end > self.log_end {
            return Err("extent address outside the volume's log");
        }
        if extent.end_page() > self.file_bytes_max / self.page_size_bytes.max(1) {
            return Err("extent beyond the largest file");
        }
        match (self.version3, extent.has_checksums()) {
            (true, false) => Err("extent without data checksums on a volume that requires them"),
            (false, true) => Err("extent with data checksums on a volume older than format version 3"),
            (true, true) if extent.page_count > self.extent_pages_max => Err("checksummed extent longer than allowed"),
            _ => Ok(()),
        }
    }
}

/// The first format version whose extent records carry a CRC-32C of each page's content
/// (docs/FORMAT.md, "Tree records"); volumes of older versions keep extents without them.
pub const FORMAT_VERSION_DATA_CHECKSUMS: u32 = 3;

/// Most pages one checksummed extent record names: its value is 8 + 4 bytes a page, kept to
/// 264 bytes so a delta commit that rewrites an extent stays small (docs/FORMAT.md); less on
/// pages too small for a tree entry that long (`extent_pages_max`).
pub const EXTENT_CHECKSUMS_MAX: u32 = 64;

/// Most pages a checksummed extent may name on a volume whose tree entries (key and value)
/// hold at most `entry_bytes_max` bytes.
pub fn extent_pages_max(entry_bytes_max: usize) -> u32 {
    let fit = entry_bytes_max.saturating_sub(ALLOCATION_KEY_BYTES + 8) / 4;
    u32::try_from(fit).unwrap_or(u32::MAX).clamp(1, EXTENT_CHECKSUMS_MAX)
}

/// CRC-32C of a file page's stored content (the whole page, zero past the file's end).
pub fn page_checksum(content: &[u8]) -> u32 {
    fsoc_flash::codec::crc32c(content)
}

/// A run of file pages stored at consecutive log addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Extent {
    pub first_page: u64,
    pub address: LogAddress,
    pub page_count: u32,
    /// CRC-32C of each page's content, in page order (`page_count` of them) on volumes of
    /// format version 3 on; empty on older volumes, whose extents carry none.
    pub checksums: Vec<u32>,
}

impl Extent {
    /// A one-page extent; `checksum` is `None` on a volume without data checksums.
    pub fn single(first_page: u64, address: LogAddress, checksum: Option<u32>) -> Extent {
        Extent { first_page, address, page_count: 1, checksums: checksum.into_iter().collect() }
    }

    pub fn end_page(&self) -> u64 {
        // Saturating: `first_page` comes from a key on flash and may be corrupt.
        self.first_page.saturating_add(u64::from(self.page_count))
    }

    pub fn has_checksums(&self) -> bool {
        !self.checksums.is_empty()
    }

    pub fn address_of(&self, page: u64) -> LogAddress {
        assert!(page >= self.first_page && page < self.end_page(), "page {page} outside {self:?}");
        // Inside the extent (asserted), so below its u32 page count.
        LogAddress(self.address.0 + u32_from_u64(page - self.first_page))
    }

    /// The stored checksum of file page `page` (inside the extent), `None` on an extent
    /// without checksums.
    pub fn checksum_of(&self, page: u64) -> Option<u32> {
        assert!(page >= self.first_page && page < self.end_page(), "page {page} outside {self:?}");
        self.checksums.get(usize::try_from(page - self.first_page).ok()?).copied()
    }

    /// The part of the extent covering file pages [first, end) (clipped to the extent).
    pub fn slice(&self, first: u64, end: u64) -> Extent {
        let first = first.max(self.first_page);
        let end = end.min(self.end_page());
        assert!(first < end, "empty slice [{first}, {end}) of {self:?}");
        let skip = usize_from_u64(first - self.first_page);
        let count = usize_from_u64(end - first);
        let checksums = if self.has_checksums() {
            self.checksums.iter().skip(skip).take(count).copied().collect()
        } else {
            Vec::new()
        };
        // Inside the extent, so below its u32 page count.
        Extent { first_page: first, address: self.address_of(first), page_count: u32_from_u64(end - first), checksums }
    }

    /// Whether `next` continues this extent in the file and on flash, and both kinds agree.
    pub fn is_continued_by(&self, next: &Extent) -> bool {
        self.end_page() == next.first_page
            && u64::from(self.address.0) + u64::from(self.page_count) == u64::from(next.address.0)
            && self.has_checksums() == next.has_checksums()
    }

    /// Appends `next`, which must continue this extent (`is_continued_by`).
    pub fn extend(&mut self, next: &Extent) {
        assert!(self.is_continued_by(next), "{next:?} does not continue {self:?}");
        self.page_count += next.page_count;
        self.checksums.extend_from_slice(&next.checksums);
    }

    pub fn encode_value(&self) -> Vec<u8> {
        assert!(
            self.checksums.is_empty() || self.checksums.len() == self.page_count as usize,
            "extent with {} checksums for {} pages",
            self.checksums.len(),
            self.page_count
        );
        let mut writer = Writer::with_capacity(8 + 4 * self.checksums.len());
        writer.u32_le(self.address.0);
        writer.u32_le(self.page_count);
        for checksum in &self.checksums {
            writer.u32_le(*checksum);
        }
        writer.bytes
    }

    /// Decodes an extent value: 8 bytes (no checksums, format versions 1 and 2) or 8 + 4 bytes
    /// a page (format version 3). Which of the two a volume may hold is the caller's check
    /// (`RecordLimits::check_extent`).
    pub fn decode(first_page: u64, bytes: &[u8]) -> Result<Extent, DecodeError> {
        let mut reader = Reader::new("extent", bytes);
        let address = LogAddress(reader.u32_le()?);
        let page_count = reader.u32_le()?;
        if page_count == 0 {
            return Err(reader.invalid("page_count", 0));
        }
        if u64::from(address.0) + u64::from(page_count) > u64::from(u32::MAX) {
            return Err(reader.invalid("address", u64::from(address.0)));
        }
        let checksum_bytes = reader.remaining_bytes();
        let mut checksums = Vec::new();
        if checksum_bytes != 0 {
            if checksum_bytes as u64 != 4 * u64::from(page_count) {
                return Err(reader.invalid("checksum bytes", checksum_bytes as u64));
            }
            checksums.reserve_exact(checksum_bytes / 4);
            for _ in 0..page_count {
                checksums.push(reader.u32_le()?);
            }
        }
        Ok(Extent { first_page, address, page_count, checksums })
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)]
mod tests {
    use super::*;

    #[test]
    fn device_numbers_round_trip_as_glibc_encodes_them() {
        // /dev/sda1 (8, 1) and /dev/null (1, 3), and numbers past 12 and 8 bits.
        assert_eq!(make_device_number(8, 1), 0x801);
        assert_eq!(make_device_number(1, 3), 0x103);
        for (major, minor) in [(8, 1), (1, 3), (4095, 255), (4096, 256), (u32::MAX, u32::MAX), (259, 1 << 20)] {
            assert_eq!(split_device_number(make_device_number(major, minor)), (major, minor));
        }
    }

    #[test]
    fn file_kinds_map_to_mode_bits_and_back() {
        for code in 1..=7 {
            let kind = FileKind::from_code(code).expect("kind");
            assert_eq!(FileKind::from_mode_bits(kind.mode_bits() | 0o644), Some(kind));
        }
        assert_eq!(FileKind::from_mode_bits(0o644), None);
    }

    #[test]
    fn allocation_keys_sort_by_inode_then_kind_then_offset() {
        let a = allocation_key(5, RecordKind::Extent, 300);
        let b = allocation_key(5, RecordKind::Extent, 0x1_0000);
        let c = allocation_key(6, RecordKind::Inode, 0);
        assert!(a < b && b < c);
        assert_eq!(parse_allocation_key(&a), Some((5, RecordKind::Extent as u8, 300)));
        assert_eq!(parse_allocation_key(&a[..16]), None);
    }

    #[test]
    fn inode_records_round_trip_and_reject_bad_fields() {
        let record = InodeRecord {
            kind: FileKind::Directory,
            mode: 0o755,
            uid: 1000,
            gid: 100,
            nlink: 2,
            flags: INODE_FLAG_INLINE,
            size: 4,
            atime_ns: 1,
            mtime_ns: 2,
            ctime_ns: -3,
            btime_ns: -4,
            pages: 0,
            generation: 9,
            parent: 1,
        };
        assert_eq!(InodeRecord::decode(&record.encode()), Ok(record));
        assert_eq!(InodeRecord::decode_for(&record.encode(), true), Ok(record));
        assert!(InodeRecord::decode_for(&record.encode(), false).is_err(), "a wide record on an older volume");
        // Versions 1 to 4: unsigned times, a time before 1970 stored as the epoch.
        let narrow = InodeRecord::decode_for(&record.encode_narrow(), false).expect("narrow");
        assert_eq!((narrow.ctime_ns, narrow.btime_ns, narrow.atime_ns), (0, 0, 1));
        let mut bad = record.encode();
        bad[0] = 9;
        assert!(InodeRecord::decode(&bad).is_err());
        assert!(InodeRecord::decode(&record.encode()[..20]).is_err());
    }
}
