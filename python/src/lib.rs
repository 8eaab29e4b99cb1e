//! `fsoc._fsoc`: the Python extension module. One class, `Volume`: an open image file and the
//! file system mounted on it, with path and descriptor calls that take and return bytes. The
//! Python package (python/fsoc/) builds the user's API on it: `Image`, file objects, walks,
//! `from_dir`/`extract` and the `python -m fsoc` command.
//!
//! Invariants: no call panics on bad input (bad paths, names, descriptors and damaged images
//! are `OSError`s with the file system's errno, errors.rs); the volume sits behind a mutex,
//! so calls from several Python threads are serialized, and each call releases the GIL while
//! it works on flash; after `close` (or a failed close) every call raises `ValueError`, as a
//! closed Python file does; a `Volume` dropped without `close` is unmounted cleanly (one
//! commit), as a Python file is flushed when collected.

mod errors;
mod image_file;

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;
use std::sync::Mutex;

use fsoc_core::fs::api::{FileHandle, OpenFlags};
use fsoc_core::fs::xattrs::XattrMode;
use fsoc_core::fs::{FileKind, FsError, InodeRecord};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors::{fs_error, open_error};
use crate::image_file::{CreateOptions, OpenImage};

/// Bytes one `pread` returns at most (a larger read is split by the caller's loop).
const READ_CHUNK_BYTES_MAX: usize = 16 << 20;

/// An inode's attributes as Python gets them: (inode, kind, mode, uid, gid, nlink, size,
/// atime_ns, mtime_ns, ctime_ns); kind is 'f', 'd', 'l', or for a device node, FIFO or socket
/// (format version 3) 'c', 'b', 'p' or 's'.
type StatTuple = (u64, char, u32, u32, u32, u32, u64, i64, i64, i64);

fn kind_code(kind: FileKind) -> char {
    match kind {
        FileKind::File => 'f',
        FileKind::Directory => 'd',
        FileKind::Symlink => 'l',
        FileKind::CharDevice => 'c',
        FileKind::BlockDevice => 'b',
        FileKind::Fifo => 'p',
        FileKind::Socket => 's',
    }
}

fn stat_tuple(inode: u64, record: &InodeRecord) -> StatTuple {
    (
        inode,
        kind_code(record.kind),
        record.mode,
        record.uid,
        record.gid,
        record.nlink,
        record.size,
        record.atime_ns,
        record.mtime_ns,
        record.ctime_ns,
    )
}

/// The parent path and final name of an absolute path (`/a/b` → `/a`, `b`); `None` for the
/// root, which has no parent entry.
fn split_parent(path: &[u8]) -> Option<(&[u8], &[u8])> {
    let index = path.iter().rposition(|&byte| byte == b'/')?;
    let name = path.get(index + 1..)?;
    if name.is_empty() {
        return None;
    }
    let parent = if index == 0 { &b"/"[..] } else { path.get(..index)? };
    Some((parent, name))
}

/// The inode of the directory that will hold `path`'s final name, and that name. The root
/// (which has no parent entry) is `Exists`, as creating it would be.
fn parent_directory<'p>(
    fs: &fsoc_core::FileSystem<image_file::ImageFlash>,
    path: &'p [u8],
) -> Result<(u64, &'p [u8]), FsError> {
    fsoc_core::fs::api::components(path)?;
    let (parent, name) = split_parent(path).ok_or(FsError::Exists)?;
    let (inode, kind) = fs.resolve(parent)?;
    if kind != FileKind::Directory {
        return Err(FsError::NotDirectory);
    }
    Ok((inode, name))
}

/// An open fsoc image (see the module comment). Python code uses `fsoc.Image`, which wraps it.
#[pyclass(frozen, module = "fsoc._fsoc")]
struct Volume {
    path: PathBuf,
    state: Mutex<Option<OpenImage>>,
}

impl Volume {
    fn new(path: PathBuf, image: OpenImage) -> Volume {
        Volume { path, state: Mutex::new(Some(image)) }
    }

    /// Runs `work` on the open volume with the GIL released; `path` names the file for an
    /// error. A closed volume is `ValueError`.
    fn with<T: Send>(
        &self,
        py: Python<'_>,
        path: &[u8],
        work: impl FnOnce(&mut OpenImage) -> Result<T, FsError> + Send,
    ) -> PyResult<T> {
        let result = py.allow_threads(|| {
            // A poisoned mutex means a call panicked (a bug): the volume may be half-changed,
            // so it is treated as closed rather than used again.
            let mut guard = self.state.lock().map_err(|_| None)?;
            let image = guard.as_mut().ok_or(None)?;
            image.fs.now_ns = image_file::wall_clock_ns();
            work(image).map_err(Some)
        });
        result.map_err(|error| match error {
            Some(error) => fs_error(&error, path),
            None => PyValueError::new_err(format!("I/O operation on a closed image ({})", self.path.display())),
        })
    }
}

#[pymethods]
impl Volume {
    /// Formats a new image file as `fsoc mkfs` does and returns it open for writing.
    #[staticmethod]
    #[pyo3(signature = (path, profile, chips, blocks, size, seed, volume_id, force, nvram=None, nvram_technology=None))]
    #[allow(clippy::too_many_arguments)]
    fn create(
        py: Python<'_>,
        path: PathBuf,
        profile: String,
        chips: u32,
        blocks: Option<u32>,
        size: Option<u64>,
        seed: u64,
        volume_id: Option<u64>,
        force: bool,
        nvram: Option<u64>,
        nvram_technology: Option<String>,
    ) -> PyResult<Volume> {
        let nvram = nvram.map(|bytes| (bytes, nvram_technology.unwrap_or_else(|| "feram".to_string())));
        let options = CreateOptions {
            profile,
            chip_count: chips,
            block_count: blocks,
            size_bytes: size,
            seed,
            volume_id,
            force,
            nvram,
        };
        let image =
            py.allow_threads(|| image_file::create(&path, &options)).map_err(|error| open_error(error, &path))?;
        Ok(Volume::new(path, image))
    }

    /// Opens and mounts an existing image (locked: shared to read, exclusive to write).
    #[staticmethod]
    fn open(py: Python<'_>, path: PathBuf, read_only: bool) -> PyResult<Volume> {
        let image =
            py.allow_threads(|| image_file::open(&path, read_only)).map_err(|error| open_error(error, &path))?;
        Ok(Volume::new(path, image))
    }

    /// The image file's path.
    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    #[getter]
    fn closed(&self) -> bool {
        self.state.lock().map_or(true, |guard| guard.is_none())
    }

    #[getter]
    fn read_only(&self, py: Python<'_>) -> PyResult<bool> {
        self.with(py, b"", |image| Ok(image.read_only))
    }

    /// The volume's format version (extended attributes from 4 on).
    #[getter]
    fn format_version(&self, py: Python<'_>) -> PyResult<u32> {
        self.with(py, b"", |image| Ok(image.fs.superblock().format_version))
    }

    /// Unmounts (the final commit), flushes the image file and releases its lock. Closing a
    /// closed volume does nothing. The volume is closed afterwards even if this raises.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let taken = py.allow_threads(|| self.state.lock().ok().and_then(|mut guard| guard.take()));
        let Some(image) = taken else { return Ok(()) };
        let OpenImage { fs, lock, .. } = image;
        let result = py.allow_threads(|| image_file::close(fs));
        drop(lock);
        result.map_err(|error| fs_error(&error, b""))
    }

    /// A transaction point: everything written so far is on flash (in the image file) when it
    /// returns.
    fn sync(&self, py: Python<'_>) -> PyResult<()> {
        self.with(py, b"", |image| image.fs.transact())
    }

    /// Whether anything changed since the last transaction point.
    fn has_uncommitted_changes(&self, py: Python<'_>) -> PyResult<bool> {
        self.with(py, b"", |image| Ok(image.fs.has_uncommitted_changes()))
    }

    /// The attributes of `path` (a symbolic link itself, not its target).
    fn stat(&self, py: Python<'_>, path: &[u8]) -> PyResult<StatTuple> {
        self.with(py, path, |image| image.fs.stat(path).map(|(inode, record)| stat_tuple(inode, &record)))
    }

    /// Every entry of the directory `path`, in name order: (name, inode, kind).
    fn readdir(&self, py: Python<'_>, path: &[u8]) -> PyResult<Vec<(Py<PyBytes>, u64, char)>> {
        let entries = self.with(py, path, |image| image.fs.readdir_path(path))?;
        Ok(entries
            .into_iter()
            .map(|entry| (PyBytes::new(py, &entry.name).unbind(), entry.inode, kind_code(entry.kind)))
            .collect())
    }

    /// Creates a directory owned by `uid`:`gid`.
    fn mkdir(&self, py: Python<'_>, path: &[u8], mode: u32, uid: u32, gid: u32) -> PyResult<()> {
        self.with(py, path, |image| {
            let (parent, name) = parent_directory(&image.fs, path)?;
            image.fs.create(parent, name, FileKind::Directory, mode, uid, gid, None).map(|_| ())
        })
    }

    /// Creates a symbolic link at `path` holding `target` (not followed, not checked).
    fn symlink(&self, py: Python<'_>, target: &[u8], path: &[u8], uid: u32, gid: u32) -> PyResult<()> {
        self.with(py, path, |image| {
            if target.contains(&0) {
                return Err(FsError::InvalidArgument("NUL in symlink target"));
            }
            let (parent, name) = parent_directory(&image.fs, path)?;
            image.fs.create(parent, name, FileKind::Symlink, 0o777, uid, gid, Some(target)).map(|_| ())
        })
    }

    fn readlink(&self, py: Python<'_>, path: &[u8]) -> PyResult<Py<PyBytes>> {
        let target = self.with(py, path, |image| image.fs.readlink_path(path))?;
        Ok(PyBytes::new(py, &target).unbind())
    }

    /// A second name `new` for the file `existing` (a hard link).
    fn link(&self, py: Python<'_>, existing: &[u8], new: &[u8]) -> PyResult<()> {
        self.with(py, new, |image| image.fs.link_path(existing, new))
    }

    fn unlink(&self, py: Python<'_>, path: &[u8]) -> PyResult<()> {
        self.with(py, path, |image| image.fs.unlink(path))
    }

    fn rmdir(&self, py: Python<'_>, path: &[u8]) -> PyResult<()> {
        self.with(py, path, |image| image.fs.rmdir(path))
    }

    /// Renames atomically, replacing an existing target as POSIX rename does.
    fn rename(&self, py: Python<'_>, source: &[u8], target: &[u8]) -> PyResult<()> {
        self.with(py, source, |image| image.fs.rename_path(source, target))
    }

    /// Changes attributes of `path`; `None` leaves one as it is.
    #[pyo3(signature = (path, mode=None, uid=None, gid=None, atime_ns=None, mtime_ns=None))]
    #[allow(clippy::too_many_arguments)]
    fn setattr(
        &self,
        py: Python<'_>,
        path: &[u8],
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        atime_ns: Option<i64>,
        mtime_ns: Option<i64>,
    ) -> PyResult<()> {
        self.with(py, path, |image| {
            let (inode, _) = image.fs.resolve(path)?;
            image.fs.setattr(inode, mode, uid, gid, atime_ns, mtime_ns).map(|_| ())
        })
    }

    /// The value of the extended attribute `name` of `path` (a link itself, never its target):
    /// ENODATA when it has none (always, on a volume older than format version 4).
    fn getxattr(&self, py: Python<'_>, path: &[u8], name: &[u8]) -> PyResult<Py<PyBytes>> {
        let value = self.with(py, path, |image| {
            let (inode, _) = image.fs.resolve(path)?;
            image.fs.get_xattr(inode, name)
        })?;
        Ok(PyBytes::new(py, &value).unbind())
    }

    /// The names of the extended attributes of `path` (a link itself), in the volume's order.
    fn listxattr(&self, py: Python<'_>, path: &[u8]) -> PyResult<Vec<Py<PyBytes>>> {
        let list = self.with(py, path, |image| {
            let (inode, _) = image.fs.resolve(path)?;
            image.fs.list_xattrs(inode)
        })?;
        Ok(list
            .split(|&byte| byte == 0)
            .filter(|name| !name.is_empty())
            .map(|name| PyBytes::new(py, name).unbind())
            .collect())
    }

    /// Sets the extended attribute `name` of `path` (a link itself); `flags` as setxattr's:
    /// 0, XATTR_CREATE (1) or XATTR_REPLACE (2). Setting `system.posix_acl_access` sets the
    /// mode's permission bits from the list. EOPNOTSUPP on a volume older than format version 4.
    fn setxattr(&self, py: Python<'_>, path: &[u8], name: &[u8], value: &[u8], flags: i32) -> PyResult<()> {
        self.with(py, path, |image| {
            let mode = XattrMode::from_flags(flags)?;
            let (inode, _) = image.fs.resolve(path)?;
            image.fs.set_xattr(inode, name, value, mode)
        })
    }

    /// Removes the extended attribute `name` of `path` (a link itself); ENODATA when absent.
    fn removexattr(&self, py: Python<'_>, path: &[u8], name: &[u8]) -> PyResult<()> {
        self.with(py, path, |image| {
            let (inode, _) = image.fs.resolve(path)?;
            image.fs.remove_xattr(inode, name)
        })
    }

    /// (block size in bytes, blocks, free blocks, longest name in bytes).
    fn statfs(&self, py: Python<'_>) -> PyResult<(u32, u64, u64, u32)> {
        self.with(py, b"", |image| {
            let statfs = image.fs.statfs()?;
            Ok((statfs.block_size_bytes, statfs.total_blocks, statfs.free_blocks, statfs.name_bytes_max))
        })
    }

    /// Opens a file and returns its descriptor. A file created here is owned by `uid`:`gid`.
    #[pyo3(signature = (path, read, write, create, exclusive, truncate, append, mode, uid, gid))]
    #[allow(clippy::too_many_arguments)]
    fn open_file(
        &self,
        py: Python<'_>,
        path: &[u8],
        read: bool,
        write: bool,
        create: bool,
        exclusive: bool,
        truncate: bool,
        append: bool,
        mode: u32,
        uid: u32,
        gid: u32,
    ) -> PyResult<u32> {
        self.with(py, path, |image| {
            let mut flags = OpenFlags { read, write, create, exclusive, truncate, append, directory: false };
            if create && write {
                // Created here rather than by `FileSystem::open`, which makes root the owner.
                // Any other lookup failure is `open`'s to report.
                if let Err(FsError::NotFound) = image.fs.resolve(path) {
                    let (parent, name) = parent_directory(&image.fs, path)?;
                    image.fs.create(parent, name, FileKind::File, mode, uid, gid, None)?;
                    flags.exclusive = false;
                }
            }
            image.fs.open(path, flags, mode).map(FileHandle::number)
        })
    }

    fn close_file(&self, py: Python<'_>, descriptor: u32) -> PyResult<()> {
        self.with(py, b"", |image| image.fs.close(FileHandle::from_number(descriptor)))
    }

    /// Up to `length` bytes from `offset` (fewer at the end of the file; empty past it).
    fn pread(&self, py: Python<'_>, descriptor: u32, offset: u64, length: usize) -> PyResult<Py<PyBytes>> {
        let length = length.min(READ_CHUNK_BYTES_MAX);
        let bytes = self.with(py, b"", |image| image.fs.pread(FileHandle::from_number(descriptor), offset, length))?;
        Ok(PyBytes::new(py, &bytes).unbind())
    }

    /// Writes `data` at `offset` (at the end for a file opened to append); returns the count.
    fn pwrite(&self, py: Python<'_>, descriptor: u32, offset: u64, data: &[u8]) -> PyResult<usize> {
        self.with(py, b"", |image| image.fs.pwrite(FileHandle::from_number(descriptor), offset, data))
    }

    fn ftruncate(&self, py: Python<'_>, descriptor: u32, size: u64) -> PyResult<()> {
        self.with(py, b"", |image| image.fs.ftruncate(FileHandle::from_number(descriptor), size))
    }

    /// A transaction point (the file's data and everything before it is on flash).
    fn fsync(&self, py: Python<'_>, descriptor: u32) -> PyResult<()> {
        self.with(py, b"", |image| image.fs.fsync_fd(FileHandle::from_number(descriptor)))
    }

    fn fstat(&self, py: Python<'_>, descriptor: u32) -> PyResult<StatTuple> {
        self.with(py, b"", |image| {
            image.fs.fstat(FileHandle::from_number(descriptor)).map(|(inode, record)| stat_tuple(inode, &record))
        })
    }

    /// Checks every invariant of the volume's metadata (as `fsoc fsck --metadata-only`):
    /// returns the violations found (at most 200 listed), empty when clean.
    fn fsck(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        self.with(py, b"", |image| {
            let expect_no_orphans = image.fs.open_descriptor_count() == 0;
            image.fs.fsck(expect_no_orphans).map(|report| report.violations)
        })
    }

    fn __repr__(&self) -> String {
        let state = if self.closed() { "closed" } else { "open" };
        format!("<fsoc._fsoc.Volume {} ({state})>", self.path.display())
    }
}

impl Drop for Volume {
    /// Unmounts cleanly if Python code forgot `close` (errors cannot be reported here; `close`
    /// reports them).
    fn drop(&mut self) {
        if let Some(image) = self.state.get_mut().ok().and_then(Option::take) {
            let OpenImage { fs, lock, .. } = image;
            let _ = image_file::close(fs);
            drop(lock);
        }
    }
}

/// Converts a path the caller gave as bytes back to the OS's form (for messages).
pub(crate) fn os_path(path: &[u8]) -> OsString {
    OsString::from_vec(path.to_vec())
}

/// The smallest and largest volume in bytes the format makes of `profile` on `chips` chips.
#[pyfunction]
fn volume_size_range(profile: &str, chips: u32) -> PyResult<(u64, u64)> {
    image_file::volume_size_range(profile, chips)
        .map_err(|error| pyo3::exceptions::PyValueError::new_err(error.message))
}

#[pymodule]
fn _fsoc(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<Volume>()?;
    module.add_function(wrap_pyfunction!(volume_size_range, module)?)?;
    module.add("PROFILES", fsoc_media::Profile::ALL.iter().map(|profile| profile.name()).collect::<Vec<_>>())?;
    module.add("NAME_BYTES_MAX", 255)?;
    module.add("PATH_BYTES_MAX", fsoc_core::fs::api::PATH_BYTES_MAX)?;
    Ok(())
}
