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
use std::sync::{Arc, Weak};
use std::time::Duration;

use fsoc_core::FileSystem;
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
        }
    }
}

/// The mount-table source naming `image` (canonical path), so `fsoc umount` can find the image
/// of a mount point. Paths that mount options cannot carry (commas, whitespace, non-UTF-8)
/// give plain `fsoc`.
pub fn source_for(image: &Path) -> String {
    match image.to_str() {
        Some(path)
            if !path.contains(|character: char| character == ',' || character.is_whitespace() || character == '\\') =>
        {
            format!("{FS_NAME}:{path}")
        }
        _ => FS_NAME.into(),
    }
}

/// The image named by the mount-table source of the fsoc mount at `mount_point` (canonical):
/// `Ok(Some(image))` for `fsoc:IMAGE`, `Ok(None)` for an fsoc mount without an image name, and
/// an error when no fsoc mount is there.
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
    if !file_system_type.starts_with("fuse") || !(source == FS_NAME || source.starts_with("fsoc:")) {
        return Err(format!("{} is not an fsoc mount ({file_system_type} from {source})", mount_point.display()));
    }
    Ok(source.strip_prefix("fsoc:").map(PathBuf::from))
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

fn fuse_device_accessible() -> bool {
    let device = std::ffi::CString::new(FUSE_DEVICE).expect("no NUL in a constant");
    // SAFETY: access() with a valid C string; no memory is written.
    unsafe { libc::access(device.as_ptr(), libc::R_OK | libc::W_OK) == 0 }
}

fn fuser_config(config: &MountConfig) -> Config {
    let mut fuser_config = Config::default();
    fuser_config.mount_options = vec![
        MountOption::FSName(config.source.clone()),
        MountOption::Subtype(FS_NAME.into()),
        MountOption::DefaultPermissions,
        // fsoc changes atime only on request (utimens), never on read: say so in the mount table.
        MountOption::NoAtime,
        if config.read_only { MountOption::RO } else { MountOption::RW },
    ];
    fuser_config.acl = if config.allow_other { SessionACL::All } else { SessionACL::Owner };
    fuser_config.n_threads = Some(config.thread_count.max(1));
    fuser_config
}

/// A mounted volume, not yet serving requests (the kernel queues them until `run`).
pub struct Mount<F: Flash + Send + Sync + 'static> {
    session: Session<FsocFuse<F>>,
    lock: Arc<VolumeLock<F>>,
    mount_point: PathBuf,
    commit_interval: Option<Duration>,
    read_only: bool,
}

impl<F: Flash + Send + Sync + 'static> Mount<F> {
    /// Mounts `fs` on `mount_point` (checked with `check_mount_point` first).
    pub fn new(fs: FileSystem<F>, mount_point: &Path, config: &MountConfig) -> Result<Mount<F>, MountError> {
        let mount_point = check_mount_point(mount_point)?;
        let lock = Arc::new(VolumeLock::new(fs));
        let session =
            Session::new(FsocFuse::new(lock.clone(), config.writeback_cache), &mount_point, &fuser_config(config))
                .map_err(|source| match source.raw_os_error() {
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
                })?;
        Ok(Mount { session, lock, mount_point, commit_interval: config.commit_interval, read_only: config.read_only })
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
        let Mount { session, lock, commit_interval, read_only, .. } = self;
        let committer = match commit_interval.filter(|interval| !interval.is_zero() && !read_only) {
            Some(interval) => Some(
                PeriodicCommitter::start(Arc::downgrade(&lock), interval)
                    .map_err(|source| MountError::Io { path: PathBuf::from("(periodic commit thread)"), source })?,
            ),
            None => None,
        };
        let session_error = session.run().err();
        if let Some(error) = &session_error {
            log::error!("FUSE session ended with an error: {error}");
        }
        // The committer holds the volume only while it commits: stop it before taking the
        // volume back for the final commit.
        if let Some(committer) = committer {
            committer.stop();
        }
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

/// A thread that makes a transaction point every `interval` while the volume has uncommitted
/// changes (a delta commit: one page program). It holds only a weak reference, so it never
/// keeps the volume alive, and it runs each commit under the volume lock like any request.
struct PeriodicCommitter {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl PeriodicCommitter {
    fn start<F: Flash + Send + Sync + 'static>(
        lock: Weak<VolumeLock<F>>,
        interval: Duration,
    ) -> io::Result<PeriodicCommitter> {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::Builder::new().name("fsoc-commit".into()).spawn(move || {
            while !stopped.load(Ordering::Acquire) {
                std::thread::park_timeout(interval);
                if stopped.load(Ordering::Acquire) {
                    return;
                }
                let Some(lock) = lock.upgrade() else { return };
                let result = lock.run("periodic commit", |state| {
                    if state.fs.has_uncommitted_changes() {
                        state.fs.commit_for_sync().map_err(|error| {
                            log::error!("periodic commit failed: {error}");
                            crate::attributes::errno(&error)
                        })?;
                    }
                    Ok(())
                });
                drop(lock);
                if result.is_err() {
                    return; // the volume answers EIO from now on; nothing more to commit
                }
            }
        })?;
        Ok(PeriodicCommitter { stop, thread })
    }

    fn stop(self) {
        self.stop.store(true, Ordering::Release);
        self.thread.thread().unpark();
        let _ = self.thread.join();
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
        assert_eq!(source_for(Path::new("/images/disk.img")), "fsoc:/images/disk.img");
        assert_eq!(source_for(Path::new("/images/a,b.img")), "fsoc");
        assert_eq!(source_for(Path::new("/images/a b.img")), "fsoc");
        assert!(mounted_image(Path::new("/proc")).unwrap_err().contains("not an fsoc mount"));
        assert!(mounted_image(Path::new("/nonexistent")).unwrap_err().contains("not a mount point"));
    }

    #[test]
    fn mount_paths_are_escaped_like_the_kernel_does() {
        assert_eq!(escape_mount_path(Path::new("/a b\\c")), "/a\\040b\\134c");
    }
}
