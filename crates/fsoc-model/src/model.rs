//! `ModelFs`: the oracle file system, kept as simple as possible so it is obviously right.
//!
//! Invariants (checked by [`ModelFs::check`]): every directory entry names a live inode;
//! a file's or symlink's `nlink` equals the number of entries naming it; a directory is
//! named exactly once (the root never) and its `nlink` is 2 plus its subdirectory count;
//! an inode nothing names (`nlink` 0) lives only while a descriptor refers to it; file
//! data never exceeds the file size, which never exceeds the configured maximum.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::listing::{Listing, ListingContent};
use crate::operation::{Operation, Outcome, Output};
use crate::path::{self, components};
use crate::types::{errno, Attributes, DirectoryEntry, Errno, Fd, FileKind, OpenFlags, Whence};
use crate::types::{FD_FIRST, ROOT_INO};

/// The limits and initial state the real file system is configured with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelConfig {
    /// Writes or truncates past this size fail with `EFBIG`; seeks past it with `EINVAL`.
    pub file_size_max_bytes: u64,
    /// `link` on a file with this many links, and `mkdir` or a cross-directory `rename` of
    /// a directory into a directory with this `nlink`, fail with `EMLINK`.
    pub link_count_max: u32,
    /// `open` with this many descriptors already open fails with `EMFILE`.
    pub open_fd_count_max: u32,
    /// Permission bits of the root directory after format.
    pub root_mode: u32,
    /// All three timestamps of the root directory after format.
    pub format_time_ns: i64,
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            file_size_max_bytes: 1 << 32,
            link_count_max: 65_000,
            open_fd_count_max: 256,
            root_mode: 0o755,
            format_time_ns: 0,
        }
    }
}

/// Permission bits kept by `open`, `mkdir` and `chmod`; higher bits are ignored.
pub const MODE_MASK: u32 = 0o7777;
/// Permission bits of every new symlink.
pub const SYMLINK_MODE: u32 = 0o777;

#[derive(Clone, Debug)]
enum Content {
    /// Bytes past `data.len()` and below `size` read as zeros, so growing a file with
    /// `truncate` costs no memory. `Arc` makes commit snapshots cheap.
    File {
        data: Arc<Vec<u8>>,
        size: u64,
    },
    Directory {
        entries: BTreeMap<Vec<u8>, u64>,
    },
    Symlink {
        target: Vec<u8>,
    },
}

#[derive(Clone, Debug)]
struct Inode {
    content: Content,
    mode: u32,
    uid: u32,
    gid: u32,
    nlink: u32,
    atime_ns: i64,
    mtime_ns: i64,
    ctime_ns: i64,
}

impl Inode {
    fn kind(&self) -> FileKind {
        match self.content {
            Content::File { .. } => FileKind::File,
            Content::Directory { .. } => FileKind::Directory,
            Content::Symlink { .. } => FileKind::Symlink,
        }
    }

    fn size(&self) -> u64 {
        match &self.content {
            Content::File { size, .. } => *size,
            // Directories report size 0: the real file system must match.
            Content::Directory { .. } => 0,
            Content::Symlink { target } => target.len() as u64,
        }
    }

    fn entries(&self) -> Option<&BTreeMap<Vec<u8>, u64>> {
        match &self.content {
            Content::Directory { entries } => Some(entries),
            _ => None,
        }
    }
}

/// Everything that survives a remount: the part a commit snapshots.
#[derive(Clone, Debug)]
struct Tree {
    inodes: BTreeMap<u64, Inode>,
    ino_next: u64,
}

#[derive(Clone, Debug)]
struct Descriptor {
    ino: u64,
    readable: bool,
    writable: bool,
    append: bool,
    offset: u64,
}

/// Where a path leads: the root, or a name in a directory (which may or may not exist).
#[derive(Clone, Copy, Debug)]
enum Place<'p> {
    Root,
    Entry { parent: u64, name: &'p [u8] },
}

/// One open descriptor, for generators that want meaningful descriptor operations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenFileInfo {
    pub fd: Fd,
    pub kind: FileKind,
    pub size_bytes: u64,
    pub offset: u64,
    pub readable: bool,
    pub writable: bool,
    pub append: bool,
    /// False once every name of the file is gone (open-unlinked).
    pub linked: bool,
}

/// One visible path, for generators.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathInfo {
    pub path: Vec<u8>,
    pub kind: FileKind,
    pub size_bytes: u64,
    /// Entries in a directory; 0 for other kinds.
    pub entry_count: usize,
}

/// The oracle: an in-memory POSIX-like file system with an explicit committed snapshot.
///
/// Every mutating call takes `now_ns`, the logical clock, and stamps times with it.
#[derive(Clone, Debug)]
pub struct ModelFs {
    config: ModelConfig,
    working: Tree,
    /// What a power cut reverts to: taken by `fsync`, `transact`, `Remount` and `commit`.
    committed: Tree,
    descriptors: BTreeMap<Fd, Descriptor>,
}

impl Default for ModelFs {
    fn default() -> Self {
        ModelFs::new(ModelConfig::default())
    }
}

impl ModelFs {
    /// A freshly formatted file system: an empty root directory, committed.
    pub fn new(config: ModelConfig) -> Self {
        let root = Inode {
            content: Content::Directory { entries: BTreeMap::new() },
            mode: config.root_mode & MODE_MASK,
            uid: 0,
            gid: 0,
            nlink: 2,
            atime_ns: config.format_time_ns,
            mtime_ns: config.format_time_ns,
            ctime_ns: config.format_time_ns,
        };
        let working = Tree { inodes: BTreeMap::from([(ROOT_INO, root)]), ino_next: ROOT_INO + 1 };
        ModelFs { config, committed: working.clone(), working, descriptors: BTreeMap::new() }
    }

    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// Applies one operation; harness events included.
    pub fn apply(&mut self, operation: &Operation, now_ns: i64) -> Outcome {
        use Operation as O;
        let unit = |result: Result<(), Errno>| result.map(|()| Output::Unit);
        match operation {
            O::Open { path, flags, mode } => self.open(path, *flags, *mode, now_ns).map(Output::Fd),
            O::Read { fd, size_bytes } => self.read(*fd, *size_bytes).map(Output::Bytes),
            O::Write { fd, data } => self.write(*fd, data, now_ns).map(Output::Count),
            O::Pread { fd, offset, size_bytes } => self.pread(*fd, *offset, *size_bytes).map(Output::Bytes),
            O::Pwrite { fd, offset, data } => self.pwrite(*fd, *offset, data, now_ns).map(Output::Count),
            O::Seek { fd, offset, whence } => self.seek(*fd, *offset, *whence).map(Output::Count),
            O::Ftruncate { fd, size_bytes } => unit(self.ftruncate(*fd, *size_bytes, now_ns)),
            O::Fsync { fd } => unit(self.fsync(*fd)),
            O::Close { fd } => unit(self.close(*fd)),
            O::Fstat { fd } => self.fstat(*fd).map(Output::Attributes),
            O::Stat { path } => self.stat(path).map(Output::Attributes),
            O::Truncate { path, size_bytes } => unit(self.truncate(path, *size_bytes, now_ns)),
            O::Mkdir { path, mode } => unit(self.mkdir(path, *mode, now_ns)),
            O::Rmdir { path } => unit(self.rmdir(path, now_ns)),
            O::Unlink { path } => unit(self.unlink(path, now_ns)),
            O::Rename { source_path, target_path } => unit(self.rename(source_path, target_path, now_ns)),
            O::Readdir { path } => self
                .readdir(path)
                .map(|entries| Output::Entries(entries.into_iter().map(|entry| (entry.name, entry.kind)).collect())),
            O::Link { existing_path, new_path } => unit(self.link(existing_path, new_path, now_ns)),
            O::Symlink { target, link_path } => unit(self.symlink(target, link_path, now_ns)),
            O::Readlink { path } => self.readlink(path).map(Output::Bytes),
            O::Chmod { path, mode } => unit(self.chmod(path, *mode, now_ns)),
            O::Chown { path, uid, gid } => unit(self.chown(path, *uid, *gid, now_ns)),
            O::Utimens { path, atime_ns, mtime_ns } => unit(self.utimens(path, *atime_ns, *mtime_ns, now_ns)),
            O::Statfs => Ok(Output::Statfs),
            O::Transact => {
                self.commit();
                Ok(Output::Unit)
            }
            O::Remount => {
                self.remount();
                Ok(Output::Unit)
            }
            O::PowerCut => {
                self.power_cut();
                Ok(Output::Unit)
            }
        }
    }

    // ---------------------------------------------------------------- descriptor calls

    /// Check order: flags (`EINVAL` for neither read nor write, or create with directory),
    /// `EMFILE`, path syntax, parent lookup; then for an existing object: create+exclusive
    /// `EEXIST`, create on a directory `EISDIR`, directory flag on a non-directory
    /// `ENOTDIR`, symlink `ELOOP`, write on a directory `EISDIR`; for a missing one
    /// `ENOENT` unless create. Truncate acts only together with write, and then always
    /// stamps mtime and ctime.
    pub fn open(&mut self, path: &[u8], flags: OpenFlags, mode: u32, now_ns: i64) -> Result<Fd, Errno> {
        if !flags.read && !flags.write {
            return Err(errno::EINVAL);
        }
        if flags.create && flags.directory {
            return Err(errno::EINVAL);
        }
        if self.descriptors.len() >= self.config.open_fd_count_max as usize {
            return Err(errno::EMFILE);
        }
        let components = components(path)?;
        let place = self.place(&components)?;
        let ino = match self.place_ino(place) {
            Some(ino) => {
                let kind = self.inode(ino).kind();
                if flags.create && flags.exclusive {
                    return Err(errno::EEXIST);
                }
                if flags.create && kind == FileKind::Directory {
                    return Err(errno::EISDIR);
                }
                if flags.directory && kind != FileKind::Directory {
                    return Err(errno::ENOTDIR);
                }
                if kind == FileKind::Symlink {
                    return Err(errno::ELOOP);
                }
                if flags.write && kind == FileKind::Directory {
                    return Err(errno::EISDIR);
                }
                if flags.write && flags.truncate {
                    self.resize_file(ino, 0, now_ns)?;
                }
                ino
            }
            None => {
                if !flags.create {
                    return Err(errno::ENOENT);
                }
                let Place::Entry { parent, name } = place else { unreachable!("the root always exists") };
                let content = Content::File { data: Arc::new(Vec::new()), size: 0 };
                self.create(parent, name, content, mode & MODE_MASK, now_ns)
            }
        };
        let fd = (FD_FIRST..).find(|fd| !self.descriptors.contains_key(fd)).expect("fd space");
        let descriptor =
            Descriptor { ino, readable: flags.read, writable: flags.write, append: flags.append, offset: 0 };
        self.descriptors.insert(fd, descriptor);
        Ok(fd)
    }

    /// `EBADF` unless open for reading; `EISDIR` on a directory.
    pub fn read(&mut self, fd: Fd, size_bytes: u64) -> Result<Vec<u8>, Errno> {
        let descriptor = self.readable_descriptor(fd)?.clone();
        let bytes = self.read_at(descriptor.ino, descriptor.offset, size_bytes)?;
        self.descriptor_mut(fd).offset += bytes.len() as u64;
        Ok(bytes)
    }

    /// Like `read` at `offset`, leaving the descriptor's offset alone.
    pub fn pread(&self, fd: Fd, offset: u64, size_bytes: u64) -> Result<Vec<u8>, Errno> {
        let descriptor = self.readable_descriptor(fd)?;
        self.read_at(descriptor.ino, offset, size_bytes)
    }

    /// `EBADF` unless open for writing. Writes at the end with append. All or nothing:
    /// `EFBIG` if the write would end past the maximum file size. A zero-length write
    /// returns 0 and changes nothing, not even times or (with append) the offset.
    pub fn write(&mut self, fd: Fd, data: &[u8], now_ns: i64) -> Result<u64, Errno> {
        let descriptor = self.writable_descriptor(fd)?.clone();
        if data.is_empty() {
            return Ok(0);
        }
        let offset = if descriptor.append { self.inode(descriptor.ino).size() } else { descriptor.offset };
        let count = self.write_at(descriptor.ino, offset, data, now_ns)?;
        self.descriptor_mut(fd).offset = offset + count;
        Ok(count)
    }

    /// Like `write` at `offset`, leaving the descriptor's offset alone; with append it
    /// writes at the end, as Linux does.
    pub fn pwrite(&mut self, fd: Fd, offset: u64, data: &[u8], now_ns: i64) -> Result<u64, Errno> {
        let descriptor = self.writable_descriptor(fd)?.clone();
        if data.is_empty() {
            return Ok(0);
        }
        let offset = if descriptor.append { self.inode(descriptor.ino).size() } else { offset };
        self.write_at(descriptor.ino, offset, data, now_ns)
    }

    /// Returns the new offset. `EINVAL` if it would be negative or past the maximum file
    /// size. Works on directory descriptors too (their size is 0).
    pub fn seek(&mut self, fd: Fd, offset: i64, whence: Whence) -> Result<u64, Errno> {
        let descriptor = self.descriptor(fd)?;
        let base = match whence {
            Whence::Set => 0,
            Whence::Current => descriptor.offset,
            Whence::End => self.inode(descriptor.ino).size(),
        };
        let target = i128::from(base) + i128::from(offset);
        if target < 0 || target > i128::from(self.config.file_size_max_bytes) {
            return Err(errno::EINVAL);
        }
        let target = target as u64;
        self.descriptor_mut(fd).offset = target;
        Ok(target)
    }

    /// `EINVAL` unless open for writing (as Linux for a read-only descriptor); `EFBIG`
    /// past the maximum size. Always stamps mtime and ctime.
    pub fn ftruncate(&mut self, fd: Fd, size_bytes: u64, now_ns: i64) -> Result<(), Errno> {
        let descriptor = self.descriptor(fd)?;
        if !descriptor.writable {
            return Err(errno::EINVAL);
        }
        let ino = descriptor.ino;
        self.resize_file(ino, size_bytes, now_ns)
    }

    /// Any open descriptor, even read-only or a directory: commits everything.
    pub fn fsync(&mut self, fd: Fd) -> Result<(), Errno> {
        self.descriptor(fd)?;
        self.commit();
        Ok(())
    }

    /// The last close of an open-unlinked file frees it.
    pub fn close(&mut self, fd: Fd) -> Result<(), Errno> {
        let descriptor = self.descriptors.remove(&fd).ok_or(errno::EBADF)?;
        self.free_if_unreferenced(descriptor.ino);
        Ok(())
    }

    pub fn fstat(&self, fd: Fd) -> Result<Attributes, Errno> {
        let descriptor = self.descriptor(fd)?;
        Ok(self.attributes(descriptor.ino))
    }

    // ---------------------------------------------------------------------- path calls

    /// `lstat` semantics: a final symlink is described, not followed.
    pub fn stat(&self, path: &[u8]) -> Result<Attributes, Errno> {
        let ino = self.resolve(path)?;
        Ok(self.attributes(ino))
    }

    /// `EISDIR` on a directory, `EINVAL` on a symlink (not followed, not a regular file),
    /// `EFBIG` past the maximum size. Always stamps mtime and ctime.
    pub fn truncate(&mut self, path: &[u8], size_bytes: u64, now_ns: i64) -> Result<(), Errno> {
        let ino = self.resolve(path)?;
        match self.inode(ino).kind() {
            FileKind::Directory => Err(errno::EISDIR),
            FileKind::Symlink => Err(errno::EINVAL),
            FileKind::File => self.resize_file(ino, size_bytes, now_ns),
        }
    }

    /// `EEXIST` if anything (even a symlink, even `/`) has the name; `EMLINK` if the
    /// parent already has the maximum link count.
    pub fn mkdir(&mut self, path: &[u8], mode: u32, now_ns: i64) -> Result<(), Errno> {
        let components = components(path)?;
        let Place::Entry { parent, name } = self.place(&components)? else {
            return Err(errno::EEXIST);
        };
        if self.child(parent, name).is_some() {
            return Err(errno::EEXIST);
        }
        if self.inode(parent).nlink >= self.config.link_count_max {
            return Err(errno::EMLINK);
        }
        let content = Content::Directory { entries: BTreeMap::new() };
        self.create(parent, name, content, mode & MODE_MASK, now_ns);
        Ok(())
    }

    /// `EBUSY` for `/`, `ENOTDIR` for a non-directory, `ENOTEMPTY` for a non-empty one.
    pub fn rmdir(&mut self, path: &[u8], now_ns: i64) -> Result<(), Errno> {
        let components = components(path)?;
        let Place::Entry { parent, name } = self.place(&components)? else {
            return Err(errno::EBUSY);
        };
        let ino = self.child(parent, name).ok_or(errno::ENOENT)?;
        let entries = self.inode(ino).entries().ok_or(errno::ENOTDIR)?;
        if !entries.is_empty() {
            return Err(errno::ENOTEMPTY);
        }
        self.detach(parent, name);
        let directory = self.inode_mut(ino);
        directory.nlink = 0;
        directory.ctime_ns = now_ns;
        self.stamp_modified(parent, now_ns);
        self.free_if_unreferenced(ino);
        Ok(())
    }

    /// `EISDIR` for a directory (and `/`). Open descriptors keep the file alive.
    pub fn unlink(&mut self, path: &[u8], now_ns: i64) -> Result<(), Errno> {
        let components = components(path)?;
        let Place::Entry { parent, name } = self.place(&components)? else {
            return Err(errno::EISDIR);
        };
        let ino = self.child(parent, name).ok_or(errno::ENOENT)?;
        if self.inode(ino).kind() == FileKind::Directory {
            return Err(errno::EISDIR);
        }
        self.detach(parent, name);
        self.inode_mut(ino).ctime_ns = now_ns;
        self.stamp_modified(parent, now_ns);
        self.free_if_unreferenced(ino);
        Ok(())
    }

    /// Check order: syntax of both paths, source parent lookup, target parent lookup,
    /// `EBUSY` if either is `/`, `ENOENT` for a missing source, `EINVAL` if the source is
    /// a directory and the target's parent lies inside it, `ENOTEMPTY` if the target is a
    /// directory containing the source, then same inode → success doing nothing, then
    /// `ENOTDIR` (directory over non-directory), `EISDIR` (non-directory over directory),
    /// `ENOTEMPTY` (over a non-empty directory), `EMLINK` (a directory into a full
    /// parent). Stamps both parents' mtime and ctime, and the ctime of the moved and the
    /// replaced inode.
    pub fn rename(&mut self, source_path: &[u8], target_path: &[u8], now_ns: i64) -> Result<(), Errno> {
        let source_components = components(source_path)?;
        let target_components = components(target_path)?;
        let source_place = self.place(&source_components)?;
        let target_place = self.place(&target_components)?;
        let (
            Place::Entry { parent: source_parent, name: source_name },
            Place::Entry { parent: target_parent, name: target_name },
        ) = (source_place, target_place)
        else {
            return Err(errno::EBUSY);
        };
        let source_ino = self.child(source_parent, source_name).ok_or(errno::ENOENT)?;
        let target_ino = self.child(target_parent, target_name);
        let source_kind = self.inode(source_ino).kind();
        if source_kind == FileKind::Directory && self.subtree_contains(source_ino, target_parent) {
            return Err(errno::EINVAL);
        }
        if let Some(target_ino) = target_ino {
            if self.subtree_contains(target_ino, source_parent) {
                return Err(errno::ENOTEMPTY);
            }
        }
        if target_ino == Some(source_ino) {
            return Ok(());
        }
        match target_ino {
            Some(target_ino) => {
                let target = self.inode(target_ino);
                match (source_kind == FileKind::Directory, target.entries()) {
                    (true, None) => return Err(errno::ENOTDIR),
                    (false, Some(_)) => return Err(errno::EISDIR),
                    (true, Some(entries)) if !entries.is_empty() => return Err(errno::ENOTEMPTY),
                    _ => {}
                }
            }
            None => {
                if source_kind == FileKind::Directory
                    && source_parent != target_parent
                    && self.inode(target_parent).nlink >= self.config.link_count_max
                {
                    return Err(errno::EMLINK);
                }
            }
        }
        if let Some(target_ino) = target_ino {
            self.detach(target_parent, target_name);
            let target = self.inode_mut(target_ino);
            if target.kind() == FileKind::Directory {
                target.nlink = 0;
            }
            target.ctime_ns = now_ns;
        }
        self.detach(source_parent, source_name);
        self.attach(target_parent, target_name, source_ino);
        self.inode_mut(source_ino).ctime_ns = now_ns;
        self.stamp_modified(source_parent, now_ns);
        self.stamp_modified(target_parent, now_ns);
        if let Some(target_ino) = target_ino {
            self.free_if_unreferenced(target_ino);
        }
        Ok(())
    }

    /// Entries sorted bytewise, without `.` and `..`; `ENOTDIR` unless a directory.
    pub fn readdir(&self, path: &[u8]) -> Result<Vec<DirectoryEntry>, Errno> {
        let ino = self.resolve(path)?;
        let entries = self.inode(ino).entries().ok_or(errno::ENOTDIR)?;
        Ok(entries
            .iter()
            .map(|(name, &ino)| DirectoryEntry { name: name.clone(), ino, kind: self.inode(ino).kind() })
            .collect())
    }

    /// Check order: syntax of both paths, `existing_path` lookup, `new_path` parent
    /// lookup, `EEXIST`, `EPERM` for a directory, `EMLINK`. Links a symlink itself.
    pub fn link(&mut self, existing_path: &[u8], new_path: &[u8], now_ns: i64) -> Result<(), Errno> {
        let existing_components = components(existing_path)?;
        let new_components = components(new_path)?;
        let existing_place = self.place(&existing_components)?;
        let ino = self.place_ino(existing_place).ok_or(errno::ENOENT)?;
        let Place::Entry { parent, name } = self.place(&new_components)? else {
            return Err(errno::EEXIST);
        };
        if self.child(parent, name).is_some() {
            return Err(errno::EEXIST);
        }
        let inode = self.inode(ino);
        if inode.kind() == FileKind::Directory {
            return Err(errno::EPERM);
        }
        if inode.nlink >= self.config.link_count_max {
            return Err(errno::EMLINK);
        }
        self.attach(parent, name, ino);
        self.inode_mut(ino).ctime_ns = now_ns;
        self.stamp_modified(parent, now_ns);
        Ok(())
    }

    /// The target is checked first (`ENOENT` empty, `ENAMETOOLONG`, `EINVAL` with NUL),
    /// then the link path as for `mkdir`. New symlinks have mode 0o777.
    pub fn symlink(&mut self, target: &[u8], link_path: &[u8], now_ns: i64) -> Result<(), Errno> {
        path::check_symlink_target(target)?;
        let components = components(link_path)?;
        let Place::Entry { parent, name } = self.place(&components)? else {
            return Err(errno::EEXIST);
        };
        if self.child(parent, name).is_some() {
            return Err(errno::EEXIST);
        }
        let content = Content::Symlink { target: target.to_vec() };
        self.create(parent, name, content, SYMLINK_MODE, now_ns);
        Ok(())
    }

    /// `EINVAL` unless a symlink.
    pub fn readlink(&self, path: &[u8]) -> Result<Vec<u8>, Errno> {
        let ino = self.resolve(path)?;
        match &self.inode(ino).content {
            Content::Symlink { target } => Ok(target.clone()),
            _ => Err(errno::EINVAL),
        }
    }

    /// Keeps `mode & 0o7777`; applies to a symlink itself. Stamps ctime.
    pub fn chmod(&mut self, path: &[u8], mode: u32, now_ns: i64) -> Result<(), Errno> {
        let ino = self.resolve(path)?;
        let inode = self.inode_mut(ino);
        inode.mode = mode & MODE_MASK;
        inode.ctime_ns = now_ns;
        Ok(())
    }

    /// Sets both ids literally (no "-1 means unchanged", no clearing of set-id bits).
    /// Stamps ctime.
    pub fn chown(&mut self, path: &[u8], uid: u32, gid: u32, now_ns: i64) -> Result<(), Errno> {
        let ino = self.resolve(path)?;
        let inode = self.inode_mut(ino);
        inode.uid = uid;
        inode.gid = gid;
        inode.ctime_ns = now_ns;
        Ok(())
    }

    /// Sets atime and mtime literally (no `UTIME_NOW`/`UTIME_OMIT`); stamps ctime with now.
    pub fn utimens(&mut self, path: &[u8], atime_ns: i64, mtime_ns: i64, now_ns: i64) -> Result<(), Errno> {
        let ino = self.resolve(path)?;
        let inode = self.inode_mut(ino);
        inode.atime_ns = atime_ns;
        inode.mtime_ns = mtime_ns;
        inode.ctime_ns = now_ns;
        Ok(())
    }

    // ----------------------------------------------------------- commits and harness

    /// Snapshots the current state as the one a power cut reverts to.
    pub fn commit(&mut self) {
        self.committed = self.working.clone();
    }

    /// Clean unmount and mount: descriptors closed, open-unlinked files freed, committed.
    pub fn remount(&mut self) {
        self.descriptors.clear();
        Self::free_orphans(&mut self.working);
        self.commit();
    }

    /// Power fails: descriptors closed, state back to the last commit.
    pub fn power_cut(&mut self) {
        self.descriptors.clear();
        self.working = self.committed.clone();
        Self::free_orphans(&mut self.working);
    }

    // ------------------------------------------------------------------- inspection

    /// The canonical snapshot of the visible tree.
    pub fn listing(&self) -> Listing {
        Self::tree_listing(&self.working)
    }

    /// The listing a power cut now would leave: what crash tests compare against.
    pub fn committed_listing(&self) -> Listing {
        Self::tree_listing(&self.committed)
    }

    /// Open descriptors in increasing order.
    pub fn open_fds(&self) -> Vec<Fd> {
        self.descriptors.keys().copied().collect()
    }

    pub fn open_files(&self) -> Vec<OpenFileInfo> {
        self.descriptors
            .iter()
            .map(|(&fd, descriptor)| {
                let inode = self.inode(descriptor.ino);
                OpenFileInfo {
                    fd,
                    kind: inode.kind(),
                    size_bytes: inode.size(),
                    offset: descriptor.offset,
                    readable: descriptor.readable,
                    writable: descriptor.writable,
                    append: descriptor.append,
                    linked: inode.nlink > 0,
                }
            })
            .collect()
    }

    /// Every visible path, the root first, parents before children, siblings by name.
    pub fn existing_paths(&self) -> Vec<PathInfo> {
        let mut paths = Vec::new();
        Self::walk(&self.working, |path, _ino, inode| {
            paths.push(PathInfo {
                path: path.to_vec(),
                kind: inode.kind(),
                size_bytes: inode.size(),
                entry_count: inode.entries().map_or(0, BTreeMap::len),
            });
        });
        paths
    }

    /// Panics with a description if an invariant in the module comment is broken.
    pub fn check(&self) {
        Self::check_tree(&self.working, Some(&self.descriptors), &self.config);
        // The snapshot may hold files that were open-unlinked at commit time; a power cut
        // frees them.
        Self::check_tree(&self.committed, None, &self.config);
        for (fd, descriptor) in &self.descriptors {
            assert!(*fd >= FD_FIRST, "descriptor {fd} below {FD_FIRST}");
            assert!(descriptor.readable || descriptor.writable, "descriptor {fd} neither readable nor writable");
            let inode = self.working.inodes.get(&descriptor.ino);
            let inode = inode.unwrap_or_else(|| panic!("descriptor {fd} names a freed inode"));
            if inode.kind() != FileKind::File {
                assert!(!descriptor.writable, "descriptor {fd} writes a {:?}", inode.kind());
            }
            assert_ne!(inode.kind(), FileKind::Symlink, "descriptor {fd} opened a symlink");
        }
        assert!(
            self.descriptors.len() <= self.config.open_fd_count_max as usize,
            "{} descriptors open, maximum {}",
            self.descriptors.len(),
            self.config.open_fd_count_max
        );
    }

    // -------------------------------------------------------------------- internals

    fn inode(&self, ino: u64) -> &Inode {
        self.working.inodes.get(&ino).unwrap_or_else(|| panic!("inode {ino} missing"))
    }

    fn inode_mut(&mut self, ino: u64) -> &mut Inode {
        self.working.inodes.get_mut(&ino).unwrap_or_else(|| panic!("inode {ino} missing"))
    }

    fn descriptor(&self, fd: Fd) -> Result<&Descriptor, Errno> {
        self.descriptors.get(&fd).ok_or(errno::EBADF)
    }

    fn descriptor_mut(&mut self, fd: Fd) -> &mut Descriptor {
        self.descriptors.get_mut(&fd).unwrap_or_else(|| panic!("descriptor {fd} vanished"))
    }

    fn readable_descriptor(&self, fd: Fd) -> Result<&Descriptor, Errno> {
        let descriptor = self.descriptor(fd)?;
        if !descriptor.readable {
            return Err(errno::EBADF);
        }
        if self.inode(descriptor.ino).kind() == FileKind::Directory {
            return Err(errno::EISDIR);
        }
        Ok(descriptor)
    }

    fn writable_descriptor(&self, fd: Fd) -> Result<&Descriptor, Errno> {
        let descriptor = self.descriptor(fd)?;
        if !descriptor.writable {
            return Err(errno::EBADF);
        }
        assert_eq!(self.inode(descriptor.ino).kind(), FileKind::File, "writable fd {fd}");
        Ok(descriptor)
    }

    /// Walks all components but the last, each of which must be an existing directory
    /// (`ENOENT` if missing, `ENOTDIR` if a file or a symlink, which is never followed).
    fn place<'p>(&self, components: &[&'p [u8]]) -> Result<Place<'p>, Errno> {
        let Some((name, directories)) = components.split_last() else {
            return Ok(Place::Root);
        };
        let mut parent = ROOT_INO;
        for directory in directories {
            let entries = self.inode(parent).entries().ok_or(errno::ENOTDIR)?;
            parent = *entries.get(*directory).ok_or(errno::ENOENT)?;
        }
        if self.inode(parent).entries().is_none() {
            return Err(errno::ENOTDIR);
        }
        Ok(Place::Entry { parent, name })
    }

    fn place_ino(&self, place: Place<'_>) -> Option<u64> {
        match place {
            Place::Root => Some(ROOT_INO),
            Place::Entry { parent, name } => self.child(parent, name),
        }
    }

    fn child(&self, parent: u64, name: &[u8]) -> Option<u64> {
        self.inode(parent).entries().and_then(|entries| entries.get(name).copied())
    }

    /// The inode a path names, `ENOENT` if none.
    fn resolve(&self, path: &[u8]) -> Result<u64, Errno> {
        let components = components(path)?;
        let place = self.place(&components)?;
        self.place_ino(place).ok_or(errno::ENOENT)
    }

    /// Whether `needle` is `directory` or lies anywhere below it.
    fn subtree_contains(&self, directory: u64, needle: u64) -> bool {
        if directory == needle {
            return true;
        }
        let Some(entries) = self.inode(directory).entries() else {
            return false;
        };
        entries.values().any(|&child| self.subtree_contains(child, needle))
    }

    fn attributes(&self, ino: u64) -> Attributes {
        let inode = self.inode(ino);
        Attributes {
            ino,
            kind: inode.kind(),
            mode: inode.mode,
            uid: inode.uid,
            gid: inode.gid,
            nlink: inode.nlink,
            size: inode.size(),
            atime_ns: inode.atime_ns,
            mtime_ns: inode.mtime_ns,
            ctime_ns: inode.ctime_ns,
        }
    }

    /// Makes a new inode named `name` in `parent` (which must not have the name yet).
    fn create(&mut self, parent: u64, name: &[u8], content: Content, mode: u32, now_ns: i64) -> u64 {
        let ino = self.working.ino_next;
        self.working.ino_next += 1;
        let nlink = if matches!(content, Content::Directory { .. }) { 2 } else { 0 };
        let inode =
            Inode { content, mode, uid: 0, gid: 0, nlink, atime_ns: now_ns, mtime_ns: now_ns, ctime_ns: now_ns };
        let previous = self.working.inodes.insert(ino, inode);
        assert!(previous.is_none(), "inode {ino} allocated twice");
        self.attach(parent, name, ino);
        self.stamp_modified(parent, now_ns);
        ino
    }

    /// Adds the entry and counts the link: a subdirectory adds to its parent's `nlink`
    /// (its own stays 2 + subdirectories), anything else to its own.
    fn attach(&mut self, parent: u64, name: &[u8], ino: u64) {
        let is_directory = self.inode(ino).kind() == FileKind::Directory;
        let Content::Directory { entries } = &mut self.inode_mut(parent).content else {
            panic!("attach into non-directory {parent}");
        };
        let previous = entries.insert(name.to_vec(), ino);
        assert!(previous.is_none(), "attach over existing entry in {parent}");
        if is_directory {
            self.inode_mut(parent).nlink += 1;
        } else {
            self.inode_mut(ino).nlink += 1;
        }
    }

    /// Removes the entry and uncounts the link, the reverse of `attach`.
    fn detach(&mut self, parent: u64, name: &[u8]) -> u64 {
        let Content::Directory { entries } = &mut self.inode_mut(parent).content else {
            panic!("detach from non-directory {parent}");
        };
        let ino = entries.remove(name).unwrap_or_else(|| panic!("detach of missing entry"));
        if self.inode(ino).kind() == FileKind::Directory {
            self.inode_mut(parent).nlink -= 1;
        } else {
            self.inode_mut(ino).nlink -= 1;
        }
        ino
    }

    fn stamp_modified(&mut self, ino: u64, now_ns: i64) {
        let inode = self.inode_mut(ino);
        inode.mtime_ns = now_ns;
        inode.ctime_ns = now_ns;
    }

    fn free_if_unreferenced(&mut self, ino: u64) {
        let inode = self.inode(ino);
        let open = self.descriptors.values().any(|descriptor| descriptor.ino == ino);
        if inode.nlink == 0 && !open {
            self.working.inodes.remove(&ino);
        }
    }

    fn free_orphans(tree: &mut Tree) {
        tree.inodes.retain(|_, inode| inode.nlink > 0);
    }

    fn read_at(&self, ino: u64, offset: u64, size_bytes: u64) -> Result<Vec<u8>, Errno> {
        let Content::File { data, size } = &self.inode(ino).content else {
            return Err(errno::EISDIR);
        };
        if offset >= *size {
            return Ok(Vec::new());
        }
        let count = size_bytes.min(size - offset) as usize;
        let start = offset as usize;
        let mut bytes = vec![0; count];
        if start < data.len() {
            let stored_end = data.len().min(start + count);
            bytes[..stored_end - start].copy_from_slice(&data[start..stored_end]);
        }
        Ok(bytes)
    }

    fn write_at(&mut self, ino: u64, offset: u64, bytes: &[u8], now_ns: i64) -> Result<u64, Errno> {
        assert!(!bytes.is_empty(), "zero-length writes return before write_at");
        let end = offset.checked_add(bytes.len() as u64).ok_or(errno::EFBIG)?;
        if end > self.config.file_size_max_bytes {
            return Err(errno::EFBIG);
        }
        let inode = self.inode_mut(ino);
        let Content::File { data, size } = &mut inode.content else {
            panic!("write_at on non-file {ino}");
        };
        let data = Arc::make_mut(data);
        let (start, end) = (offset as usize, end as usize);
        if data.len() < end {
            data.resize(end, 0);
        }
        data[start..end].copy_from_slice(bytes);
        *size = (*size).max(end as u64);
        inode.mtime_ns = now_ns;
        inode.ctime_ns = now_ns;
        Ok(bytes.len() as u64)
    }

    fn resize_file(&mut self, ino: u64, size_bytes: u64, now_ns: i64) -> Result<(), Errno> {
        if size_bytes > self.config.file_size_max_bytes {
            return Err(errno::EFBIG);
        }
        let inode = self.inode_mut(ino);
        let Content::File { data, size } = &mut inode.content else {
            panic!("resize_file on non-file {ino}");
        };
        if (data.len() as u64) > size_bytes {
            Arc::make_mut(data).truncate(size_bytes as usize);
        }
        *size = size_bytes;
        inode.mtime_ns = now_ns;
        inode.ctime_ns = now_ns;
        Ok(())
    }

    /// Visits every reachable inode depth-first: the root, then each entry by name.
    fn walk(tree: &Tree, mut visit: impl FnMut(&[u8], u64, &Inode)) {
        let mut stack = vec![(b"/".to_vec(), ROOT_INO)];
        while let Some((path, ino)) = stack.pop() {
            let inode = &tree.inodes[&ino];
            visit(&path, ino, inode);
            if let Some(entries) = inode.entries() {
                for (name, &child) in entries.iter().rev() {
                    stack.push((path::join(&path, name), child));
                }
            }
        }
    }

    fn tree_listing(tree: &Tree) -> Listing {
        let mut files = Vec::new();
        Self::walk(tree, |path, ino, inode| {
            let content = match &inode.content {
                Content::File { data, size } => {
                    let mut hasher = crate::listing::Fnv1a64::new();
                    hasher.update(data);
                    hasher.update_zeros(size - data.len() as u64);
                    ListingContent::File { fnv1a_64: hasher.finish() }
                }
                Content::Directory { .. } => ListingContent::Directory,
                Content::Symlink { target } => ListingContent::Symlink { target: target.clone() },
            };
            let attributes = Attributes {
                ino,
                kind: inode.kind(),
                mode: inode.mode,
                uid: inode.uid,
                gid: inode.gid,
                nlink: inode.nlink,
                size: inode.size(),
                atime_ns: inode.atime_ns,
                mtime_ns: inode.mtime_ns,
                ctime_ns: inode.ctime_ns,
            };
            files.push((path.to_vec(), attributes, content));
        });
        Listing::from_files(files)
    }

    /// `descriptors` is `None` for the committed snapshot, where orphans are allowed.
    fn check_tree(tree: &Tree, descriptors: Option<&BTreeMap<Fd, Descriptor>>, config: &ModelConfig) {
        let root = tree.inodes.get(&ROOT_INO).expect("root inode missing");
        assert_eq!(root.kind(), FileKind::Directory, "root is not a directory");
        assert!(tree.ino_next > *tree.inodes.keys().last().expect("root"), "ino_next reused");
        // Count the names of each inode and the subdirectories of each directory.
        let mut name_counts: BTreeMap<u64, u32> = BTreeMap::new();
        let mut subdirectory_counts: BTreeMap<u64, u32> = BTreeMap::new();
        for (&ino, inode) in &tree.inodes {
            let Some(entries) = inode.entries() else {
                continue;
            };
            for (name, &child) in entries {
                path::check_name(name).unwrap_or_else(|errno| panic!("directory {ino} has a bad name (errno {errno})"));
                let child_inode =
                    tree.inodes.get(&child).unwrap_or_else(|| panic!("directory {ino} names freed inode {child}"));
                *name_counts.entry(child).or_default() += 1;
                if child_inode.kind() == FileKind::Directory {
                    *subdirectory_counts.entry(ino).or_default() += 1;
                }
            }
        }
        let open_inos: Option<BTreeSet<u64>> =
            descriptors.map(|descriptors| descriptors.values().map(|d| d.ino).collect());
        for (&ino, inode) in &tree.inodes {
            let names = name_counts.get(&ino).copied().unwrap_or(0);
            match &inode.content {
                Content::Directory { .. } if ino == ROOT_INO => {
                    assert_eq!(names, 0, "the root has {names} names");
                }
                Content::Directory { entries } => {
                    assert!(names <= 1, "directory {ino} has {names} names");
                    if names == 0 {
                        assert_eq!(inode.nlink, 0, "unnamed directory {ino}");
                        assert!(entries.is_empty(), "removed directory {ino} has entries");
                    }
                }
                _ => assert_eq!(inode.nlink, names, "inode {ino}: nlink vs names"),
            }
            if let Content::Directory { .. } = inode.content {
                if names > 0 || ino == ROOT_INO {
                    let subdirectories = subdirectory_counts.get(&ino).copied().unwrap_or(0);
                    assert_eq!(inode.nlink, 2 + subdirectories, "directory {ino} nlink");
                }
            }
            if let Content::File { data, size } = &inode.content {
                assert!(data.len() as u64 <= *size, "inode {ino}: data beyond size {size}");
                assert!(*size <= config.file_size_max_bytes, "inode {ino}: size {size}");
            }
            assert_eq!(inode.mode & !MODE_MASK, 0, "inode {ino}: mode {:#o}", inode.mode);
            if let (0, Some(open_inos)) = (inode.nlink, &open_inos) {
                assert!(open_inos.contains(&ino), "orphan inode {ino} has no descriptor");
            }
        }
        // Reachability: walking from the root meets every named inode exactly once per
        // name, which also rules out directory cycles.
        let mut reached: BTreeMap<u64, u32> = BTreeMap::new();
        Self::walk(tree, |_, ino, _| *reached.entry(ino).or_default() += 1);
        for (ino, names) in &name_counts {
            assert_eq!(reached.get(ino), Some(names), "inode {ino} reachability vs names");
        }
    }
}
