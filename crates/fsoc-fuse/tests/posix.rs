//! POSIX behaviour through a real FUSE mount of a RAM-backed volume served in this process:
//! each test mounts, exercises the kernel interface with ordinary system calls (and, for
//! permissions, child processes running as another user), unmounts, and then checks the
//! volume with fsck after a remount.
//!
//! Needs /dev/fuse and root (as in CI); without them the tests fail with a message saying so.

use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fsoc_core::{FileSystem, FsConfig};
use fsoc_fuse::{BackgroundMount, Mount, MountConfig, Unmounter};
use fsoc_media::{Profile, RamStore, SimConfig, SimFlash};

type RamFlash = SimFlash<RamStore>;

/// A volume mounted on a temporary directory; unmounted (lazily if need be) when dropped.
struct TestMount {
    mount_point: PathBuf,
    unmounter: Unmounter,
    background: Option<BackgroundMount<RamFlash>>,
    _directory: tempfile::TempDir,
}

impl TestMount {
    /// Formats a RAM volume of `block_count` MLC erase blocks (128 KiB each) and mounts it.
    fn new(block_count: u32) -> TestMount {
        TestMount::with_config(block_count, &MountConfig::default())
    }

    fn with_config(block_count: u32, config: &MountConfig) -> TestMount {
        assert!(
            Path::new("/dev/fuse").exists(),
            "/dev/fuse is missing: these tests need FUSE (run as root with /dev/fuse)"
        );
        let flash = SimFlash::create(SimConfig::new(Profile::Mlc, 1, block_count, 1)).expect("flash");
        let fs = FileSystem::format(flash, FsConfig::default(), 1).expect("format");
        let directory = tempfile::tempdir().expect("tempdir");
        let mount_point = directory.path().join("mnt");
        fs::create_dir(&mount_point).expect("mount point");
        let mut mount = Mount::new(fs, &mount_point, config).expect("mount (needs root and /dev/fuse)");
        let unmounter = mount.unmounter();
        let mount_point = mount.mount_point().to_path_buf();
        let background = mount.spawn().expect("serve");
        TestMount { mount_point, unmounter, background: Some(background), _directory: directory }
    }

    fn path(&self, relative: &str) -> PathBuf {
        self.mount_point.join(relative)
    }

    /// Unmounts, checks the volume after a remount, and returns it for more checks.
    fn finish(mut self) -> FileSystem<RamFlash> {
        self.unmounter.unmount().expect("unmount");
        let served = self.background.take().expect("mounted").join().expect("session");
        assert_eq!(served.failure, None, "no callback panicked");
        let flash = served.fs.unmount().expect("clean unmount");
        let mut fs = FileSystem::mount(flash, FsConfig::default()).expect("remount");
        let report = fs.fsck(true).expect("fsck");
        assert!(report.is_clean(), "fsck after unmount: {:?}", report.violations);
        fs
    }
}

impl Drop for TestMount {
    fn drop(&mut self) {
        if let Some(background) = self.background.take() {
            // A failed test: detach the mount so nothing hangs on it, and let the session end.
            let _ = self.unmounter.unmount();
            let _ = background.join();
        }
    }
}

fn errno_of(error: &std::io::Error) -> i32 {
    error.raw_os_error().unwrap_or(0)
}

fn c_path(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).expect("no NUL in test paths")
}

fn statvfs(path: &Path) -> libc::statvfs {
    let path = c_path(path);
    // SAFETY: valid C string and a zeroed out-struct of the right type.
    unsafe {
        let mut stat: libc::statvfs = std::mem::zeroed();
        assert_eq!(libc::statvfs(path.as_ptr(), &mut stat), 0, "statvfs");
        stat
    }
}

/// Runs `script` with `sh -c` as `uid:gid` and returns (success, stderr).
fn run_as(uid: u32, gid: u32, script: &str) -> (bool, String) {
    let output = Command::new("sh").arg("-c").arg(script).uid(uid).gid(gid).output().expect("sh");
    (output.status.success(), String::from_utf8_lossy(&output.stderr).into_owned())
}

#[test]
fn files_links_and_renames_behave_as_posix_says() {
    let mount = TestMount::new(256);
    // O_EXCL: a second exclusive create fails with EEXIST.
    let path = mount.path("exclusive");
    File::options().write(true).create_new(true).open(&path).expect("create_new");
    let error = File::options().write(true).create_new(true).open(&path).expect_err("second O_EXCL");
    assert_eq!(error.kind(), ErrorKind::AlreadyExists);

    // O_APPEND from two descriptors interleaves whole writes at the end.
    let log = mount.path("log");
    let mut first = OpenOptions::new().create(true).append(true).open(&log).expect("append 1");
    let mut second = OpenOptions::new().append(true).open(&log).expect("append 2");
    for round in 0..50 {
        first.write_all(format!("a{round:02}\n").as_bytes()).expect("write a");
        second.write_all(format!("b{round:02}\n").as_bytes()).expect("write b");
    }
    drop((first, second));
    let text = fs::read_to_string(&log).expect("read log");
    assert_eq!(text.len(), 100 * 4, "no append overwrote another");
    assert!(text.starts_with("a00\nb00\na01\n"));

    // O_TRUNC empties an existing file.
    fs::write(mount.path("trunc"), b"0123456789").expect("write");
    drop(OpenOptions::new().write(true).truncate(true).open(mount.path("trunc")).expect("O_TRUNC"));
    assert_eq!(fs::metadata(mount.path("trunc")).expect("stat").len(), 0);

    // Sparse file: a write far past the end leaves a hole that reads as zeros.
    let mut sparse =
        File::options().read(true).write(true).create(true).truncate(true).open(mount.path("sparse")).expect("sparse");
    sparse.seek(SeekFrom::Start(10 << 20)).expect("seek");
    sparse.write_all(b"tail").expect("write tail");
    let mut hole = vec![1u8; 8192];
    sparse.seek(SeekFrom::Start(5 << 20)).expect("seek hole");
    sparse.read_exact(&mut hole).expect("read hole");
    assert!(hole.iter().all(|&byte| byte == 0), "hole reads as zeros");
    assert_eq!(sparse.metadata().expect("stat").len(), (10 << 20) + 4);

    // Truncate down then up: the cut bytes come back as zeros.
    sparse.set_len(3).expect("truncate down");
    sparse.set_len(100).expect("truncate up");
    let mut content = Vec::new();
    sparse.seek(SeekFrom::Start(0)).expect("rewind");
    sparse.read_to_end(&mut content).expect("read");
    assert_eq!(content.len(), 100);
    assert!(content.iter().all(|&byte| byte == 0), "bytes past the cut read as zeros after growing");
    drop(sparse);

    // Open, unlink, and the file lives until the last close.
    let doomed = mount.path("doomed");
    fs::write(&doomed, vec![7u8; 300_000]).expect("write doomed");
    let free_before = statvfs(&mount.mount_point).f_bfree;
    let mut open = File::options().read(true).write(true).open(&doomed).expect("open doomed");
    fs::remove_file(&doomed).expect("unlink while open");
    assert_eq!(fs::metadata(&doomed).expect_err("name gone").kind(), ErrorKind::NotFound);
    open.write_all(b"still writable").expect("write after unlink");
    let mut head = [0u8; 14];
    open.seek(SeekFrom::Start(0)).expect("rewind");
    open.read_exact(&mut head).expect("read after unlink");
    assert_eq!(&head, b"still writable");
    assert_eq!(open.metadata().expect("fstat").nlink(), 0);
    drop(open);
    // The kernel sends RELEASE after close returns (asynchronously): wait for it, bounded.
    let deadline = Instant::now() + Duration::from_secs(5);
    while statvfs(&mount.mount_point).f_bfree <= free_before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(statvfs(&mount.mount_point).f_bfree > free_before, "space returns at the last close");

    // Hard links and symbolic links.
    fs::write(mount.path("original"), b"shared").expect("write");
    fs::hard_link(mount.path("original"), mount.path("alias")).expect("link");
    assert_eq!(fs::metadata(mount.path("original")).expect("stat").nlink(), 2);
    assert_eq!(
        fs::metadata(mount.path("alias")).expect("stat").ino(),
        fs::metadata(mount.path("original")).expect("stat").ino()
    );
    std::os::unix::fs::symlink("original", mount.path("symbolic")).expect("symlink");
    assert_eq!(fs::read_link(mount.path("symbolic")).expect("readlink"), Path::new("original"));
    assert_eq!(fs::read(mount.path("symbolic")).expect("follow"), b"shared");
    assert!(fs::symlink_metadata(mount.path("symbolic")).expect("lstat").file_type().is_symlink());

    // Rename replaces an existing file atomically; directories follow POSIX rules.
    fs::write(mount.path("new"), b"new").expect("write");
    fs::rename(mount.path("new"), mount.path("alias")).expect("rename over a file");
    assert_eq!(fs::read(mount.path("alias")).expect("read"), b"new");
    assert_eq!(fs::metadata(mount.path("original")).expect("stat").nlink(), 1, "replaced link dropped");
    fs::create_dir(mount.path("dir_a")).expect("mkdir");
    fs::create_dir(mount.path("dir_b")).expect("mkdir");
    fs::write(mount.path("dir_b/x"), b"x").expect("write");
    let error = fs::rename(mount.path("dir_a"), mount.path("dir_b")).expect_err("over non-empty dir");
    assert_eq!(errno_of(&error), libc::ENOTEMPTY);
    fs::remove_file(mount.path("dir_b/x")).expect("unlink");
    fs::rename(mount.path("dir_a"), mount.path("dir_b")).expect("over empty dir");
    assert!(!mount.path("dir_a").exists());
    let error = fs::rename(mount.path("dir_b"), mount.path("alias")).expect_err("dir over file");
    assert_eq!(errno_of(&error), libc::ENOTDIR);

    // renameat2(RENAME_NOREPLACE) refuses to replace.
    let (from, to) = (c_path(&mount.path("original")), c_path(&mount.path("alias")));
    // SAFETY: valid C strings; AT_FDCWD with absolute paths.
    let result =
        unsafe { libc::renameat2(libc::AT_FDCWD, from.as_ptr(), libc::AT_FDCWD, to.as_ptr(), libc::RENAME_NOREPLACE) };
    assert_eq!(result, -1);
    assert_eq!(errno_of(&std::io::Error::last_os_error()), libc::EEXIST);

    // Names up to 255 bytes; statfs reports that limit.
    let longest = "n".repeat(255);
    fs::write(mount.path(&longest), b"long").expect("255-byte name");
    let error = fs::write(mount.path(&"n".repeat(256)), b"x").expect_err("256-byte name");
    assert_eq!(errno_of(&error), libc::ENAMETOOLONG);
    assert_eq!(statvfs(&mount.mount_point).f_namemax, 255);

    // utimens: explicit times and UTIME_NOW.
    let stamped = mount.path("stamped");
    fs::write(&stamped, b"t").expect("write");
    let past = UNIX_EPOCH + Duration::new(1_000_000_000, 123_456_789);
    File::options()
        .write(true)
        .open(&stamped)
        .expect("open")
        .set_times(fs::FileTimes::new().set_accessed(past).set_modified(past))
        .expect("utimens");
    let metadata = fs::metadata(&stamped).expect("stat");
    assert_eq!((metadata.mtime(), metadata.mtime_nsec()), (1_000_000_000, 123_456_789));
    assert_eq!((metadata.atime(), metadata.atime_nsec()), (1_000_000_000, 123_456_789));
    let times = [
        libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_NOW },
        libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_NOW },
    ];
    let path = c_path(&stamped);
    // SAFETY: valid path and a two-element times array.
    assert_eq!(unsafe { libc::utimensat(libc::AT_FDCWD, path.as_ptr(), times.as_ptr(), 0) }, 0);
    let now = SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_secs() as i64;
    assert!((fs::metadata(&stamped).expect("stat").mtime() - now).abs() <= 5, "UTIME_NOW sets the current time");

    // statfs: free space shrinks by what a large write takes. Free space is what a writer can
    // still have, counted in whole free segments plus the open segments' room, so it is exact
    // to within one segment (128 KiB here) of the bytes written.
    let before = statvfs(&mount.mount_point);
    fs::write(mount.path("four_mib"), vec![3u8; 4 << 20]).expect("write 4 MiB");
    File::open(mount.path("four_mib")).expect("open").sync_all().expect("fsync");
    let after = statvfs(&mount.mount_point);
    let used_bytes = (before.f_bfree - after.f_bfree) * after.f_frsize;
    let segment_bytes = 128 << 10;
    assert!(used_bytes + segment_bytes >= 4 << 20, "4 MiB written, free space fell by {used_bytes} bytes");

    let fs = mount.finish();
    let (inode, _) = fs.resolve(b"/four_mib").expect("resolve");
    assert_eq!(fs.read(inode, 0, 8).expect("read"), vec![3u8; 8], "contents survive unmount and remount");
}

#[test]
fn ownership_and_permissions_follow_the_caller() {
    let mount = TestMount::new(128);
    // Root creates with uid 0; directories for the other user.
    fs::create_dir(mount.path("shared")).expect("mkdir");
    fs::set_permissions(mount.path("shared"), fs::Permissions::from_mode(0o1777)).expect("chmod 1777");
    fs::create_dir(mount.path("private")).expect("mkdir");
    fs::set_permissions(mount.path("private"), fs::Permissions::from_mode(0o700)).expect("chmod 700");
    fs::write(mount.path("root_file"), b"root").expect("write");
    fs::set_permissions(mount.path("root_file"), fs::Permissions::from_mode(0o644)).expect("chmod");
    fs::create_dir(mount.path("group")).expect("mkdir");
    std::os::unix::fs::chown(mount.path("group"), Some(0), Some(100)).expect("chown");
    fs::set_permissions(mount.path("group"), fs::Permissions::from_mode(0o2777)).expect("chmod 2777");
    assert_eq!(fs::metadata(mount.path("root_file")).expect("stat").uid(), 0);

    let user = 65534;
    let root = mount.mount_point.display();
    // The other user creates in the sticky directory and owns what it creates.
    let (ok, stderr) = run_as(
        user,
        user,
        &format!("echo hi > {root}/shared/mine && mkdir {root}/shared/dir && ln -s mine {root}/shared/link"),
    );
    assert!(ok, "user writes in a 1777 directory: {stderr}");
    for name in ["shared/mine", "shared/dir"] {
        let metadata = fs::metadata(mount.path(name)).expect("stat");
        assert_eq!((metadata.uid(), metadata.gid()), (user, user), "{name} belongs to its creator");
    }
    assert_eq!(fs::symlink_metadata(mount.path("shared/link")).expect("lstat").uid(), user);
    // ... but cannot read a 0700 directory, write a 0644 file, chmod or delete root's files.
    let (ok, _) = run_as(user, user, &format!("ls {root}/private"));
    assert!(!ok, "0700 directory is closed to others");
    let (ok, _) = run_as(user, user, &format!("echo x >> {root}/root_file"));
    assert!(!ok, "0644 file is read-only to others");
    let (ok, _) = run_as(user, user, &format!("chmod 777 {root}/root_file"));
    assert!(!ok, "only the owner may chmod");
    let (ok, _) = run_as(user, user, &format!("cat {root}/root_file"));
    assert!(ok, "0644 file is readable by others");
    fs::write(mount.path("shared/roots"), b"r").expect("root writes in shared");
    let (ok, _) = run_as(user, user, &format!("rm -f {root}/shared/roots"));
    assert!(!ok, "sticky bit: others may not delete root's file");
    assert!(mount.path("shared/roots").exists());
    // The setgid directory passes on its group, and its setgid bit to subdirectories.
    let (ok, stderr) = run_as(user, user, &format!("touch {root}/group/file && mkdir {root}/group/sub"));
    assert!(ok, "user writes in a 2777 directory: {stderr}");
    assert_eq!(fs::metadata(mount.path("group/file")).expect("stat").gid(), 100, "group inherited");
    let sub = fs::metadata(mount.path("group/sub")).expect("stat");
    assert_eq!(sub.gid(), 100);
    assert_ne!(sub.mode() & 0o2000, 0, "subdirectory inherits setgid");
    // chown by root works; the kernel clears set-id bits on chown of a file.
    fs::set_permissions(mount.path("root_file"), fs::Permissions::from_mode(0o4755)).expect("setuid");
    std::os::unix::fs::chown(mount.path("root_file"), Some(user), Some(user)).expect("chown");
    let metadata = fs::metadata(mount.path("root_file")).expect("stat");
    assert_eq!((metadata.uid(), metadata.gid()), (user, user));
    assert_eq!(metadata.mode() & 0o4000, 0, "setuid cleared by chown");
    mount.finish();
}

#[test]
fn a_directory_of_100000_entries_lists_completely_in_order() {
    let mount = TestMount::new(1024);
    let directory = mount.path("big");
    fs::create_dir(&directory).expect("mkdir");
    let count = 100_000;
    for index in 0..count {
        File::create(directory.join(format!("f{index:06}"))).expect("create");
    }
    let mut names: Vec<String> = fs::read_dir(&directory)
        .expect("readdir")
        .map(|entry| entry.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), count, "every entry listed once");
    let listed_in_order = names.windows(2).all(|pair| pair[0] < pair[1]);
    assert!(listed_in_order, "name order, no duplicates");
    names.dedup();
    assert_eq!(names.len(), count);
    assert_eq!(names.first().map(String::as_str), Some("f000000"));
    assert_eq!(names.last().map(String::as_str), Some("f099999"));
    let fs = mount.finish();
    assert_eq!(fs.readdir_path(b"/big").expect("readdir").len(), count);
}

#[test]
fn concurrent_readers_and_writers_finish_without_deadlock() {
    let mount = TestMount::new(256);
    let started = Instant::now();
    std::thread::scope(|scope| {
        for worker in 0..6 {
            let path = mount.path(&format!("worker{worker}"));
            scope.spawn(move || {
                let block = vec![worker as u8; 64 * 1024];
                for round in 0..20 {
                    fs::write(&path, &block[..(round + 1) * 3000]).expect("write");
                    let content = fs::read(&path).expect("read");
                    assert_eq!(content.len(), (round + 1) * 3000);
                    assert!(content.iter().all(|&byte| byte == worker as u8));
                    if round % 5 == 0 {
                        File::open(&path).expect("open").sync_all().expect("fsync");
                    }
                }
            });
        }
        scope.spawn(|| {
            for _ in 0..200 {
                let _ = fs::read_dir(&mount.mount_point).expect("readdir").count();
            }
        });
    });
    assert!(started.elapsed() < Duration::from_secs(120), "finished in {:?}", started.elapsed());
    mount.finish();
}

/// Fills a 6 MiB volume through one descriptor and returns the first error: from a write, or
/// (with the kernel's write-back cache, which accepts writes into memory and reports a failed
/// write-back later, as NFS does) from the fsync after 16 MiB were accepted.
fn fill_until_error(mount: &TestMount) -> std::io::Error {
    let mut file = File::create(mount.path("filler")).expect("create");
    let chunk = vec![9u8; 256 * 1024];
    let mut written = 0u64;
    loop {
        match file.write_all(&chunk) {
            Ok(()) => written += chunk.len() as u64,
            Err(error) => return error,
        }
        if written >= 16 << 20 {
            return file.sync_all().expect_err("a 6 MiB volume cannot make 16 MiB durable");
        }
    }
}

fn recovers_after_a_delete(mount: TestMount) {
    fs::remove_file(mount.path("filler")).expect("delete");
    fs::write(mount.path("after"), vec![1u8; 100_000]).expect("space is back after the delete");
    File::open(mount.path("after")).expect("open").sync_all().expect("fsync");
    let fs = mount.finish();
    assert_eq!(fs.stat(b"/after").expect("stat").1.size, 100_000);
}

#[test]
fn a_full_volume_answers_enospc_and_recovers_after_a_delete() {
    let mount = TestMount::new(48);
    let error = fill_until_error(&mount);
    assert_eq!(errno_of(&error), libc::ENOSPC, "full volume: {error}");
    recovers_after_a_delete(mount);
}

#[test]
fn without_the_write_back_cache_the_write_itself_answers_enospc() {
    let mount = TestMount::with_config(48, &MountConfig { writeback_cache: false, ..MountConfig::default() });
    let mut file = File::create(mount.path("filler")).expect("create");
    let chunk = vec![9u8; 256 * 1024];
    let mut written = 0u64;
    let error = loop {
        match file.write_all(&chunk) {
            Ok(()) => written += chunk.len() as u64,
            Err(error) => break error,
        }
        assert!(written < 16 << 20, "a 6 MiB volume cannot hold {written} bytes");
    };
    assert_eq!(errno_of(&error), libc::ENOSPC, "full volume: {error}");
    drop(file);
    recovers_after_a_delete(mount);
}

/// An unlinked file that a process still holds without an open file (an O_PATH descriptor)
/// lives on with a link count of 0, as on ext4, and its space comes back once the descriptor
/// is closed and the kernel forgets the inode: the mount's pin (`references`) is released, not
/// leaked.
#[test]
fn an_unlinked_inode_lives_while_the_kernel_holds_it_and_is_freed_after() {
    let mount = TestMount::new(64);
    let data = vec![0x5au8; 4 << 20];
    fs::write(mount.path("held"), &data).expect("write");
    File::open(mount.path("held")).expect("open").sync_all().expect("fsync");
    let free_with_file = statvfs(&mount.mount_point).f_bfree;
    let path = c_path(&mount.path("held"));
    // SAFETY: a valid C string; the descriptor is closed below.
    let descriptor = unsafe { libc::open(path.as_ptr(), libc::O_PATH) };
    assert!(descriptor >= 0, "O_PATH open");
    fs::remove_file(mount.path("held")).expect("unlink");
    // Still there through the descriptor, with no name.
    let through = fs::metadata(format!("/proc/self/fd/{descriptor}")).expect("stat through the descriptor");
    assert_eq!((through.nlink(), through.len()), (0, 4 << 20));
    let reopened = fs::read(format!("/proc/self/fd/{descriptor}")).expect("reopen through /proc");
    assert!(reopened == data, "the contents live on");
    assert!(statvfs(&mount.mount_point).f_bfree <= free_with_file + 8, "not freed while held");
    // SAFETY: closing the descriptor opened above.
    unsafe { libc::close(descriptor) };
    // The kernel forgets the inode once nothing holds it; the space then comes back.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let free = statvfs(&mount.mount_point).f_bfree;
        // Its 2,048 pages, less the open data segment's share that statfs counts only once the
        // segment fills (one segment of 64 pages).
        if free + 64 >= free_with_file + (4 << 20) / 2048 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the unlinked file's 2,048 pages never came back: {free} free, {free_with_file} with the file"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    mount.finish();
}
