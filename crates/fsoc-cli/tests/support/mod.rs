//! Helpers for tests that drive the `fsoc` binary and real programs on a real FUSE mount.
//!
//! Every child process runs under a time limit and is killed when it overruns; a mount is
//! always taken down (lazily, and its server killed) when its guard is dropped, so a failing
//! test never leaves a hung mount behind.

#![allow(dead_code)] // each test binary uses a different subset

use std::collections::BTreeMap;
use std::ffi::CString;
use std::fs;
use std::hash::{Hash, Hasher};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

pub const FSOC: &str = env!("CARGO_BIN_EXE_fsoc");
/// Limit for one program run on the mount.
pub const PROGRAM_TIMEOUT: Duration = Duration::from_secs(120);
/// Limit for a mount to appear or an unmount to finish.
pub const MOUNT_TIMEOUT: Duration = Duration::from_secs(30);

/// What a finished child printed.
pub struct Output {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    pub fn text(&self) -> String {
        format!("status {}\nstdout:\n{}\nstderr:\n{}", self.status, self.stdout, self.stderr)
    }
}

/// Fails the test with a clear message if `program` is not installed: the suite never skips
/// silently (scripts/setup.sh installs every program it runs).
pub fn require(program: &str) {
    let found = std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).any(|directory| directory.join(program).is_file()))
        .unwrap_or(false);
    assert!(found, "{program} is not installed: run `bash scripts/setup.sh` (as root) to install the test programs");
}

/// Runs a command to completion within `timeout` (killed and failed when it overruns).
pub fn run(command: &mut Command, timeout: Duration) -> Output {
    let directory = tempfile::tempdir().expect("tempdir for output");
    let (stdout_path, stderr_path) = (directory.path().join("stdout"), directory.path().join("stderr"));
    let description = format!("{command:?}");
    let mut child = command
        .stdin(Stdio::null())
        .stdout(fs::File::create(&stdout_path).expect("stdout file"))
        .stderr(fs::File::create(&stderr_path).expect("stderr file"))
        .spawn()
        .unwrap_or_else(|error| panic!("cannot start {description}: {error}"));
    let status = wait_with_timeout(&mut child, timeout).unwrap_or_else(|| {
        let _ = child.kill();
        let _ = child.wait();
        let stderr = fs::read_to_string(&stderr_path).unwrap_or_default();
        panic!("{description} did not finish within {timeout:?}; stderr:\n{stderr}");
    });
    Output {
        status,
        stdout: fs::read_to_string(&stdout_path).unwrap_or_default(),
        stderr: fs::read_to_string(&stderr_path).unwrap_or_default(),
    }
}

/// Runs a command and fails the test unless it succeeds.
pub fn run_ok(command: &mut Command) -> Output {
    let description = format!("{command:?}");
    let output = run(command, PROGRAM_TIMEOUT);
    assert!(output.status.success(), "{description} failed:\n{}", output.text());
    output
}

/// `sh -c script` in `directory`, which must succeed.
pub fn shell(directory: &Path, script: &str) -> Output {
    run_ok(Command::new("sh").arg("-c").arg(script).current_dir(directory))
}

pub fn fsoc(arguments: &[&str]) -> Output {
    run(Command::new(FSOC).args(arguments), PROGRAM_TIMEOUT)
}

fn wait_with_timeout(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// An image file and a mount point in a temporary directory.
pub struct Volume {
    pub directory: tempfile::TempDir,
    pub image: PathBuf,
    pub mount_point: PathBuf,
}

impl Volume {
    /// `fsoc mkfs` of an image of `size` (for example "256M").
    pub fn new(size: &str) -> Volume {
        Self::with_mkfs_arguments(size, &[])
    }

    /// `new`, with more `fsoc mkfs` arguments (for example `--nvram 64K`).
    pub fn with_mkfs_arguments(size: &str, arguments: &[&str]) -> Volume {
        assert!(
            Path::new("/dev/fuse").exists(),
            "/dev/fuse is missing: the FUSE tests need it (CI runs as root with /dev/fuse)"
        );
        require("fusermount3");
        let directory = tempfile::tempdir().expect("tempdir");
        let image = directory.path().join("volume.img");
        let mount_point = directory.path().join("mnt");
        fs::create_dir(&mount_point).expect("mount point");
        let mut mkfs = vec!["mkfs", image.to_str().expect("utf-8 path"), "--size", size];
        mkfs.extend_from_slice(arguments);
        let output = fsoc(&mkfs);
        assert!(output.status.success(), "mkfs failed:\n{}", output.text());
        Volume { directory, image, mount_point }
    }

    pub fn image_arg(&self) -> &str {
        self.image.to_str().expect("utf-8 path")
    }

    /// Starts `fsoc mount` in the foreground and waits until the mount is live.
    pub fn mount(&self) -> Mounted<'_> {
        self.mount_with(&[])
    }

    /// `mount`, with more `fsoc mount` arguments (for example `-o scrub=1000`).
    pub fn mount_with(&self, arguments: &[&str]) -> Mounted<'_> {
        let log = self.directory.path().join("mount.log");
        let mut child = Command::new(FSOC)
            .arg("mount")
            .args(arguments)
            .arg(&self.image)
            .arg(&self.mount_point)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::options().create(true).append(true).open(&log).expect("mount log"))
            .spawn()
            .expect("start fsoc mount");
        let deadline = Instant::now() + MOUNT_TIMEOUT;
        let canonical = self.mount_point.canonicalize().expect("canonical mount point");
        while !fsoc_fuse::is_mount_point(&canonical) {
            if let Some(status) = child.try_wait().expect("wait") {
                panic!(
                    "fsoc mount exited with {status} before mounting:\n{}",
                    fs::read_to_string(&log).unwrap_or_default()
                );
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("fsoc mount did not mount within {MOUNT_TIMEOUT:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Mounted { volume: self, child: Some(child), log }
    }

    /// `fsoc fsck` must report a clean volume.
    pub fn fsck(&self) {
        let output = fsoc(&["fsck", self.image_arg()]);
        assert!(
            output.status.success() && output.stdout.contains("clean"),
            "fsck of {}:\n{}",
            self.image.display(),
            output.text()
        );
    }
}

/// A running `fsoc mount`; dropped without `unmount`, it is detached and its server killed.
pub struct Mounted<'v> {
    pub volume: &'v Volume,
    child: Option<Child>,
    log: PathBuf,
}

impl Mounted<'_> {
    pub fn path(&self, relative: &str) -> PathBuf {
        self.volume.mount_point.join(relative)
    }

    pub fn root(&self) -> &Path {
        &self.volume.mount_point
    }

    /// What the server wrote to its log (stderr) so far.
    pub fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// `fusermount3 -u`, then waits for `fsoc mount` to commit and exit successfully.
    pub fn unmount(mut self) {
        // A program that just exited may still be leaving the mount (its last references are
        // dropped asynchronously): retry a busy unmount for a few seconds.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let output = run(Command::new("fusermount3").arg("-u").arg(&self.volume.mount_point), MOUNT_TIMEOUT);
            if output.status.success() {
                break;
            }
            assert!(
                output.stderr.contains("busy") && Instant::now() < deadline,
                "fusermount3 -u failed:\n{}",
                output.text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let mut child = self.child.take().expect("running");
        let status = wait_with_timeout(&mut child, MOUNT_TIMEOUT).unwrap_or_else(|| {
            let _ = child.kill();
            let _ = child.wait();
            panic!("fsoc mount did not exit within {MOUNT_TIMEOUT:?} of the unmount");
        });
        assert!(
            status.success(),
            "fsoc mount exited with {status}:\n{}",
            fs::read_to_string(&self.log).unwrap_or_default()
        );
    }

    /// Sends `signal` to the server and waits for a clean exit (commit and unmount).
    pub fn stop_with_signal(self, signal: i32) {
        self.send_signal(signal);
        self.wait_for_exit(signal);
    }

    pub fn send_signal(&self, signal: i32) {
        // SAFETY: kill with the pid of our own child process.
        assert_eq!(unsafe { libc::kill(self.pid() as i32, signal) }, 0, "kill");
    }

    /// Whether the server process is still running.
    pub fn is_running(&mut self) -> bool {
        self.child.as_mut().expect("running").try_wait().expect("wait").is_none()
    }

    /// Waits for the server to exit successfully after `signal`, with the mount gone.
    pub fn wait_for_exit(mut self, signal: i32) {
        let mut child = self.child.take().expect("running");
        let status = wait_with_timeout(&mut child, MOUNT_TIMEOUT).unwrap_or_else(|| {
            let _ = child.kill();
            let _ = child.wait();
            panic!("fsoc mount did not exit within {MOUNT_TIMEOUT:?} of signal {signal}");
        });
        assert!(
            status.success(),
            "fsoc mount exited with {status} after signal {signal}:\n{}",
            fs::read_to_string(&self.log).unwrap_or_default()
        );
        assert!(!fsoc_fuse::is_mount_point(&self.volume.mount_point.canonicalize().expect("path")), "unmounted");
    }

    /// SIGKILLs the server (a crash) if it still runs, reaps it and clears the dead mount it
    /// leaves.
    pub fn kill(mut self) {
        let mut child = self.child.take().expect("running");
        let _ = child.kill(); // may already be dead
        let _ = child.wait();
        detach(&self.volume.mount_point);
    }
}

impl Drop for Mounted<'_> {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            detach(&self.volume.mount_point);
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Lazily unmounts whatever is mounted at `path` (a live or a dead FUSE mount).
pub fn detach(path: &Path) {
    let _ = run(Command::new("fusermount3").arg("-u").arg("-z").arg(path), MOUNT_TIMEOUT);
}

/// A comparable description of a tree: for each path, its kind, permission bits, size and a
/// hash of its content (files) or its target (symlinks). Modification times of files are
/// included too; directories' are not (listing them is not a change, but the kernel may
/// read-ahead).
pub fn snapshot(root: &Path) -> BTreeMap<String, String> {
    let mut entries = BTreeMap::new();
    collect(root, root, &mut entries);
    entries
}

fn collect(root: &Path, path: &Path, entries: &mut BTreeMap<String, String>) {
    let metadata = fs::symlink_metadata(path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    let relative = path.strip_prefix(root).expect("under root").display().to_string();
    let mode = metadata.permissions().mode() & 0o7777;
    let owner = format!("{}:{}", metadata.uid(), metadata.gid());
    let description = if metadata.file_type().is_symlink() {
        format!("link {owner} -> {}", fs::read_link(path).expect("readlink").display())
    } else if metadata.is_dir() {
        let mut children: Vec<PathBuf> =
            fs::read_dir(path).expect("readdir").map(|entry| entry.expect("entry").path()).collect();
        children.sort();
        for child in children {
            collect(root, &child, entries);
        }
        format!("dir {mode:o} {owner} nlink {}", metadata.nlink())
    } else {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        fs::read(path).unwrap_or_else(|error| panic!("{}: {error}", path.display())).hash(&mut hasher);
        format!(
            "file {mode:o} {owner} nlink {} size {} mtime {}.{:09} hash {:016x}",
            metadata.nlink(),
            metadata.len(),
            metadata.mtime(),
            metadata.mtime_nsec(),
            hasher.finish()
        )
    };
    entries.insert(relative, description);
}

/// The check after every real-program run: snapshot the mount, unmount, `fsoc fsck` must be
/// clean, remount, and the snapshot must be unchanged. Returns the new mount.
pub fn check_round_trip(mounted: Mounted<'_>) -> Mounted<'_> {
    let volume = mounted.volume;
    let before = snapshot(mounted.root());
    mounted.unmount();
    volume.fsck();
    let remounted = volume.mount();
    let after = snapshot(remounted.root());
    if before != after {
        let changed: Vec<_> = before
            .iter()
            .filter(|(path, description)| after.get(*path) != Some(description))
            .map(|(path, description)| format!("{path}: {description} -> {:?}", after.get(path)))
            .chain(after.keys().filter(|path| !before.contains_key(*path)).map(|path| format!("{path}: new")))
            .take(20)
            .collect();
        panic!("contents changed across unmount and remount:\n{}", changed.join("\n"));
    }
    remounted
}

/// A private copy of the workspace's `crates/` sources (a real source tree that does not
/// change while a test reads it).
pub fn source_tree(into: &Path) -> PathBuf {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("crates directory");
    let copy = into.join("source");
    run_ok(Command::new("cp").arg("-a").arg(crates).arg(&copy));
    copy
}

/// A path as a C string (for the xattr calls libc offers and std does not).
pub fn c_path(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).expect("path without NUL")
}

/// lsetxattr: sets an attribute without following a link.
pub fn set_attribute(path: &Path, name: &str, value: &[u8]) {
    let name_c = CString::new(name).expect("name without NUL");
    // SAFETY: NUL-terminated path and name, and `value.len()` bytes.
    let done =
        unsafe { libc::lsetxattr(c_path(path).as_ptr(), name_c.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
    assert_eq!(done, 0, "lsetxattr {} {name}: {}", path.display(), std::io::Error::last_os_error());
}

/// Reads a list or a value with a call made twice (size, then the bytes).
pub fn sized_read(call: impl Fn(*mut u8, usize) -> isize, what: &str) -> Vec<u8> {
    let size = call(std::ptr::null_mut(), 0);
    assert!(size >= 0, "{what}: {}", std::io::Error::last_os_error());
    let mut buffer = vec![0u8; size as usize];
    let read = call(buffer.as_mut_ptr(), buffer.len());
    assert!(read >= 0, "{what}: {}", std::io::Error::last_os_error());
    buffer.truncate(read as usize);
    buffer
}

/// The attributes of `path` (not following a link), sorted by name.
pub fn attributes(path: &Path) -> Vec<(String, Vec<u8>)> {
    let path_c = c_path(path);
    let what = format!("llistxattr {}", path.display());
    // SAFETY: a NUL-terminated path and a buffer of `size` bytes (or null with 0).
    let names = sized_read(|buffer, size| unsafe { libc::llistxattr(path_c.as_ptr(), buffer.cast(), size) }, &what);
    let mut attributes: Vec<(String, Vec<u8>)> = names
        .split(|&byte| byte == 0)
        .filter(|name| !name.is_empty())
        .map(|name| {
            let name_c = CString::new(name).expect("name without NUL");
            let what = format!("lgetxattr {} {}", path.display(), String::from_utf8_lossy(name));
            // SAFETY: NUL-terminated path and name, and a buffer of `size` bytes (or null with 0).
            let value = sized_read(
                |buffer, size| unsafe { libc::lgetxattr(path_c.as_ptr(), name_c.as_ptr(), buffer.cast(), size) },
                &what,
            );
            (String::from_utf8_lossy(name).into_owned(), value)
        })
        .collect();
    attributes.sort();
    attributes
}
