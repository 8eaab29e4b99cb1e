//! One function per 9P2000.L request: each looks its fids up, makes one engine call (`read`
//! for what only looks, `change` for the rest) and encodes the reply. docs/PROTOCOL.md, "What
//! fsoc serve implements", states each message's meaning here.
//!
//! Rread and Rreaddir are built in place in the request's own buffer (the data or entries
//! after an 11-byte header), every other reply in the worker's small buffer, so a request
//! allocates nothing beyond those bounded buffers (fsoc-core's own lookups aside).
//!
//! Invariants: an fsoc open count is taken (Tlopen, Tlcreate of a file) only together with
//! marking the fid open, under the volume's exclusive lock, and given back exactly once, when
//! the fid goes (Tclunk, Tremove, Tversion, disconnect); a fid's remembered location is
//! checked against the directory before Tremove or Trename acts on it.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};

use fsoc_9p::constants::{
    open_flags, setattr, xattr_flags, IO_HEADER_SIZE_BYTES, NO_UID, READ_HEADER_SIZE_BYTES, UNLINKAT_REMOVE_DIRECTORY,
};
use fsoc_9p::{
    decode_request, encode, encode_read_header, DecodeError, DirectoryEntry, DirectoryEntryWriter, Errno, Fid,
    LockQuery, LockRequest, LockStatus, LockType, Qid, Reply, Request, SetAttributes, Tag, WalkNames, WalkQids,
};
use fsoc_core::fs::records::ROOT_INODE;
use fsoc_core::fs::xattrs::{XattrMode, XATTR_VALUE_BYTES_MAX};
use fsoc_core::fs::{FileKind, FsError, InodeRecord};
use fsoc_core::FileSystem;
use fsoc_engine::{DirectoryCursor, EngineError};
use fsoc_flash::Flash;

use crate::attributes::{attributes, dirent_type, engine_errno, errno, fs_stats, qid, time_ns};
use crate::connection::Connection;
use crate::fids::{FidEntry, OpenMode, XattrFid};
use crate::secret;

/// Where a reply was put.
pub(crate) enum Outcome {
    /// The first n bytes of the worker's small reply buffer.
    Small(usize),
    /// The first n bytes of the request's buffer (Rread, Rreaddir).
    InBuffer(usize),
}

/// Why a request failed: the errno its Rlerror carries.
pub(crate) struct Refusal(Errno);

impl From<Errno> for Refusal {
    fn from(errno: Errno) -> Self {
        Refusal(errno)
    }
}

impl From<FsError> for Refusal {
    fn from(error: FsError) -> Self {
        Refusal(errno(&error))
    }
}

impl From<EngineError> for Refusal {
    fn from(error: EngineError) -> Self {
        Refusal(engine_errno(&error))
    }
}

type Answer<T> = Result<T, Refusal>;

/// The 9P header sizes as u32, for arithmetic with msize.
const IO_HEADER_BYTES: u32 = 24;
const READ_HEADER_BYTES: u32 = 11;
const _: () =
    assert!(IO_HEADER_SIZE_BYTES == IO_HEADER_BYTES as usize && READ_HEADER_SIZE_BYTES == READ_HEADER_BYTES as usize);

/// st_mode's file-type mask (Tmknod).
const MODE_TYPE_MASK: u32 = 0o170000;

/// The errno of a message whose header is readable but whose body is not.
pub(crate) fn decode_errno(error: &DecodeError) -> Errno {
    match error {
        DecodeError::StringTooLong { .. } => Errno::ENAMETOOLONG,
        DecodeError::UnknownType { .. } => Errno::EOPNOTSUPP,
        _ => Errno::EPROTO,
    }
}

/// Whether a fid holds an fsoc open count (an open file, device node, FIFO or socket).
pub(crate) fn holds_open_count(entry: &FidEntry) -> bool {
    // A file, device node, FIFO or socket opened by Tlopen or Tlcreate (a directory's open
    // takes no count; a symbolic link cannot be opened).
    entry.open.is_some() && entry.kind != FileKind::Directory
}

/// Decodes and executes the request in `buffer[..length]` and puts its reply in `small` or in
/// `buffer`.
pub(crate) fn execute<F: Flash + Send + Sync + 'static>(
    connection: &Connection<F>,
    tag: Tag,
    buffer: &mut Vec<u8>,
    length: usize,
    small: &mut [u8],
    msize: u32,
) -> Outcome {
    let session = Session { connection, msize };
    let request = match buffer.get(..length).map(decode_request) {
        Some(Ok((_, request))) => request,
        Some(Err(error)) => return refusal(tag, decode_errno(&error), small),
        None => return refusal(tag, Errno::EPROTO, small),
    };
    // Rread and Rreaddir are built in the request's buffer: their requests borrow nothing
    // from it, so it is free once their fields are copied out.
    let answer = match request {
        Request::Read { fid, offset, count } => session.read(tag, fid, offset, count, buffer).map(Outcome::InBuffer),
        Request::Readdir { fid, offset, count } => {
            session.readdir(tag, fid, offset, count, buffer).map(Outcome::InBuffer)
        }
        other => session.small_request(tag, &other, small).map(Outcome::Small),
    };
    answer.unwrap_or_else(|Refusal(errno)| refusal(tag, errno, small))
}

fn refusal(tag: Tag, errno: Errno, small: &mut [u8]) -> Outcome {
    // An 11-byte message always fits the small buffer.
    Outcome::Small(encode(tag, &Reply::Lerror { errno }, small).unwrap_or(0))
}

fn reply_into(tag: Tag, reply: &Reply<'_>, small: &mut [u8]) -> Answer<usize> {
    encode(tag, reply, small).map_err(|error| {
        log::error!("a reply did not encode: {error}");
        Refusal(Errno::EIO)
    })
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

struct Session<'c, F: Flash> {
    connection: &'c Connection<F>,
    msize: u32,
}

impl<F: Flash + Send + Sync + 'static> Session<'_, F> {
    fn fid(&self, fid: Fid) -> Answer<FidEntry> {
        Ok(lock(&self.connection.fids).get(fid)?.clone())
    }

    fn directory(&self, fid: Fid) -> Answer<FidEntry> {
        let entry = self.fid(fid)?;
        if entry.kind != FileKind::Directory {
            return Err(Errno::ENOTDIR.into());
        }
        Ok(entry)
    }

    fn read_only(&self) -> bool {
        self.connection.shared.read_only
    }

    /// Runs `body` holding the volume shared.
    fn look<T>(
        &self,
        operation: &'static str,
        inode: u64,
        body: impl FnOnce(&FileSystem<F>) -> Answer<T>,
    ) -> Answer<T> {
        self.connection.shared.volume.read(operation, Some(inode), body)?
    }

    /// Runs `body` holding the volume exclusively.
    fn change<T>(
        &self,
        operation: &'static str,
        inode: u64,
        body: impl FnOnce(&mut FileSystem<F>) -> Answer<T>,
    ) -> Answer<T> {
        if self.read_only() {
            return Err(Errno::EROFS.into());
        }
        self.connection.shared.volume.change(operation, Some(inode), body)?
    }

    /// The largest data a read or write carries at this msize.
    fn iounit(&self) -> u32 {
        self.msize.saturating_sub(IO_HEADER_BYTES)
    }

    fn small_request(&self, tag: Tag, request: &Request<'_>, small: &mut [u8]) -> Answer<usize> {
        let reply = match *request {
            // The reader handles Tversion and Tflush, and `execute` Tread and Treaddir.
            Request::Version { .. } | Request::Flush { .. } | Request::Read { .. } | Request::Readdir { .. } => {
                return Err(Errno::EPROTO.into())
            }
            Request::Auth { .. } => return Err(Errno::EOPNOTSUPP.into()),
            Request::Attach { fid, afid, uname, aname, n_uname } => {
                Reply::Attach { qid: self.attach(fid, afid, uname, aname, n_uname)? }
            }
            Request::Walk { fid, new_fid, names } => Reply::Walk { qids: self.walk(fid, new_fid, &names)? },
            Request::Lopen { fid, flags } => Reply::Lopen { qid: self.lopen(fid, flags)?, iounit: self.iounit() },
            Request::Lcreate { fid, name, flags, mode, gid } => {
                Reply::Lcreate { qid: self.lcreate(fid, name, flags, mode, gid)?, iounit: self.iounit() }
            }
            Request::Write { fid, offset, data } => Reply::Write { count: self.write(fid, offset, data)? },
            Request::Clunk { fid } => {
                self.clunk(fid)?;
                Reply::Clunk
            }
            Request::Remove { fid } => {
                self.remove(fid)?;
                Reply::Remove
            }
            Request::Getattr { fid, .. } => {
                let entry = self.fid(fid)?;
                let page_size_bytes = self.connection.shared.page_size_bytes;
                let record = self.look("getattr", entry.inode, |fs| Ok(fs.getattr(entry.inode)?))?;
                Reply::Getattr { attributes: attributes(entry.inode, &record, page_size_bytes) }
            }
            Request::Setattr { fid, attributes } => {
                self.setattr(fid, &attributes)?;
                Reply::Setattr
            }
            Request::Mkdir { directory_fid, name, mode, gid } => {
                Reply::Mkdir { qid: self.create(directory_fid, name, FileKind::Directory, mode, gid, None)? }
            }
            Request::Symlink { directory_fid, name, target, gid } => {
                Reply::Symlink { qid: self.create(directory_fid, name, FileKind::Symlink, 0o777, gid, Some(target))? }
            }
            Request::Mknod { directory_fid, name, mode, major, minor, gid } => {
                let kind = match mode & MODE_TYPE_MASK {
                    0 => FileKind::File,
                    bits => FileKind::from_mode_bits(bits).ok_or(Errno::EINVAL)?,
                };
                match kind {
                    FileKind::File => {
                        Reply::Mknod { qid: self.create(directory_fid, name, FileKind::File, mode, gid, None)? }
                    }
                    FileKind::Directory | FileKind::Symlink => return Err(Errno::EINVAL.into()),
                    special => {
                        let rdev = fsoc_core::fs::records::make_device_number(major, minor);
                        let directory = self.directory(directory_fid)?;
                        let inode = self.change("mknod", directory.inode, |fs| {
                            Ok(fs.create_special(
                                directory.inode,
                                name,
                                special,
                                mode & 0o7777,
                                directory.uid,
                                gid,
                                rdev,
                            )?)
                        })?;
                        Reply::Mknod { qid: qid(inode, special) }
                    }
                }
            }
            Request::Link { directory_fid, fid, name } => {
                let directory = self.directory(directory_fid)?;
                let target = self.fid(fid)?;
                self.change("link", target.inode, |fs| Ok(fs.link(target.inode, directory.inode, name)?))?;
                Reply::Link
            }
            Request::Readlink { fid } => {
                let entry = self.fid(fid)?;
                let target = self.look("readlink", entry.inode, |fs| Ok(fs.readlink(entry.inode)?))?;
                return reply_into(tag, &Reply::Readlink { target: &target }, small);
            }
            Request::Rename { fid, directory_fid, name } => {
                self.rename(fid, directory_fid, name)?;
                Reply::Rename
            }
            Request::Renameat { old_directory_fid, old_name, new_directory_fid, new_name } => {
                let old_directory = self.directory(old_directory_fid)?;
                let new_directory = self.directory(new_directory_fid)?;
                self.change("renameat", old_directory.inode, |fs| {
                    Ok(fs.rename(old_directory.inode, old_name, new_directory.inode, new_name)?)
                })?;
                Reply::Renameat
            }
            Request::Unlinkat { directory_fid, name, flags } => {
                if flags & !UNLINKAT_REMOVE_DIRECTORY != 0 {
                    return Err(Errno::EINVAL.into());
                }
                let directory = self.directory(directory_fid)?;
                let remove_directory = flags & UNLINKAT_REMOVE_DIRECTORY != 0;
                self.change("unlinkat", directory.inode, |fs| {
                    Ok(fs.remove(directory.inode, name, remove_directory)?)
                })?;
                Reply::Unlinkat
            }
            Request::Fsync { fid, .. } => {
                let entry = self.fid(fid)?;
                self.make_durable(entry.inode)?;
                Reply::Fsync
            }
            Request::Statfs { fid } => {
                let entry = self.fid(fid)?;
                let loaded = self.look("statfs", entry.inode, |fs| Ok(fs.statfs_loaded()))?;
                let statfs = match loaded {
                    Some(statfs) => statfs,
                    // The first statfs after mount loads the segment table (a change of the
                    // in-memory state only; allowed on a read-only volume too).
                    None => self.connection.shared.volume.change("statfs", Some(entry.inode), |fs| fs.statfs())??,
                };
                Reply::Statfs { stats: fs_stats(&statfs, self.connection.shared.volume_id) }
            }
            Request::Xattrwalk { fid, new_fid, name } => {
                Reply::Xattrwalk { size_bytes: self.xattrwalk(fid, new_fid, name)? }
            }
            Request::Xattrcreate { fid, name, attribute_size_bytes, flags } => {
                self.xattrcreate(fid, name, attribute_size_bytes, flags)?;
                Reply::Xattrcreate
            }
            Request::Lock { fid, lock } => Reply::Lock { status: self.lock(fid, &lock)? },
            Request::Getlock { fid, query } => {
                self.fid(fid)?;
                // The Linux client tests its own processes' locks first and then always asks
                // with type UNLCK (v9fs_file_getlock sends the type posix_test_lock left), so
                // UNLCK is a question like the other two, not an error.
                if query.lock_type.0 > LockType::UNLOCK.0 {
                    return Err(Errno::EINVAL.into());
                }
                // No lock is ever held against another (see `lock`): the range is free.
                Reply::Getlock { query: LockQuery { lock_type: LockType::UNLOCK, ..query } }
            }
        };
        reply_into(tag, &reply, small)
    }

    fn attach(&self, fid: Fid, afid: Fid, uname: &[u8], aname: &[u8], n_uname: u32) -> Answer<Qid> {
        if afid != Fid::NONE {
            return Err(Errno::EBADF.into()); // no authentication fids exist (Tauth is refused)
        }
        let secret = self.connection.shared.config.secret.as_deref();
        let aname_is_secret = secret.is_some_and(|secret| secret::matches(secret, aname));
        if let Some(secret) = secret {
            if !aname_is_secret && !secret::matches(secret, uname) {
                let failures = self.connection.attach_failures.fetch_add(1, Ordering::AcqRel) + 1;
                log::warn!("attach refused: wrong secret ({failures} on this connection)");
                if failures >= self.connection.shared.config.attach_failures_max {
                    self.connection.close_after_reply();
                }
                return Err(Errno::EACCES.into());
            }
        }
        if !(aname.is_empty() || aname == b"/" || aname_is_secret) {
            return Err(Errno::ENOENT.into()); // one tree only: the volume's root
        }
        let uid = if n_uname == NO_UID { 0 } else { n_uname };
        let record = self.look("attach", ROOT_INODE, |fs| Ok(fs.getattr(ROOT_INODE)?))?;
        lock(&self.connection.fids).insert_new(fid, FidEntry::root(uid))?;
        Ok(qid(ROOT_INODE, record.kind))
    }

    /// Twalk: up to 16 names from `fid`; a failure after the first name gives the qids walked
    /// so far and no new fid.
    fn walk(&self, fid: Fid, new_fid: Fid, names: &WalkNames<'_>) -> Answer<WalkQids> {
        let start = self.fid(fid)?;
        if new_fid == fid && start.open.is_some() {
            return Err(Errno::EBADF.into());
        }
        if new_fid != fid && lock(&self.connection.fids).contains(new_fid) {
            return Err(Errno::EBADF.into());
        }
        let names = names.as_slice();
        let (qids, end) = self.look("walk", start.inode, |fs| {
            let mut qids = WalkQids::new();
            let mut current = (start.inode, start.kind, None::<(u64, &[u8])>);
            for (index, name) in names.iter().enumerate() {
                match step(fs, current.0, current.1, name) {
                    Ok(next) => {
                        qids.push(qid(next.0, next.1)).map_err(|_| Errno::EPROTO)?;
                        current = next;
                    }
                    Err(refusal) if index == 0 => return Err(refusal),
                    Err(_) => break,
                }
            }
            Ok((qids, current))
        })?;
        if qids.len() < names.len() {
            return Ok(qids);
        }
        let location = match end.2 {
            Some((parent, name)) => Some((parent, Arc::from(name))),
            None if names.is_empty() => start.location.clone(),
            None => None,
        };
        let entry = FidEntry { inode: end.0, kind: end.1, location, ..start.clone_unopened() };
        let mut fids = lock(&self.connection.fids);
        if new_fid == fid {
            fids.replace_or_insert(new_fid, entry)?;
        } else {
            fids.insert_new(new_fid, entry)?;
        }
        Ok(qids)
    }

    /// A transaction point (fdatasync and fsync alike: data and metadata become durable), for
    /// Tfsync and for files opened O_SYNC or O_DSYNC; nothing on a read-only volume. The
    /// flash's flush runs with the volume released (other requests proceed); the caller's reply
    /// waits for it.
    fn make_durable(&self, inode: u64) -> Answer<()> {
        if !self.read_only() {
            self.connection
                .shared
                .volume
                .change_then_flush("fsync", Some(inode), |fs| -> Answer<_> { Ok(((), fs.begin_fsync(inode)?)) })??;
        }
        Ok(())
    }

    fn lopen(&self, fid: Fid, flags: u32) -> Answer<Qid> {
        let entry = self.fid(fid)?;
        if entry.open.is_some() || entry.xattr.is_some() {
            return Err(Errno::EBADF.into());
        }
        let mode = open_mode(flags)?;
        let inode = entry.inode;
        match entry.kind {
            FileKind::Symlink => return Err(Errno::ELOOP.into()),
            FileKind::Directory if mode.write => return Err(Errno::EISDIR.into()),
            FileKind::Directory => {
                let parent = self.look("lopen", inode, |fs| {
                    let record = fs.getattr(inode)?;
                    Ok(if inode == ROOT_INODE { ROOT_INODE } else { record.parent })
                })?;
                let mut fids = lock(&self.connection.fids);
                let current = fids.get_mut(fid)?;
                if current.open.is_some() || current.inode != inode {
                    return Err(Errno::EBADF.into()); // changed by a concurrent request
                }
                current.open = Some(mode);
                current.cursor = Some(Arc::new(Mutex::new(DirectoryCursor::new(inode, parent))));
            }
            // A device node, FIFO or socket opens like a file; the volume refuses reading or
            // writing it (its contents are the client kernel's, which serves them itself).
            _ => {
                if flags & open_flags::DIRECTORY != 0 {
                    return Err(Errno::ENOTDIR.into());
                }
                if mode.write && self.read_only() {
                    return Err(Errno::EROFS.into());
                }
                let truncate = mode.write && flags & open_flags::TRUNCATE != 0;
                self.connection.shared.volume.change("lopen", Some(inode), |fs| {
                    open_counted(fs, inode, mode, truncate)?;
                    self.mark_open(fs, fid, (inode, inode), mode, |entry| {
                        entry.open = Some(mode);
                    })
                })??;
                if mode.sync && truncate {
                    self.make_durable(inode)?;
                }
            }
        }
        Ok(qid(inode, entry.kind))
    }

    /// Marks `fid` (which must still name `named` and be unopened) open with `update`, inside
    /// the change that took the open count of `counted`; gives that count back if the fid
    /// changed meanwhile (a concurrent clunk or walk of the same fid).
    fn mark_open(
        &self,
        fs: &mut FileSystem<F>,
        fid: Fid,
        (named, counted): (u64, u64),
        mode: OpenMode,
        update: impl FnOnce(&mut FidEntry),
    ) -> Answer<()> {
        let mut fids = lock(&self.connection.fids);
        match fids.get_mut(fid) {
            Ok(entry) if entry.open.is_none() && entry.inode == named => {
                update(entry);
                assert_eq!(entry.open, Some(mode), "fid {} not marked open", fid.0);
                Ok(())
            }
            _ => {
                drop(fids);
                let _ = fs.release_inode(counted);
                Err(Errno::EBADF.into())
            }
        }
    }

    fn lcreate(&self, fid: Fid, name: &[u8], flags: u32, mode: u32, gid: u32) -> Answer<Qid> {
        let directory = self.directory(fid)?;
        if directory.open.is_some() {
            return Err(Errno::EBADF.into());
        }
        let open_mode = open_mode(flags)?;
        let exclusive = flags & open_flags::EXCLUSIVE != 0;
        let truncate = open_mode.write && flags & open_flags::TRUNCATE != 0;
        let inode = self.change("lcreate", directory.inode, |fs| {
            // open(2) with O_CREAT: an existing file is opened unless O_EXCL is given.
            let (inode, created) = match fs.lookup(directory.inode, name) {
                Ok(_) if exclusive => return Err(Errno::EEXIST.into()),
                Ok((_, FileKind::Directory)) => return Err(Errno::EISDIR.into()),
                Ok((_, FileKind::Symlink)) => return Err(Errno::EEXIST.into()),
                Ok((inode, FileKind::File)) => (inode, false),
                Ok((inode, _special)) => (inode, false),
                Err(FsError::NotFound) => {
                    (fs.create(directory.inode, name, FileKind::File, mode & 0o7777, directory.uid, gid, None)?, true)
                }
                Err(error) => return Err(error.into()),
            };
            open_counted(fs, inode, open_mode, truncate && !created)?;
            let location = (directory.inode, Arc::from(name));
            self.mark_open(fs, fid, (directory.inode, inode), open_mode, |entry| {
                *entry = FidEntry {
                    inode,
                    kind: FileKind::File,
                    location: Some(location),
                    uid: directory.uid,
                    open: Some(open_mode),
                    cursor: None,
                    xattr: None,
                };
            })?;
            Ok(inode)
        })?;
        if open_mode.sync {
            // A create (or truncation) asked to be synchronous is durable with its reply: one
            // message where a create then a Tfsync take two (docs/PROTOCOL.md 6.5).
            self.make_durable(inode)?;
        }
        Ok(qid(inode, FileKind::File))
    }

    fn read(&self, tag: Tag, fid: Fid, offset: u64, count: u32, buffer: &mut Vec<u8>) -> Answer<usize> {
        let entry = self.fid(fid)?;
        if let Some(xattr) = &entry.xattr {
            return self.read_xattr(tag, xattr, offset, count, buffer);
        }
        let Some(mode) = entry.open else { return Err(Errno::EBADF.into()) };
        if entry.kind == FileKind::Directory {
            return Err(Errno::EISDIR.into());
        }
        if !mode.read {
            return Err(Errno::EBADF.into());
        }
        let limit = self.msize.saturating_sub(READ_HEADER_BYTES);
        let count = usize::try_from(count.min(limit)).unwrap_or(0);
        let end = READ_HEADER_SIZE_BYTES + count;
        if buffer.len() < end {
            buffer.resize(end, 0);
        }
        let data = buffer.get_mut(READ_HEADER_SIZE_BYTES..end).ok_or(Errno::EIO)?;
        let read = self.look("read", entry.inode, |fs| Ok(fs.read_into(entry.inode, offset, data)?))?;
        assert!(read <= count, "read {read} bytes into {count}");
        let read = u32::try_from(read).map_err(|_| Errno::EIO)?;
        encode_read_header(tag, read, buffer).map_err(|_| Refusal(Errno::EIO))
    }

    fn readdir(&self, tag: Tag, fid: Fid, offset: u64, count: u32, buffer: &mut Vec<u8>) -> Answer<usize> {
        let entry = self.fid(fid)?;
        if entry.kind != FileKind::Directory {
            return Err(Errno::ENOTDIR.into());
        }
        let Some(cursor) = entry.cursor else { return Err(Errno::EBADF.into()) };
        let limit = self.msize.saturating_sub(READ_HEADER_BYTES);
        let count = count.min(limit);
        let end = READ_HEADER_SIZE_BYTES + usize::try_from(count).unwrap_or(0);
        if buffer.len() < end {
            buffer.resize(end, 0);
        }
        let reply = buffer.get_mut(..end).ok_or(Errno::EIO)?;
        self.look("readdir", entry.inode, |fs| {
            let mut writer = DirectoryEntryWriter::new(reply, count).map_err(|_| Errno::EIO)?;
            let mut cursor = lock(&cursor);
            cursor.read(fs, offset, |listed| {
                let entry = DirectoryEntry {
                    qid: qid(listed.inode, listed.kind),
                    offset: listed.next_cookie,
                    dirent_type: dirent_type(listed.kind),
                    name: listed.name,
                };
                // Full (or a name the codec refuses, which validated names never are): stop.
                !matches!(writer.push(&entry), Ok(true))
            })?;
            Ok(writer.finish(tag))
        })
    }

    fn write(&self, fid: Fid, offset: u64, data: &[u8]) -> Answer<u32> {
        let entry = self.fid(fid)?;
        if let Some(xattr) = &entry.xattr {
            return write_xattr(xattr, offset, data);
        }
        let Some(mode) = entry.open else { return Err(Errno::EBADF.into()) };
        if entry.kind == FileKind::Directory {
            return Err(Errno::EISDIR.into());
        }
        if !mode.write {
            return Err(Errno::EBADF.into());
        }
        let written = self.change("write", entry.inode, |fs| {
            let offset = if mode.append { fs.getattr(entry.inode)?.size } else { offset };
            Ok(fs.write(entry.inode, offset, data)?)
        })?;
        if mode.sync {
            self.make_durable(entry.inode)?;
        }
        Ok(u32::try_from(written).map_err(|_| Errno::EIO)?)
    }

    fn clunk(&self, fid: Fid) -> Answer<()> {
        let entry = lock(&self.connection.fids).remove(fid).ok_or(Errno::EBADF)?;
        if let Some(xattr) = &entry.xattr {
            return self.finish_xattr(&entry, xattr);
        }
        if holds_open_count(&entry) {
            self.connection.shared.volume.change("clunk", Some(entry.inode), |fs| fs.release_inode(entry.inode))??;
        }
        Ok(())
    }

    /// Txattrwalk: `new_fid` reads one attribute's value, or with an empty name the names of
    /// all (NUL-terminated); the reply says how many bytes. `trusted.` attributes exist for
    /// the root user only, as Linux shows them.
    fn xattrwalk(&self, fid: Fid, new_fid: Fid, name: &[u8]) -> Answer<u64> {
        let entry = self.fid(fid)?;
        let privileged = entry.uid == 0;
        let bytes = self.look("xattrwalk", entry.inode, |fs| {
            if name.is_empty() {
                let list = fs.list_xattrs(entry.inode)?;
                let mut kept = Vec::with_capacity(list.len());
                for listed in list.split_inclusive(|&byte| byte == 0) {
                    if privileged || !listed.starts_with(TRUSTED_PREFIX) {
                        kept.extend_from_slice(listed);
                    }
                }
                return Ok(kept);
            }
            if !privileged && name.starts_with(TRUSTED_PREFIX) {
                return Err(Errno::ENODATA.into());
            }
            Ok(fs.get_xattr(entry.inode, name)?)
        })?;
        let size = bytes.len() as u64;
        let walked = FidEntry { xattr: Some(Arc::new(Mutex::new(XattrFid::Reading(bytes)))), ..entry.clone_unopened() };
        let mut fids = lock(&self.connection.fids);
        if new_fid == fid {
            fids.replace_or_insert(new_fid, walked)?;
        } else {
            fids.insert_new(new_fid, walked)?;
        }
        Ok(size)
    }

    /// Txattrcreate: `fid` becomes the attribute's writing end; Twrite fills the value and
    /// Tclunk sets it (`finish_xattr`). Refused at once: a value over 64 KiB (E2BIG), a name
    /// fsoc-core would refuse, unknown flags, and what the attach user may not change
    /// (`may_change_xattr`).
    fn xattrcreate(&self, fid: Fid, name: &[u8], size: u64, flags: u32) -> Answer<()> {
        let entry = self.fid(fid)?;
        if self.read_only() {
            return Err(Errno::EROFS.into());
        }
        if flags & !(xattr_flags::CREATE | xattr_flags::REPLACE) != 0
            || flags == xattr_flags::CREATE | xattr_flags::REPLACE
        {
            return Err(Errno::EINVAL.into());
        }
        let size = usize::try_from(size).ok().filter(|&size| size <= XATTR_VALUE_BYTES_MAX).ok_or(Errno::E2BIG)?;
        fsoc_core::fs::xattrs::check_xattr_name(name)?;
        let record = self.look("xattrcreate", entry.inode, |fs| Ok(fs.getattr(entry.inode)?))?;
        may_change_xattr(entry.uid, &record, name)?;
        let mut fids = lock(&self.connection.fids);
        let current = fids.get_mut(fid)?;
        if current.open.is_some() || current.xattr.is_some() || current.inode != entry.inode {
            return Err(Errno::EBADF.into());
        }
        current.xattr = Some(Arc::new(Mutex::new(XattrFid::Writing {
            name: name.to_vec(),
            size,
            flags,
            value: Vec::with_capacity(size),
        })));
        Ok(())
    }

    /// Tread of an attribute fid: the bytes from `offset`.
    fn read_xattr(
        &self,
        tag: Tag,
        xattr: &Mutex<XattrFid>,
        offset: u64,
        count: u32,
        buffer: &mut Vec<u8>,
    ) -> Answer<usize> {
        let xattr = lock(xattr);
        let XattrFid::Reading(bytes) = &*xattr else { return Err(Errno::EBADF.into()) };
        let limit = self.msize.saturating_sub(READ_HEADER_BYTES);
        let count = usize::try_from(count.min(limit)).unwrap_or(0);
        let start = usize::try_from(offset).unwrap_or(usize::MAX).min(bytes.len());
        let slice = bytes.get(start..).unwrap_or_default();
        let slice = slice.get(..count.min(slice.len())).unwrap_or_default();
        let end = READ_HEADER_SIZE_BYTES + slice.len();
        if buffer.len() < end {
            buffer.resize(end, 0);
        }
        buffer.get_mut(READ_HEADER_SIZE_BYTES..end).ok_or(Errno::EIO)?.copy_from_slice(slice);
        let read = u32::try_from(slice.len()).map_err(|_| Errno::EIO)?;
        encode_read_header(tag, read, buffer).map_err(|_| Refusal(Errno::EIO))
    }

    /// Tclunk of an attribute fid: a writing end sets the value it received (all of the size
    /// Txattrcreate declared, else EINVAL), or removes the attribute when that size was 0.
    fn finish_xattr(&self, entry: &FidEntry, xattr: &Mutex<XattrFid>) -> Answer<()> {
        let xattr = lock(xattr);
        let XattrFid::Writing { name, size, flags, value } = &*xattr else { return Ok(()) };
        if value.len() != *size {
            return Err(Errno::EINVAL.into());
        }
        let mode = match *flags {
            xattr_flags::CREATE => XattrMode::Create,
            xattr_flags::REPLACE => XattrMode::Replace,
            _ => XattrMode::Any,
        };
        self.change("xattrcreate", entry.inode, |fs| {
            if *size == 0 {
                Ok(fs.remove_xattr(entry.inode, name)?)
            } else {
                Ok(fs.set_xattr(entry.inode, name, value, mode)?)
            }
        })
    }

    /// Tremove: removes the file and clunks the fid, which goes even if the removal fails.
    fn remove(&self, fid: Fid) -> Answer<()> {
        let entry = lock(&self.connection.fids).remove(fid).ok_or(Errno::EBADF)?;
        let removed = self.change("remove", entry.inode, |fs| {
            let (parent, name) = located(fs, &entry)?;
            Ok(fs.remove(parent, &name, entry.kind == FileKind::Directory)?)
        });
        if holds_open_count(&entry) {
            self.connection.shared.volume.change("clunk", Some(entry.inode), |fs| fs.release_inode(entry.inode))??;
        }
        removed
    }

    fn setattr(&self, fid: Fid, attributes: &SetAttributes) -> Answer<()> {
        let entry = self.fid(fid)?;
        let valid = attributes.valid_mask;
        let given = |bit: u32| valid & bit != 0;
        self.change("setattr", entry.inode, |fs| {
            if given(setattr::SIZE) {
                fs.truncate(entry.inode, attributes.size_bytes)?;
            }
            let now_ns = fs.now_ns;
            let time = |bit: u32, set_bit: u32, time: &fsoc_9p::Timestamp| {
                given(bit).then(|| if given(set_bit) { time_ns(time) } else { now_ns })
            };
            let mode = given(setattr::MODE).then_some(attributes.mode);
            let uid = given(setattr::UID).then_some(attributes.uid);
            let gid = given(setattr::GID).then_some(attributes.gid);
            let access_ns = time(setattr::ATIME, setattr::ATIME_SET, &attributes.access_time);
            let modify_ns = time(setattr::MTIME, setattr::MTIME_SET, &attributes.modify_time);
            let any = mode.is_some() || uid.is_some() || gid.is_some() || access_ns.is_some() || modify_ns.is_some();
            if any || given(setattr::CTIME) {
                fs.setattr(entry.inode, mode, uid, gid, access_ns, modify_ns)?;
            }
            Ok(())
        })
    }

    fn create(
        &self,
        directory_fid: Fid,
        name: &[u8],
        kind: FileKind,
        mode: u32,
        gid: u32,
        target: Option<&[u8]>,
    ) -> Answer<Qid> {
        let directory = self.directory(directory_fid)?;
        let inode = self.change("create", directory.inode, |fs| {
            Ok(fs.create(directory.inode, name, kind, mode & 0o7777, directory.uid, gid, target)?)
        })?;
        Ok(qid(inode, kind))
    }

    fn rename(&self, fid: Fid, directory_fid: Fid, name: &[u8]) -> Answer<()> {
        let entry = self.fid(fid)?;
        let directory = self.fid(directory_fid)?;
        self.change("rename", entry.inode, |fs| {
            let (parent, old_name) = located(fs, &entry)?;
            fs.rename(parent, &old_name, directory.inode, name)?;
            if let Ok(moved) = lock(&self.connection.fids).get_mut(fid) {
                if moved.inode == entry.inode {
                    moved.location = Some((directory.inode, Arc::from(name)));
                }
            }
            Ok(())
        })
    }

    /// Tlock: granted at once. fsoc serves one device: the locks of one client are its own
    /// business (the Linux client keeps them locally too), and no lock is arbitrated between
    /// connections (docs/PROTOCOL.md).
    fn lock(&self, fid: Fid, lock: &LockRequest<'_>) -> Answer<LockStatus> {
        self.fid(fid)?;
        if lock.lock_type.0 > LockType::UNLOCK.0 {
            return Err(Errno::EINVAL.into());
        }
        Ok(LockStatus::SUCCESS)
    }
}

/// Where a walk stands: the inode, its kind, and the directory and name it was reached by.
type WalkPosition<'n> = (u64, FileKind, Option<(u64, &'n [u8])>);

/// One step of a walk from directory `inode`.
fn step<'n, F: Flash>(fs: &FileSystem<F>, inode: u64, kind: FileKind, name: &'n [u8]) -> Answer<WalkPosition<'n>> {
    if kind != FileKind::Directory {
        return Err(Errno::ENOTDIR.into());
    }
    if name == b".." {
        // Never above the root: the attach point is the top of the client's tree.
        let parent = if inode == ROOT_INODE { ROOT_INODE } else { fs.getattr(inode)?.parent };
        return Ok((parent, FileKind::Directory, None));
    }
    let (found, found_kind) = fs.lookup(inode, name)?;
    Ok((found, found_kind, Some((inode, name))))
}

/// The directory and name `entry` was reached through, checked to still name its file.
fn located<F: Flash>(fs: &FileSystem<F>, entry: &FidEntry) -> Answer<(u64, Arc<[u8]>)> {
    let Some((parent, name)) = entry.location.clone() else {
        return Err(if entry.inode == ROOT_INODE { Errno::EBUSY } else { Errno::EINVAL }.into());
    };
    match fs.lookup(parent, &name) {
        Ok((found, _)) if found == entry.inode => Ok((parent, name)),
        Ok(_) | Err(FsError::NotFound) => match fs.getattr(entry.inode) {
            // Renamed or replaced through another fid since this one was walked.
            Ok(_) => Err(Errno::ESTALE.into()),
            Err(error) => Err(error.into()),
        },
        Err(error) => Err(error.into()),
    }
}

/// Takes an fsoc open count on `inode`, truncating the file if asked (the count is given back
/// if the truncation fails). An immutable or append-only file refuses what ext4 refuses
/// (`FileSystem::check_open`: EPERM).
fn open_counted<F: Flash>(fs: &mut FileSystem<F>, inode: u64, mode: OpenMode, truncate: bool) -> Answer<()> {
    fs.check_open(inode, mode.write, mode.append, truncate)?;
    fs.open_inode(inode)?;
    if truncate {
        if let Err(error) = fs.truncate(inode, 0) {
            let _ = fs.release_inode(inode);
            return Err(error.into());
        }
    }
    Ok(())
}

fn open_mode(flags: u32) -> Answer<OpenMode> {
    let append = flags & open_flags::APPEND != 0;
    // O_SYNC includes O_DSYNC's bit on Linux; either makes writes durable before their reply.
    let sync = flags & (open_flags::SYNC | open_flags::DATA_SYNC) != 0;
    match flags & open_flags::ACCESS_MODE_MASK {
        open_flags::READ_ONLY => Ok(OpenMode { read: true, write: false, append, sync }),
        open_flags::WRITE_ONLY => Ok(OpenMode { read: false, write: true, append, sync }),
        open_flags::READ_WRITE => Ok(OpenMode { read: true, write: true, append, sync }),
        _ => Err(Errno::EINVAL.into()),
    }
}

/// The namespace whose attributes only the root user sees and sets.
const TRUSTED_PREFIX: &[u8] = b"trusted.";

/// Twrite of an attribute fid: the value arrives in order, within the declared size.
fn write_xattr(xattr: &Mutex<XattrFid>, offset: u64, data: &[u8]) -> Answer<u32> {
    let mut xattr = lock(xattr);
    let XattrFid::Writing { size, value, .. } = &mut *xattr else { return Err(Errno::EBADF.into()) };
    if offset != value.len() as u64 || value.len() + data.len() > *size {
        return Err(Errno::EINVAL.into());
    }
    value.extend_from_slice(data);
    Ok(u32::try_from(data.len()).map_err(|_| Errno::EIO)?)
}

/// Whether the attach user `uid` may set or remove the attribute `name` of `record`, by
/// Linux's rules for a caller without capabilities unless it is root: `trusted.` and
/// `security.` need root; an ACL needs the owner; `user.` needs write permission on a file or
/// directory (the kernel allows `user.` on no other kind).
fn may_change_xattr(uid: u32, record: &InodeRecord, name: &[u8]) -> Result<(), Errno> {
    if uid == 0 {
        return Ok(());
    }
    if name.starts_with(TRUSTED_PREFIX) || name.starts_with(b"security.") {
        return Err(Errno::EPERM);
    }
    if name.starts_with(b"system.") {
        return if uid == record.uid { Ok(()) } else { Err(Errno::EPERM) };
    }
    let writable = if uid == record.uid { record.mode & 0o200 != 0 } else { record.mode & 0o002 != 0 };
    if writable {
        Ok(())
    } else {
        Err(Errno::EACCES)
    }
}
