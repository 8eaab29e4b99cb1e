//! Inode attribute flags and the volume label (issue 18 point 3, format version 3): stored on
//! flash, enforced with ext4's errnos (EPERM) on every path, kept across remount and by fsck;
//! refused (EOPNOTSUPP) on volumes whose format has no room for them.
mod common;

use common::*;
use fsoc_core::fs::attributes::{FS_APPEND_FL, FS_IMMUTABLE_FL, FS_NOATIME_FL, FS_NODUMP_FL, FS_SYNC_FL};
use fsoc_core::fs::FileKind;
use fsoc_core::{FileSystem, FsConfig, FsError, OpenFlags};
use fsoc_media::{Profile, SimFlash};

const WRITE: OpenFlags = OpenFlags { read: false, ..CREATE };
const APPEND: OpenFlags = OpenFlags { append: true, ..WRITE };

fn volume() -> FileSystem<SimFlash> {
    let mut fs = FileSystem::format(sim(Profile::Mlc, 1, 48, 8), FsConfig::default(), 8).expect("format");
    fs.mkdir(b"/d", 0o755).expect("mkdir");
    write_file(&mut fs, "/d/f", &pattern(5000, 1)).expect("write");
    fs.transact().expect("commit");
    fs
}

fn inode(fs: &FileSystem<SimFlash>, path: &str) -> u64 {
    fs.stat(path.as_bytes()).expect("stat").0
}

fn is_eperm<T: std::fmt::Debug>(result: Result<T, FsError>, what: &str) {
    match result {
        Err(error) => {
            assert_eq!(error, FsError::NotPermitted, "{what}");
            assert_eq!(error.errno(), 1, "{what}: EPERM");
        }
        Ok(value) => panic!("{what}: allowed ({value:?})"),
    }
}

#[test]
fn an_immutable_file_refuses_every_change() {
    let mut fs = volume();
    let file = inode(&fs, "/d/f");
    is_eperm(fs.set_inode_flags(file, FS_IMMUTABLE_FL, false), "setting i unprivileged");
    fs.set_inode_flags(file, FS_IMMUTABLE_FL, true).expect("set i");
    assert_eq!(fs.inode_flags(file).expect("flags"), FS_IMMUTABLE_FL);
    is_eperm(fs.open(b"/d/f", WRITE, 0), "open for writing");
    is_eperm(fs.write(file, 0, b"x"), "write");
    is_eperm(fs.write(file, 5000, b"x"), "append");
    is_eperm(fs.truncate(file, 10), "truncate");
    is_eperm(fs.punch_hole(file, 0, 4096), "punch");
    is_eperm(fs.chmod(b"/d/f", 0o600), "chmod");
    is_eperm(fs.chown(b"/d/f", 1, 1), "chown");
    is_eperm(fs.utimens(b"/d/f", 1, 2), "utimens");
    is_eperm(fs.unlink(b"/d/f"), "unlink");
    is_eperm(fs.rename_path(b"/d/f", b"/d/g"), "rename");
    is_eperm(fs.link_path(b"/d/f", b"/d/h"), "link");
    is_eperm(fs.setattr_kept_times(file, None, None, None, Some(1), Some(2)), "kept times");
    write_file(&mut fs, "/d/other", b"o").expect("another file");
    is_eperm(fs.rename_path(b"/d/other", b"/d/f"), "rename over it");
    // Reading is unaffected.
    assert_eq!(read_file(&mut fs, "/d/f").expect("read"), pattern(5000, 1));
    // Kept across a remount and clean under fsck.
    fs.transact().expect("commit");
    let mut fs = FileSystem::mount(fs.into_flash_without_commit(), FsConfig::default()).expect("remount");
    assert_eq!(fs.inode_flags(file).expect("flags"), FS_IMMUTABLE_FL);
    assert_clean(&mut fs, "immutable file");
    is_eperm(fs.set_inode_flags(file, 0, false), "clearing i unprivileged");
    fs.set_inode_flags(file, 0, true).expect("clear i");
    fs.write(file, 0, b"now writable").expect("write after clearing");
    fs.unlink(b"/d/f").expect("unlink after clearing");
}

#[test]
fn an_append_only_file_grows_at_the_end_only() {
    let mut fs = volume();
    let file = inode(&fs, "/d/f");
    fs.set_inode_flags(file, FS_APPEND_FL, true).expect("set a");
    is_eperm(fs.open(b"/d/f", WRITE, 0), "open for writing without O_APPEND");
    is_eperm(fs.open(b"/d/f", OpenFlags { truncate: true, ..APPEND }, 0), "O_TRUNC");
    let fd = fs.open(b"/d/f", APPEND, 0).expect("open with O_APPEND");
    fs.close(fd).expect("close");
    is_eperm(fs.write(file, 100, b"x"), "write inside");
    is_eperm(fs.write(file, 6000, b"x"), "write past the end (a hole)");
    assert_eq!(fs.write(file, 5000, b"ta").expect("write at the end"), 2);
    // A write-back cache writes back the whole page an append ended in: the same bytes up to
    // the end, then new ones. Allowed; different bytes before the end are not.
    let mut page = pattern(5000, 1)[4096..].to_vec();
    page.extend_from_slice(b"ta");
    let mut changed = page.clone();
    changed[0] ^= 1;
    changed.extend_from_slice(b"il");
    is_eperm(fs.write(file, 4096, &changed), "a rewrite that changes a byte before the end");
    page.extend_from_slice(b"il");
    assert_eq!(fs.write(file, 4096, &page).expect("a rewrite that keeps the old bytes"), page.len());
    is_eperm(fs.truncate(file, 0), "truncate");
    is_eperm(fs.punch_hole(file, 0, 4096), "punch");
    is_eperm(fs.chmod(b"/d/f", 0o600), "chmod");
    is_eperm(fs.chown(b"/d/f", 1, 1), "chown");
    is_eperm(fs.utimens(b"/d/f", 1, 2), "explicit times");
    fs.setattr_kept_times(file, None, None, None, Some(1), Some(2)).expect("times a front end keeps");
    is_eperm(fs.unlink(b"/d/f"), "unlink");
    is_eperm(fs.rename_path(b"/d/f", b"/d/g"), "rename");
    is_eperm(fs.link_path(b"/d/f", b"/d/h"), "link");
    let mut expected = pattern(5000, 1);
    expected.extend_from_slice(b"tail");
    assert_eq!(read_file(&mut fs, "/d/f").expect("read"), expected);
    assert_clean(&mut fs, "append-only file");
}

#[test]
fn flagged_directories_guard_their_entries() {
    let mut fs = volume();
    let directory = inode(&fs, "/d");
    fs.set_inode_flags(directory, FS_IMMUTABLE_FL, true).expect("set i on /d");
    is_eperm(write_file(&mut fs, "/d/new", b"n"), "create in an immutable directory");
    is_eperm(fs.mkdir(b"/d/sub", 0o755), "mkdir in an immutable directory");
    is_eperm(fs.unlink(b"/d/f"), "unlink from an immutable directory");
    is_eperm(fs.rename_path(b"/d/f", b"/f"), "rename out of an immutable directory");
    write_file(&mut fs, "/outside", b"o").expect("create elsewhere");
    is_eperm(fs.rename_path(b"/outside", b"/d/in"), "rename into an immutable directory");
    // The file in it can still be written (its own flags decide).
    fs.write(inode(&fs, "/d/f"), 0, b"x").expect("write a file in it");

    fs.set_inode_flags(directory, FS_APPEND_FL, true).expect("i off, a on");
    write_file(&mut fs, "/d/new", b"n").expect("create in an append-only directory");
    fs.rename_path(b"/outside", b"/d/in").expect("rename into an append-only directory");
    is_eperm(fs.unlink(b"/d/new"), "unlink from an append-only directory");
    is_eperm(fs.rename_path(b"/d/new", b"/new"), "rename out of an append-only directory");
    assert_eq!(fs.lookup(directory, b"new").expect("lookup").1, FileKind::File);
    assert_clean(&mut fs, "flagged directories");
}

#[test]
fn the_other_flags_are_kept_and_sync_commits_each_write() {
    let mut fs = volume();
    let file = inode(&fs, "/d/f");
    let flags = FS_NOATIME_FL | FS_NODUMP_FL | FS_SYNC_FL;
    fs.set_inode_flags(file, flags, false).expect("owner sets A, d, S");
    assert_eq!(fs.inode_flags(file).expect("flags"), flags);
    assert_eq!(fs.set_inode_flags(file, flags | 0x0000_0004, false), Err(FsError::NotSupported), "compression");
    assert_eq!(FsError::NotSupported.errno(), 95, "EOPNOTSUPP");
    // S: the write is durable when it returns, without fsync.
    fs.write(file, 0, b"synchronous").expect("write");
    let mut fs = FileSystem::mount(fs.into_flash_without_commit(), FsConfig::default()).expect("remount");
    assert_eq!(&read_file(&mut fs, "/d/f").expect("read")[..11], b"synchronous");
    assert_eq!(fs.inode_flags(file).expect("flags"), flags);
}

#[test]
fn the_label_is_kept_and_checked() {
    let mut fs = volume();
    assert_eq!(fs.label().expect("label"), b"");
    fs.set_label(b"rootfs-a").expect("set label");
    assert_eq!(fs.set_label(&[b'x'; 256]), Err(FsError::InvalidArgument("a label holds at most 255 bytes")));
    assert!(fs.set_label(b"a\0b").is_err());
    fs.transact().expect("commit");
    let mut fs = FileSystem::mount(fs.into_flash_without_commit(), FsConfig::default()).expect("remount");
    assert_eq!(fs.label().expect("label"), b"rootfs-a");
    assert_clean(&mut fs, "labelled volume");
    fs.set_label(b"").expect("remove the label");
    assert_eq!(fs.label().expect("label"), b"");
    assert_clean(&mut fs, "label removed");
}

/// A volume of format version 2 keeps its format: no flags, no label (EOPNOTSUPP), and the
/// flag query answers none.
#[test]
fn older_volumes_refuse_flags_and_labels() {
    let directory = tempfile::tempdir().expect("temporary directory");
    let path = directory.path().join("v2.img");
    unpack_sparse(include_bytes!("fixtures/golden-v2.sparse"), &path);
    let mut fs =
        FileSystem::mount(SimFlash::open_image(&path).expect("open image"), FsConfig::default()).expect("mount");
    let file = inode_of(&fs, "/hello.txt");
    assert_eq!(fs.inode_flags(file).expect("flags"), 0);
    assert_eq!(fs.set_inode_flags(file, FS_IMMUTABLE_FL, true), Err(FsError::NotSupported));
    assert_eq!(fs.set_inode_flags(file, 0, true), Ok(()), "no change is no error");
    assert_eq!(fs.label().expect("label"), b"");
    assert_eq!(fs.set_label(b"x"), Err(FsError::NotSupported));
    assert_clean(&mut fs, "golden v2");
}

fn inode_of(fs: &FileSystem<SimFlash<fsoc_media::ImageStore>>, path: &str) -> u64 {
    fs.stat(path.as_bytes()).expect("stat").0
}
