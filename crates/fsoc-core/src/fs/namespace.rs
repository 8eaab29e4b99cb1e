//! The namespace: names in directories (lookup, readdir, create, link, remove, rename) and
//! symbolic links.

use alloc::vec::Vec;

use fsoc_flash::convert::usize_from_u64;
use fsoc_flash::Flash;

use super::{api, attributes, records, validate_name, DirectoryEntry, FileSystem, TreeId, DIRECTORY_DEPTH_MAX};
use crate::btree::Tree;
use crate::fs::acl::{ACL_ACCESS_NAME, ACL_DEFAULT_NAME};
use crate::fs::error::FsError;
use crate::fs::records::{
    allocation_key, directory_key, parse_directory_key, DirectoryValue, RecordKind, NAME_BYTES_MAX, ORPHAN_LIST_INODE,
};
use crate::fs::records::{FileKind, InodeRecord};
use crate::fs::space::SpaceUse;
use crate::fs::xattrs::XattrMode;

/// What `FileSystem::create_masked` makes.
#[derive(Clone, Copy, Debug)]
pub struct NewInode<'a> {
    pub kind: FileKind,
    /// Permission bits (0o7777) as the caller asked for them.
    pub mode: u32,
    /// Bits taken away when the directory has no default ACL.
    pub umask: u32,
    pub uid: u32,
    pub gid: u32,
    /// The device number of a device node (ignored for other kinds).
    pub rdev: u64,
    /// The target of a symbolic link (`Some` exactly when `kind` is `Symlink`).
    pub symlink_target: Option<&'a [u8]>,
}

impl<F: Flash> FileSystem<F> {
    pub fn validate_name(name: &[u8]) -> Result<(), FsError> {
        validate_name(name)
    }

    /// Looks a name up in a directory.
    pub fn lookup(&self, parent: u64, name: &[u8]) -> Result<(u64, FileKind), FsError> {
        if name.len() > NAME_BYTES_MAX {
            return Err(FsError::NameTooLong);
        }
        let parent_record = self.getattr(parent)?;
        if parent_record.kind != FileKind::Directory {
            return Err(FsError::NotDirectory);
        }
        // No valid entry holds such a name, so none is found: an entry an image crafted under
        // it ("..", "a/b") is never followed (fsck reports it).
        if validate_name(name).is_err() {
            return Err(FsError::NotFound);
        }
        let bytes = self.tree_get(TreeId::Directory, &directory_key(parent, name))?.ok_or(FsError::NotFound)?;
        let value = DirectoryValue::decode(&bytes)
            .map_err(|_| FsError::CorruptFile { inode: parent, reason: "undecodable directory entry" })?;
        Ok((value.inode, value.kind))
    }

    /// Up to `count_max` entries of a directory with names greater than `after`, in name order.
    /// Names are returned as stored: a caller that hands them on (to an OS, a host path) checks
    /// them with `validate_name` first, as an image may hold any bytes (fsck reports bad ones).
    /// An entry that does not decode is an error for this directory.
    pub fn readdir(
        &self,
        directory: u64,
        after: Option<&[u8]>,
        count_max: usize,
    ) -> Result<Vec<DirectoryEntry>, FsError> {
        if self.getattr(directory)?.kind != FileKind::Directory {
            return Err(FsError::NotDirectory);
        }
        let mut entries = Vec::new();
        let mut undecodable = false;
        // One cursor over the directory's key range: each leaf read once.
        let start = directory_key(directory, after.unwrap_or(&[]));
        self.tree_scan(TreeId::Directory, &start, after.is_none(), &mut |key, value| {
            let Some((parent, name)) = parse_directory_key(key) else { return false };
            if parent != directory || entries.len() >= count_max {
                return false;
            }
            match DirectoryValue::decode(value) {
                Ok(value) => {
                    entries.push(DirectoryEntry { name: name.to_vec(), inode: value.inode, kind: value.kind });
                    true
                }
                Err(_) => {
                    undecodable = true;
                    false
                }
            }
        })?;
        if undecodable {
            return Err(FsError::CorruptFile { inode: directory, reason: "undecodable directory entry" });
        }
        Ok(entries)
    }

    pub(super) fn directory_is_empty(&self, directory: u64) -> Result<bool, FsError> {
        Ok(self.readdir(directory, None, 1)?.is_empty())
    }

    /// Creates a file, directory or symlink named `name` in `parent` (with `mode` as given,
    /// unless `parent` has a default ACL: `create_masked`).
    #[allow(clippy::too_many_arguments)]
    pub fn create(
        &mut self,
        parent: u64,
        name: &[u8],
        kind: FileKind,
        mode: u32,
        uid: u32,
        gid: u32,
        symlink_target: Option<&[u8]>,
    ) -> Result<u64, FsError> {
        if kind.is_special() {
            return Err(FsError::InvalidArgument("a device node, FIFO or socket is made with create_special"));
        }
        let new = NewInode { kind, mode, umask: 0, uid, gid, rdev: 0, symlink_target };
        self.create_masked(parent, name, &new)
    }

    /// mknod(2): creates a device node (`rdev` is its device number, Linux's `dev_t`), a FIFO
    /// or a socket (`rdev` ignored). EOPNOTSUPP on a volume older than format version 3.
    #[allow(clippy::too_many_arguments)]
    pub fn create_special(
        &mut self,
        parent: u64,
        name: &[u8],
        kind: FileKind,
        mode: u32,
        uid: u32,
        gid: u32,
        rdev: u64,
    ) -> Result<u64, FsError> {
        if !kind.is_special() {
            return Err(FsError::InvalidArgument("create_special of a file, directory or symlink"));
        }
        self.create_masked(parent, name, &NewInode { kind, mode, umask: 0, uid, gid, rdev, symlink_target: None })
    }

    /// Creates any kind of inode as a kernel file system does with POSIX ACLs: when `parent`
    /// has a default ACL the new inode inherits it (its mode masked by the list, `umask`
    /// ignored; a directory also takes the default list), otherwise the mode loses the
    /// `umask` bits. Symbolic links take neither. A device node, FIFO or socket is
    /// EOPNOTSUPP on a volume older than format version 3.
    pub fn create_masked(&mut self, parent: u64, name: &[u8], new: &NewInode<'_>) -> Result<u64, FsError> {
        if new.kind.is_special() && !self.is_version3() {
            return Err(FsError::NotSupported);
        }
        if new.symlink_target.is_some() != (new.kind == FileKind::Symlink) {
            return Err(FsError::InvalidArgument("a symbolic link, and only one, has a target"));
        }
        let rdev = if new.kind.is_device() { new.rdev } else { 0 };
        self.create_inode(
            parent,
            Some(name),
            new.kind,
            new.mode,
            (new.uid, new.gid),
            new.symlink_target,
            rdev,
            new.umask,
        )
    }

    /// open(2) with `O_TMPFILE`: a regular file in `directory` without a name. It is made
    /// open (one count of `open_inode`, released with `release_inode`), with a link count of
    /// 0 and on the orphan list, so it is deleted at its last release, or at the next mount
    /// after a power cut, unless `link` gives it a name first. Its mode, group and ACLs are a
    /// new file's in `directory`, whose times do not change (as on ext4).
    pub fn create_unnamed(&mut self, directory: u64, new: &NewInode<'_>) -> Result<u64, FsError> {
        if new.kind != FileKind::File {
            return Err(FsError::InvalidArgument("an unnamed inode is a regular file"));
        }
        let inode =
            self.create_inode(directory, None, FileKind::File, new.mode, (new.uid, new.gid), None, 0, new.umask)?;
        *self.open_counts.entry(inode).or_insert(0) += 1;
        Ok(inode)
    }

    #[allow(clippy::too_many_arguments)]
    fn create_inode(
        &mut self,
        parent: u64,
        name: Option<&[u8]>,
        kind: FileKind,
        mode: u32,
        (uid, gid): (u32, u32),
        symlink_target: Option<&[u8]>,
        rdev: u64,
        umask: u32,
    ) -> Result<u64, FsError> {
        if let Some(name) = name {
            Self::validate_name(name)?;
        }
        if let Some(target) = symlink_target {
            if target.is_empty() {
                return Err(FsError::NotFound);
            }
            if target.len() > api::PATH_BYTES_MAX {
                return Err(FsError::NameTooLong);
            }
        }
        let (mode, access_acl, default_acl) = if self.has_xattrs() {
            let inherited = self.inherited_acls(parent, kind, mode, umask)?;
            (inherited.mode, inherited.access, inherited.default)
        } else if kind == FileKind::Symlink {
            (mode, None, None)
        } else {
            (mode & !(umask & 0o777), None, None)
        };
        self.start_generation()?;
        self.ensure_space(if access_acl.is_some() || default_acl.is_some() { 4 } else { 2 }, SpaceUse::Data)?;
        self.mutate(|fs| {
            match name.map(|name| fs.lookup(parent, name)) {
                Some(Ok(_)) => return Err(FsError::Exists),
                Some(Err(FsError::NotFound)) | None => {}
                Some(Err(error)) => return Err(error),
            }
            let directory = fs.getattr(parent)?;
            if directory.kind != FileKind::Directory {
                return Err(FsError::NotDirectory);
            }
            attributes::refuse_if_immutable(&directory)?;
            let mut record = InodeRecord::new(
                kind,
                mode,
                (uid, gid),
                (fs.now_ns, fs.generation),
                (
                    if kind == FileKind::Directory { parent } else { rdev },
                    symlink_target.map_or(0, |target| target.len() as u64),
                ),
            );
            let inode = match name {
                Some(name) => fs.add_inode(parent, name, &record)?,
                None => {
                    record.nlink = 0;
                    let inode = fs.allocate_inode();
                    fs.put_inode(inode, &record)?;
                    fs.volume.may_have_orphans = true;
                    let orphan = allocation_key(ORPHAN_LIST_INODE, RecordKind::Orphan, inode);
                    fs.tree_insert(TreeId::Allocation, &orphan, &[])?;
                    inode
                }
            };
            if let Some(acl) = &access_acl {
                fs.xattr_put(inode, ACL_ACCESS_NAME, acl, XattrMode::Create)?;
            }
            if let Some(acl) = &default_acl {
                fs.xattr_put(inode, ACL_DEFAULT_NAME, acl, XattrMode::Create)?;
            }
            if let Some(target) = symlink_target {
                // Targets longer than one tree entry are stored as consecutive chunks.
                for (index, chunk) in target.chunks(fs.symlink_chunk_bytes()).enumerate() {
                    fs.tree_insert(
                        TreeId::Allocation,
                        &allocation_key(inode, RecordKind::Symlink, index as u64),
                        chunk,
                    )?;
                }
            }
            Ok(inode)
        })
    }

    /// Gives `record` a new inode number and names it `name` in `parent` (whose times and, for
    /// a directory, link count follow), inside a change that checked the name is free.
    pub(super) fn add_inode(&mut self, parent: u64, name: &[u8], record: &InodeRecord) -> Result<u64, FsError> {
        let inode = self.allocate_inode();
        self.put_inode(inode, record)?;
        let entry = DirectoryValue { inode, kind: record.kind };
        self.tree_insert(TreeId::Directory, &directory_key(parent, name), &entry.encode())?;
        self.touch_directory(parent, if record.kind == FileKind::Directory { 1 } else { 0 })?;
        Ok(inode)
    }

    /// Bytes of a symlink target kept in one Symlink record.
    pub(crate) fn symlink_chunk_bytes(&self) -> usize {
        Tree::max_entry_bytes(self.volume.layout().page_size_bytes()) - records::ALLOCATION_KEY_BYTES
    }

    pub(super) fn symlink_chunk_count(&self, target_bytes: u64) -> u64 {
        target_bytes.div_ceil(self.symlink_chunk_bytes() as u64)
    }

    pub fn readlink(&self, inode: u64) -> Result<Vec<u8>, FsError> {
        let record = self.getattr(inode)?;
        if record.kind != FileKind::Symlink {
            return Err(FsError::InvalidArgument("not a symbolic link"));
        }
        // getattr checked 1 <= size <= PATH_BYTES_MAX, which bounds the allocation and loop.
        let mut target = Vec::with_capacity(usize_from_u64(record.size));
        for index in 0..self.symlink_chunk_count(record.size) {
            let chunk = self.tree_get(TreeId::Allocation, &allocation_key(inode, RecordKind::Symlink, index))?;
            target.extend_from_slice(
                &chunk.ok_or(FsError::CorruptFile { inode, reason: "symlink target chunk missing" })?,
            );
            if target.len() as u64 > record.size {
                return Err(FsError::CorruptFile { inode, reason: "symlink target longer than its size" });
            }
        }
        if target.len() as u64 != record.size {
            return Err(FsError::CorruptFile { inode, reason: "symlink target length differs from its size" });
        }
        Ok(target)
    }

    /// Adds a hard link `parent/name` to `inode`. An inode without a name that is still open
    /// (on the orphan list: made by `create_unnamed`, or unlinked while open) takes it as its
    /// first link and leaves the list; the kernel's VFS allows that only for an `O_TMPFILE`
    /// file opened without `O_EXCL` (linkat(2)), and ENOENT is the answer for a deleted inode.
    pub fn link(&mut self, inode: u64, parent: u64, name: &[u8]) -> Result<(), FsError> {
        Self::validate_name(name)?;
        self.ensure_space(2, SpaceUse::Data)?;
        self.mutate(|fs| {
            let mut record = fs.getattr(inode)?;
            match fs.lookup(parent, name) {
                Ok(_) => return Err(FsError::Exists),
                Err(FsError::NotFound) => {}
                Err(error) => return Err(error),
            }
            if record.kind == FileKind::Directory {
                return Err(FsError::NotPermitted);
            }
            attributes::refuse_if_pinned(&record)?;
            attributes::refuse_if_immutable(&fs.getattr(parent)?)?;
            if record.nlink == 0 {
                let orphan = allocation_key(ORPHAN_LIST_INODE, RecordKind::Orphan, inode);
                if record.kind != FileKind::File || fs.tree_remove(TreeId::Allocation, &orphan)?.is_none() {
                    return Err(FsError::NotFound);
                }
            }
            record.nlink = record.nlink.checked_add(1).ok_or(FsError::TooManyLinks)?;
            record.ctime_ns = fs.now_ns;
            fs.put_inode(inode, &record)?;
            let entry = DirectoryValue { inode, kind: record.kind };
            fs.tree_insert(TreeId::Directory, &directory_key(parent, name), &entry.encode())?;
            fs.touch_directory(parent, 0)
        })?;
        self.after_namespace_change()
    }

    /// Removes `parent/name`: a file or symlink (`directory == false`) or an empty directory.
    pub fn remove(&mut self, parent: u64, name: &[u8], directory: bool) -> Result<(), FsError> {
        self.ensure_space(0, SpaceUse::Metadata)?;
        self.mutate(|fs| {
            let (inode, kind) = fs.lookup(parent, name)?;
            // Read what the removal will need before changing anything, so a corrupt record
            // fails this call alone instead of leaving a half-done removal (which poisons).
            let record = fs.entry_target(inode, kind)?;
            match (directory, kind == FileKind::Directory) {
                (false, true) => return Err(FsError::IsDirectory),
                (true, false) => return Err(FsError::NotDirectory),
                _ => {}
            }
            // ext4's may_delete: neither the entry's directory nor the inode may be immutable
            // or append-only.
            attributes::refuse_if_pinned(&fs.getattr(parent)?)?;
            attributes::refuse_if_pinned(&record)?;
            if directory && !fs.directory_is_empty(inode)? {
                return Err(FsError::NotEmpty);
            }
            if record.kind == FileKind::File && record.nlink <= 1 && !record.is_inline() {
                fs.check_extents(inode)?;
            }
            if directory {
                fs.check_link_change(parent, -1)?;
            }
            fs.tree_remove(TreeId::Directory, &directory_key(parent, name))?;
            fs.touch_directory(parent, if directory { -1 } else { 0 })?;
            fs.drop_link(inode)
        })?;
        self.after_namespace_change()
    }

    /// The record of the inode a directory entry names, refused when its kind is not the one
    /// the entry records: removals and renames act on the entry's kind, so a corrupt entry
    /// naming a directory as a file would otherwise delete that directory with its contents,
    /// or move it into its own subtree.
    pub(super) fn entry_target(&self, inode: u64, kind: FileKind) -> Result<InodeRecord, FsError> {
        let record = self.getattr(inode)?;
        if record.kind != kind {
            return Err(FsError::CorruptFile { inode, reason: "directory entry's kind differs from the inode's" });
        }
        Ok(record)
    }

    /// Whether `ancestor` is `directory` or one of its ancestors, following parent links up to
    /// the root. The walk is bounded by `DIRECTORY_DEPTH_MAX`, so a cycle of corrupt parent
    /// links ends in an error, not a hang.
    pub(super) fn is_ancestor(&mut self, ancestor: u64, directory: u64) -> Result<bool, FsError> {
        let mut current = directory;
        for _depth in 0..DIRECTORY_DEPTH_MAX {
            if current == ancestor {
                return Ok(true);
            }
            if current == records::ROOT_INODE {
                return Ok(false);
            }
            current = self.getattr(current)?.parent;
        }
        Err(FsError::CorruptFile { inode: directory, reason: "parent links do not reach the root (a cycle?)" })
    }

    pub(super) fn after_namespace_change(&mut self) -> Result<(), FsError> {
        if self.config.commit_triggers.unlink_rename {
            self.commit_for_sync()?;
        }
        Ok(())
    }
}
