//! Extended attributes (format version 4; docs/FORMAT.md, "Tree records"): any name the
//! Linux VFS passes (`user.`, `trusted.`, `security.`, `system.posix_acl_access` and
//! `system.posix_acl_default`), names of 1–255 bytes, values up to 64 KiB, with Linux's
//! errnos (ENODATA, ERANGE, E2BIG, EEXIST, EOPNOTSUPP, EPERM).
//!
//! Storage: one attribute is the byte stream `name_len u8 ‖ value_len u32 LE ‖ name ‖ value`,
//! cut into chunks of one tree entry each (as symlink targets are), under allocation keys of
//! kind 6 whose offset is `CRC-32C(name) u32 ‖ slot u16 ‖ chunk u16`: a lookup reads only
//! the attributes whose names share the hash (almost always one), and names that collide take
//! the next free slot.
//!
//! The two ACL names carry Linux's rules with them (fs/acl.rs): setting an access ACL sets
//! the mode's permission bits from it (and stores nothing when the mode says it all), chmod
//! rewrites the access ACL, a default ACL is only for directories, and a new inode inherits
//! its directory's default ACL (`FileSystem::create_masked`).
#![deny(clippy::indexing_slicing, clippy::unwrap_used)]

use alloc::vec::Vec;

use fsoc_flash::codec::crc32c;
use fsoc_flash::Flash;

use crate::btree::Tree;
use crate::fs::acl::{Acl, ACL_ACCESS_NAME, ACL_DEFAULT_NAME};
use crate::fs::attributes;
use crate::fs::records::{
    allocation_key, parse_allocation_key, split_xattr_offset, xattr_offset, FileKind, InodeRecord, RecordKind,
    ALLOCATION_KEY_BYTES,
};
use crate::fs::space::SpaceUse;
use crate::fs::{FileSystem, FsError, TreeId};

/// Longest attribute name, namespace prefix included (Linux's XATTR_NAME_MAX).
pub const XATTR_NAME_BYTES_MAX: usize = 255;
/// Largest attribute value (Linux's XATTR_SIZE_MAX).
pub const XATTR_VALUE_BYTES_MAX: usize = 65_536;
/// Largest attribute list, NUL-terminated names (Linux's XATTR_LIST_MAX): a longer list is
/// E2BIG, as the kernel answers for it.
pub const XATTR_LIST_BYTES_MAX: usize = 65_536;
/// `name_len u8 ‖ value_len u32`.
const HEADER_BYTES: usize = 5;
const STREAM_BYTES_MAX: usize = HEADER_BYTES + XATTR_NAME_BYTES_MAX + XATTR_VALUE_BYTES_MAX;

/// setxattr's flags: XATTR_CREATE (fail if present) and XATTR_REPLACE (fail if absent).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XattrMode {
    Any,
    Create,
    Replace,
}

impl XattrMode {
    /// From setxattr's `flags` (0, XATTR_CREATE 1, XATTR_REPLACE 2); EINVAL otherwise.
    pub fn from_flags(flags: i32) -> Result<XattrMode, FsError> {
        match flags {
            0 => Ok(XattrMode::Any),
            1 => Ok(XattrMode::Create),
            2 => Ok(XattrMode::Replace),
            _ => Err(FsError::InvalidArgument("setxattr flags other than XATTR_CREATE or XATTR_REPLACE")),
        }
    }
}

/// Checks a name as the Linux VFS does before a file system sees it: 1–255 bytes (ERANGE),
/// no NUL, one of the namespaces fsoc stores (EOPNOTSUPP), something after the prefix.
pub fn check_xattr_name(name: &[u8]) -> Result<(), FsError> {
    if name.is_empty() || name.len() > XATTR_NAME_BYTES_MAX {
        return Err(FsError::OutOfRange);
    }
    if name.contains(&0) {
        return Err(FsError::InvalidArgument("an attribute name may not hold a NUL byte"));
    }
    if name == ACL_ACCESS_NAME || name == ACL_DEFAULT_NAME {
        return Ok(());
    }
    match [&b"user."[..], b"trusted.", b"security."].into_iter().find(|prefix| name.starts_with(prefix)) {
        Some(prefix) if name.len() == prefix.len() => Err(FsError::InvalidArgument("an attribute name is empty")),
        Some(_) => Ok(()),
        None => Err(FsError::NotSupported),
    }
}

/// Linux keeps `user.` attributes to regular files and directories (xattr_permission).
fn user_namespace_refused(name: &[u8], kind: FileKind) -> bool {
    name.starts_with(b"user.") && !matches!(kind, FileKind::File | FileKind::Directory)
}

/// What an assembly keeps of the attributes it meets.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Keep<'a> {
    /// Every name (listxattr).
    Names,
    /// The name and value of this one attribute (getxattr).
    Value(&'a [u8]),
}

/// One attribute as an assembly found it.
#[derive(Debug)]
pub(crate) struct XattrEntry {
    pub hash: u32,
    pub slot: u16,
    /// Chunk records it occupies.
    pub chunks: u16,
    /// Empty unless kept.
    pub name: Vec<u8>,
    /// Whether its name is the one `Keep::Value` asked for.
    pub matched: bool,
    pub value: Option<Vec<u8>>,
}

/// The attribute being assembled from its chunk records.
struct OpenEntry {
    hash: u32,
    slot: u16,
    chunks: u16,
    stored: usize,
    head: Vec<u8>,
    header: Option<(usize, usize)>,
    entry: XattrEntry,
}

/// Rebuilds attributes from one inode's kind-6 records met in key order, checking what the
/// format says of them (chunks consecutive from 0, lengths, the name's hash). Used by the
/// lookups here and by fsck.
pub(crate) struct XattrAssembly<'a> {
    keep: Keep<'a>,
    open: Option<OpenEntry>,
}

impl<'a> XattrAssembly<'a> {
    pub fn new(keep: Keep<'a>) -> Self {
        XattrAssembly { keep, open: None }
    }

    /// Takes the record at `offset`; returns the attribute it completed before it, if any.
    pub fn push(&mut self, offset: u64, value: &[u8]) -> Result<Option<XattrEntry>, &'static str> {
        let (hash, slot, chunk) = split_xattr_offset(offset);
        let finished = match &self.open {
            Some(open) if (open.hash, open.slot) != (hash, slot) => self.finish()?,
            _ => None,
        };
        let open = match &mut self.open {
            Some(open) => {
                if chunk != open.chunks {
                    return Err("attribute chunk out of place");
                }
                open
            }
            None if chunk != 0 => return Err("attribute chunk out of place"),
            None => self.open.insert(OpenEntry {
                hash,
                slot,
                chunks: 0,
                stored: 0,
                head: Vec::new(),
                header: None,
                entry: XattrEntry { hash, slot, chunks: 0, name: Vec::new(), matched: false, value: None },
            }),
        };
        if value.is_empty() {
            return Err("empty attribute chunk");
        }
        open.chunks = open.chunks.checked_add(1).ok_or("attribute of too many chunks")?;
        open.stored += value.len();
        if open.stored > STREAM_BYTES_MAX {
            return Err("attribute longer than a name and a value can be");
        }
        if let Some(kept) = open.entry.value.as_mut() {
            kept.extend_from_slice(value);
        } else if open.header.is_none() {
            open.head.extend_from_slice(value);
            Self::read_header(open, self.keep)?;
        }
        Ok(finished)
    }

    /// Parses the header and name once the chunks so far hold them.
    fn read_header(open: &mut OpenEntry, keep: Keep<'_>) -> Result<(), &'static str> {
        let Some((&name_len, rest)) = open.head.split_first() else { return Ok(()) };
        let Some((value_len, _)) = rest.split_first_chunk::<4>() else { return Ok(()) };
        let (name_len, value_len) = (usize::from(name_len), u32::from_le_bytes(*value_len) as usize);
        if name_len == 0 || value_len > XATTR_VALUE_BYTES_MAX {
            return Err("attribute header out of range");
        }
        let Some(name) = open.head.get(HEADER_BYTES..HEADER_BYTES + name_len) else { return Ok(()) };
        if crc32c(name) != open.hash {
            return Err("attribute name does not hash to its key");
        }
        open.header = Some((name_len, value_len));
        open.entry.matched = matches!(keep, Keep::Value(wanted) if wanted == name);
        if open.entry.matched || matches!(keep, Keep::Names) {
            open.entry.name = name.to_vec();
        }
        if open.entry.matched {
            open.entry.value = Some(open.head.get(HEADER_BYTES + name_len..).unwrap_or_default().to_vec());
        }
        open.head = Vec::new();
        Ok(())
    }

    /// Ends the assembly (or the attribute in progress); returns that attribute, if any.
    pub fn finish(&mut self) -> Result<Option<XattrEntry>, &'static str> {
        let Some(open) = self.open.take() else { return Ok(None) };
        let Some((name_len, value_len)) = open.header else { return Err("attribute shorter than its header") };
        if open.stored != HEADER_BYTES + name_len + value_len {
            return Err("attribute length differs from its header");
        }
        let mut entry = open.entry;
        entry.chunks = open.chunks;
        Ok(Some(entry))
    }
}

impl<F: Flash> FileSystem<F> {
    /// Bytes of an attribute's stream kept in one chunk record.
    fn xattr_chunk_bytes(&self) -> usize {
        Tree::max_entry_bytes(self.volume.layout().page_size_bytes()) - ALLOCATION_KEY_BYTES
    }

    /// The attributes of `inode` in key order (all, or those whose names hash to `hash`),
    /// assembled as `keep` says; `visit` returns false to stop.
    fn scan_xattrs(
        &self,
        inode: u64,
        hash: Option<u32>,
        keep: Keep<'_>,
        visit: &mut dyn FnMut(XattrEntry) -> Result<bool, FsError>,
    ) -> Result<(), FsError> {
        let corrupt = |reason| FsError::CorruptFile { inode, reason };
        let mut assembly = XattrAssembly::new(keep);
        let mut failure = None;
        let start = allocation_key(inode, RecordKind::Xattr, xattr_offset(hash.unwrap_or(0), 0, 0));
        self.tree_scan(TreeId::Allocation, &start, true, &mut |key, value| {
            let offset = match parse_allocation_key(key) {
                Some((owner, kind, offset)) if owner == inode && kind == RecordKind::Xattr as u8 => offset,
                _ => return false,
            };
            if hash.is_some_and(|hash| split_xattr_offset(offset).0 != hash) {
                return false;
            }
            let step = assembly.push(offset, value).map_err(corrupt).and_then(|done| match done {
                Some(entry) => visit(entry),
                None => Ok(true),
            });
            match step {
                Ok(more) => more,
                Err(error) => {
                    failure = Some(error);
                    false
                }
            }
        })?;
        if let Some(error) = failure {
            return Err(error);
        }
        match assembly.finish().map_err(corrupt)? {
            Some(entry) => visit(entry).map(|_| ()),
            None => Ok(()),
        }
    }

    /// The attribute `name` of `inode` with its value, and the slots its hash group uses.
    fn find_xattr(&self, inode: u64, name: &[u8]) -> Result<(Option<XattrEntry>, Vec<u16>), FsError> {
        let mut found = None;
        let mut slots = Vec::new();
        self.scan_xattrs(inode, Some(crc32c(name)), Keep::Value(name), &mut |entry| {
            slots.push(entry.slot);
            if entry.matched {
                found = Some(entry);
            }
            Ok(true)
        })?;
        Ok((found, slots))
    }

    /// getxattr: the value of attribute `name` of `inode`. ENODATA when it has none (always on
    /// a volume older than format version 4).
    pub fn get_xattr(&self, inode: u64, name: &[u8]) -> Result<Vec<u8>, FsError> {
        check_xattr_name(name)?;
        self.getattr(inode)?;
        if !self.has_xattrs() {
            return Err(FsError::NoAttribute);
        }
        let (found, _) = self.find_xattr(inode, name)?;
        found.and_then(|entry| entry.value).ok_or(FsError::NoAttribute)
    }

    /// listxattr: the names of `inode`'s attributes, each followed by a NUL, in key order.
    /// E2BIG when the list would pass 64 KiB.
    pub fn list_xattrs(&self, inode: u64) -> Result<Vec<u8>, FsError> {
        self.getattr(inode)?;
        let mut list = Vec::new();
        if !self.has_xattrs() {
            return Ok(list);
        }
        self.scan_xattrs(inode, None, Keep::Names, &mut |entry| {
            if list.len() + entry.name.len() + 1 > XATTR_LIST_BYTES_MAX {
                return Err(FsError::TooBig);
            }
            list.extend_from_slice(&entry.name);
            list.push(0);
            Ok(true)
        })?;
        Ok(list)
    }

    /// setxattr. EOPNOTSUPP on a volume older than format version 4; EPERM on an immutable or
    /// append-only inode, and for a `user.` attribute on anything but a file or directory.
    /// Setting `system.posix_acl_access` sets the mode's permission bits from the list (and
    /// stores no list the mode says all of); `system.posix_acl_default` is for directories.
    pub fn set_xattr(&mut self, inode: u64, name: &[u8], value: &[u8], mode: XattrMode) -> Result<(), FsError> {
        if value.len() > XATTR_VALUE_BYTES_MAX {
            check_xattr_name(name)?;
            return Err(FsError::TooBig);
        }
        let record = self.xattr_change_allowed(inode, name)?;
        // An ACL is checked (and its effect on the mode worked out) before anything changes.
        let acl = if name == ACL_ACCESS_NAME || name == ACL_DEFAULT_NAME { Some(Acl::decode(value)?) } else { None };
        if name == ACL_DEFAULT_NAME && record.kind != FileKind::Directory {
            return match acl {
                Some(Some(_)) => Err(FsError::AccessDenied),
                _ => Ok(()),
            };
        }
        let stream_bytes = (HEADER_BYTES + name.len() + value.len()) as u64;
        let pages = 2 * stream_bytes.div_ceil(self.page_size()) + 2;
        self.ensure_space(u32::try_from(pages).unwrap_or(u32::MAX), SpaceUse::Data)?;
        self.mutate(|fs| {
            let mut record = record;
            match acl {
                // No entries: Linux reads that as removing the list.
                Some(None) => {
                    fs.xattr_delete(inode, name)?;
                }
                Some(Some(acl)) if name == ACL_ACCESS_NAME => {
                    let (new_mode, equivalent) = acl.mode_and_equivalence(record.mode);
                    record.mode = new_mode;
                    if equivalent {
                        fs.xattr_delete(inode, name)?;
                    } else {
                        fs.xattr_put(inode, name, &acl.encode(), mode)?;
                    }
                }
                // Stored in its canonical form (ids of the unnamed entries as Linux writes them).
                Some(Some(acl)) => fs.xattr_put(inode, name, &acl.encode(), mode)?,
                None => fs.xattr_put(inode, name, value, mode)?,
            }
            record.ctime_ns = fs.now_ns;
            fs.put_inode(inode, &record)
        })
    }

    /// removexattr. ENODATA when `inode` has no attribute `name`.
    pub fn remove_xattr(&mut self, inode: u64, name: &[u8]) -> Result<(), FsError> {
        let record = self.xattr_change_allowed(inode, name)?;
        self.ensure_space(0, SpaceUse::Metadata)?;
        self.mutate(|fs| {
            if !fs.xattr_delete(inode, name)? {
                return Err(FsError::NoAttribute);
            }
            let mut record = record;
            record.ctime_ns = fs.now_ns;
            fs.put_inode(inode, &record)
        })
    }

    /// The checks setxattr and removexattr share, in Linux's order: the name (ERANGE,
    /// EOPNOTSUPP), the volume's format (EOPNOTSUPP), the inode (ENOENT), `user.` on other
    /// than files and directories and an immutable or append-only inode (EPERM). Returns the
    /// inode's record.
    fn xattr_change_allowed(&self, inode: u64, name: &[u8]) -> Result<InodeRecord, FsError> {
        check_xattr_name(name)?;
        if !self.has_xattrs() {
            return Err(FsError::NotSupported);
        }
        let record = self.getattr(inode)?;
        if user_namespace_refused(name, record.kind) {
            return Err(FsError::NotPermitted);
        }
        attributes::refuse_if_pinned(&record)?;
        Ok(record)
    }

    /// Writes attribute `name` (inside a change): replaces its chunks, or takes the first free
    /// slot of its hash group.
    pub(super) fn xattr_put(&mut self, inode: u64, name: &[u8], value: &[u8], mode: XattrMode) -> Result<(), FsError> {
        let (found, slots) = self.find_xattr(inode, name)?;
        let slot = match (found, mode) {
            (Some(_), XattrMode::Create) => return Err(FsError::Exists),
            (None, XattrMode::Replace) => return Err(FsError::NoAttribute),
            (Some(entry), _) => {
                self.remove_xattr_chunks(inode, &entry)?;
                entry.slot
            }
            (None, _) => (0..=u16::MAX).find(|slot| !slots.contains(slot)).ok_or(FsError::NoSpace)?,
        };
        let name_len = u8::try_from(name.len()).map_err(|_| FsError::OutOfRange)?;
        let mut stream = Vec::with_capacity(HEADER_BYTES + name.len() + value.len());
        stream.push(name_len);
        let value_len = u32::try_from(value.len()).map_err(|_| FsError::TooBig)?;
        stream.extend_from_slice(&value_len.to_le_bytes());
        stream.extend_from_slice(name);
        stream.extend_from_slice(value);
        let hash = crc32c(name);
        for (chunk, bytes) in stream.chunks(self.xattr_chunk_bytes()).enumerate() {
            let chunk = u16::try_from(chunk).map_err(|_| FsError::TooBig)?;
            self.tree_insert(
                TreeId::Allocation,
                &allocation_key(inode, RecordKind::Xattr, xattr_offset(hash, slot, chunk)),
                bytes,
            )?;
        }
        Ok(())
    }

    /// Removes attribute `name` (inside a change); false when there was none.
    pub(super) fn xattr_delete(&mut self, inode: u64, name: &[u8]) -> Result<bool, FsError> {
        match self.find_xattr(inode, name)?.0 {
            Some(entry) => {
                self.remove_xattr_chunks(inode, &entry)?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn remove_xattr_chunks(&mut self, inode: u64, entry: &XattrEntry) -> Result<(), FsError> {
        for chunk in 0..entry.chunks {
            let key = allocation_key(inode, RecordKind::Xattr, xattr_offset(entry.hash, entry.slot, chunk));
            self.tree_remove(TreeId::Allocation, &key)?;
        }
        Ok(())
    }

    /// Removes every attribute record of `inode` (inside its deletion), a batch of keys at a
    /// time so memory stays bounded whatever the inode holds.
    pub(super) fn remove_all_xattrs(&mut self, inode: u64) -> Result<(), FsError> {
        if !self.has_xattrs() {
            return Ok(());
        }
        const BATCH: usize = 256;
        let start = allocation_key(inode, RecordKind::Xattr, 0);
        loop {
            let mut keys = Vec::new();
            self.tree_scan(TreeId::Allocation, &start, true, &mut |key, _| match parse_allocation_key(key) {
                Some((owner, kind, _)) if owner == inode && kind == RecordKind::Xattr as u8 => {
                    keys.push(key.to_vec());
                    keys.len() < BATCH
                }
                _ => false,
            })?;
            if keys.is_empty() {
                return Ok(());
            }
            for key in keys {
                self.tree_remove(TreeId::Allocation, &key)?;
            }
        }
    }

    /// The ACL stored under `name` on `inode`, if any (corrupt when it does not decode).
    pub(super) fn stored_acl(&self, inode: u64, name: &[u8]) -> Result<Option<Acl>, FsError> {
        if !self.has_xattrs() {
            return Ok(None);
        }
        match self.find_xattr(inode, name)?.0.and_then(|entry| entry.value) {
            Some(value) => Acl::decode(&value).map_err(|_| FsError::CorruptFile { inode, reason: "undecodable ACL" }),
            None => Ok(None),
        }
    }

    /// chmod of an inode with an access ACL (inside the change): the list follows the new mode.
    pub(super) fn chmod_acl(&mut self, inode: u64, mode: u32) -> Result<(), FsError> {
        if let Some(mut acl) = self.stored_acl(inode, ACL_ACCESS_NAME)? {
            acl.chmod(mode);
            self.xattr_put(inode, ACL_ACCESS_NAME, &acl.encode(), XattrMode::Replace)?;
        }
        Ok(())
    }

    /// What a new inode of `kind` created with `mode` in `parent` gets (Linux's
    /// posix_acl_create): with a default ACL on `parent`, the mode masked by it, the access
    /// ACL to store (when the mode does not say it all) and, for a directory, the default ACL
    /// to copy; without one, the mode less `umask`.
    pub(super) fn inherited_acls(
        &self,
        parent: u64,
        kind: FileKind,
        mode: u32,
        umask: u32,
    ) -> Result<Inherited, FsError> {
        let plain = |mode| Inherited { mode, access: None, default: None };
        if kind == FileKind::Symlink {
            return Ok(plain(mode));
        }
        let Some(default) = self.stored_acl(parent, ACL_DEFAULT_NAME)? else {
            return Ok(plain(mode & !(umask & 0o777)));
        };
        let mut access = default.clone();
        let (mode, not_equivalent) = access.create_masq(mode);
        let access = not_equivalent.then(|| access.encode());
        let default = (kind == FileKind::Directory).then(|| default.encode());
        Ok(Inherited { mode, access, default })
    }
}

/// What a new inode takes from its directory (`FileSystem::inherited_acls`).
pub(super) struct Inherited {
    pub mode: u32,
    /// The access ACL to store, when the mode does not say all it says.
    pub access: Option<Vec<u8>>,
    /// The default ACL to store (directories).
    pub default: Option<Vec<u8>>,
}

/// Whether `record` may carry attribute `name` (fsck).
pub(crate) fn xattr_allowed_on(name: &[u8], record: &InodeRecord) -> bool {
    !user_namespace_refused(name, record.kind) && (name != ACL_DEFAULT_NAME || record.kind == FileKind::Directory)
}

/// The file capability attribute, which a write, truncate or chown takes away.
pub const CAPABILITY_NAME: &[u8] = b"security.capability";

impl<F: Flash> FileSystem<F> {
    /// What a write, a truncate or a chown of a regular file takes away, as Linux's
    /// file_remove_privs and chown do: the file capability (`security.capability`) always,
    /// and with `set_id_bits` the set-user-id bit and, on a group-executable file, the
    /// set-group-id bit (the front end decides whether the caller keeps them: CAP_FSETID).
    /// Changes nothing, ctime included, when there is nothing to take; allowed on an
    /// append-only file (the write it goes with is).
    pub fn kill_privileges(&mut self, inode: u64, set_id_bits: bool) -> Result<(), FsError> {
        const SET_USER_ID: u32 = 0o4000;
        const SET_GROUP_ID: u32 = 0o2000;
        let record = self.getattr(inode)?;
        if record.kind != FileKind::File {
            return Ok(());
        }
        let mut mode = record.mode;
        if set_id_bits {
            mode &= !SET_USER_ID;
            if mode & (SET_GROUP_ID | 0o010) == SET_GROUP_ID | 0o010 {
                mode &= !SET_GROUP_ID;
            }
        }
        let has_capability = self.has_xattrs() && self.find_xattr(inode, CAPABILITY_NAME)?.0.is_some();
        if mode == record.mode && !has_capability {
            return Ok(());
        }
        attributes::refuse_if_immutable(&record)?;
        self.ensure_space(0, SpaceUse::Metadata)?;
        self.mutate(|fs| {
            if has_capability {
                fs.xattr_delete(inode, CAPABILITY_NAME)?;
            }
            let mut record = record;
            record.mode = mode;
            record.ctime_ns = fs.now_ns;
            fs.put_inode(inode, &record)
        })
    }
}
