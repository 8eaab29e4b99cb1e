//! Mounting a volume, serving it until it is unmounted, and handing the file system back for
//! a clean unmount (commit) afterwards.
//!
//! Invariants: the mount point is checked before anything is mounted (missing, not a
//! directory, already a mount point, FUSE device absent), each with its own `MountError`;
//! `Mount::run` returns only after the kernel has dropped the mount, so the caller's commit
//! is the last write to the volume.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use fsoc_core::fs::attributes::AccessTimes;
use fsoc_core::txn::TxnError;
use fsoc_core::{FileSystem, FsError};
use fsoc_media::Flash;
use fuser::{Config, MountOption, Session, SessionACL, SessionUnmounter};

use crate::adapter::FsocFuse;
use crate::volume_lock::VolumeLock;

pub const FUSE_DEVICE: &str = "/dev/fuse";
/// The source name the mount table shows (`fsoc on /mnt type fuse`), alone or as the prefix
/// of `fsoc:IMAGE`.
pub const FS_NAME: &str = "fsoc";

/// How to mount.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountConfig {
    /// Let every user use the mount (`allow_other`); the kernel still checks permissions
    /// (`default_permissions`). Normally on when mounted by root.
    pub allow_other: bool,
    pub read_only: bool,
    /// Threads receiving kernel requests. Read-only requests (lookups, attributes, reads,
    /// listings) run on them at once; changes take the volume exclusively.
    pub thread_count: usize,
    /// Let the kernel's page cache gather writes (FUSE `writeback_cache`): small writes reach
    /// the volume as a few large ones, at writeback, fsync, close or unmount. fsync and close
    /// keep their meaning (the kernel writes the file's dirty pages back before it sends
    /// either); until then a write lives only in the kernel, as on any Linux file system.
    pub writeback_cache: bool,
    /// What the mount table shows as the source: `fsoc`, or `fsoc:IMAGE` (see `source_for`).
    pub source: String,
    /// A transaction point this often when something changed (ext4's `commit=5`, Reliance
    /// Edge's timer trigger), so work left on the mount survives a crash of the host within
    /// about this time; `None` commits only on fsync, explicit transact and unmount.
    pub commit_interval: Option<Duration>,
    /// Honour set-user-id and set-group-id bits (`suid`; off: `nosuid`). On by default when
    /// root mounts, as for a kernel file system; an unprivileged mount cannot have it.
    pub set_user_id: bool,
    /// Let device nodes on the mount work (`dev`; off: `nodev`). Same default as `set_user_id`.
    pub devices: bool,
    /// Let programs on the mount run (`exec`; off: `noexec`, execve fails with EACCES).
    pub execute: bool,
    /// The kernel's access-time mode by its mount(8) name: `relatime` (the kernel's default,
    /// also what `atime` gives), `noatime` or `strictatime` (root only). The kernel leaves a
    /// FUSE file's atime to the server, which updates it by this rule on the reads and
    /// listings that reach it (`FsocFuse::with_access_times`).
    pub access_time: &'static str,
    /// Serve extended attributes (`xattr`; off: `noxattr`, which also turns ACLs off). Needs
    /// a volume of format version 4; an older volume is mounted without them.
    pub xattrs: bool,
    /// Enforce POSIX ACLs (`acl`, the default as on ext4; off: `noacl`).
    pub posix_acl: bool,
    /// Pages a second the background scrub reads (`scrub=N`; 0 turns it off): the whole log,
    /// a few pages at a time, with data found near the ECC's limit moved before it is lost
    /// (fsoc-engine's `BackgroundScrubber`).
    pub scrub_pages_per_second: u32,
    /// Use FUSE over io_uring when the kernel offers it (`io_uring`; off by default:
    /// `no_io_uring`). Linux offers it from 6.14 when the fuse module's `enable_uring`
    /// parameter is on (`/sys/module/fuse/parameters/enable_uring`); otherwise, and with this
    /// off, requests go through /dev/fuse. Off by default because it is faster only while the
    /// server and the programs using the mount share a scheduling group (docs/MOUNT.md).
    pub io_uring: bool,
}

/// Default periodic transaction point of a mount.
pub const COMMIT_INTERVAL_DEFAULT: Duration = Duration::from_secs(5);

impl Default for MountConfig {
    fn default() -> Self {
        MountConfig {
            allow_other: is_root(),
            read_only: false,
            thread_count: 4,
            writeback_cache: true,
            source: FS_NAME.into(),
            commit_interval: Some(COMMIT_INTERVAL_DEFAULT),
            set_user_id: is_root(),
            devices: is_root(),
            execute: true,
            access_time: "relatime",
            xattrs: true,
            posix_acl: true,
            scrub_pages_per_second: fsoc_engine::SCRUB_PAGES_PER_SECOND_DEFAULT,
            io_uring: false,
        }
    }
}

/// The mount-table source naming `image` (canonical path): the path itself, as a kernel file
/// system shows its device, so `fsoc umount`, mount(8)'s remount and `mount -a` find the image
/// of a mount point. Paths that mount options cannot carry (commas, whitespace, backslashes,
/// non-UTF-8) give plain `fsoc`.
pub fn source_for(image: &Path) -> String {
    match image.to_str() {
        Some(path)
            if !path.contains(|character: char| character == ',' || character.is_whitespace() || character == '\\') =>
        {
            path.to_string()
        }
        _ => FS_NAME.into(),
    }
}

/// The image named by the mount-table source of the fsoc mount at `mount_point` (canonical):
/// `Ok(Some(image))` when the source names it, `Ok(None)` for an fsoc mount without an image
/// name, and an error when no fsoc mount is there. An fsoc mount has type `fuse.fsoc` (or, made
/// by an older fsoc, type `fuse` and source `fsoc` or `fsoc:IMAGE`).
pub fn mounted_image(mount_point: &Path) -> Result<Option<PathBuf>, String> {
    let table =
        std::fs::read_to_string("/proc/self/mountinfo").map_err(|error| format!("/proc/self/mountinfo: {error}"))?;
    let wanted = escape_mount_path(mount_point);
    // The last entry for a path is the one on top.
    let line = table
        .lines()
        .rfind(|line| line.split(' ').nth(4) == Some(wanted.as_str()))
        .ok_or_else(|| format!("{} is not a mount point", mount_point.display()))?;
    let after_separator = line.split(" - ").nth(1).unwrap_or("");
    let mut fields = after_separator.split(' ');
    let (file_system_type, source) = (fields.next().unwrap_or(""), fields.next().unwrap_or(""));
    let subtype = format!("fuse.{FS_NAME}");
    let older = file_system_type == "fuse" && (source == FS_NAME || source.starts_with("fsoc:"));
    if file_system_type != subtype && !older {
        return Err(format!("{} is not an fsoc mount ({file_system_type} from {source})", mount_point.display()));
    }
    let path = source.strip_prefix("fsoc:").unwrap_or(source);
    Ok(path.starts_with('/').then(|| PathBuf::from(unescape_mount_path(path))))
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

#[derive(Debug, thiserror::Error)]
pub enum MountError {
    #[error("mount point {0} does not exist")]
    MountPointMissing(PathBuf),
    #[error("mount point {0} is not a directory")]
    MountPointNotDirectory(PathBuf),
    #[error("mount point {0} is busy: something is already mounted there")]
    MountPointBusy(PathBuf),
    #[error("{FUSE_DEVICE} is missing: load the fuse kernel module (`modprobe fuse`), or give the container the device (`--device /dev/fuse`)")]
    FuseDeviceMissing,
    #[error("{FUSE_DEVICE} is not readable and writable by this user: mount as root, or let users open it (mode 0666, the usual udev default)")]
    FuseDeviceNotAccessible,
    #[error("permission denied mounting on {path}: {detail}")]
    PermissionDenied { path: PathBuf, detail: String },
    #[error("cannot mount on {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("the mount ended but the file system is still referenced (a bug)")]
    StillReferenced,
    #[error("unknown access-time mode \"{0}\" (relatime, noatime or strictatime)")]
    UnknownAccessTime(String),
    #[error("only root may mount with {0}: a FUSE mount by another user is always nosuid and nodev, and fusermount3 knows no strictatime")]
    OptionNeedsRoot(&'static str),
}

/// Checks the mount point and the FUSE device before mounting, so each problem gets its own
/// message instead of a bare errno from the mount call.
pub fn check_mount_point(path: &Path) -> Result<PathBuf, MountError> {
    let metadata = match std::fs::metadata(path) {
        Ok(metadata) => metadata,
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            return Err(MountError::MountPointMissing(path.into()))
        }
        // ENOTCONN: a dead FUSE mount (its server was killed) is still in the mount table.
        Err(error) if error.raw_os_error() == Some(libc::ENOTCONN) => {
            return Err(MountError::MountPointBusy(path.into()))
        }
        Err(source) => return Err(MountError::Io { path: path.into(), source }),
    };
    if !metadata.is_dir() {
        return Err(MountError::MountPointNotDirectory(path.into()));
    }
    let canonical = path.canonicalize().map_err(|source| MountError::Io { path: path.into(), source })?;
    if is_mount_point(&canonical) {
        return Err(MountError::MountPointBusy(path.into()));
    }
    if !Path::new(FUSE_DEVICE).exists() {
        return Err(MountError::FuseDeviceMissing);
    }
    Ok(canonical)
}

/// Whether `path` (canonical) is a mount point, from `/proc/self/mountinfo`.
pub fn is_mount_point(path: &Path) -> bool {
    let Ok(table) = std::fs::read_to_string("/proc/self/mountinfo") else { return false };
    let wanted = escape_mount_path(path);
    table.lines().any(|line| line.split(' ').nth(4) == Some(wanted.as_str()))
}

/// Mount points in /proc/self/mountinfo escape space, tab, newline and backslash as octal.
fn escape_mount_path(path: &Path) -> String {
    let mut escaped = String::new();
    for character in path.to_string_lossy().chars() {
        match character {
            ' ' => escaped.push_str("\\040"),
            '\t' => escaped.push_str("\\011"),
            '\n' => escaped.push_str("\\012"),
            '\\' => escaped.push_str("\\134"),
            other => escaped.push(other),
        }
    }
    escaped
}

/// Undoes `escape_mount_path`, and the kernel's escaping of mount-table fields (octal escapes
/// `\NNN`; anything else is kept as it is).
pub fn unescape_mount_path(escaped: &str) -> String {
    let mut bytes = Vec::with_capacity(escaped.len());
    let mut rest = escaped.as_bytes();
    while let Some((&byte, tail)) = rest.split_first() {
        let octal = tail.get(..3).filter(|digits| digits.iter().all(|digit| (b'0'..=b'7').contains(digit)));
        match octal {
            Some(digits) if byte == b'\\' => {
                let value = digits.iter().fold(0u32, |value, digit| value * 8 + u32::from(digit - b'0'));
                bytes.push(u8::try_from(value).unwrap_or(b'?'));
                rest = tail.get(3..).unwrap_or_default();
            }
            _ => {
                bytes.push(byte);
                rest = tail;
            }
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

fn fuse_device_accessible() -> bool {
    let device = std::ffi::CString::new(FUSE_DEVICE).expect("no NUL in a constant");
    // SAFETY: access() with a valid C string; no memory is written.
    unsafe { libc::access(device.as_ptr(), libc::R_OK | libc::W_OK) == 0 }
}

/// fuser's configuration for a mount of `config` (also `fsoc mount --remote`'s, whose source
/// names the server).
pub fn fuser_config(config: &MountConfig) -> Config {
    let mut mount_options = vec![
        MountOption::FSName(config.source.clone()),
        // The kernel's own `subtype=` option (fuser's `Subtype` reaches only fusermount3): the
        // mount table then says `fuse.fsoc`, by which mount(8) and umount(8) find fsoc's helpers.
        MountOption::CUSTOM(format!("subtype={FS_NAME}")),
        MountOption::DefaultPermissions,
        if config.read_only { MountOption::RO } else { MountOption::RW },
        if config.set_user_id { MountOption::Suid } else { MountOption::NoSuid },
        if config.devices { MountOption::Dev } else { MountOption::NoDev },
        if config.execute { MountOption::Exec } else { MountOption::NoExec },
    ];
    // `relatime` is what the kernel gives a mount without an access-time flag; `strictatime`
    // has no fuser option and is set after mounting (`Mount::new`).
    if config.access_time == ACCESS_TIME_NEVER {
        mount_options.push(MountOption::NoAtime);
    }
    let mut fuser_config = Config::default();
    fuser_config.mount_options = mount_options;
    fuser_config.acl = if config.allow_other { SessionACL::All } else { SessionACL::Owner };
    fuser_config.n_threads = Some(config.thread_count.max(1));
    fuser_config
}

const ACCESS_TIME_RELATIVE: &str = "relatime";
const ACCESS_TIME_NEVER: &str = "noatime";
const ACCESS_TIME_STRICT: &str = "strictatime";

/// The rule reads follow for an access-time mode `check_config` accepted.
fn access_times(mode: &str) -> AccessTimes {
    match mode {
        ACCESS_TIME_NEVER => AccessTimes::Never,
        ACCESS_TIME_STRICT => AccessTimes::Strict,
        _ => AccessTimes::Relative,
    }
}

/// Refuses what the kernel would refuse or silently drop, before anything is mounted.
fn check_config(config: &MountConfig) -> Result<(), MountError> {
    if ![ACCESS_TIME_RELATIVE, ACCESS_TIME_NEVER, ACCESS_TIME_STRICT].contains(&config.access_time) {
        return Err(MountError::UnknownAccessTime(config.access_time.to_string()));
    }
    // fusermount3 mounts an unprivileged user's volume nosuid,nodev and knows no strictatime.
    if !is_root() {
        for (asked, option) in [
            (config.set_user_id, "suid"),
            (config.devices, "dev"),
            (config.access_time == ACCESS_TIME_STRICT, ACCESS_TIME_STRICT),
        ] {
            if asked {
                return Err(MountError::OptionNeedsRoot(option));
            }
        }
    }
    Ok(())
}

impl MountConfig {
    /// The mount(2) flags of the per-mount settings (as /proc/self/mountinfo shows them: ro,
    /// nosuid, nodev, noexec and the access-time mode), for a remount.
    pub fn per_mount_flags(&self) -> libc::c_ulong {
        per_mount_flags(self)
    }
}

fn per_mount_flags(config: &MountConfig) -> libc::c_ulong {
    let mut flags = 0;
    for (set, flag) in [
        (config.read_only, libc::MS_RDONLY),
        (!config.set_user_id, libc::MS_NOSUID),
        (!config.devices, libc::MS_NODEV),
        (!config.execute, libc::MS_NOEXEC),
        (config.access_time == ACCESS_TIME_NEVER, libc::MS_NOATIME),
        (config.access_time == ACCESS_TIME_STRICT, libc::MS_STRICTATIME),
    ] {
        if set {
            flags |= flag;
        }
    }
    flags
}

/// Replaces the per-mount flags of the mount at `mount_point` (a bind remount: the file
/// system itself is not asked anything, so this works before the server serves requests).
fn set_per_mount_flags(mount_point: &Path, flags: libc::c_ulong) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(mount_point.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "mount point contains NUL"))?;
    // SAFETY: `path` is a valid NUL-terminated string; the other pointers may be null for a
    // bind remount.
    let result = unsafe {
        libc::mount(
            std::ptr::null(),
            path.as_ptr(),
            std::ptr::null(),
            libc::MS_REMOUNT | libc::MS_BIND | flags,
            std::ptr::null(),
        )
    };
    if result == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A mounted volume, not yet serving requests (the kernel queues them until `run`).
pub struct Mount<F: Flash + Send + Sync + 'static> {
    session: Session<FsocFuse<F>>,
    lock: Arc<VolumeLock<F>>,
    mount_point: PathBuf,
    commit_interval: Option<Duration>,
    scrub_pages_per_second: u32,
    /// Commit requests (`CommitHandle`) wait here until `run` starts the committer thread.
    commit_requests: Arc<CommitRequests>,
    /// The kernel granted FUSE over io_uring (set during the handshake, before `new` returns).
    ring: Arc<AtomicBool>,
}

impl<F: Flash + Send + Sync + 'static> Mount<F> {
    /// Whether requests travel over io_uring rather than /dev/fuse (`MountConfig::io_uring`).
    pub fn uses_io_uring(&self) -> bool {
        self.ring.load(Ordering::Relaxed)
    }

    /// Mounts `fs` on `mount_point` (checked with `check_mount_point` first).
    pub fn new(fs: FileSystem<F>, mount_point: &Path, config: &MountConfig) -> Result<Mount<F>, MountError> {
        check_config(config)?;
        let mount_point = check_mount_point(mount_point)?;
        let lock = Arc::new(VolumeLock::new(fs));
        let ring = Arc::new(AtomicBool::new(false));
        let mut adapter = FsocFuse::new(lock.clone(), config.writeback_cache, config.xattrs, config.posix_acl)
            .with_access_times(access_times(config.access_time));
        if config.io_uring {
            adapter = adapter.with_io_uring(ring.clone());
        }
        let session = Session::new(adapter, &mount_point, &fuser_config(config)).map_err(|source| {
            match source.raw_os_error() {
                Some(libc::EBUSY) => MountError::MountPointBusy(mount_point.clone()),
                Some(libc::ENOENT) if !Path::new(FUSE_DEVICE).exists() => MountError::FuseDeviceMissing,
                Some(libc::EACCES) if !fuse_device_accessible() => MountError::FuseDeviceNotAccessible,
                Some(libc::EPERM | libc::EACCES) => {
                    MountError::PermissionDenied { path: mount_point.clone(), detail: source.to_string() }
                }
                _ if source.kind() == io::ErrorKind::PermissionDenied => {
                    MountError::PermissionDenied { path: mount_point.clone(), detail: source.to_string() }
                }
                _ => MountError::Io { path: mount_point.clone(), source },
            }
        })?;
        if config.access_time == ACCESS_TIME_STRICT {
            // Dropping `session` on error unmounts again.
            set_per_mount_flags(&mount_point, per_mount_flags(config))
                .map_err(|source| MountError::Io { path: mount_point.clone(), source })?;
        }
        Ok(Mount {
            session,
            lock,
            mount_point,
            commit_interval: config.commit_interval,
            scrub_pages_per_second: config.scrub_pages_per_second,
            commit_requests: Arc::new(CommitRequests::default()),
            ring,
        })
    }

    /// A handle that makes a transaction point on request, from any thread, while the volume
    /// is served (`mount -o remount,ro` asks for one through `fsoc mount`'s signal thread).
    pub fn commit_handle(&self) -> CommitHandle {
        CommitHandle { requests: Arc::downgrade(&self.commit_requests) }
    }

    /// A handle that makes a read-only mount's volume writable, from any thread, while it is
    /// served (`mount -o remount,rw` asks through `fsoc mount`'s signal thread). The flash
    /// under the volume must take writes: the caller opened it so.
    pub fn writable_handle(&self) -> WritableHandle<F> {
        WritableHandle { lock: Arc::downgrade(&self.lock) }
    }

    pub fn mount_point(&self) -> &Path {
        &self.mount_point
    }

    /// A handle that unmounts from another thread (a signal handler thread, a test).
    pub fn unmounter(&mut self) -> Unmounter {
        Unmounter { inner: self.session.unmount_callable(), mount_point: self.mount_point.clone() }
    }

    /// Serves requests until the volume is unmounted (`fusermount3 -u`, `umount`, or an
    /// `Unmounter`), then returns the file system for the caller's clean unmount.
    pub fn run(self) -> Result<Served<F>, MountError> {
        let Mount { session, lock, commit_interval, scrub_pages_per_second, commit_requests, .. } = self;
        // Started on a read-only mount too, which commits nothing until it is remounted
        // writable (`WritableHandle`): from then on it commits as a writable mount does.
        let interval = commit_interval.filter(|interval| !interval.is_zero());
        let committer = Committer::start(Arc::downgrade(&lock), interval, commit_requests)
            .map_err(|source| MountError::Io { path: PathBuf::from("(commit thread)"), source })?;
        // Scrubbing is upkeep, not service: a mount without its thread still serves. It moves
        // weak data only while the volume is writable.
        let scrubber = (scrub_pages_per_second > 0)
            .then(|| fsoc_engine::BackgroundScrubber::start(Arc::downgrade(&lock), scrub_pages_per_second, true))
            .and_then(|started| {
                started.inspect_err(|error| log::warn!("no background scrub: its thread did not start: {error}")).ok()
            });
        let session_error = session.run().err();
        if let Some(error) = &session_error {
            log::error!("FUSE session ended with an error: {error}");
        }
        if let Some(scrubber) = scrubber {
            scrubber.stop();
        }
        // The committer holds the volume only while it commits: stop it before taking the
        // volume back for the final commit.
        committer.stop();
        let lock = Arc::try_unwrap(lock).map_err(|_| MountError::StillReferenced)?;
        let state = lock.into_state();
        let failure = state.failure().map(str::to_owned);
        Ok(Served { fs: state.fs, failure, session_error })
    }

    /// Serves requests on a background thread (for tests and embedding).
    pub fn spawn(self) -> io::Result<BackgroundMount<F>> {
        let thread = std::thread::Builder::new().name("fsoc-fuse".into()).spawn(move || self.run())?;
        Ok(BackgroundMount { thread })
    }
}

/// Where the committer thread sends one requester the outcome of its commit.
type CommitAnswer = mpsc::Sender<Result<(), String>>;

/// Commit requests waiting for the committer thread; `None` once it has stopped, so a late
/// request fails at once instead of waiting for an answer that never comes.
struct CommitRequests {
    pending: Mutex<Option<Vec<CommitAnswer>>>,
    thread: Mutex<Option<std::thread::Thread>>,
}

impl Default for CommitRequests {
    fn default() -> Self {
        CommitRequests { pending: Mutex::new(Some(Vec::new())), thread: Mutex::new(None) }
    }
}

/// Asks a served volume for a transaction point now (see `Mount::commit_handle`).
#[derive(Clone)]
pub struct CommitHandle {
    requests: Weak<CommitRequests>,
}

impl CommitHandle {
    /// Commits the volume's changes (a delta commit, or nothing when nothing changed) and
    /// waits for it, at most `timeout`. A read-only volume has nothing to commit.
    pub fn commit(&self, timeout: Duration) -> Result<(), String> {
        let requests = self.requests.upgrade().ok_or("the volume is no longer served")?;
        let (sender, receiver) = mpsc::channel();
        match requests.pending.lock().unwrap_or_else(PoisonError::into_inner).as_mut() {
            Some(pending) => pending.push(sender),
            None => return Err("the volume is no longer served".into()),
        }
        if let Some(thread) = requests.thread.lock().unwrap_or_else(PoisonError::into_inner).as_ref() {
            thread.unpark();
        }
        drop(requests);
        match receiver.recv_timeout(timeout) {
            Ok(result) => result,
            Err(mpsc::RecvTimeoutError::Timeout) => Err(format!("no commit within {timeout:?}")),
            Err(mpsc::RecvTimeoutError::Disconnected) => Err("the volume stopped being served".into()),
        }
    }
}

/// Makes a served read-only volume writable (see `Mount::writable_handle`).
pub struct WritableHandle<F: Flash> {
    lock: Weak<VolumeLock<F>>,
}

impl<F: Flash> WritableHandle<F> {
    /// `FileSystem::make_writable` under the volume lock: on success the volume takes changes
    /// (the kernel's own read-only flag is the caller's to clear); on failure it stays
    /// read-only and the error says why (a volume no longer served, or poisoned by an
    /// internal error, answers `Poisoned`).
    pub fn make_writable(&self) -> Result<(), FsError> {
        let poisoned = || FsError::Io(TxnError::Poisoned);
        let lock = self.lock.upgrade().ok_or_else(poisoned)?;
        let mut failure = None;
        lock.run("remount read-write", |state| {
            state.fs.make_writable().map_err(|error| {
                let errno = crate::attributes::errno(&error);
                failure = Some(error);
                errno
            })
        })
        .map_err(|_| failure.unwrap_or_else(poisoned))
    }
}

/// The thread that makes every transaction point the mount makes on its own: every `interval`
/// while the volume has uncommitted changes (a delta commit: one page program), and on request
/// (`CommitHandle`). It holds only a weak reference, so it never keeps the volume alive, and it
/// runs each commit under the volume lock like any request.
struct Committer {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl Committer {
    fn start<F: Flash + Send + Sync + 'static>(
        lock: Weak<VolumeLock<F>>,
        interval: Option<Duration>,
        requests: Arc<CommitRequests>,
    ) -> io::Result<Committer> {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::Builder::new().name("fsoc-commit".into()).spawn(move || {
            *requests.thread.lock().unwrap_or_else(PoisonError::into_inner) = Some(std::thread::current());
            commit_until_stopped(&lock, interval, &requests, &stopped);
            // Later requests fail at once; waiting ones see their sender dropped.
            requests.pending.lock().unwrap_or_else(PoisonError::into_inner).take();
        })?;
        Ok(Committer { stop, thread })
    }

    fn stop(self) {
        self.stop.store(true, Ordering::Release);
        self.thread.thread().unpark();
        let _ = self.thread.join();
    }
}

fn commit_until_stopped<F: Flash + Send + Sync + 'static>(
    lock: &Weak<VolumeLock<F>>,
    interval: Option<Duration>,
    requests: &CommitRequests,
    stopped: &AtomicBool,
) {
    let mut due = interval.map(|interval| Instant::now() + interval);
    while !stopped.load(Ordering::Acquire) {
        let waiting = std::mem::take(
            requests.pending.lock().unwrap_or_else(PoisonError::into_inner).as_mut().unwrap_or(&mut Vec::new()),
        );
        let periodic = due.is_some_and(|due| Instant::now() >= due);
        if waiting.is_empty() && !periodic {
            // Requests and `stop` unpark the thread; a spurious wake-up only loops.
            match due {
                Some(due) => std::thread::park_timeout(due.saturating_duration_since(Instant::now())),
                None => std::thread::park(),
            }
            continue;
        }
        let Some(lock) = lock.upgrade() else { return };
        let mut failure = None;
        let result = lock.run(if periodic { "periodic commit" } else { "requested commit" }, |state| {
            if state.fs.has_uncommitted_changes() {
                state.fs.commit_for_sync().map_err(|error| {
                    log::error!("commit failed: {error}");
                    failure = Some(error.to_string());
                    crate::attributes::errno(&error)
                })?;
            }
            Ok(())
        });
        drop(lock);
        let answer = result.map_err(|errno| failure.unwrap_or_else(|| format!("commit failed: {errno:?}")));
        let failed = answer.is_err();
        for sender in waiting {
            let _ = sender.send(answer.clone());
        }
        if failed {
            return; // the volume answers EIO from now on; nothing more to commit
        }
        if periodic {
            due = interval.map(|interval| Instant::now() + interval);
        }
    }
}

/// What `Mount::run` hands back once the kernel has let go of the mount.
pub struct Served<F: Flash> {
    /// The file system, still to be unmounted (committed) by the caller.
    pub fs: FileSystem<F>,
    /// The panic that stopped serving, if any: the volume is poisoned, and unmounting it
    /// leaves the last committed state on flash.
    pub failure: Option<String>,
    pub session_error: Option<io::Error>,
}

pub struct BackgroundMount<F: Flash + Send + Sync + 'static> {
    thread: std::thread::JoinHandle<Result<Served<F>, MountError>>,
}

impl<F: Flash + Send + Sync + 'static> BackgroundMount<F> {
    /// Waits for the session to end (after an unmount).
    pub fn join(self) -> Result<Served<F>, MountError> {
        self.thread.join().unwrap_or(Err(MountError::StillReferenced))
    }
}

/// How an unmount went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unmounted {
    /// The mount is gone; the session ends now.
    Now,
    /// The mount point was busy, so it was detached (`umount -l`): it vanished from the
    /// namespace, and the session ends when the last open file on it is closed.
    Detached,
}

/// Unmounts a `Mount` from any thread.
pub struct Unmounter {
    inner: SessionUnmounter,
    mount_point: PathBuf,
}

impl Unmounter {
    pub fn unmount(&mut self) -> io::Result<Unmounted> {
        match self.inner.unmount() {
            Ok(()) => Ok(Unmounted::Now),
            Err(error) if error.raw_os_error() == Some(libc::EBUSY) => {
                detach(&self.mount_point)?;
                Ok(Unmounted::Detached)
            }
            Err(error) => Err(error),
        }
    }
}

/// Lazily unmounts `mount_point` (MNT_DETACH), falling back to `fusermount3 -u -z` for an
/// unprivileged user.
fn detach(mount_point: &Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(mount_point.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "mount point contains NUL"))?;
    // SAFETY: `path` is a valid NUL-terminated string that outlives the call.
    if unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) } == 0 {
        return Ok(());
    }
    let error = io::Error::last_os_error();
    if error.raw_os_error() != Some(libc::EPERM) {
        return Err(error);
    }
    let status = std::process::Command::new("fusermount3").arg("-u").arg("-z").arg("--").arg(mount_point).status()?;
    if status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!("fusermount3 -u -z {} failed: {status}", mount_point.display())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_point_problems_are_named() {
        let directory = tempfile::tempdir().expect("tempdir");
        let missing = directory.path().join("missing");
        assert!(matches!(check_mount_point(&missing), Err(MountError::MountPointMissing(_))));
        let file = directory.path().join("file");
        std::fs::write(&file, b"x").expect("write");
        assert!(matches!(check_mount_point(&file), Err(MountError::MountPointNotDirectory(_))));
        assert!(matches!(check_mount_point(Path::new("/proc")), Err(MountError::MountPointBusy(_))));
    }

    #[test]
    fn sources_name_the_image_when_options_can_carry_it() {
        assert_eq!(source_for(Path::new("/images/disk.img")), "/images/disk.img");
        assert_eq!(source_for(Path::new("/images/a,b.img")), "fsoc");
        assert_eq!(source_for(Path::new("/images/a b.img")), "fsoc");
        assert!(mounted_image(Path::new("/proc")).unwrap_err().contains("not an fsoc mount"));
        assert!(mounted_image(Path::new("/nonexistent")).unwrap_err().contains("not a mount point"));
    }

    #[test]
    fn mount_paths_are_escaped_like_the_kernel_does() {
        assert_eq!(escape_mount_path(Path::new("/a b\\c")), "/a\\040b\\134c");
        assert_eq!(unescape_mount_path("/a\\040b\\134c"), "/a b\\c");
        assert_eq!(unescape_mount_path("/odd\\09x\\"), "/odd\\09x\\", "not an octal escape: kept");
    }

    #[test]
    fn per_mount_flags_follow_the_config() {
        let config = MountConfig {
            read_only: true,
            set_user_id: false,
            devices: true,
            execute: false,
            access_time: "strictatime",
            ..MountConfig::default()
        };
        assert_eq!(
            per_mount_flags(&config),
            libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NOEXEC | libc::MS_STRICTATIME
        );
        let config = MountConfig { set_user_id: true, devices: false, access_time: "noatime", ..config };
        assert_eq!(per_mount_flags(&config), libc::MS_RDONLY | libc::MS_NODEV | libc::MS_NOEXEC | libc::MS_NOATIME);
        let bad = MountConfig { access_time: "sometimes", ..MountConfig::default() };
        assert!(matches!(check_config(&bad), Err(MountError::UnknownAccessTime(name)) if name == "sometimes"));
        assert!(check_config(&MountConfig::default()).is_ok(), "the defaults are valid for any user");
    }
}
