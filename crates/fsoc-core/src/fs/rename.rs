//! Renames: rename(2) with POSIX replacement rules, and renameat2(2)'s RENAME_EXCHANGE (two
//! names trade inodes atomically) and RENAME_WHITEOUT (the source name is left holding a
//! whiteout, a character device numbered 0:0, as overlayfs asks). RENAME_NOREPLACE is the
//! caller's check (`lookup` under the same exclusive lock). Each is one change: a power cut
//! leaves the names as they were before or as they are after.

use fsoc_flash::Flash;

use super::{attributes, FileSystem, TreeId};
use crate::fs::error::FsError;
use crate::fs::records::{directory_key, DirectoryValue, FileKind, InodeRecord};
use crate::fs::space::SpaceUse;

impl<F: Flash> FileSystem<F> {
    /// Atomic rename with POSIX replacement rules.
    pub fn rename(
        &mut self,
        source_parent: u64,
        source_name: &[u8],
        target_parent: u64,
        target_name: &[u8],
    ) -> Result<(), FsError> {
        Self::validate_name(target_name)?;
        self.ensure_space(0, SpaceUse::Metadata)?;
        self.mutate(|fs| fs.move_entry(source_parent, source_name, target_parent, target_name).map(|_| ()))?;
        self.after_namespace_change()
    }

    /// The body of `rename`, inside a change: false when the two names already named the same
    /// inode (nothing changes).
    fn move_entry(
        &mut self,
        source_parent: u64,
        source_name: &[u8],
        target_parent: u64,
        target_name: &[u8],
    ) -> Result<bool, FsError> {
        let fs = self;
        let (inode, kind) = fs.lookup(source_parent, source_name)?;
        let source_record = fs.entry_target(inode, kind)?;
        let target_record = fs.getattr(target_parent)?;
        if target_record.kind != FileKind::Directory {
            return Err(FsError::NotDirectory);
        }
        // Renaming a name onto another name of the same inode changes nothing (Linux
        // returns at once, before any permission check).
        if matches!(fs.lookup(target_parent, target_name), Ok((existing, _)) if existing == inode) {
            return Ok(false);
        }
        // The source is deleted from its directory and added to the target's.
        attributes::refuse_if_pinned(&fs.getattr(source_parent)?)?;
        attributes::refuse_if_pinned(&source_record)?;
        attributes::refuse_if_immutable(&target_record)?;
        if kind == FileKind::Directory {
            // A directory may not move into its own subtree: walk up from the target.
            if fs.is_ancestor(inode, target_parent)? {
                return Err(FsError::InvalidArgument("cannot move a directory into itself"));
            }
        }
        let existing = match fs.lookup(target_parent, target_name) {
            Ok((existing_inode, existing_kind)) => {
                let existing_record = fs.entry_target(existing_inode, existing_kind)?;
                // Replacing deletes the existing entry (ext4's may_delete on the target).
                if existing_inode != inode {
                    attributes::refuse_if_pinned(&target_record)?;
                    attributes::refuse_if_pinned(&existing_record)?;
                }
                // Replacing the last name of a file deletes it: its extents are checked
                // first, as `remove` does.
                if existing_inode != inode
                    && existing_record.kind == FileKind::File
                    && existing_record.nlink <= 1
                    && !existing_record.is_inline()
                {
                    fs.check_extents(existing_inode)?;
                }
                Some((existing_inode, existing_kind))
            }
            Err(FsError::NotFound) => None,
            Err(error) => return Err(error),
        };
        if let Some((existing_inode, FileKind::Directory)) = existing {
            // The target is a directory on the source's path: it contains the source.
            if fs.is_ancestor(existing_inode, source_parent)? {
                return Err(FsError::NotEmpty);
            }
        }
        if let Some((existing_inode, existing_kind)) = existing {
            if existing_inode == inode {
                return Ok(false);
            }
            match (kind == FileKind::Directory, existing_kind == FileKind::Directory) {
                (true, false) => return Err(FsError::NotDirectory),
                (false, true) => return Err(FsError::IsDirectory),
                (true, true) if !fs.directory_is_empty(existing_inode)? => return Err(FsError::NotEmpty),
                _ => {}
            }
        }
        // Link counts are checked before the first change, so a corrupt count fails this
        // call alone instead of leaving a half-done rename (which poisons the volume).
        let replaced_directory = matches!(existing, Some((_, FileKind::Directory)));
        let moved_directory = kind == FileKind::Directory && source_parent != target_parent;
        if replaced_directory {
            fs.check_link_change(target_parent, -1)?;
        }
        if moved_directory {
            fs.check_link_change(source_parent, -1)?;
            fs.check_link_change(target_parent, if replaced_directory { 0 } else { 1 })?;
        }
        if let Some((existing_inode, existing_kind)) = existing {
            let is_directory = existing_kind == FileKind::Directory;
            fs.tree_remove(TreeId::Directory, &directory_key(target_parent, target_name))?;
            if is_directory {
                fs.touch_directory(target_parent, -1)?;
            }
            fs.drop_link(existing_inode)?;
        }
        fs.tree_remove(TreeId::Directory, &directory_key(source_parent, source_name))?;
        let entry = DirectoryValue { inode, kind };
        fs.tree_insert(TreeId::Directory, &directory_key(target_parent, target_name), &entry.encode())?;
        fs.touch_directory(source_parent, if moved_directory { -1 } else { 0 })?;
        fs.touch_directory(target_parent, if moved_directory { 1 } else { 0 })?;
        let mut record = fs.getattr(inode)?;
        record.ctime_ns = fs.now_ns;
        if kind == FileKind::Directory {
            record.parent = target_parent;
        }
        fs.put_inode(inode, &record)?;
        Ok(true)
    }

    /// renameat2(RENAME_EXCHANGE): `a` and `b` (both must exist) trade places. Directories
    /// moved to another parent take their `..` link count with them; neither may end up inside
    /// itself (EINVAL, as Linux answers for an exchange). Both inodes' ctimes and both parents'
    /// mtimes and ctimes change; names of one inode exchange as a no-op.
    pub fn rename_exchange(
        &mut self,
        (a_parent, a_name): (u64, &[u8]),
        (b_parent, b_name): (u64, &[u8]),
    ) -> Result<(), FsError> {
        self.ensure_space(0, SpaceUse::Metadata)?;
        self.mutate(|fs| {
            let (a, a_kind) = fs.lookup(a_parent, a_name)?;
            let (b, b_kind) = fs.lookup(b_parent, b_name)?;
            let a_record = fs.entry_target(a, a_kind)?;
            let b_record = fs.entry_target(b, b_kind)?;
            if a == b {
                return Ok(());
            }
            // Both names are removed from their directories (ext4's may_delete on each).
            attributes::refuse_if_pinned(&fs.getattr(a_parent)?)?;
            attributes::refuse_if_pinned(&fs.getattr(b_parent)?)?;
            attributes::refuse_if_pinned(&a_record)?;
            attributes::refuse_if_pinned(&b_record)?;
            let a_is_directory = a_kind == FileKind::Directory;
            let b_is_directory = b_kind == FileKind::Directory;
            // Links `a_parent` gains: b's `..` arrives, a's leaves.
            let a_parent_links = i32::from(b_is_directory) - i32::from(a_is_directory);
            if a_parent != b_parent {
                if (a_is_directory && fs.is_ancestor(a, b_parent)?)
                    || (b_is_directory && fs.is_ancestor(b, a_parent)?)
                {
                    return Err(FsError::InvalidArgument("cannot move a directory into itself"));
                }
                fs.check_link_change(a_parent, a_parent_links)?;
                fs.check_link_change(b_parent, -a_parent_links)?;
            }
            let a_entry = DirectoryValue { inode: a, kind: a_kind };
            let b_entry = DirectoryValue { inode: b, kind: b_kind };
            fs.tree_insert(TreeId::Directory, &directory_key(a_parent, a_name), &b_entry.encode())?;
            fs.tree_insert(TreeId::Directory, &directory_key(b_parent, b_name), &a_entry.encode())?;
            if a_parent == b_parent {
                fs.touch_directory(a_parent, 0)?;
            } else {
                fs.touch_directory(a_parent, a_parent_links)?;
                fs.touch_directory(b_parent, -a_parent_links)?;
            }
            for (inode, mut record, new_parent) in [(a, a_record, b_parent), (b, b_record, a_parent)] {
                record.ctime_ns = fs.now_ns;
                if record.kind == FileKind::Directory {
                    record.parent = new_parent;
                }
                fs.put_inode(inode, &record)?;
            }
            Ok(())
        })?;
        self.after_namespace_change()
    }

    /// renameat2(RENAME_WHITEOUT): `rename`, and the source name then holds a whiteout (a
    /// character device 0:0, mode 0, owned by `owner`) made in the same change. The caller
    /// checks the privilege (Linux requires CAP_MKNOD). EOPNOTSUPP on a volume older than
    /// format version 3, which keeps no device nodes.
    pub fn rename_whiteout(
        &mut self,
        (source_parent, source_name): (u64, &[u8]),
        (target_parent, target_name): (u64, &[u8]),
        (uid, gid): (u32, u32),
    ) -> Result<(), FsError> {
        if !self.is_version3() {
            return Err(FsError::NotSupported);
        }
        Self::validate_name(target_name)?;
        self.start_generation()?;
        self.ensure_space(2, SpaceUse::Data)?;
        self.mutate(|fs| {
            if !fs.move_entry(source_parent, source_name, target_parent, target_name)? {
                return Ok(());
            }
            let whiteout = InodeRecord::new(FileKind::CharDevice, 0, (uid, gid), (fs.now_ns, fs.generation), (0, 0));
            fs.add_inode(source_parent, source_name, &whiteout).map(|_| ())
        })?;
        self.after_namespace_change()
    }
}
