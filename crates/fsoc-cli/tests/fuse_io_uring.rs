//! FUSE over io_uring (`fsoc mount -o io_uring`): the same file system through the kernel's
//! ring transport (vendor/fuser/PATCHES.md). Needs root, /dev/fuse and a kernel with the fuse
//! module's `enable_uring` switch (Linux 6.14 on); elsewhere each test says why it skipped.
//!
//! The switch is global: the tests here turn it on or off only while holding `SWITCH`, and
//! put it back as it was. Mounts of other tests are not affected (fsoc asks for io_uring only
//! with `-o io_uring`).

mod support;

use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Mutex;

use fsoc_fuse::{IoUringSwitch, IO_URING_GRANTED, IO_URING_SWITCH};
use support::{attributes, set_attribute, Volume};

const REFUSED_LINE: &str = "io_uring asked for, but the kernel does not offer FUSE over io_uring";

static SWITCH: Mutex<()> = Mutex::new(());

/// The kernel's switch set to `on` until dropped (then back as it was); `None`, with the
/// reason printed, when this machine cannot run the test.
fn switch(on: bool) -> Option<IoUringSwitch> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIP: FUSE over io_uring tests need root (to set {IO_URING_SWITCH})");
        return None;
    }
    if !Path::new(IO_URING_SWITCH).exists() {
        eprintln!("SKIP: {IO_URING_SWITCH} is missing: this kernel has no FUSE over io_uring (Linux 6.14 or later)");
        return None;
    }
    Some(IoUringSwitch::set(on).expect("set the fuse module's enable_uring"))
}

/// Files of several sizes written, read back whole and in pieces, appended to, overwritten in
/// the middle, renamed, listed, linked, given attributes and removed; every answer checked.
fn exercise(root: &Path) {
    let mut expected = Vec::new();
    for index in 0..40u32 {
        let size = (index as usize * 79_193) % (3 << 20);
        let content: Vec<u8> = (0..size).map(|byte| (byte as u32 * 31 + index) as u8).collect();
        let path = root.join(format!("file-{index:02}"));
        fs::write(&path, &content).expect("write");
        expected.push((path, content));
    }
    for (path, content) in &expected {
        assert_eq!(&fs::read(path).expect("read"), content, "{}", path.display());
        let file = fs::File::open(path).expect("open");
        if content.len() > 10_000 {
            let mut piece = vec![0u8; 4096];
            file.read_exact_at(&mut piece, 5000).expect("pread");
            assert_eq!(&piece[..], &content[5000..9096], "{}", path.display());
        }
    }
    // Append and overwrite in the middle, with fsync.
    let (path, mut content) = expected[20].clone();
    let mut file = fs::OpenOptions::new().read(true).write(true).open(&path).expect("open rw");
    file.seek(SeekFrom::End(0)).expect("seek");
    file.write_all(b"appended").expect("append");
    content.extend_from_slice(b"appended");
    file.write_all_at(b"middle", 100).expect("overwrite");
    content[100..106].copy_from_slice(b"middle");
    file.sync_all().expect("fsync");
    let mut back = Vec::new();
    file.seek(SeekFrom::Start(0)).expect("rewind");
    file.read_to_end(&mut back).expect("read back");
    assert_eq!(back, content);
    drop(file);
    // Directories, renames, hard links, symlinks, listings.
    fs::create_dir_all(root.join("a/b/c")).expect("mkdir -p");
    fs::rename(&path, root.join("a/b/c/moved")).expect("rename");
    assert_eq!(fs::read(root.join("a/b/c/moved")).expect("read moved"), content);
    fs::hard_link(root.join("a/b/c/moved"), root.join("a/link")).expect("link");
    std::os::unix::fs::symlink("b/c/moved", root.join("a/symlink")).expect("symlink");
    assert_eq!(fs::read(root.join("a/symlink")).expect("through the symlink"), content);
    let mut names: Vec<String> = fs::read_dir(root)
        .expect("readdir")
        .map(|entry| entry.expect("entry").file_name().into_string().expect("utf-8"))
        .collect();
    names.sort();
    assert_eq!(names.len(), 40, "39 files and a: {names:?}");
    // Extended attributes.
    let target = root.join("a/link");
    set_attribute(&target, "user.colour", b"green");
    assert_eq!(attributes(&target), vec![("user.colour".to_string(), b"green".to_vec())]);
    // Many readers at once (several ring threads, both queues).
    std::thread::scope(|scope| {
        for reader in 0..4 {
            let expected = &expected;
            scope.spawn(move || {
                for (index, (path, content)) in expected.iter().enumerate() {
                    if index == 20 || index % 4 != reader {
                        continue;
                    }
                    assert_eq!(&fs::read(path).expect("parallel read"), content, "{}", path.display());
                }
            });
        }
    });
    for (index, (path, _)) in expected.iter().enumerate() {
        if index != 20 {
            fs::remove_file(path).expect("unlink");
        }
    }
    assert_eq!(fs::read_dir(root).expect("readdir").count(), 1, "only a/ is left");
}

#[test]
fn a_mount_over_io_uring_behaves_as_over_dev_fuse() {
    let _serial = SWITCH.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let Some(_switch) = switch(true) else { return };
    let volume = Volume::new("256M");
    let mounted = volume.mount_with(&["-o", "io_uring", "--verbose"]);
    let log = mounted.log();
    assert!(log.contains(IO_URING_GRANTED), "the kernel did not grant io_uring:\n{log}");
    exercise(mounted.root());
    let mounted = support::check_round_trip(mounted);
    mounted.unmount();
    volume.fsck();
}

#[test]
fn io_uring_refused_by_the_kernel_falls_back_to_dev_fuse_with_a_warning() {
    let _serial = SWITCH.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let Some(_switch) = switch(false) else { return };
    let volume = Volume::new("128M");
    let mounted = volume.mount_with(&["-o", "io_uring"]);
    let log = mounted.log();
    assert!(log.contains(REFUSED_LINE) && !log.contains(IO_URING_GRANTED), "{log}");
    fs::write(mounted.path("still-works"), b"over /dev/fuse").expect("write");
    assert_eq!(fs::read(mounted.path("still-works")).expect("read"), b"over /dev/fuse");
    mounted.unmount();
    volume.fsck();
}
