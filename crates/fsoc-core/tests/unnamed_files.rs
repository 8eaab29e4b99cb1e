//! Unnamed files (open(2) with `O_TMPFILE`, issue 11 point 3): `create_unnamed` makes an open
//! regular file with a link count of 0 on the orphan list; `link` may give it a name (linkat);
//! otherwise its last release deletes it, and a power cut leaves nothing behind either: the
//! next mount deletes it with the other orphans.
mod common;

use common::*;
use fsoc_core::fs::{FileKind, NewInode};
use fsoc_core::{FileSystem, FsConfig, FsError};

fn unnamed_file(mode: u32, umask: u32) -> NewInode<'static> {
    NewInode { kind: FileKind::File, mode, umask, uid: 5, gid: 6, rdev: 0, symlink_target: None }
}

#[test]
fn an_unnamed_file_lives_while_open_and_keeps_a_name_linkat_gives_it() {
    let mut fs = fresh(64);

    let kept = fs.create_unnamed(1, &unnamed_file(0o666, 0o022)).expect("create_unnamed");
    let record = fs.getattr(kept).expect("getattr");
    assert_eq!((record.kind, record.nlink, record.mode, record.uid, record.gid), (FileKind::File, 0, 0o644, 5, 6));
    fs.write(kept, 0, &pattern(30_000, 1)).expect("write");
    assert!(fs.readdir(1, None, 16).expect("readdir").is_empty(), "an unnamed file is in no directory");
    assert_clean(&mut fs, "with an unnamed file open");

    let dropped = fs.create_unnamed(1, &unnamed_file(0o600, 0)).expect("create_unnamed");
    fs.write(dropped, 0, &pattern(50_000, 2)).expect("write");
    let directory_before = fs.getattr(1).expect("root");
    fs.link(kept, 1, b"named").expect("linkat of an unnamed file");
    fs.link(kept, 1, b"second").expect("a second name");
    assert_eq!(fs.getattr(kept).expect("getattr").nlink, 2);
    assert!(fs.getattr(1).expect("root").mtime_ns >= directory_before.mtime_ns);

    fs.release_inode(kept).expect("close the named one");
    fs.release_inode(dropped).expect("close the unnamed one");
    assert_eq!(fs.getattr(dropped).map(|record| record.nlink), Err(FsError::NotFound), "deleted at its last close");
    assert_eq!(fs.link(dropped, 1, b"too-late"), Err(FsError::NotFound), "a deleted inode takes no name");
    assert_eq!(read_file(&mut fs, "/named").expect("read"), pattern(30_000, 1));
    fs.transact().expect("commit");
    let report = fs.fsck(false).expect("fsck");
    assert!(report.is_clean(), "{:?}", report.violations);
    assert_eq!((report.orphans, report.data_pages), (0, 15), "only the named file's 15 pages are mapped");

    let flash = fs.unmount().expect("unmount");
    let mut fs = FileSystem::mount(flash, FsConfig::default()).expect("mount");
    assert_eq!(read_file(&mut fs, "/second").expect("read"), pattern(30_000, 1));
    fs.remove(1, b"named", false).expect("unlink");
    fs.remove(1, b"second", false).expect("unlink");
    fs.transact().expect("commit");
    let report = fs.fsck(true).expect("fsck");
    assert!(report.is_clean(), "{:?}", report.violations);
    assert_eq!((report.files, report.data_pages), (0, 0));
}

#[test]
fn a_power_cut_leaves_no_unnamed_file_behind() {
    let mut fs = fresh(64);
    write_file(&mut fs, "/kept", &pattern(10_000, 3)).expect("write");
    fs.transact().expect("commit");
    let unnamed = fs.create_unnamed(1, &unnamed_file(0o600, 0)).expect("create_unnamed");
    fs.write(unnamed, 0, &pattern(60_000, 4)).expect("write");
    fs.transact().expect("commit with the unnamed file open");
    let report = fs.fsck(false).expect("fsck");
    assert_eq!((report.orphans, report.data_pages), (1, 5 + 30), "the unnamed file is an orphan with its pages");

    let flash = fs.into_flash_without_commit();
    let mut fs = FileSystem::mount(flash, FsConfig::default()).expect("mount after the power cut");
    assert_eq!(fs.getattr(unnamed).map(|record| record.nlink), Err(FsError::NotFound), "the mount deleted it");
    assert_eq!(read_file(&mut fs, "/kept").expect("read"), pattern(10_000, 3));
    let report = fs.fsck(true).expect("fsck");
    assert!(report.is_clean(), "{:?}", report.violations);
    assert_eq!((report.orphans, report.data_pages), (0, 5), "its pages are free again");
}

#[test]
fn an_unnamed_file_is_made_only_as_a_file_in_a_directory() {
    let mut fs = fresh(64);
    write_file(&mut fs, "/file", b"not a directory").expect("write");
    let (file, _) = fs.lookup(1, b"file").expect("lookup");
    assert_eq!(fs.create_unnamed(file, &unnamed_file(0o600, 0)), Err(FsError::NotDirectory));
    assert_eq!(fs.create_unnamed(999, &unnamed_file(0o600, 0)), Err(FsError::NotFound));
    let directory = NewInode { kind: FileKind::Directory, ..unnamed_file(0o700, 0) };
    assert!(matches!(fs.create_unnamed(1, &directory), Err(FsError::InvalidArgument(_))));
    assert_clean(&mut fs, "after the refusals");
}
