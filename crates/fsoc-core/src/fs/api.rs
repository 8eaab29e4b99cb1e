//! Path and descriptor calls (open/read/write/seek/…) over the inode-level `FileSystem`.
//!
//! Path syntax is strict and simple: absolute, `/`-separated, no empty, `.` or `..`
//! components; intermediate symlinks are not followed (ENOTDIR) and final ones are not either
//! (stat is lstat; open of a symlink is ELOOP, like O_NOFOLLOW).

use alloc::vec::Vec;

use fsoc_flash::Flash;

use crate::fs::records::{FileKind, InodeRecord, ROOT_INODE};
use crate::fs::{DirectoryEntry, FileSystem, FsError, StatFs};

/// Longest path accepted, in bytes (Linux PATH_MAX less the terminating NUL).
pub const PATH_BYTES_MAX: usize = 4095;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpenFlags {
    pub read: bool,
    pub write: bool,
    pub create: bool,
    pub exclusive: bool,
    pub truncate: bool,
    pub append: bool,
    pub directory: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Whence {
    Set,
    Current,
    End,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenFile {
    pub inode: u64,
    pub offset: u64,
    pub flags: OpenFlags,
}

/// Lowest descriptor number handed out (0–2 are stdio by convention).
pub const FIRST_DESCRIPTOR: u32 = 3;

/// An open file, as `open` returns it: only the calls that take one accept it, so an inode
/// number, an offset or a count cannot be passed where a descriptor is meant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FileHandle(u32);

impl FileHandle {
    /// The descriptor number (for a C ABI, a log line, a wire protocol's handle).
    pub fn number(self) -> u32 {
        self.0
    }

    /// The handle with descriptor number `number` (from a C ABI or a wire protocol); a number
    /// `open` did not hand out is refused by every call with `FsError::BadDescriptor`.
    pub fn from_number(number: u32) -> FileHandle {
        FileHandle(number)
    }
}

/// Splits an absolute path into components.
pub fn components(path: &[u8]) -> Result<Vec<&[u8]>, FsError> {
    let Some(rest) = path.strip_prefix(b"/") else {
        return Err(FsError::InvalidArgument("path must be absolute"));
    };
    if path.len() > PATH_BYTES_MAX {
        return Err(FsError::NameTooLong);
    }
    if rest.is_empty() {
        return Ok(Vec::new());
    }
    let mut parts = Vec::new();
    for name in rest.split(|&byte| byte == b'/') {
        crate::fs::validate_name(name)?;
        parts.push(name);
    }
    Ok(parts)
}

impl<F: Flash> FileSystem<F> {
    fn walk(&self, parts: &[&[u8]]) -> Result<(u64, FileKind), FsError> {
        let mut current = (ROOT_INODE, FileKind::Directory);
        for name in parts {
            if current.1 != FileKind::Directory {
                return Err(FsError::NotDirectory);
            }
            current = self.lookup(current.0, name)?;
        }
        Ok(current)
    }

    /// Resolves a path to its inode (the final component is not followed).
    pub fn resolve(&self, path: &[u8]) -> Result<(u64, FileKind), FsError> {
        let parts = components(path)?;
        self.walk(&parts)
    }

    /// Resolves the parent directory of a path and returns it with the final name.
    fn resolve_parent<'p>(&self, path: &'p [u8]) -> Result<(u64, &'p [u8]), FsError> {
        let parts = components(path)?;
        let Some((name, parents)) = parts.split_last() else {
            return Err(FsError::Busy); // the root has no parent entry
        };
        let (parent, kind) = self.walk(parents)?;
        if kind != FileKind::Directory {
            return Err(FsError::NotDirectory);
        }
        Ok((parent, name))
    }

    fn descriptor(&self, fd: FileHandle) -> Result<OpenFile, FsError> {
        self.descriptors.get(&fd.0).copied().ok_or(FsError::BadDescriptor)
    }

    pub fn open(&mut self, path: &[u8], flags: OpenFlags, mode: u32) -> Result<FileHandle, FsError> {
        if !flags.read && !flags.write {
            return Err(FsError::InvalidArgument("open for neither reading nor writing"));
        }
        if flags.create && flags.directory {
            return Err(FsError::InvalidArgument("O_CREAT with O_DIRECTORY"));
        }
        if self.descriptors.len() >= self.config.open_files_max {
            return Err(FsError::TooManyOpenFiles);
        }
        let (parent, name) = match self.resolve_parent(path) {
            Ok(found) => found,
            Err(FsError::Busy) => (ROOT_INODE, &[][..]),
            Err(error) => return Err(error),
        };
        let existing = if name.is_empty() { Ok((ROOT_INODE, FileKind::Directory)) } else { self.lookup(parent, name) };
        let created = existing.is_err();
        let inode = match existing {
            Ok((inode, kind)) => {
                if flags.create && flags.exclusive {
                    return Err(FsError::Exists);
                }
                if flags.create && kind == FileKind::Directory {
                    return Err(FsError::IsDirectory);
                }
                if flags.directory && kind != FileKind::Directory {
                    return Err(FsError::NotDirectory);
                }
                match kind {
                    FileKind::Symlink => return Err(FsError::Loop),
                    FileKind::Directory if flags.write => return Err(FsError::IsDirectory),
                    _ => {}
                }
                inode
            }
            Err(FsError::NotFound) if flags.create => self.create(parent, name, FileKind::File, mode, 0, 0, None)?,
            Err(error) => return Err(error),
        };
        self.check_open(inode, flags.write, flags.append, flags.truncate && flags.write)?;
        // A file this call made is empty already: nothing to truncate.
        if flags.truncate && flags.write && !created {
            self.truncate(inode, 0)?;
        }
        // Fewer descriptors are open than `open_files_max` (checked above), so one is free.
        let fd = (FIRST_DESCRIPTOR..=u32::MAX)
            .find(|fd| !self.descriptors.contains_key(fd))
            .ok_or(FsError::TooManyOpenFiles)?;
        self.open_inode(inode)?;
        self.descriptors.insert(fd, OpenFile { inode, offset: 0, flags });
        Ok(FileHandle(fd))
    }

    pub fn close(&mut self, fd: FileHandle) -> Result<(), FsError> {
        let file = self.descriptors.remove(&fd.0).ok_or(FsError::BadDescriptor)?;
        self.release_inode(file.inode)
    }

    pub fn pread(&self, fd: FileHandle, offset: u64, length: usize) -> Result<Vec<u8>, FsError> {
        let file = self.descriptor(fd)?;
        if !file.flags.read {
            return Err(FsError::BadDescriptor);
        }
        FileSystem::read(self, file.inode, offset, length)
    }

    /// `pread` into a buffer of the caller's (see `FileSystem::read_into`).
    pub fn pread_into(&self, fd: FileHandle, offset: u64, buffer: &mut [u8]) -> Result<usize, FsError> {
        let file = self.descriptor(fd)?;
        if !file.flags.read {
            return Err(FsError::BadDescriptor);
        }
        self.read_into(file.inode, offset, buffer)
    }

    pub fn read_fd(&mut self, fd: FileHandle, length: usize) -> Result<Vec<u8>, FsError> {
        let file = self.descriptor(fd)?;
        let bytes = self.pread(fd, file.offset, length)?;
        if let Some(open) = self.descriptors.get_mut(&fd.0) {
            open.offset += bytes.len() as u64;
        }
        Ok(bytes)
    }

    pub fn pwrite(&mut self, fd: FileHandle, offset: u64, data: &[u8]) -> Result<usize, FsError> {
        let file = self.descriptor(fd)?;
        if !file.flags.write {
            return Err(FsError::BadDescriptor);
        }
        // Linux: pwrite on an O_APPEND descriptor appends.
        let offset = if file.flags.append { self.getattr(file.inode)?.size } else { offset };
        FileSystem::write(self, file.inode, offset, data)
    }

    pub fn write_fd(&mut self, fd: FileHandle, data: &[u8]) -> Result<usize, FsError> {
        let file = self.descriptor(fd)?;
        if !file.flags.write {
            return Err(FsError::BadDescriptor);
        }
        if data.is_empty() {
            return Ok(0); // changes nothing, not even an O_APPEND descriptor's offset
        }
        let offset = if file.flags.append { self.getattr(file.inode)?.size } else { file.offset };
        let written = FileSystem::write(self, file.inode, offset, data)?;
        if let Some(open) = self.descriptors.get_mut(&fd.0) {
            open.offset = offset + written as u64;
        }
        Ok(written)
    }

    pub fn seek(&mut self, fd: FileHandle, offset: i64, whence: Whence) -> Result<u64, FsError> {
        let file = self.descriptor(fd)?;
        let base = match whence {
            Whence::Set => 0,
            Whence::Current => file.offset as i128,
            Whence::End => self.getattr(file.inode)?.size as i128,
        };
        let target = u64::try_from(base + offset as i128)
            .ok()
            .filter(|&target| target <= self.file_bytes_max())
            .ok_or(FsError::InvalidArgument("seek before the start of the file"))?;
        if let Some(open) = self.descriptors.get_mut(&fd.0) {
            open.offset = target;
        }
        Ok(target)
    }

    pub fn ftruncate(&mut self, fd: FileHandle, size: u64) -> Result<(), FsError> {
        let file = self.descriptor(fd)?;
        if !file.flags.write {
            return Err(FsError::InvalidArgument("descriptor not open for writing"));
        }
        self.truncate(file.inode, size)
    }

    pub fn fsync_fd(&mut self, fd: FileHandle) -> Result<(), FsError> {
        let file = self.descriptor(fd)?;
        self.fsync(file.inode)
    }

    pub fn fstat(&self, fd: FileHandle) -> Result<(u64, InodeRecord), FsError> {
        let file = self.descriptor(fd)?;
        Ok((file.inode, self.getattr(file.inode)?))
    }

    pub fn stat(&self, path: &[u8]) -> Result<(u64, InodeRecord), FsError> {
        let (inode, _) = self.resolve(path)?;
        Ok((inode, self.getattr(inode)?))
    }

    pub fn truncate_path(&mut self, path: &[u8], size: u64) -> Result<(), FsError> {
        let (inode, _) = self.resolve(path)?;
        self.truncate(inode, size)
    }

    pub fn mkdir(&mut self, path: &[u8], mode: u32) -> Result<u64, FsError> {
        let (parent, name) =
            self.resolve_parent(path).map_err(|e| if e == FsError::Busy { FsError::Exists } else { e })?;
        self.create(parent, name, FileKind::Directory, mode, 0, 0, None)
    }

    pub fn rmdir(&mut self, path: &[u8]) -> Result<(), FsError> {
        let (parent, name) = self.resolve_parent(path)?;
        self.remove(parent, name, true)
    }

    pub fn unlink(&mut self, path: &[u8]) -> Result<(), FsError> {
        let (parent, name) =
            self.resolve_parent(path).map_err(|e| if e == FsError::Busy { FsError::IsDirectory } else { e })?;
        self.remove(parent, name, false)
    }

    pub fn rename_path(&mut self, from: &[u8], to: &[u8]) -> Result<(), FsError> {
        // Syntax of both paths first, then both parent lookups, then "neither is the root".
        components(from)?;
        components(to)?;
        let source = match self.resolve_parent(from) {
            Ok(found) => Some(found),
            Err(FsError::Busy) => None,
            Err(error) => return Err(error),
        };
        let target = match self.resolve_parent(to) {
            Ok(found) => Some(found),
            Err(FsError::Busy) => None,
            Err(error) => return Err(error),
        };
        match (source, target) {
            (Some((source_parent, source_name)), Some((target_parent, target_name))) => {
                self.rename(source_parent, source_name, target_parent, target_name)
            }
            _ => Err(FsError::Busy),
        }
    }

    pub fn readdir_path(&self, path: &[u8]) -> Result<Vec<DirectoryEntry>, FsError> {
        let (inode, kind) = self.resolve(path)?;
        if kind != FileKind::Directory {
            return Err(FsError::NotDirectory);
        }
        self.readdir(inode, None, usize::MAX)
    }

    pub fn link_path(&mut self, existing: &[u8], new: &[u8]) -> Result<(), FsError> {
        // Syntax of both paths, in argument order, before any lookup.
        components(existing)?;
        components(new)?;
        let (inode, _) = self.resolve(existing)?;
        let (parent, name) =
            self.resolve_parent(new).map_err(|e| if e == FsError::Busy { FsError::Exists } else { e })?;
        self.link(inode, parent, name)
    }

    pub fn symlink_path(&mut self, target: &[u8], link: &[u8]) -> Result<u64, FsError> {
        if target.is_empty() {
            return Err(FsError::NotFound);
        }
        if target.len() > PATH_BYTES_MAX {
            return Err(FsError::NameTooLong);
        }
        if target.contains(&0) {
            return Err(FsError::InvalidArgument("NUL in symlink target"));
        }
        let (parent, name) =
            self.resolve_parent(link).map_err(|e| if e == FsError::Busy { FsError::Exists } else { e })?;
        self.create(parent, name, FileKind::Symlink, 0o777, 0, 0, Some(target))
    }

    pub fn readlink_path(&self, path: &[u8]) -> Result<Vec<u8>, FsError> {
        let (inode, _) = self.resolve(path)?;
        self.readlink(inode)
    }

    pub fn chmod(&mut self, path: &[u8], mode: u32) -> Result<(), FsError> {
        let (inode, _) = self.resolve(path)?;
        self.setattr(inode, Some(mode), None, None, None, None).map(|_| ())
    }

    pub fn chown(&mut self, path: &[u8], uid: u32, gid: u32) -> Result<(), FsError> {
        let (inode, _) = self.resolve(path)?;
        self.setattr(inode, None, Some(uid), Some(gid), None, None).map(|_| ())
    }

    pub fn utimens(&mut self, path: &[u8], atime_ns: i64, mtime_ns: i64) -> Result<(), FsError> {
        let (inode, _) = self.resolve(path)?;
        self.setattr(inode, None, None, None, Some(atime_ns), Some(mtime_ns)).map(|_| ())
    }

    pub fn statfs_path(&mut self) -> Result<StatFs, FsError> {
        self.statfs()
    }

    /// Explicit transaction point.
    pub fn transact(&mut self) -> Result<(), FsError> {
        self.commit_for_sync()
    }

    /// Number of descriptors currently open.
    pub fn open_descriptor_count(&self) -> usize {
        self.descriptors.len()
    }
}
