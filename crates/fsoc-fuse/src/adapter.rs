//! The `fuser::Filesystem` implementation: each kernel request becomes one fsoc-core call made
//! under the volume lock, and every error becomes the errno `FsError::errno` names.
//!
//! Invariants: replies are sent after the lock is released; every `open`/`create`/`opendir`
//! takes an fsoc open count that exactly one `release`/`releasedir` gives back, so a file
//! unlinked while open lives until its last close; new entries belong to the calling process's
//! uid and gid (or the directory's gid under a setgid directory).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fsoc_core::fs::attributes::{access_time_due, AccessTimes};
use fsoc_core::fs::xattrs::XattrMode;
use fsoc_core::fs::{FileKind, FsError, InodeRecord, NewInode};
use fsoc_media::Flash;
use fuser::{
    AccessFlags, BsdFileFlags, CopyFileRangeFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags,
    Generation, INodeNo, InitFlags, IoctlFlags, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr,
    ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyLseek,
    ReplyOpen, ReplyStatfs, ReplyStatx, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};

use crate::attributes::{errno, file_attr, file_type, now_ns, rdev_from_fuse, time_ns};
use crate::permissions::{may_access, new_entry_group_and_mode, set_id_bits_chown_drops, Caller};
use crate::references::KernelReferences;
use crate::volume_lock::{MountState, OpenFile, VolumeLock};
use fsoc_engine::DirectoryCursor as DirectoryStream;

/// How long the kernel may cache attributes and names. Every change goes through this mount,
/// and the kernel updates its caches on the changes it makes, so a short TTL is safe; it only
/// bounds staleness should that ever be wrong.
const CACHE_TTL: Duration = Duration::from_secs(10);
/// Largest write the kernel sends in one request.
const WRITE_BYTES_MAX: u32 = 1 << 20;
/// The generation of a negative entry (no inode).
const NO_GENERATION: Generation = Generation(0);
/// Bytes one copy_file_range call copies at most (callers loop for more).
const COPY_RANGE_BYTES_MAX: u64 = 64 << 20;
/// Bytes copied under one hold of the volume lock.
const COPY_CHUNK_BYTES: u64 = 1 << 20;

/// Largest readahead asked of the kernel (it may grant less).
const READAHEAD_BYTES_MAX: u32 = 1 << 20;

/// A mounted fsoc volume as the kernel sees it.
pub struct FsocFuse<F: Flash> {
    lock: std::sync::Arc<VolumeLock<F>>,
    /// Asked for `writeback_cache`; `writeback` says whether the kernel granted it.
    writeback_cache: bool,
    writeback: AtomicBool,
    /// Extended attributes are served (the volume has them and the mount did not say
    /// `noxattr`); otherwise every xattr call is ENOSYS, after which the kernel stops asking.
    xattrs: bool,
    /// POSIX ACLs are enforced by the kernel from `system.posix_acl_*` (FUSE_POSIX_ACL).
    posix_acl: bool,
    /// When reads update access times (the mount's relatime, strictatime or noatime).
    access_times: AccessTimes,
    /// With `io_uring` asked for: set when the kernel granted FUSE over io_uring.
    ring: Option<std::sync::Arc<AtomicBool>>,
    /// The kernel's lookup counts, and the unlinked inodes kept alive for them.
    references: KernelReferences,
}

impl<F: Flash> FsocFuse<F> {
    /// `xattrs` and `posix_acl` are what the mount asked for; both need a volume of format
    /// version 4 (older ones keep no attributes).
    pub fn new(lock: std::sync::Arc<VolumeLock<F>>, writeback_cache: bool, xattrs: bool, posix_acl: bool) -> Self {
        let volume_has_xattrs =
            lock.read_on("init", None, |state| Ok(state.fs.superblock().format_version >= 4)).unwrap_or(false);
        let xattrs = xattrs && volume_has_xattrs;
        FsocFuse {
            lock,
            writeback_cache,
            writeback: AtomicBool::new(false),
            xattrs,
            posix_acl: posix_acl && xattrs,
            access_times: AccessTimes::Relative,
            ring: None,
            references: KernelReferences::default(),
        }
    }

    /// Asks the kernel for FUSE over io_uring when it offers it (Linux 6.14 on, with the
    /// `fuse` module's `enable_uring` on); `granted` is set when it did.
    pub fn with_io_uring(mut self, granted: std::sync::Arc<AtomicBool>) -> Self {
        self.ring = Some(granted);
        self
    }

    /// Sets when reads update access times (relatime unless told otherwise).
    pub fn with_access_times(mut self, access_times: AccessTimes) -> Self {
        self.access_times = access_times;
        self
    }

    /// Replies with a positive entry, counting the reference the kernel takes to it. The
    /// generation goes into the kernel's file handles (`InodeRecord::generation`).
    fn reply_entry(&self, reply: ReplyEntry, (attr, generation): &(FileAttr, Generation)) {
        self.references.taken(attr.ino.0);
        reply.entry(&CACHE_TTL, attr, *generation);
    }

    /// Before `name` in `parent` may lose its inode's last link: pins that inode when the
    /// kernel still references it, so it lives on (link count 0) until the kernel forgets it
    /// (`references`). A missing name pins nothing.
    fn pin_referenced(&self, state: &mut MountState<F>, parent: u64, name: &[u8]) -> Result<(), Errno> {
        let Ok((inode, _)) = state.fs.lookup(parent, name) else { return Ok(()) };
        if self.references.should_pin(inode) {
            if let Err(error) = state.fs.open_inode(inode) {
                self.references.pin_failed(inode);
                return Err(fs_error(error));
            }
        }
        Ok(())
    }

    /// After a read of `inode` reached the volume: records the access when the mount's rule
    /// says one is due. Checked under the shared lock, so only a due update takes the
    /// exclusive one (with relatime, about once a day per file, or after it changed). The
    /// kernel answers reads from its page cache without asking, so those leave no trace: a
    /// FUSE file system sees only the reads that miss the cache.
    fn record_access(&self, inode: u64) {
        if self.access_times == AccessTimes::Never {
            return;
        }
        let now = now_ns();
        let due = self.lock.read_on("atime", Some(inode), |state| {
            Ok(access_time_due(&state.fs.getattr(inode).map_err(fs_error)?, now, self.access_times))
        });
        if due == Ok(true) {
            // Best effort, as Linux's touch_atime: a failure here fails no read.
            let _ = self.lock.run_on("atime", Some(inode), |state| state.fs.record_access(inode).map_err(fs_error));
        }
    }

    /// With the kernel's write-back cache, the kernel decides every write's offset (it keeps
    /// the file size and applies O_APPEND itself) and may write back through any open handle.
    fn kernel_places_writes(&self) -> bool {
        self.writeback.load(Ordering::Relaxed)
    }
}

/// Open flags of every file handle: the kernel may keep the file's cached pages across opens,
/// since every change to the volume goes through this mount (the kernel sees them all).
const OPEN_FLAGS: FopenFlags = FopenFlags::FOPEN_KEEP_CACHE;

/// Open flags of every directory handle: the kernel keeps a listing in its cache and serves
/// the next listing of the directory from it, across opens, until the directory changes (it
/// sees every change, as for files). dbench lists directories about 40,000 times in 5 s: each
/// listing had cost a READDIRPLUS and a READDIR request.
const DIRECTORY_OPEN_FLAGS: FopenFlags = FopenFlags::FOPEN_CACHE_DIR.union(FopenFlags::FOPEN_KEEP_CACHE);

/// The attributes of a negative entry: node id 0 tells the kernel the name does not exist.
pub fn negative_entry() -> FileAttr {
    FileAttr {
        ino: INodeNo(0),
        size: 0,
        blocks: 0,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind: FileType::RegularFile,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

fn fs_error(error: FsError) -> Errno {
    let answer = errno(&error);
    if answer == Errno::EIO {
        // The caller sees only EIO: the log keeps the cause (which request, which inode, which
        // record).
        match crate::volume_lock::current_request() {
            Some((operation, Some(inode))) => log::error!("{operation} on inode {inode}: answering EIO: {error}"),
            Some((operation, None)) => log::error!("{operation}: answering EIO: {error}"),
            None => log::error!("answering EIO: {error}"),
        }
    }
    answer
}

/// Creates `parent/name` for the caller and returns its inode and attributes.
#[allow(clippy::too_many_arguments)]
fn create_entry<F: Flash>(
    state: &mut MountState<F>,
    request: (u32, u32),
    parent: u64,
    name: &[u8],
    kind: FileKind,
    (mode, umask): (u32, u32),
    target: EntryTarget<'_>,
) -> Result<(u64, InodeRecord), Errno> {
    let (uid, gid) = request;
    let directory = state.fs.getattr(parent).map_err(fs_error)?;
    if directory.kind != FileKind::Directory {
        return Err(Errno::ENOTDIR);
    }
    let (gid, mode) = new_entry_group_and_mode(&directory, kind, gid, mode);
    let (symlink_target, rdev) = match target {
        EntryTarget::None => (None, 0),
        EntryTarget::Symlink(target) => (Some(target), 0),
        EntryTarget::Device(rdev) => (None, rdev),
    };
    // The kernel leaves the umask to the file system (FUSE_DONT_MASK): a directory's default
    // ACL replaces it (fsoc-core's create_masked).
    let new = NewInode { kind, mode, umask, uid, gid, rdev, symlink_target };
    let inode = state.fs.create_masked(parent, name, &new).map_err(|error| match error {
        // mknod(2): EPERM for a node type the file system does not support (a volume older
        // than format version 3 keeps only files, directories and symlinks).
        FsError::NotSupported if kind.is_special() => Errno::EPERM,
        error => fs_error(error),
    })?;
    let record = state.fs.getattr(inode).map_err(fs_error)?;
    Ok((inode, record))
}

/// An attribute list (NUL-terminated names) without its `trusted.` names.
fn without_trusted_names(list: &[u8]) -> Vec<u8> {
    let names = list.split_inclusive(|&byte| byte == 0);
    names.filter(|name| !name.starts_with(b"trusted.")).flatten().copied().collect()
}

/// A getxattr or listxattr answer: the size alone when the caller asked with size 0, the bytes
/// when they fit, ERANGE when they do not (getxattr(2)).
fn reply_xattr_bytes(result: Result<Vec<u8>, Errno>, size: u32, reply: ReplyXattr) {
    match result {
        Ok(bytes) if size == 0 => reply.size(u32::try_from(bytes.len()).unwrap_or(u32::MAX)),
        Ok(bytes) if bytes.len() <= size as usize => reply.data(&bytes),
        Ok(_) => reply.error(Errno::ERANGE),
        Err(error) => reply.error(error),
    }
}

/// What a new entry points at beyond its kind.
#[derive(Clone, Copy)]
enum EntryTarget<'a> {
    None,
    Symlink(&'a [u8]),
    /// A device node's number (`dev_t`); 0 for FIFOs and sockets.
    Device(u64),
}

fn attributes<F: Flash>(state: &MountState<F>, inode: u64) -> Result<fuser::FileAttr, Errno> {
    let record = state.fs.getattr(inode).map_err(fs_error)?;
    Ok(file_attr(inode, &record, page_size(state)))
}

/// An entry's attributes and generation (what a file handle carries beside the inode number).
fn entry_attributes<F: Flash>(state: &MountState<F>, inode: u64) -> Result<(FileAttr, Generation), Errno> {
    let record = state.fs.getattr(inode).map_err(fs_error)?;
    Ok((file_attr(inode, &record, page_size(state)), Generation(u64::from(record.generation))))
}

fn page_size<F: Flash>(state: &MountState<F>) -> u32 {
    state.fs.layout().geometry.page_data_bytes
}

fn time_or_now(time: Option<TimeOrNow>, now_ns: i64) -> Option<i64> {
    time.map(|time| match time {
        TimeOrNow::SpecificTime(time) => time_ns(time),
        TimeOrNow::Now => now_ns,
    })
}

/// The stream of open directory `handle` of `inode` (its own lock; the handle table is held only
/// to find it).
fn directory_stream<F: Flash>(
    state: &MountState<F>,
    handle: FileHandle,
    inode: INodeNo,
) -> Result<Arc<Mutex<DirectoryStream>>, Errno> {
    let stream = state.handles().directories.get(&handle.0).cloned().ok_or(Errno::EBADF)?;
    let stream_inode = stream.lock().unwrap_or_else(PoisonError::into_inner).inode();
    assert_eq!(stream_inode, inode.0, "directory handle {} belongs to another inode", handle.0);
    Ok(stream)
}

/// The ioctls the mount answers (include/uapi/linux/fs.h). The kernel's fileattr calls
/// (chattr, lsattr) send FS_IOC_GETFLAGS/SETFLAGS with a 4-byte int; a program may also use
/// the 32-bit numbers. The label ioctls carry 256 bytes (FSLABEL_MAX), NUL-terminated.
const FS_IOC_GETFLAGS: u32 = 0x8008_6601;
const FS_IOC_SETFLAGS: u32 = 0x4008_6602;
const FS_IOC32_GETFLAGS: u32 = 0x8004_6601;
const FS_IOC32_SETFLAGS: u32 = 0x4004_6602;
const FS_IOC_GETFSLABEL: u32 = 0x8100_9431;
const FS_IOC_SETFSLABEL: u32 = 0x4100_9432;
const FSLABEL_MAX: usize = 256;
/// struct fsxattr (28 bytes: xflags, extsize, nextents, projid, cowextsize, 8 bytes pad).
const FS_IOC_FSGETXATTR: u32 = 0x801c_581f;
const FS_IOC_FSSETXATTR: u32 = 0x401c_5820;
const FSXATTR_BYTES: usize = 28;
/// (FS_*_FL, FS_XFLAG_*) of the flags fsoc keeps.
const XFLAGS: [(u32, u32); 5] = [
    (fsoc_core::fs::attributes::FS_IMMUTABLE_FL, 0x08),
    (fsoc_core::fs::attributes::FS_APPEND_FL, 0x10),
    (fsoc_core::fs::attributes::FS_SYNC_FL, 0x20),
    (fsoc_core::fs::attributes::FS_NOATIME_FL, 0x40),
    (fsoc_core::fs::attributes::FS_NODUMP_FL, 0x80),
];

fn xflags_from_flags(flags: u32) -> u32 {
    XFLAGS.iter().filter(|(flag, _)| flags & flag != 0).fold(0, |xflags, (_, xflag)| xflags | xflag)
}

/// `None` when `xflags` holds a flag fsoc does not keep.
fn flags_from_xflags(xflags: u32) -> Option<u32> {
    let known = XFLAGS.iter().fold(0, |mask, (_, xflag)| mask | xflag);
    (xflags & !known == 0)
        .then(|| XFLAGS.iter().filter(|(_, xflag)| xflags & xflag != 0).fold(0, |flags, (flag, _)| flags | flag))
}

/// Whether open flags ask for writing.
fn opens_for_writing(flags: i32) -> bool {
    flags & libc::O_ACCMODE != libc::O_RDONLY
}

/// Opens `inode` for a new handle, the one way open and create do it: the open is checked
/// against the inode's flags (an immutable or append-only file refuses what ext4 refuses,
/// `FileSystem::check_open`), O_TRUNC truncates (the kernel normally truncates with setattr
/// first; this covers it being passed through), and an fsoc open count is taken (released in
/// `release`). An append-only or sync file is opened for direct I/O: the kernel's write-back
/// cache would otherwise send its writes later and in any order (an append-only file refuses
/// a write past its end; a sync file's writes must be durable when write(2) returns).
fn open_file<F: Flash>(
    state: &mut MountState<F>,
    caller_uid: u32,
    inode: u64,
    flags: i32,
) -> Result<(u64, FopenFlags), Errno> {
    use fsoc_core::fs::records::{INODE_FLAG_APPEND, INODE_FLAG_SYNC};
    let truncate = flags & libc::O_TRUNC != 0;
    let record = state
        .fs
        .check_open(inode, opens_for_writing(flags), flags & libc::O_APPEND != 0, truncate)
        .map_err(fs_error)?;
    if truncate {
        // As a truncate by setattr (FUSE_HANDLE_KILLPRIV_V2; see `setattr`).
        state.fs.kill_privileges(inode, caller_uid != 0).map_err(fs_error)?;
    }
    if truncate && record.size != 0 {
        state.fs.truncate(inode, 0).map_err(fs_error)?;
    }
    let handle = state.handles_mut().allocate_handle()?;
    state.fs.open_inode(inode).map_err(fs_error)?;
    let open = OpenFile { inode, append: flags & libc::O_APPEND != 0, writable: opens_for_writing(flags) };
    state.handles_mut().files.insert(handle, open);
    let direct = record.flags & (INODE_FLAG_APPEND | INODE_FLAG_SYNC) != 0;
    Ok((handle, if direct { OPEN_FLAGS | FopenFlags::FOPEN_DIRECT_IO } else { OPEN_FLAGS }))
}

impl<F: Flash + Send + Sync + 'static> Filesystem for FsocFuse<F> {
    fn init(&mut self, _request: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Both may be refused by an old kernel; the defaults then apply, which are correct too.
        let _ = config.set_max_write(WRITE_BYTES_MAX);
        let _ = config.set_time_granularity(Duration::from_nanos(1));
        let _ = config.set_max_readahead(READAHEAD_BYTES_MAX).or_else(|granted| config.set_max_readahead(granted));
        // Lookups and creates in one directory may run at once (the volume lock orders them).
        let _ = config.add_capabilities(InitFlags::FUSE_PARALLEL_DIROPS);
        // Listings with attributes when the kernel expects lookups to follow (`ls -l`).
        let _ = config.add_capabilities(InitFlags::FUSE_DO_READDIRPLUS | InitFlags::FUSE_READDIRPLUS_AUTO);
        // File handles (open_by_handle_at, NFS export) outlive the kernel's inode: it finds an
        // evicted one again by looking up "." and ".." (see `lookup`).
        let _ = config.add_capabilities(InitFlags::FUSE_EXPORT_SUPPORT);
        if self.writeback_cache && config.add_capabilities(InitFlags::FUSE_WRITEBACK_CACHE).is_ok() {
            self.writeback.store(true, Ordering::Relaxed);
        }
        // POSIX ACLs as ext4's `acl` option gives them: the kernel checks permissions against
        // the lists (reading them with getxattr and caching them) and leaves the umask to the
        // file system, which applies a directory's default ACL instead when it has one.
        // Set-id bits and file capabilities are taken away by the server on write, truncate
        // and chown (`kill_privileges`). Without it the kernel asks for `security.capability`
        // before every write: 4-byte writes ran at 47,000/s instead of 1,000,000/s.
        let _ = config.add_capabilities(InitFlags::FUSE_HANDLE_KILLPRIV_V2);
        // FUSE over io_uring: a request and its reply in one system call on the caller's CPU,
        // instead of a read and a write on /dev/fuse. A metadata round trip took 10–11 µs
        // instead of 21–27 µs on the build machine (docs/MOUNT.md). The kernel offers it only
        // when the fuse module's `enable_uring` parameter is on.
        if let Some(granted) = &self.ring {
            if config.add_capabilities(InitFlags::FUSE_OVER_IO_URING).is_ok() {
                granted.store(true, Ordering::Relaxed);
            }
        }
        if self.posix_acl && config.add_capabilities(InitFlags::FUSE_POSIX_ACL | InitFlags::FUSE_DONT_MASK).is_err() {
            log::warn!("the kernel does not offer POSIX ACLs to FUSE: mounted without them");
        }
        Ok(())
    }

    fn lookup(&self, _request: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let by_handle = matches!(name.as_bytes(), b"." | b"..");
        let result = self.lock.read_on("lookup", Some(parent.0), |state| {
            #[cfg(test)]
            tests::maybe_panic(name);
            let inode = match name.as_bytes() {
                // Export support: the kernel looks up "." in a node id to find an inode it
                // evicted (a file handle names the node id, which is the inode number: never
                // reused, see DESIGN.md), and ".." in a directory to find its parent.
                b"." => parent.0,
                b".." => {
                    let record = state.fs.getattr(parent.0).map_err(fs_error)?;
                    if record.kind != FileKind::Directory {
                        return Err(Errno::ENOTDIR);
                    }
                    if parent.0 == INodeNo::ROOT.0 {
                        parent.0
                    } else {
                        record.parent
                    }
                }
                name => state.fs.lookup(parent.0, name).map_err(fs_error)?.0,
            };
            entry_attributes(state, inode)
        });
        match result {
            Ok(attr) => self.reply_entry(reply, &attr),
            // A handle whose file is gone is stale.
            Err(error) if by_handle && error == Errno::ENOENT => reply.error(Errno::ESTALE),
            // A name that does not exist is remembered by the kernel for the TTL (a negative
            // entry), so a create after a failed lookup, or a program probing for a file,
            // costs no second request. Every change goes through this mount, so the kernel
            // drops the entry itself when the name is made.
            Err(error) if error == Errno::ENOENT => reply.entry(&CACHE_TTL, &negative_entry(), NO_GENERATION),
            Err(error) => reply.error(error),
        }
    }

    /// The kernel dropped `count` references to `inode`; at the last one, an inode kept alive
    /// for it after losing its last name is released (and deleted, unless a file handle still
    /// holds it).
    fn forget(&self, _request: &Request, inode: INodeNo, count: u64) {
        if self.references.forgotten(inode.0, count) {
            // Best effort: a failure leaves the inode on the orphan list, deleted at the next
            // mount.
            let _ =
                self.lock.run_on("forget", Some(inode.0), |state| state.fs.release_inode(inode.0).map_err(fs_error));
        }
    }

    /// statx(2) asking for the birth time: the attributes with it (format version 5 on; an
    /// older volume's inodes record none, and the answer's mask leaves STATX_BTIME out).
    fn statx(
        &self,
        _request: &Request,
        inode: INodeNo,
        _handle: Option<FileHandle>,
        _flags: u32,
        _mask: u32,
        reply: ReplyStatx,
    ) {
        let result = self.lock.read_on("statx", Some(inode.0), |state| {
            let record = state.fs.getattr(inode.0).map_err(fs_error)?;
            let attr = file_attr(inode.0, &record, page_size(state));
            Ok((attr, (record.btime_ns != 0).then_some(attr.crtime)))
        });
        match result {
            Ok((attr, birth_time)) => reply.statx(&CACHE_TTL, &attr, birth_time),
            Err(error) => reply.error(error),
        }
    }

    fn getattr(&self, _request: &Request, inode: INodeNo, _handle: Option<FileHandle>, reply: ReplyAttr) {
        match self.lock.read_on("getattr", Some(inode.0), |state| attributes(state, inode.0)) {
            Ok(attr) => reply.attr(&CACHE_TTL, &attr),
            Err(error) => reply.error(error),
        }
    }

    fn setattr(
        &self,
        request: &Request,
        inode: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _handle: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        // Permission rules (who may chmod, chown, set times, and which set-id bits survive)
        // were applied by the kernel: the mount uses `default_permissions`.
        // chown(2) with both ids -1 reaches the server as a SETATTR of the change time alone
        // (with the write-back cache, which sends the kernel's times) or of nothing (without
        // it): with FUSE_HANDLE_KILLPRIV_V2 the kernel drops the set-id bits' removal and, with
        // it, the mode change whose owner check ext4 applies (notify_change). Both are done here.
        // A SETATTR of nothing is also the kernel's own removal of set-id bits before a write
        // (file_remove_privs, which needs no ownership and whose write then removes the bits,
        // FUSE_WRITE_KILL_SUIDGID): it comes through a file open for writing, so without the
        // write-back cache a SETATTR of nothing on a file some handle has open for writing is
        // taken as that, and as chown(-1, -1) otherwise (docs/MOUNT.md).
        let no_field =
            mode.is_none() && uid.is_none() && gid.is_none() && size.is_none() && atime.is_none() && mtime.is_none();
        let chown_to_same = no_field
            && if self.writeback.load(Ordering::Relaxed) {
                _ctime.is_some()
            } else {
                let open_for_writing = self.lock.read_on("setattr", Some(inode.0), |state| {
                    Ok(state.handles().files.values().any(|open| open.inode == inode.0 && open.writable))
                });
                open_for_writing == Ok(false)
            };
        if chown_to_same {
            let caller = Caller::from_process(request.uid(), request.gid(), request.pid());
            let result = self.lock.run_on("setattr", Some(inode.0), |state| {
                let record = state.fs.getattr(inode.0).map_err(fs_error)?;
                let dropped = set_id_bits_chown_drops(&record, &caller);
                if dropped != 0 && caller.uid != 0 && caller.uid != record.uid {
                    return Err(Errno::EPERM);
                }
                state.fs.kill_privileges(inode.0, false).map_err(fs_error)?;
                let mode = (dropped != 0).then_some(record.mode & !dropped);
                state.fs.setattr_kept_times(inode.0, mode, None, None, None, None).map_err(fs_error)?;
                attributes(state, inode.0)
            });
            return match result {
                Ok(attr) => reply.attr(&CACHE_TTL, &attr),
                Err(error) => reply.error(error),
            };
        }
        let result = self.lock.run_on("setattr", Some(inode.0), |state| {
            // FUSE_HANDLE_KILLPRIV_V2: a truncate or a chown takes the file capability away
            // and, as the kernel would, the set-id bits (a truncate only when the caller is not
            // root: fuser does not pass the kernel's FATTR_KILL_SUIDGID, docs/MOUNT.md).
            let chown = uid.is_some() || gid.is_some();
            if size.is_some() || chown {
                state.fs.kill_privileges(inode.0, chown || request.uid() != 0).map_err(fs_error)?;
            }
            if let Some(size) = size {
                state.fs.truncate(inode.0, size).map_err(fs_error)?;
            }
            let now_ns = state.fs.now_ns;
            let (atime_ns, mtime_ns) = (time_or_now(atime, now_ns), time_or_now(mtime, now_ns));
            let changes_more =
                mode.is_some() || uid.is_some() || gid.is_some() || atime_ns.is_some() || mtime_ns.is_some();
            if changes_more || size.is_none() {
                // An explicit time from the caller is refused on an append-only file, as on
                // ext4; "now" is not, and with the write-back cache the kernel sends the times
                // it keeps for written files as explicit ones, indistinguishable from a
                // caller's, so those are taken (docs/MOUNT.md).
                let explicit = |time: &Option<TimeOrNow>| matches!(time, Some(TimeOrNow::SpecificTime(_)));
                let callers_times = (explicit(&atime) || explicit(&mtime)) && !self.writeback.load(Ordering::Relaxed);
                let mode = mode.map(|mode| mode & 0o7777);
                if callers_times {
                    state.fs.setattr(inode.0, mode, uid, gid, atime_ns, mtime_ns)
                } else {
                    state.fs.setattr_kept_times(inode.0, mode, uid, gid, atime_ns, mtime_ns)
                }
                .map_err(fs_error)?;
            }
            attributes(state, inode.0)
        });
        match result {
            Ok(attr) => reply.attr(&CACHE_TTL, &attr),
            Err(error) => reply.error(error),
        }
    }

    fn readlink(&self, _request: &Request, inode: INodeNo, reply: ReplyData) {
        match self.lock.read_on("readlink", Some(inode.0), |state| state.fs.readlink(inode.0).map_err(fs_error)) {
            Ok(target) => reply.data(&target),
            Err(error) => reply.error(error),
        }
    }

    fn mknod(
        &self,
        request: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        // Regular files, device nodes, FIFOs and sockets (the kernel checked who may make a
        // device node). A volume older than format version 3 keeps only regular files:
        // EPERM, as mknod(2) specifies for a node type the file system does not support.
        let kind = match mode & libc::S_IFMT {
            0 => FileKind::File,
            bits => match FileKind::from_mode_bits(bits) {
                Some(kind) if kind == FileKind::File || kind.is_special() => kind,
                _ => return reply.error(Errno::EINVAL),
            },
        };
        let caller = (request.uid(), request.gid());
        let target = if kind == FileKind::File { EntryTarget::None } else { EntryTarget::Device(rdev_from_fuse(rdev)) };
        let result = self.lock.run_on("mknod", Some(parent.0), |state| {
            let (inode, record) = create_entry(state, caller, parent.0, name.as_bytes(), kind, (mode, umask), target)?;
            Ok((file_attr(inode, &record, page_size(state)), Generation(u64::from(record.generation))))
        });
        match result {
            Ok(attr) => self.reply_entry(reply, &attr),
            Err(error) => reply.error(error),
        }
    }

    fn mkdir(&self, request: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        let caller = (request.uid(), request.gid());
        let result = self.lock.run_on("mkdir", Some(parent.0), |state| {
            let (inode, record) = create_entry(
                state,
                caller,
                parent.0,
                name.as_bytes(),
                FileKind::Directory,
                (mode, umask),
                EntryTarget::None,
            )?;
            Ok((file_attr(inode, &record, page_size(state)), Generation(u64::from(record.generation))))
        });
        match result {
            Ok(attr) => self.reply_entry(reply, &attr),
            Err(error) => reply.error(error),
        }
    }

    fn unlink(&self, _request: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.lock.run_on("unlink", Some(parent.0), |state| {
            self.pin_referenced(state, parent.0, name.as_bytes())?;
            state.fs.remove(parent.0, name.as_bytes(), false).map_err(fs_error)
        }) {
            Ok(()) => reply.ok(),
            Err(error) => reply.error(error),
        }
    }

    fn rmdir(&self, _request: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.lock.run_on("rmdir", Some(parent.0), |state| {
            self.pin_referenced(state, parent.0, name.as_bytes())?;
            state.fs.remove(parent.0, name.as_bytes(), true).map_err(fs_error)
        }) {
            Ok(()) => reply.ok(),
            Err(error) => reply.error(error),
        }
    }

    fn symlink(&self, request: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        let caller = (request.uid(), request.gid());
        let target = target.as_os_str().as_bytes();
        let result = self.lock.run_on("symlink", Some(parent.0), |state| {
            let (inode, record) = create_entry(
                state,
                caller,
                parent.0,
                link_name.as_bytes(),
                FileKind::Symlink,
                (0o777, 0),
                EntryTarget::Symlink(target),
            )?;
            Ok((file_attr(inode, &record, page_size(state)), Generation(u64::from(record.generation))))
        });
        match result {
            Ok(attr) => self.reply_entry(reply, &attr),
            Err(error) => reply.error(error),
        }
    }

    fn rename(
        &self,
        request: &Request,
        parent: INodeNo,
        name: &OsStr,
        new_parent: INodeNo,
        new_name: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let no_replace = flags.contains(RenameFlags::RENAME_NOREPLACE);
        let caller = (request.uid(), request.gid());
        let (source, target) = ((parent.0, name.as_bytes()), (new_parent.0, new_name.as_bytes()));
        let result = self.lock.run_on("rename", Some(parent.0), |state| {
            if flags.contains(RenameFlags::RENAME_EXCHANGE) {
                // The kernel refused EXCHANGE with NOREPLACE or WHITEOUT before asking.
                return state.fs.rename_exchange(source, target).map_err(fs_error);
            }
            // A name renamed over loses its inode's link: keep it alive for the kernel.
            self.pin_referenced(state, new_parent.0, new_name.as_bytes())?;
            if no_replace {
                match state.fs.lookup(new_parent.0, new_name.as_bytes()) {
                    Ok(_) => return Err(Errno::EEXIST),
                    Err(FsError::NotFound) => {}
                    Err(error) => return Err(fs_error(error)),
                }
            }
            if flags.contains(RenameFlags::RENAME_WHITEOUT) {
                // The kernel checked CAP_MKNOD; the whiteout is owned as a new node would be.
                let directory = state.fs.getattr(parent.0).map_err(fs_error)?;
                if directory.kind != FileKind::Directory {
                    return Err(Errno::ENOTDIR);
                }
                let (gid, _) = new_entry_group_and_mode(&directory, FileKind::CharDevice, caller.1, 0);
                return state.fs.rename_whiteout(source, target, (caller.0, gid)).map_err(|error| match error {
                    FsError::NotSupported => Errno::EINVAL,
                    error => fs_error(error),
                });
            }
            state.fs.rename(parent.0, name.as_bytes(), new_parent.0, new_name.as_bytes()).map_err(fs_error)
        });
        match result {
            Ok(()) => reply.ok(),
            Err(error) => reply.error(error),
        }
    }

    fn link(&self, _request: &Request, inode: INodeNo, new_parent: INodeNo, new_name: &OsStr, reply: ReplyEntry) {
        let result = self.lock.run_on("link", Some(inode.0), |state| {
            state.fs.link(inode.0, new_parent.0, new_name.as_bytes()).map_err(fs_error)?;
            entry_attributes(state, inode.0)
        });
        match result {
            Ok(attr) => self.reply_entry(reply, &attr),
            Err(error) => reply.error(error),
        }
    }

    fn open(&self, request: &Request, inode: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let result = self.lock.run_on("open", Some(inode.0), |state| {
            let record = state.fs.getattr(inode.0).map_err(fs_error)?;
            match record.kind {
                FileKind::Directory if flags.0 & libc::O_ACCMODE != libc::O_RDONLY => return Err(Errno::EISDIR),
                FileKind::Symlink => return Err(Errno::ELOOP),
                _ => {}
            }
            open_file(state, request.uid(), inode.0, flags.0)
        });
        match result {
            Ok((handle, open_flags)) => reply.opened(FileHandle(handle), open_flags),
            Err(error) => reply.error(error),
        }
    }

    fn read(
        &self,
        _request: &Request,
        inode: INodeNo,
        _handle: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        // Each receiving thread reuses one buffer (at most `max_write`/readahead in size).
        thread_local! {
            static READ_BUFFER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        READ_BUFFER.with_borrow_mut(|buffer| {
            buffer.resize(size as usize, 0);
            match self
                .lock
                .read_on("read", Some(inode.0), |state| state.fs.read_into(inode.0, offset, buffer).map_err(fs_error))
            {
                Ok(read) => {
                    // Before the reply: the kernel asks for the new atime as soon as it has it.
                    self.record_access(inode.0);
                    reply.data(&buffer[..read]);
                }
                Err(error) => reply.error(error),
            }
        });
    }

    fn write(
        &self,
        _request: &Request,
        inode: INodeNo,
        handle: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let kernel_places_writes = self.kernel_places_writes();
        let result = self.lock.run_on("write", Some(inode.0), |state| {
            let append = !kernel_places_writes
                && state.handles_mut().files.get(&handle.0).map_or(flags.0 & libc::O_APPEND != 0, |file| file.append);
            // O_APPEND: the end of file is read under the lock, so concurrent appenders never
            // overwrite each other.
            let offset = if append { state.fs.getattr(inode.0).map_err(fs_error)?.size } else { offset };
            // FUSE_HANDLE_KILLPRIV_V2: the write takes the file capability away, and the set-id
            // bits when the kernel says the writer may not keep them.
            let set_id_bits = write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID);
            state.fs.kill_privileges(inode.0, set_id_bits).map_err(fs_error)?;
            if kernel_places_writes {
                // The kernel keeps the file's times and sends them with setattr.
                state.fs.write_keeping_times(inode.0, offset, data).map_err(fs_error)
            } else {
                state.fs.write(inode.0, offset, data).map_err(fs_error)
            }
        });
        match result {
            Ok(written) => reply.written(u32::try_from(written).unwrap_or(u32::MAX)),
            Err(error) => reply.error(error),
        }
    }

    fn flush(
        &self,
        _request: &Request,
        _inode: INodeNo,
        _handle: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // Nothing to do at close: the kernel has written the file's cached pages back before it
        // sends FLUSH (and does so with or without it), and durability is fsync's job. ENOSYS
        // tells the kernel to stop sending it, saving a round trip per close.
        reply.error(Errno::ENOSYS);
    }

    fn release(
        &self,
        _request: &Request,
        inode: INodeNo,
        handle: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let result = self.lock.run_on("release", Some(inode.0), |state| {
            let file = state.handles_mut().files.remove(&handle.0).ok_or(Errno::EBADF)?;
            assert_eq!(file.inode, inode.0, "handle {} belongs to inode {}, not {}", handle.0, file.inode, inode.0);
            state.fs.release_inode(file.inode).map_err(fs_error)
        });
        match result {
            Ok(()) => reply.ok(),
            Err(error) => reply.error(error),
        }
    }

    fn fsync(&self, _request: &Request, inode: INodeNo, _handle: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        match self
            .lock
            .run_then_flush_on("fsync", Some(inode.0), |state| state.fs.begin_fsync(inode.0).map_err(fs_error))
        {
            Ok(()) => reply.ok(),
            Err(error) => reply.error(error),
        }
    }

    fn opendir(&self, _request: &Request, inode: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let result = self.lock.run_on("opendir", Some(inode.0), |state| {
            let record = state.fs.getattr(inode.0).map_err(fs_error)?;
            if record.kind != FileKind::Directory {
                return Err(Errno::ENOTDIR);
            }
            let handle = state.handles_mut().allocate_handle()?;
            // An open count keeps a directory removed while listed readable (as empty).
            state.fs.open_inode(inode.0).map_err(fs_error)?;
            let parent = if inode.0 == INodeNo::ROOT.0 { inode.0 } else { record.parent };
            state.handles_mut().directories.insert(handle, Arc::new(Mutex::new(DirectoryStream::new(inode.0, parent))));
            Ok(handle)
        });
        match result {
            Ok(handle) => reply.opened(FileHandle(handle), DIRECTORY_OPEN_FLAGS),
            Err(error) => reply.error(error),
        }
    }

    fn readdir(&self, _request: &Request, inode: INodeNo, handle: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let result = self.lock.read_on("readdir", Some(inode.0), |state| {
            let stream = directory_stream(state, handle, inode)?;
            let mut stream = stream.lock().unwrap_or_else(PoisonError::into_inner);
            stream
                .read(&state.fs, offset, |entry| {
                    reply.add(
                        INodeNo(entry.inode),
                        entry.next_cookie,
                        file_type(entry.kind),
                        OsStr::from_bytes(entry.name),
                    )
                })
                .map_err(fs_error)
        });
        match result {
            Ok(()) => {
                if offset == 0 {
                    self.record_access(inode.0);
                }
                reply.ok();
            }
            Err(error) => reply.error(error),
        }
    }

    /// READDIRPLUS (the kernel asks for it when it expects a lookup of each entry, as `ls -l`
    /// does): each entry comes with its attributes, saving a LOOKUP round trip per entry.
    fn readdirplus(
        &self,
        _request: &Request,
        inode: INodeNo,
        handle: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let result = self.lock.read_on("readdirplus", Some(inode.0), |state| {
            let stream = directory_stream(state, handle, inode)?;
            let mut stream = stream.lock().unwrap_or_else(PoisonError::into_inner);
            let page_size_bytes = page_size(state);
            let mut entry_error = None;
            stream
                .read(&state.fs, offset, |entry| match state.fs.getattr(entry.inode) {
                    Ok(record) => {
                        let attr = file_attr(entry.inode, &record, page_size_bytes);
                        let name = OsStr::from_bytes(entry.name);
                        let generation = Generation(u64::from(record.generation));
                        let full =
                            reply.add(INodeNo(entry.inode), entry.next_cookie, name, &CACHE_TTL, &attr, generation);
                        // The kernel takes a reference to every entry but `.` and `..`.
                        if !full && entry.name != b"." && entry.name != b".." {
                            self.references.taken(entry.inode);
                        }
                        full
                    }
                    Err(error) => {
                        entry_error = Some(error);
                        true // stop here; the error is the answer
                    }
                })
                .map_err(fs_error)?;
            match entry_error {
                Some(error) => Err(fs_error(error)),
                None => Ok(()),
            }
        });
        match result {
            Ok(()) => {
                if offset == 0 {
                    self.record_access(inode.0);
                }
                reply.ok();
            }
            Err(error) => reply.error(error),
        }
    }

    fn releasedir(
        &self,
        _request: &Request,
        _inode: INodeNo,
        handle: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        let result = self.lock.run_on("releasedir", None, |state| {
            let stream = state.handles_mut().directories.remove(&handle.0).ok_or(Errno::EBADF)?;
            let stream_inode = stream.lock().unwrap_or_else(PoisonError::into_inner).inode();
            state.fs.release_inode(stream_inode).map_err(fs_error)
        });
        match result {
            Ok(()) => reply.ok(),
            Err(error) => reply.error(error),
        }
    }

    fn fsyncdir(&self, _request: &Request, inode: INodeNo, _handle: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        match self
            .lock
            .run_then_flush_on("fsyncdir", Some(inode.0), |state| state.fs.begin_fsync(inode.0).map_err(fs_error))
        {
            Ok(()) => reply.ok(),
            Err(error) => reply.error(error),
        }
    }

    fn statfs(&self, _request: &Request, _inode: INodeNo, reply: ReplyStatfs) {
        // Shared once the segment table is in memory; the first statfs after mount loads it.
        let statfs = match self.lock.read_on("statfs", None, |state| Ok(state.fs.statfs_loaded())) {
            Ok(Some(statfs)) => Ok(statfs),
            Ok(None) => self.lock.run_on("statfs", None, |state| state.fs.statfs().map_err(fs_error)),
            Err(error) => Err(error),
        };
        match statfs {
            Ok(statfs) => {
                // fsoc has no inode table: any free page can hold a new inode's records.
                let files_free = statfs.free_blocks;
                let files = statfs.next_inode.saturating_sub(1).saturating_add(files_free);
                reply.statfs(
                    statfs.total_blocks,
                    statfs.free_blocks,
                    statfs.free_blocks,
                    files,
                    files_free,
                    statfs.block_size_bytes,
                    statfs.name_bytes_max,
                    statfs.block_size_bytes,
                )
            }
            Err(error) => reply.error(error),
        }
    }

    // Extended attributes (fsoc-core's xattrs module). Without them (`noxattr`, or a volume
    // older than format version 4) ENOSYS tells the kernel so once: it then answers every
    // later xattr call itself with EOPNOTSUPP and stops asking.
    fn setxattr(
        &self,
        _request: &Request,
        inode: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        if !self.xattrs {
            return reply.error(Errno::ENOSYS);
        }
        let result = self.lock.run_on("setxattr", Some(inode.0), |state| {
            let mode = XattrMode::from_flags(flags).map_err(fs_error)?;
            state.fs.set_xattr(inode.0, name.as_bytes(), value, mode).map_err(fs_error)
        });
        match result {
            Ok(()) => reply.ok(),
            Err(error) => reply.error(error),
        }
    }

    fn getxattr(&self, _request: &Request, inode: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        if !self.xattrs {
            return reply.error(Errno::ENOSYS);
        }
        let result = self
            .lock
            .read_on("getxattr", Some(inode.0), |state| state.fs.get_xattr(inode.0, name.as_bytes()).map_err(fs_error));
        reply_xattr_bytes(result, size, reply);
    }

    fn listxattr(&self, request: &Request, inode: INodeNo, size: u32, reply: ReplyXattr) {
        if !self.xattrs {
            return reply.error(Errno::ENOSYS);
        }
        let result =
            self.lock.read_on("listxattr", Some(inode.0), |state| state.fs.list_xattrs(inode.0).map_err(fs_error));
        // trusted. names are listed only to a privileged caller (CAP_SYS_ADMIN; root here), as
        // ext4 lists them.
        let result = result.map(|list| if request.uid() == 0 { list } else { without_trusted_names(&list) });
        reply_xattr_bytes(result, size, reply);
    }

    fn removexattr(&self, _request: &Request, inode: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        if !self.xattrs {
            return reply.error(Errno::ENOSYS);
        }
        match self.lock.run_on("removexattr", Some(inode.0), |state| {
            state.fs.remove_xattr(inode.0, name.as_bytes()).map_err(fs_error)
        }) {
            Ok(()) => reply.ok(),
            Err(error) => reply.error(error),
        }
    }

    /// SEEK_DATA and SEEK_HOLE (the kernel answers SEEK_SET, SEEK_CUR and SEEK_END itself),
    /// from the file's extents: `cp --sparse`, `tar -S` and backup tools skip the holes.
    fn lseek(
        &self,
        _request: &Request,
        inode: INodeNo,
        _handle: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        let Ok(offset) = u64::try_from(offset) else { return reply.error(Errno::ENXIO) };
        let result = self.lock.read_on("lseek", Some(inode.0), |state| match whence {
            libc::SEEK_DATA => state.fs.seek_data(inode.0, offset).map_err(fs_error),
            libc::SEEK_HOLE => state.fs.seek_hole(inode.0, offset).map_err(fs_error),
            _ => Err(Errno::EINVAL),
        });
        match result.and_then(|found| i64::try_from(found).map_err(|_| Errno::EOVERFLOW)) {
            Ok(found) => reply.offset(found),
            Err(error) => reply.error(error),
        }
    }

    /// chattr/lsattr (FS_IOC_GETFLAGS/SETFLAGS) and the volume label (FS_IOC_GETFSLABEL/
    /// SETFSLABEL), with Linux's rules: only the owner or root changes flags, only root
    /// (CAP_LINUX_IMMUTABLE) changes immutable and append-only, only root (CAP_SYS_ADMIN)
    /// sets the label; any other ioctl is ENOTTY, as ext4 answers.
    fn ioctl(
        &self,
        request: &Request,
        inode: INodeNo,
        _handle: FileHandle,
        _flags: IoctlFlags,
        command: u32,
        in_data: &[u8],
        out_size: u32,
        reply: ReplyIoctl,
    ) {
        let caller = request.uid();
        let result: Result<Vec<u8>, Errno> = match command {
            FS_IOC_GETFLAGS | FS_IOC32_GETFLAGS => self
                .lock
                .read_on("ioctl GETFLAGS", Some(inode.0), |state| state.fs.inode_flags(inode.0).map_err(fs_error))
                .map(|flags| {
                    // An int (4 bytes) from the kernel's fileattr call, a long (8) from a
                    // program's own FS_IOC_GETFLAGS: the low bytes are the same int.
                    let wide = (out_size as usize).clamp(4, 8);
                    let mut out =
                        if wide == 8 { u64::from(flags).to_ne_bytes().to_vec() } else { flags.to_ne_bytes().to_vec() };
                    out.truncate(wide);
                    out
                }),
            FS_IOC_SETFLAGS | FS_IOC32_SETFLAGS => match in_data.get(..4).and_then(|bytes| bytes.try_into().ok()) {
                None => Err(Errno::EINVAL),
                Some(bytes) => self.lock.run_on("ioctl SETFLAGS", Some(inode.0), |state| {
                    let owner = state.fs.getattr(inode.0).map_err(fs_error)?.uid;
                    if caller != 0 && caller != owner {
                        return Err(Errno::EPERM);
                    }
                    let flags = u32::from_ne_bytes(bytes);
                    state.fs.set_inode_flags(inode.0, flags, caller == 0).map_err(fs_error)?;
                    Ok(Vec::new())
                }),
            },
            FS_IOC_GETFSLABEL => self
                .lock
                .read_on("ioctl GETFSLABEL", Some(inode.0), |state| state.fs.label().map_err(fs_error))
                .map(|mut label| {
                    label.resize(FSLABEL_MAX, 0);
                    label
                }),
            FS_IOC_SETFSLABEL => {
                let label = in_data.get(..FSLABEL_MAX).and_then(|bytes| bytes.split(|&byte| byte == 0).next());
                match (caller, label) {
                    (0, Some(label)) if label.len() < FSLABEL_MAX => {
                        self.lock.run_on("ioctl SETFSLABEL", Some(inode.0), |state| {
                            state.fs.set_label(label).map_err(fs_error).map(|()| Vec::new())
                        })
                    }
                    (0, _) => Err(Errno::EINVAL),
                    _ => Err(Errno::EPERM),
                }
            }
            // The kernel's own fileattr_set asks for the current attributes this way first.
            FS_IOC_FSGETXATTR => self
                .lock
                .read_on("ioctl FSGETXATTR", Some(inode.0), |state| state.fs.inode_flags(inode.0).map_err(fs_error))
                .map(|flags| {
                    let mut out = vec![0u8; FSXATTR_BYTES];
                    out[..4].copy_from_slice(&xflags_from_flags(flags).to_ne_bytes());
                    out
                }),
            FS_IOC_FSSETXATTR => match in_data.get(..FSXATTR_BYTES) {
                None => Err(Errno::EINVAL),
                // Extent size hints and project ids are not kept: only their absence is accepted.
                Some(fsxattr) if fsxattr[4..].iter().any(|&byte| byte != 0) => Err(Errno::EOPNOTSUPP),
                Some(fsxattr) => {
                    let xflags = u32::from_ne_bytes([fsxattr[0], fsxattr[1], fsxattr[2], fsxattr[3]]);
                    match flags_from_xflags(xflags) {
                        None => Err(Errno::EOPNOTSUPP),
                        Some(flags) => self.lock.run_on("ioctl FSSETXATTR", Some(inode.0), |state| {
                            let owner = state.fs.getattr(inode.0).map_err(fs_error)?.uid;
                            if caller != 0 && caller != owner {
                                return Err(Errno::EPERM);
                            }
                            state.fs.set_inode_flags(inode.0, flags, caller == 0).map_err(fs_error)?;
                            Ok(Vec::new())
                        }),
                    }
                }
            },
            _ => Err(Errno::ENOTTY),
        };
        match result {
            Ok(out) => reply.ioctl(0, &out),
            Err(error) => reply.error(error),
        }
    }

    /// fallocate, with ext4's modes: 0 and KEEP_SIZE check that the range's unmapped pages
    /// fit the free space and (0) extend the file, PUNCH_HOLE | KEEP_SIZE unmaps the range's
    /// whole pages and zeroes the rest, ZERO_RANGE (with or without KEEP_SIZE) does the same and
    /// may extend the file (fsoc-core's `allocate`, `punch_hole` and `zero_range`: a
    /// copy-on-write log reserves nothing, see `allocate`). COLLAPSE_RANGE, INSERT_RANGE and
    /// UNSHARE_RANGE are EOPNOTSUPP.
    fn fallocate(
        &self,
        _request: &Request,
        inode: INodeNo,
        _handle: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        const KEEP_SIZE: i32 = libc::FALLOC_FL_KEEP_SIZE;
        const PUNCH: i32 = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        const ZERO: i32 = libc::FALLOC_FL_ZERO_RANGE;
        let result = self.lock.run_on("fallocate", Some(inode.0), |state| {
            let fs = &mut state.fs;
            match mode {
                0 => fs.allocate(inode.0, offset, length, false),
                KEEP_SIZE => fs.allocate(inode.0, offset, length, true),
                PUNCH => fs.punch_hole(inode.0, offset, length),
                ZERO => fs.zero_range(inode.0, offset, length, false),
                _ if mode == ZERO | KEEP_SIZE => fs.zero_range(inode.0, offset, length, true),
                _ => return Err(Errno::EOPNOTSUPP),
            }
            .map_err(fs_error)
        });
        match result {
            Ok(()) => reply.ok(),
            Err(error) => reply.error(error),
        }
    }

    /// copy_file_range(2), as reads and writes inside the server (no data crosses to the
    /// kernel): up to `COPY_RANGE_BYTES_MAX` per call, `COPY_CHUNK_BYTES` under the lock at a
    /// time, so other callers run between chunks. A short count is a valid answer (callers
    /// loop); a failure after the first chunk answers with what was copied. Holes in the
    /// source are copied as zeros.
    fn copy_file_range(
        &self,
        request: &Request,
        inode_in: INodeNo,
        _handle_in: FileHandle,
        offset_in: u64,
        inode_out: INodeNo,
        _handle_out: FileHandle,
        offset_out: u64,
        length: u64,
        flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        if flags.bits() != 0 {
            return reply.error(Errno::EINVAL);
        }
        let length = length.min(COPY_RANGE_BYTES_MAX);
        let set_id_bits = request.uid() != 0;
        let mut copied = 0u64;
        while copied < length {
            let chunk = usize::try_from((length - copied).min(COPY_CHUNK_BYTES)).unwrap_or(usize::MAX);
            let (Some(from), Some(to)) = (offset_in.checked_add(copied), offset_out.checked_add(copied)) else {
                return reply.error(Errno::EINVAL);
            };
            let result = self.lock.run_on("copy_file_range", Some(inode_out.0), |state| {
                let data = state.fs.read(inode_in.0, from, chunk).map_err(fs_error)?;
                if data.is_empty() {
                    return Ok(0);
                }
                if copied == 0 {
                    state.fs.kill_privileges(inode_out.0, set_id_bits).map_err(fs_error)?;
                }
                state.fs.write(inode_out.0, to, &data).map_err(fs_error)
            });
            match result {
                Ok(written) => {
                    copied += written as u64;
                    if written < chunk {
                        break;
                    }
                }
                Err(error) if copied == 0 => return reply.error(error),
                Err(_) => break,
            }
        }
        if copied > 0 {
            self.record_access(inode_in.0);
        }
        reply.written(u32::try_from(copied).unwrap_or(u32::MAX))
    }

    fn access(&self, request: &Request, inode: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        // Not called under `default_permissions` (the kernel checks), but answered correctly
        // should the volume ever be mounted without it.
        let caller = Caller::from_process(request.uid(), request.gid(), request.pid());
        let result = self.lock.read_on("access", Some(inode.0), |state| {
            let record = state.fs.getattr(inode.0).map_err(fs_error)?;
            let mask = (mask.bits() as u32) & 0o7;
            if may_access(&record, &caller, mask) {
                Ok(())
            } else {
                Err(Errno::EACCES)
            }
        });
        match result {
            Ok(()) => reply.ok(),
            Err(error) => reply.error(error),
        }
    }

    fn create(
        &self,
        request: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let caller = (request.uid(), request.gid());
        let result = self.lock.run_on("create", Some(parent.0), |state| {
            let created = create_entry(
                state,
                caller,
                parent.0,
                name.as_bytes(),
                FileKind::File,
                (mode, umask),
                EntryTarget::None,
            );
            let inode = match created {
                Ok((inode, _)) => inode,
                // Someone else created it since the kernel looked: open it, unless O_EXCL.
                Err(error) if error == Errno::EEXIST && flags & libc::O_EXCL == 0 => {
                    let (inode, kind) = state.fs.lookup(parent.0, name.as_bytes()).map_err(fs_error)?;
                    match kind {
                        FileKind::Directory => return Err(Errno::EISDIR),
                        FileKind::Symlink => return Err(Errno::ELOOP),
                        _ => {}
                    }
                    inode
                }
                Err(error) => return Err(error),
            };
            let (handle, open_flags) = open_file(state, caller.0, inode, flags)?;
            Ok((entry_attributes(state, inode)?, handle, open_flags))
        });
        match result {
            Ok(((attr, generation), handle, open_flags)) => {
                self.references.taken(attr.ino.0);
                reply.created(&CACHE_TTL, &attr, generation, FileHandle(handle), open_flags)
            }
            Err(error) => reply.error(error),
        }
    }

    /// open(2) with O_TMPFILE: an open file without a name, link count 0, in `parent` (the
    /// kernel checked write and search permission on it). linkat(2) may name it later
    /// (`link`); otherwise it is deleted when the kernel forgets it, or at the next mount.
    fn tmpfile(&self, request: &Request, parent: INodeNo, mode: u32, umask: u32, flags: i32, reply: ReplyCreate) {
        let (uid, caller_gid) = (request.uid(), request.gid());
        let result = self.lock.run_on("tmpfile", Some(parent.0), |state| {
            let directory = state.fs.getattr(parent.0).map_err(fs_error)?;
            if directory.kind != FileKind::Directory {
                return Err(Errno::ENOTDIR);
            }
            let (gid, mode) = new_entry_group_and_mode(&directory, FileKind::File, caller_gid, mode);
            let new = NewInode { kind: FileKind::File, mode, umask, uid, gid, rdev: 0, symlink_target: None };
            // One open count comes with the inode: it stands for the kernel's reference, and
            // is released by `forget` (the pin of `KernelReferences`).
            let inode = state.fs.create_unnamed(parent.0, &new).map_err(fs_error)?;
            match open_file(state, uid, inode, flags) {
                Ok((handle, open_flags)) => Ok((entry_attributes(state, inode)?, handle, open_flags)),
                Err(error) => {
                    let _ = state.fs.release_inode(inode);
                    Err(error)
                }
            }
        });
        match result {
            Ok(((attr, generation), handle, open_flags)) => {
                self.references.taken_pinned(attr.ino.0);
                reply.created(&CACHE_TTL, &attr, generation, FileHandle(handle), open_flags)
            }
            Err(error) => reply.error(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;
    use std::sync::Mutex;

    use fsoc_core::{FileSystem, FsConfig};
    use fsoc_media::{Profile, SimConfig, SimFlash};

    use crate::session::{Mount, MountConfig};

    /// A name whose lookup panics (a stand-in for a bug in a callback).
    static PANIC_ON_LOOKUP: Mutex<Option<Vec<u8>>> = Mutex::new(None);

    pub(super) fn maybe_panic(name: &OsStr) {
        use std::os::unix::ffi::OsStrExt;
        let armed =
            PANIC_ON_LOOKUP.lock().map(|name_armed| name_armed.as_deref() == Some(name.as_bytes())).unwrap_or(false);
        assert!(!armed, "injected bug in lookup");
    }

    /// A panic inside a callback of a real mount: the caller gets EIO, later calls too, the
    /// mount still unmounts, and the volume keeps its last committed state and is fsck-clean.
    #[test]
    fn a_panicking_callback_answers_eio_and_keeps_the_volume_consistent() {
        assert!(std::path::Path::new("/dev/fuse").exists(), "/dev/fuse is missing: this test needs FUSE (run as root)");
        let flash = SimFlash::create(SimConfig::new(Profile::Mlc, 1, 128, 1)).expect("flash");
        let fs = FileSystem::format(flash, FsConfig::default(), 1).expect("format");
        let directory = tempfile::tempdir().expect("tempdir");
        let mount_point = directory.path().join("mnt");
        std::fs::create_dir(&mount_point).expect("mkdir");
        let mut mount = Mount::new(fs, &mount_point, &MountConfig::default()).expect("mount");
        let mut unmounter = mount.unmounter();
        let background = mount.spawn().expect("serve");
        let durable = mount_point.join("durable");
        std::fs::write(&durable, b"fsync'd").expect("write");
        std::fs::File::open(&durable).expect("open").sync_all().expect("fsync");
        std::fs::write(mount_point.join("volatile"), b"not fsync'd").expect("write");
        *PANIC_ON_LOOKUP.lock().expect("lock") = Some(b"trigger-bug".to_vec());
        let error = std::fs::metadata(mount_point.join("trigger-bug")).expect_err("lookup panics");
        assert_eq!(error.raw_os_error(), Some(libc::EIO), "the panic became EIO");
        let error = std::fs::write(mount_point.join("after"), b"x").expect_err("the volume stopped");
        assert_eq!(error.raw_os_error(), Some(libc::EIO));
        unmounter.unmount().expect("unmount");
        let served = background.join().expect("session");
        assert!(
            served.failure.as_deref().is_some_and(|failure| failure.contains("injected bug")),
            "{:?}",
            served.failure
        );
        let flash = served.fs.unmount().expect("a poisoned volume unmounts without committing");
        let mut fs = FileSystem::mount(flash, FsConfig::default()).expect("remount");
        assert!(fs.fsck(true).expect("fsck").is_clean());
        let (inode, _) = fs.lookup(1, b"durable").expect("the fsync'd file survives");
        assert_eq!(fs.read(inode, 0, 64).expect("read"), b"fsync'd");
        assert!(fs.lookup(1, b"volatile").is_err(), "changes after the last commit are gone, as after a crash");
    }
}
