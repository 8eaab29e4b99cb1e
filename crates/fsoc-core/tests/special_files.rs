//! Device nodes, FIFOs and sockets (issue 11 point 1, format version 3): made with
//! `create_special`, listed with their kind, kept across remount with their device numbers,
//! renamed, linked and removed like files, refused for reading and writing (their contents
//! are the kernel's), checked by fsck; refused on volumes whose format has no room for them.
mod common;

use common::*;
use fsoc_core::fs::records::{make_device_number, split_device_number};
use fsoc_core::fs::FileKind;
use fsoc_core::{FileSystem, FsConfig, FsError};
use fsoc_media::{Profile, SimFlash};

const SPECIALS: [(&str, FileKind, u64); 4] = [
    ("/dev-null", FileKind::CharDevice, 0x103),
    ("/sda1", FileKind::BlockDevice, 0x801),
    ("/fifo", FileKind::Fifo, 0),
    ("/socket", FileKind::Socket, 0),
];

#[test]
fn special_files_are_kept_listed_and_checked() {
    let mut fs = FileSystem::format(sim(Profile::Mlc, 1, 48, 9), FsConfig::default(), 9).expect("format");
    for (path, kind, rdev) in SPECIALS {
        let name = &path.as_bytes()[1..];
        fs.create_special(1, name, kind, 0o640, 7, 8, rdev | 0x1_0000_0000).expect("create_special");
        assert_eq!(fs.create_special(1, name, kind, 0o640, 7, 8, rdev), Err(FsError::Exists));
    }
    assert!(fs.create_special(1, b"x", FileKind::File, 0o644, 0, 0, 0).is_err(), "a file is made with create");
    // The big device number survives; FIFOs and sockets have none.
    let big = make_device_number(259, 1 << 20);
    fs.create_special(1, b"nvme", FileKind::BlockDevice, 0o600, 0, 0, big).expect("big numbers");
    fs.transact().expect("commit");
    let mut fs = FileSystem::mount(fs.into_flash_without_commit(), FsConfig::default()).expect("remount");
    for (path, kind, rdev) in SPECIALS {
        let (inode, record) = fs.stat(path.as_bytes()).expect("stat");
        assert_eq!((record.kind, record.mode, record.uid, record.gid, record.size), (kind, 0o640, 7, 8, 0), "{path}");
        let expected = if kind.is_device() { rdev | 0x1_0000_0000 } else { 0 };
        assert_eq!(record.rdev(), expected, "{path}");
        assert!(matches!(fs.read(inode, 0, 10), Err(FsError::InvalidArgument(_))), "{path}: read");
        assert!(matches!(fs.write(inode, 0, b"x"), Err(FsError::InvalidArgument(_))), "{path}: write");
        assert!(matches!(fs.truncate(inode, 0), Err(FsError::InvalidArgument(_))), "{path}: truncate");
    }
    assert_eq!(split_device_number(fs.stat(b"/nvme").expect("stat").1.rdev()), (259, 1 << 20));
    let listed: Vec<(Vec<u8>, FileKind)> =
        fs.readdir_path(b"/").expect("readdir").into_iter().map(|entry| (entry.name, entry.kind)).collect();
    for (path, kind, _) in SPECIALS {
        assert!(listed.contains(&(path.as_bytes()[1..].to_vec(), kind)), "{path} listed as {kind:?}: {listed:?}");
    }
    let report = fs.fsck(true).expect("fsck");
    assert!(report.is_clean(), "{:?}", report.violations);
    assert_eq!(report.special_files, 5);
    // Renamed, linked and removed like files.
    fs.rename_path(b"/fifo", b"/fifo2").expect("rename");
    fs.link_path(b"/dev-null", b"/null-again").expect("link");
    assert_eq!(fs.stat(b"/null-again").expect("stat").1.nlink, 2);
    fs.unlink(b"/dev-null").expect("unlink");
    fs.unlink(b"/null-again").expect("unlink the last name");
    fs.unlink(b"/socket").expect("unlink");
    assert!(matches!(fs.rmdir(b"/sda1"), Err(FsError::NotDirectory)));
    assert_clean(&mut fs, "after renames and removals");
}

#[test]
fn older_volumes_refuse_special_files() {
    let directory = tempfile::tempdir().expect("temporary directory");
    let path = directory.path().join("v2.img");
    unpack_sparse(include_bytes!("fixtures/golden-v2.sparse"), &path);
    let mut fs =
        FileSystem::mount(SimFlash::open_image(&path).expect("open image"), FsConfig::default()).expect("mount");
    assert_eq!(fs.create_special(1, b"fifo", FileKind::Fifo, 0o644, 0, 0, 0), Err(FsError::NotSupported));
    assert_clean(&mut fs, "golden v2");
}
