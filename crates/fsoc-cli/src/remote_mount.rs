//! `fsoc mount --remote ADDRESS MOUNTPOINT`: a FUSE file system on this host that forwards
//! every kernel request to an `fsoc serve` through fsoc-client (the user-space stand-in for the
//! kernel's v9fs), until it is unmounted (Ctrl-C, SIGTERM, `fsoc umount`, `fusermount3 -u`).
//!
//! Each inode the kernel knows holds one fid (walked from its parent at lookup, clunked when
//! the kernel forgets the inode); each open file or directory holds another fid, opened with
//! Tlopen/Tlcreate and clunked at release. Requests run on several threads at once and their
//! 9P requests share the one connection, in flight together.
//!
//! Caching: attributes and names are cached by the kernel for `CACHE_TTL` (1 s), and file
//! pages are dropped at every open (no FOPEN_KEEP_CACHE): the server may be changed by other
//! hosts too, so a change made elsewhere is seen within a second, and file contents at the
//! next open (close-to-open, as NFS). The kernel's write-back cache (the local mount's default)
//! is off: with it the kernel keeps a file's size itself and would not see another host change
//! it; `-o writeback_cache` turns it on for a volume only this mount writes (small writes are
//! then gathered by the kernel and sent at write-back, fsync or close).
//!
//! An open fid released by the kernel is kept (one per inode) for the next open of the file,
//! until the kernel forgets the inode: a file unlinked while so kept stays allocated on the
//! server until then (the kernel forgets an unlinked inode as soon as nothing uses it).
//!
//! Invariants: the kernel's lookup count of an inode is the count kept here, and its fid is
//! clunked exactly when that count reaches zero (the root's never); every errno the server
//! sends reaches the caller unchanged, and a lost connection is EIO (logged).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fsoc_9p::constants::{dirent_type, open_flags, setattr};
use fsoc_9p::{SetAttributes, Timestamp};
use fsoc_client::{Client, ConnectOptions, Metadata, Node};
use fsoc_fuse::{negative_entry, MountConfig};
use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags, KernelConfig,
    LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry,
    ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, Session, TimeOrNow, WriteFlags,
};

use crate::mount_options::MountOptions;

#[path = "remote_directory_attributes.rs"]
mod directory_attributes;
#[path = "remote_write_behind.rs"]
mod write_behind;
use directory_attributes::DirectoryAttributes;
use write_behind::{OpenFile, WriteBehind};

/// How long the kernel may cache attributes and names: short, because another host may change
/// the volume through its own connection (this mount's own changes update the kernel's caches
/// as they are made).
pub const CACHE_TTL: Duration = Duration::from_secs(1);
const GENERATION: Generation = Generation(0);
/// Largest write the kernel sends in one request (split into Twrites of the iounit, pipelined).
const WRITE_BYTES_MAX: u32 = 1 << 20;
const READAHEAD_BYTES_MAX: u32 = 1 << 20;
/// Bytes of entries asked per Treaddir: the kernel's readdir buffer is one page, and a FUSE
/// entry is never smaller than a 9P one, so more would only be fetched to be dropped.
const READDIR_BYTES: u32 = 4096;

struct InodeEntry {
    node: Arc<Node>,
    /// The kernel's lookup count; `u64::MAX` for the root, which is never forgotten.
    lookups: u64,
    /// A fid of this file opened read-write by a handle since released, kept for the next open
    /// (saving its Twalk, Tlopen and Tclunk); clunked when the kernel forgets the inode.
    idle_open: Option<Node>,
    /// The same for a fid opened read-write with O_APPEND (the server places its writes), kept
    /// for the next append: PostMark opens every file it appends to anew.
    idle_append: Option<Node>,
}

struct HandleEntry {
    node: Arc<Node>,
    /// Opened O_APPEND with the server placing each write at the end.
    server_append: bool,
    /// The inode whose `idle_open` may take the fid back at release (opened read-write).
    reusable_for: Option<u64>,
}

/// The FUSE side of a remote mount.
pub struct RemoteFs {
    client: Client,
    inodes: Mutex<HashMap<u64, InodeEntry>>,
    handles: Mutex<HashMap<u64, HandleEntry>>,
    next_handle: AtomicU64,
    writeback_cache: bool,
    /// Small writes gathered per inode while the kernel's write-back cache is off.
    write_behind: WriteBehind,
    writeback: AtomicBool,
    /// Directory attributes fetched with this mount's creates and unlinks, for the GETATTR
    /// the kernel sends after each.
    directories: DirectoryAttributes,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The errno for a client error: the server's errno unchanged, EIO for a lost connection or a
/// protocol error (logged, since the caller sees only EIO).
fn errno(error: io::Error) -> Errno {
    match error.raw_os_error() {
        Some(number) => Errno::from_i32(number),
        None => {
            log::error!("answering EIO: {error}");
            Errno::EIO
        }
    }
}

fn timestamp(time: SystemTime) -> Timestamp {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    Timestamp { seconds: since.as_secs(), nanoseconds: u64::from(since.subsec_nanos()) }
}

fn file_attr(metadata: &Metadata) -> FileAttr {
    let kind = if metadata.is_dir() {
        FileType::Directory
    } else if metadata.is_symlink() {
        FileType::Symlink
    } else {
        FileType::RegularFile
    };
    FileAttr {
        ino: INodeNo(metadata.ino()),
        size: metadata.len(),
        blocks: metadata.blocks(),
        atime: metadata.accessed(),
        mtime: metadata.modified(),
        ctime: metadata.changed(),
        crtime: metadata.changed(),
        kind,
        perm: (metadata.mode() & 0o7777) as u16,
        nlink: u32::try_from(metadata.nlink()).unwrap_or(u32::MAX),
        uid: metadata.uid(),
        gid: metadata.gid(),
        rdev: 0,
        blksize: u32::try_from(metadata.blksize()).unwrap_or(4096),
        flags: 0,
    }
}

fn dirent_file_type(kind: u8) -> FileType {
    match kind {
        dirent_type::DIRECTORY => FileType::Directory,
        dirent_type::SYMLINK => FileType::Symlink,
        _ => FileType::RegularFile,
    }
}

impl RemoteFs {
    pub fn new(client: Client, writeback_cache: bool) -> io::Result<RemoteFs> {
        let root = client.root().clone_node()?;
        let root_ino = root.qid().path;
        assert_eq!(root_ino, INodeNo::ROOT.0, "the server's root must be inode 1, FUSE's root");
        let inodes = HashMap::from([(
            root_ino,
            InodeEntry { node: Arc::new(root), lookups: u64::MAX, idle_open: None, idle_append: None },
        )]);
        Ok(RemoteFs {
            client,
            inodes: Mutex::new(inodes),
            handles: Mutex::new(HashMap::new()),
            next_handle: AtomicU64::new(1),
            writeback_cache,
            write_behind: WriteBehind::default(),
            writeback: AtomicBool::new(false),
            directories: DirectoryAttributes::default(),
        })
    }

    fn node(&self, inode: INodeNo) -> Result<Arc<Node>, Errno> {
        // The kernel names only inodes it looked up and has not forgotten.
        lock(&self.inodes).get(&inode.0).map(|entry| entry.node.clone()).ok_or(Errno::ESTALE)
    }

    fn handle(&self, handle: FileHandle) -> Result<Arc<Node>, Errno> {
        lock(&self.handles).get(&handle.0).map(|entry| entry.node.clone()).ok_or(Errno::EBADF)
    }

    /// A handle's open fid and whether the server places its writes (O_APPEND).
    fn handle_entry(&self, handle: FileHandle) -> Result<(Arc<Node>, bool), Errno> {
        lock(&self.handles).get(&handle.0).map(|entry| (entry.node.clone(), entry.server_append)).ok_or(Errno::EBADF)
    }

    /// A new handle for the open fid `node`.
    fn add_handle(&self, node: Node, reusable_for: Option<u64>, server_append: bool) -> FileHandle {
        let handle = self.next_handle.fetch_add(1, Ordering::Relaxed);
        lock(&self.handles).insert(handle, HandleEntry { node: Arc::new(node), server_append, reusable_for });
        FileHandle(handle)
    }

    /// Ends a handle: its fid goes back to its inode's idle slot if it may and the slot is
    /// free, else it is clunked (when the last reference, a read or write still running on
    /// another thread, drops).
    fn release_handle(&self, handle: FileHandle) -> Result<(), Errno> {
        let entry = lock(&self.handles).remove(&handle.0).ok_or(Errno::EBADF)?;
        let (Some(inode), Ok(node)) = (entry.reusable_for, Arc::try_unwrap(entry.node)) else { return Ok(()) };
        let mut inodes = lock(&self.inodes);
        if let Some(inode_entry) = inodes.get_mut(&inode) {
            let slot = if entry.server_append { &mut inode_entry.idle_append } else { &mut inode_entry.idle_open };
            if slot.is_none() {
                *slot = Some(node);
            }
        }
        Ok(())
    }

    /// Opens a file for a new handle. Files are opened read-write on the server whatever the
    /// kernel asked (it checks permissions itself under `default_permissions`), so one open fid
    /// serves any later open: it is kept at release and taken again here, saving a Twalk, a
    /// Tlopen and a Tclunk per open. An append without the write-back cache needs the server's
    /// O_APPEND (it places each write at the end): such fids are kept apart, for appends. An
    /// open whose read-write open is refused (a read-only server, a file the attach's user may
    /// not write) gets a fid of its own with the kernel's flags.
    fn open_file(&self, inode: INodeNo, flags: i32) -> Result<FileHandle, Errno> {
        let writeback = self.writeback.load(Ordering::Relaxed);
        let server_append = flags & libc::O_APPEND != 0 && !writeback;
        let idle = lock(&self.inodes).get_mut(&inode.0).and_then(|entry| {
            if server_append {
                entry.idle_append.take()
            } else {
                entry.idle_open.take()
            }
        });
        let node = self.node(inode)?;
        if flags & libc::O_TRUNC != 0 {
            // Gathered writes land before the truncation, as they were made.
            self.write_behind.settle(inode.0);
        }
        if let Some(opened) = idle {
            if flags & libc::O_TRUNC != 0 {
                opened
                    .setattr(SetAttributes { valid_mask: setattr::SIZE, size_bytes: 0, ..SetAttributes::default() })
                    .map_err(errno)?;
            }
            return Ok(self.add_handle(opened, Some(inode.0), server_append));
        }
        let truncate = if flags & libc::O_TRUNC != 0 { open_flags::TRUNCATE } else { 0 };
        let append = if server_append { open_flags::APPEND } else { 0 };
        match node.open_clone(open_flags::READ_WRITE | truncate | append) {
            Ok(opened) => return Ok(self.add_handle(opened, Some(inode.0), server_append)),
            Err(error) if matches!(error.raw_os_error(), Some(libc::EROFS | libc::EISDIR | libc::EACCES)) => {}
            Err(error) => return Err(errno(error)),
        }
        let opened = node.open_clone(self.open_flags(flags)).map_err(errno)?;
        Ok(self.add_handle(opened, None, server_append))
    }

    /// Counts one kernel lookup of `node`'s inode: the first keeps the node (its fid), later
    /// ones drop theirs (clunked).
    fn remember(&self, node: Node, metadata: &Metadata) {
        let mut inodes = lock(&self.inodes);
        match inodes.get_mut(&metadata.ino()) {
            Some(entry) => entry.lookups = entry.lookups.saturating_add(1),
            None => {
                inodes.insert(
                    metadata.ino(),
                    InodeEntry { node: Arc::new(node), lookups: 1, idle_open: None, idle_append: None },
                );
            }
        }
    }

    /// Walks `name` in `parent`, describes it and counts the lookup.
    fn look_up(&self, parent: INodeNo, name: &OsStr) -> Result<FileAttr, Errno> {
        let directory = self.node(parent)?;
        // The walk and the attributes in one round trip (on an ordered connection).
        let (node, mut metadata) = directory.walk_with_attributes(&[name.as_bytes()]).map_err(errno)?;
        // The size the kernel is told must count this mount's gathered writes.
        if self.write_behind.holds(node.qid().path) {
            self.write_behind.settle(node.qid().path);
            metadata = node.getattr().map_err(errno)?;
        }
        let attr = file_attr(&metadata);
        self.remember(node, &metadata);
        Ok(attr)
    }

    /// Looks up `name`, just made in `parent` by the server (which makes the attach's user the
    /// owner), and gives it to the calling user `uid` when that is someone else.
    fn look_up_made(&self, parent: INodeNo, name: &OsStr, uid: u32) -> Result<FileAttr, Errno> {
        let attr = self.look_up(parent, name)?;
        if uid != attr.uid {
            self.own(&*self.node(attr.ino)?, uid)?;
            return Ok(FileAttr { uid, ..attr });
        }
        Ok(attr)
    }

    /// After a create by the server (which makes the attach's user the owner), gives the new
    /// file to the calling user when that is someone else.
    fn own(&self, node: &Node, uid: u32) -> Result<(), Errno> {
        if uid == self.client.options().uid {
            return Ok(());
        }
        node.setattr(SetAttributes { valid_mask: setattr::UID, uid, ..SetAttributes::default() }).map_err(errno)
    }

    /// The Tlopen flags for the kernel's open flags: the access mode, O_TRUNC and O_APPEND. With
    /// the write-back cache the kernel reads pages of files open for writing only, and places
    /// appends itself.
    fn open_flags(&self, flags: i32) -> u32 {
        let mut access = (flags & libc::O_ACCMODE) as u32;
        let writeback = self.writeback.load(Ordering::Relaxed);
        if writeback && access == open_flags::WRITE_ONLY {
            access = open_flags::READ_WRITE;
        }
        let mut result = access;
        if flags & libc::O_TRUNC != 0 {
            result |= open_flags::TRUNCATE;
        }
        if flags & libc::O_APPEND != 0 && !writeback {
            result |= open_flags::APPEND;
        }
        result
    }

    /// Unlinks `name` in `parent`, fetching the directory's attributes after it for the
    /// kernel's next GETATTR of it.
    fn unlink_in(&self, parent: INodeNo, name: &OsStr, directory: bool) -> Result<(), Errno> {
        let epoch = self.directories.epoch();
        let after = self.node(parent)?.unlinkat_with_attributes(name.as_bytes(), directory).map_err(errno)?;
        if let Some(metadata) = after {
            self.directories.keep(epoch, file_attr(&metadata));
        }
        Ok(())
    }

    fn pipeline_depth(&self) -> usize {
        self.client.options().pipeline_depth
    }
}

fn time_or_now(time: Option<TimeOrNow>, now_bit: u32, set_bit: u32) -> (u32, Timestamp) {
    match time {
        None => (0, Timestamp::default()),
        Some(TimeOrNow::Now) => (now_bit, Timestamp::default()),
        Some(TimeOrNow::SpecificTime(time)) => (now_bit | set_bit, timestamp(time)),
    }
}

impl Filesystem for RemoteFs {
    fn init(&mut self, _request: &Request, config: &mut KernelConfig) -> io::Result<()> {
        let _ = config.set_max_write(WRITE_BYTES_MAX);
        let _ = config.set_time_granularity(Duration::from_nanos(1));
        let _ = config.set_max_readahead(READAHEAD_BYTES_MAX).or_else(|granted| config.set_max_readahead(granted));
        let _ = config.add_capabilities(InitFlags::FUSE_PARALLEL_DIROPS);
        if self.writeback_cache && config.add_capabilities(InitFlags::FUSE_WRITEBACK_CACHE).is_ok() {
            self.writeback.store(true, Ordering::Relaxed);
        }
        Ok(())
    }

    fn lookup(&self, _request: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.look_up(parent, name) {
            Ok(attr) => reply.entry(&CACHE_TTL, &attr, GENERATION),
            // A name that does not exist is remembered by the kernel for the TTL, as a name
            // that does (node id 0: a negative entry), so a create after a failed lookup, or a
            // program probing for a file, costs no second round trip; a name made by another
            // host is seen within the TTL, as every other change of it.
            Err(error) if error == Errno::ENOENT => reply.entry(&CACHE_TTL, &negative_entry(), GENERATION),
            Err(error) => reply.error(error),
        }
    }

    fn forget(&self, _request: &Request, inode: INodeNo, lookup_count: u64) {
        let mut inodes = lock(&self.inodes);
        if let Some(entry) = inodes.get_mut(&inode.0) {
            if entry.lookups == u64::MAX {
                return;
            }
            entry.lookups = entry.lookups.saturating_sub(lookup_count);
            if entry.lookups == 0 {
                // Dropping the last reference clunks the fid.
                inodes.remove(&inode.0);
                self.write_behind.forget(inode.0);
                self.directories.forget(inode.0);
            }
        }
    }

    fn getattr(&self, _request: &Request, inode: INodeNo, _handle: Option<FileHandle>, reply: ReplyAttr) {
        if let Some(attr) = self.directories.take(inode.0) {
            reply.attr(&CACHE_TTL, &attr);
            return;
        }
        self.write_behind.settle(inode.0);
        match self.node(inode).and_then(|node| node.getattr().map_err(errno)) {
            Ok(metadata) => reply.attr(&CACHE_TTL, &file_attr(&metadata)),
            Err(error) => reply.error(error),
        }
    }

    fn setattr(
        &self,
        _request: &Request,
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
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let (atime_bits, access_time) = time_or_now(atime, setattr::ATIME, setattr::ATIME_SET);
        let (mtime_bits, modify_time) = time_or_now(mtime, setattr::MTIME, setattr::MTIME_SET);
        let mut attributes =
            SetAttributes { valid_mask: atime_bits | mtime_bits, access_time, modify_time, ..SetAttributes::default() };
        if let Some(mode) = mode {
            attributes.valid_mask |= setattr::MODE;
            attributes.mode = mode & 0o7777;
        }
        if let Some(uid) = uid {
            attributes.valid_mask |= setattr::UID;
            attributes.uid = uid;
        }
        if let Some(gid) = gid {
            attributes.valid_mask |= setattr::GID;
            attributes.gid = gid;
        }
        if let Some(size) = size {
            attributes.valid_mask |= setattr::SIZE;
            attributes.size_bytes = size;
        }
        self.write_behind.settle(inode.0);
        let result = self.node(inode).and_then(|node| {
            if attributes.valid_mask != 0 {
                return node.setattr_with_attributes(attributes).map_err(errno);
            }
            node.getattr().map_err(errno)
        });
        // After the change: an attribute fetch that began before it may not be kept.
        self.directories.forget(inode.0);
        match result {
            Ok(metadata) => reply.attr(&CACHE_TTL, &file_attr(&metadata)),
            Err(error) => reply.error(error),
        }
    }

    fn readlink(&self, _request: &Request, inode: INodeNo, reply: ReplyData) {
        match self.node(inode).and_then(|node| node.readlink().map_err(errno)) {
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
        _umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        // Only regular files, as on the local mount (the server refuses other nodes too).
        let file_format = mode & libc::S_IFMT;
        if file_format != 0 && file_format != libc::S_IFREG {
            reply.error(Errno::EPERM);
            return;
        }
        let result = self.node(parent).and_then(|directory| {
            let mut node = directory.clone_node().map_err(errno)?;
            let flags = open_flags::WRITE_ONLY | open_flags::CREATE | open_flags::EXCLUSIVE;
            node.lcreate(name.as_bytes(), flags, mode & 0o7777, request.gid()).map_err(errno)?;
            self.own(&node, request.uid())?;
            drop(node);
            self.look_up(parent, name)
        });
        // After the change: an attribute fetch that began before it may not be kept.
        self.directories.forget(parent.0);
        match result {
            Ok(attr) => reply.entry(&CACHE_TTL, &attr, GENERATION),
            Err(error) => reply.error(error),
        }
    }

    fn mkdir(&self, request: &Request, parent: INodeNo, name: &OsStr, mode: u32, _umask: u32, reply: ReplyEntry) {
        let result = self.node(parent).and_then(|directory| {
            directory.mkdir(name.as_bytes(), mode & 0o7777, request.gid()).map_err(errno)?;
            self.look_up_made(parent, name, request.uid())
        });
        // After the change: an attribute fetch that began before it may not be kept.
        self.directories.forget(parent.0);
        match result {
            Ok(attr) => reply.entry(&CACHE_TTL, &attr, GENERATION),
            Err(error) => reply.error(error),
        }
    }

    fn unlink(&self, _request: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.unlink_in(parent, name, false) {
            Ok(()) => reply.ok(),
            Err(error) => reply.error(error),
        }
    }

    fn rmdir(&self, _request: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.unlink_in(parent, name, true) {
            Ok(()) => reply.ok(),
            Err(error) => reply.error(error),
        }
    }

    fn symlink(&self, request: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        let result = self.node(parent).and_then(|directory| {
            let target = target.as_os_str().as_bytes();
            directory.symlink(link_name.as_bytes(), target, request.gid()).map_err(errno)?;
            self.look_up_made(parent, link_name, request.uid())
        });
        // After the change: an attribute fetch that began before it may not be kept.
        self.directories.forget(parent.0);
        match result {
            Ok(attr) => reply.entry(&CACHE_TTL, &attr, GENERATION),
            Err(error) => reply.error(error),
        }
    }

    fn rename(
        &self,
        _request: &Request,
        parent: INodeNo,
        name: &OsStr,
        new_parent: INodeNo,
        new_name: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if flags.intersects(RenameFlags::RENAME_EXCHANGE | RenameFlags::RENAME_WHITEOUT) {
            reply.error(Errno::EINVAL);
            return;
        }
        let result = self.node(parent).and_then(|from| {
            let to = self.node(new_parent)?;
            if flags.contains(RenameFlags::RENAME_NOREPLACE) {
                // Not atomic across hosts: 9P has no rename that refuses to replace.
                match to.walk(&[new_name.as_bytes()]) {
                    Ok(_) => return Err(Errno::EEXIST),
                    Err(error) if error.kind() == io::ErrorKind::NotFound => {}
                    Err(error) => return Err(errno(error)),
                }
            }
            from.renameat(name.as_bytes(), &to, new_name.as_bytes()).map_err(errno)
        });
        // After the change: an attribute fetch that began before it may not be kept.
        self.directories.forget(parent.0);
        self.directories.forget(new_parent.0);
        match result {
            Ok(()) => reply.ok(),
            Err(error) => reply.error(error),
        }
    }

    fn link(&self, _request: &Request, inode: INodeNo, new_parent: INodeNo, new_name: &OsStr, reply: ReplyEntry) {
        let result = self.node(inode).and_then(|file| {
            self.node(new_parent)?.link(&file, new_name.as_bytes()).map_err(errno)?;
            let metadata = file.getattr().map_err(errno)?;
            // A link's entry counts as a lookup of the inode, which is known already.
            if let Some(entry) = lock(&self.inodes).get_mut(&inode.0) {
                entry.lookups = entry.lookups.saturating_add(1);
            }
            Ok(file_attr(&metadata))
        });
        // After the change: an attribute fetch that began before it may not be kept.
        self.directories.forget(new_parent.0);
        match result {
            Ok(attr) => reply.entry(&CACHE_TTL, &attr, GENERATION),
            Err(error) => reply.error(error),
        }
    }

    fn open(&self, _request: &Request, inode: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        match self.open_file(inode, flags.0) {
            // No FOPEN_KEEP_CACHE: another host may have changed the file since the last open.
            Ok(handle) => reply.opened(handle, FopenFlags::empty()),
            Err(error) => reply.error(error),
        }
    }

    fn read(
        &self,
        _request: &Request,
        inode: INodeNo,
        handle: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        thread_local! {
            static READ_BUFFER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        let node = match self.handle(handle) {
            Ok(node) => node,
            Err(error) => return reply.error(error),
        };
        self.write_behind.settle(inode.0);
        READ_BUFFER.with_borrow_mut(|buffer| {
            buffer.resize(size as usize, 0);
            let read = if size > node.iounit() {
                node.read_at_pipelined(offset, buffer, self.pipeline_depth())
            } else {
                node.read_at(offset, buffer)
            };
            match read {
                Ok(read) => reply.data(&buffer[..read]),
                Err(error) => reply.error(errno(error)),
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
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let send_directly = |node: &Node, offset: u64, data: &[u8]| {
            if data.len() > node.iounit() as usize {
                node.write_at_pipelined(offset, data, self.pipeline_depth()).map_err(errno)
            } else {
                node.write_at(offset, data).map_err(errno)
            }
        };
        let result = self.handle_entry(handle).and_then(|(node, server_append)| {
            if self.writeback.load(Ordering::Relaxed) {
                // The kernel gathers writes itself.
                return send_directly(&node, offset, data);
            }
            let file = OpenFile { handle: handle.0, node: &node, server_append };
            self.write_behind.write(inode.0, file, offset, data, send_directly)
        });
        match result {
            Ok(written) => reply.written(u32::try_from(written).unwrap_or(u32::MAX)),
            Err(error) => reply.error(error),
        }
    }

    fn flush(&self, _request: &Request, inode: INodeNo, _handle: FileHandle, _owner: LockOwner, reply: ReplyEmpty) {
        // At every close: the file's gathered writes go to the server (close-to-open), and a
        // write-behind that failed is reported here (durability is still fsync's).
        match self.write_behind.flush(inode.0) {
            Ok(()) => reply.ok(),
            Err(error) => reply.error(error),
        }
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
        // Writes gathered through the handle (a memory map's, written after the last close)
        // go out on its fid first. Then the fid is kept for the next open of the file, or
        // clunked: the server then releases the file.
        let sent = self.write_behind.flush(inode.0);
        let released = self.release_handle(handle);
        match sent.and(released) {
            Ok(()) => reply.ok(),
            Err(error) => reply.error(error),
        }
    }

    fn fsync(&self, _request: &Request, inode: INodeNo, handle: FileHandle, datasync: bool, reply: ReplyEmpty) {
        let flushed = self.write_behind.flush(inode.0);
        match flushed.and_then(|()| self.handle(handle)).and_then(|node| node.fsync(datasync).map_err(errno)) {
            Ok(()) => reply.ok(),
            Err(error) => reply.error(error),
        }
    }

    fn opendir(&self, _request: &Request, inode: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let result = self.node(inode).and_then(|node| {
            let mut opened = node.clone_node().map_err(errno)?;
            opened.lopen(open_flags::READ_ONLY | open_flags::DIRECTORY).map_err(errno)?;
            Ok(self.add_handle(opened, None, false))
        });
        match result {
            Ok(handle) => reply.opened(handle, FopenFlags::empty()),
            Err(error) => reply.error(error),
        }
    }

    fn readdir(&self, _request: &Request, _inode: INodeNo, handle: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        // The kernel's offset is the 9P cookie of the last entry it took (0 at the start), so a
        // listing continues exactly where the server's cookies say.
        let entries = match self.handle(handle).and_then(|node| node.readdir(offset, READDIR_BYTES).map_err(errno)) {
            Ok(entries) => entries,
            Err(error) => return reply.error(error),
        };
        for entry in entries {
            let name = OsStr::from_bytes(&entry.name);
            if reply.add(INodeNo(entry.qid.path), entry.offset, dirent_file_type(entry.dirent_type), name) {
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(
        &self,
        _request: &Request,
        _inode: INodeNo,
        handle: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        match lock(&self.handles).remove(&handle.0) {
            Some(_) => reply.ok(),
            None => reply.error(Errno::EBADF),
        }
    }

    fn fsyncdir(&self, _request: &Request, _inode: INodeNo, handle: FileHandle, datasync: bool, reply: ReplyEmpty) {
        match self.handle(handle).and_then(|node| node.fsync(datasync).map_err(errno)) {
            Ok(()) => reply.ok(),
            Err(error) => reply.error(error),
        }
    }

    fn statfs(&self, _request: &Request, _inode: INodeNo, reply: ReplyStatfs) {
        match self.client.statfs() {
            Ok(stats) => reply.statfs(
                stats.block_count,
                stats.free_block_count,
                stats.available_block_count,
                stats.file_count,
                stats.free_file_count,
                stats.block_size_bytes,
                stats.name_length_max,
                stats.block_size_bytes,
            ),
            Err(error) => reply.error(errno(error)),
        }
    }

    // Extended attributes are not forwarded yet (the server serves them: Txattrwalk,
    // Txattrcreate); ENOSYS tells the kernel once, so it stops asking for security.capability
    // before every write (forwarding them needs FUSE_HANDLE_KILLPRIV_V2 here too, as the local
    // mount negotiates it).
    fn setxattr(
        &self,
        _request: &Request,
        _inode: INodeNo,
        _name: &OsStr,
        _value: &[u8],
        _flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        reply.error(Errno::ENOSYS);
    }

    fn getxattr(&self, _request: &Request, _inode: INodeNo, _name: &OsStr, _size: u32, reply: ReplyXattr) {
        reply.error(Errno::ENOSYS);
    }

    fn listxattr(&self, _request: &Request, _inode: INodeNo, _size: u32, reply: ReplyXattr) {
        reply.error(Errno::ENOSYS);
    }

    fn removexattr(&self, _request: &Request, _inode: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(Errno::ENOSYS);
    }

    fn create(
        &self,
        request: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let result = self.node(parent).and_then(|directory| {
            // Read-write unless it is an append the server must place (see open_file), so the
            // fid can serve later opens.
            let server_append = flags & libc::O_APPEND != 0 && !self.writeback.load(Ordering::Relaxed);
            let access = self.open_flags(flags) & !open_flags::ACCESS_MODE_MASK | open_flags::READ_WRITE;
            let mut create_flags = access | open_flags::CREATE;
            if flags & libc::O_EXCL != 0 {
                create_flags |= open_flags::EXCLUSIVE;
            }
            let mode = mode & 0o7777;
            let (opened, node, metadata) = if request.uid() == self.client.options().uid {
                // The create, the inode's own fid (a clone of the open one: clones are never
                // open), its attributes and the directory's after the create: one round trip
                // on an ordered connection.
                let epoch = self.directories.epoch();
                let created =
                    directory.create_file(name.as_bytes(), create_flags, mode, request.gid(), true).map_err(errno)?;
                if let Some(directory) = &created.directory {
                    self.directories.keep(epoch, file_attr(directory));
                }
                (created.opened, created.node, created.metadata)
            } else {
                // Given to the caller after the create, then described.
                let mut opened = directory.clone_node().map_err(errno)?;
                opened.lcreate(name.as_bytes(), create_flags, mode, request.gid()).map_err(errno)?;
                self.own(&opened, request.uid())?;
                let (node, metadata) = opened.clone_with_attributes().map_err(errno)?;
                (opened, node, metadata)
            };
            let attr = file_attr(&metadata);
            self.remember(node, &metadata);
            // Created read-write: kept at release like any open fid (with the appending ones
            // when the server places its writes).
            Ok((attr, self.add_handle(opened, Some(metadata.ino()), server_append)))
        });
        if request.uid() != self.client.options().uid {
            // The create made without the directory's attributes: what is kept of them is old.
            self.directories.forget(parent.0);
        }
        match result {
            Ok((attr, handle)) => reply.created(&CACHE_TTL, &attr, GENERATION, handle, FopenFlags::empty()),
            Err(error) => reply.error(error),
        }
    }
}

/// `fsoc mount --remote ADDRESS MOUNTPOINT`: connects, mounts, serves until unmounted.
/// `ready` is called once the mount is live (`--daemon` reports it to the parent).
pub fn serve(
    address: &str,
    mount_point: &Path,
    secret_file: Option<&Path>,
    options: &MountOptions,
    verbose: bool,
    ready: &mut dyn FnMut(),
) -> Result<(), String> {
    fsoc_fuse::logger::install("fsoc mount", verbose);
    let mount_point: PathBuf = fsoc_fuse::check_mount_point(mount_point).map_err(|error| error.to_string())?;
    let mut config = MountConfig::default();
    options.configure(&mut config);
    let mut connect_options = ConnectOptions::default();
    if let Some(path) = secret_file {
        connect_options = connect_options.secret_file(path).map_err(|error| error.to_string())?;
    }
    // Block the stopping signals before any thread starts (the client's connection has its
    // own), so only `sigwait` takes them.
    let signals = crate::serve_cmd::block_termination_signals();
    let client = Client::connect(address, &connect_options).map_err(|error| format!("{address}: {error}"))?;
    // The kernel's write-back cache makes it the authority on a file's size: a size changed by
    // another host would not be seen (tests/remote_mount.rs). Off unless asked for with
    // `-o writeback_cache`, for a volume this mount alone writes.
    let writeback_cache = options.writeback_cache.unwrap_or(false);
    let remote = RemoteFs::new(client, writeback_cache).map_err(|error| format!("{address}: {error}"))?;
    // The local mount's options; the mount table's source names the server.
    let config = MountConfig { source: format!("{}:{address}", fsoc_fuse::FS_NAME), ..config };
    let mut session = Session::new(remote, &mount_point, &fsoc_fuse::fuser_config(&config))
        .map_err(|error| format!("cannot mount on {}: {error}", mount_point.display()))?;
    let mut unmounter = session.unmount_callable();
    let shown = mount_point.display().to_string();
    std::thread::Builder::new()
        .name("fsoc-signals".into())
        .spawn(move || {
            let mut signal = 0;
            // SAFETY: `signals` is a valid set and `signal` a valid out-pointer.
            if unsafe { libc::sigwait(&signals, &mut signal) } == 0 {
                log::info!("signal {signal}: unmounting {shown}");
                if let Err(error) = unmounter.unmount() {
                    log::error!("cannot unmount {shown}: {error}");
                }
            }
        })
        .map_err(|error| format!("cannot start the signal thread: {error}"))?;
    eprintln!(
        "fsoc: {address} mounted on {}; unmount with Ctrl-C or `fsoc umount {}`",
        mount_point.display(),
        mount_point.display()
    );
    ready();
    session.run().map_err(|error| format!("{}: the FUSE session ended: {error}", mount_point.display()))?;
    log::info!("{} unmounted", mount_point.display());
    Ok(())
}
