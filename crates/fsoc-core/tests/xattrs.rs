//! Extended attributes and POSIX ACLs (issue 11 point 2, format version 4): stored in the
//! allocation tree, kept across remounts and delta commits, checked by fsck, with Linux's
//! errnos; ACLs tied to the mode as Linux ties them; refused on older volumes.
mod common;

use common::*;
use fsoc_core::fs::acl::{Acl, AclEntry, ACL_ACCESS_NAME, ACL_DEFAULT_NAME, ACL_GROUP_OBJ, ACL_MASK, ACL_OTHER};
use fsoc_core::fs::acl::{ACL_USER, ACL_USER_OBJ};
use fsoc_core::fs::attributes::{FS_APPEND_FL, FS_IMMUTABLE_FL};
use fsoc_core::fs::xattrs::{XattrMode, XATTR_VALUE_BYTES_MAX};
use fsoc_core::fs::{FileKind, NewInode};
use fsoc_core::{FileSystem, FsConfig, FsError};
use fsoc_media::{Profile, SimFlash};

fn volume(profile: Profile) -> FileSystem<SimFlash> {
    let mut fs = FileSystem::format(sim(profile, 1, 64, 21), FsConfig::default(), 21).expect("format");
    fs.mkdir(b"/d", 0o755).expect("mkdir");
    write_file(&mut fs, "/d/f", b"contents").expect("write");
    fs.transact().expect("commit");
    fs
}

fn inode(fs: &FileSystem<SimFlash>, path: &str) -> u64 {
    fs.stat(path.as_bytes()).expect("stat").0
}

fn names(list: &[u8]) -> Vec<String> {
    let mut names: Vec<String> = list
        .split(|&byte| byte == 0)
        .filter(|name| !name.is_empty())
        .map(|name| String::from_utf8_lossy(name).into())
        .collect();
    names.sort();
    names
}

fn remount(fs: FileSystem<SimFlash>) -> FileSystem<SimFlash> {
    FileSystem::mount(fs.into_flash_without_commit(), FsConfig::default()).expect("remount")
}

const UNDEFINED: u32 = u32::MAX;

fn acl(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    Acl { entries: entries.iter().map(|&(tag, perm, id)| AclEntry { tag, perm, id }).collect() }.encode()
}

#[test]
fn attributes_are_stored_listed_replaced_and_removed() {
    for profile in [Profile::Mlc, Profile::Slc] {
        let mut fs = volume(profile);
        let file = inode(&fs, "/d/f");
        let big: Vec<u8> = (0..XATTR_VALUE_BYTES_MAX).map(|index| (index * 7 % 251) as u8).collect();
        let long_name = format!("user.{}", "n".repeat(250));
        fs.set_xattr(file, b"user.small", b"1", XattrMode::Any).expect("set small");
        fs.set_xattr(file, b"user.empty", b"", XattrMode::Any).expect("set empty value");
        fs.set_xattr(file, b"security.big", &big, XattrMode::Create).expect("set 64 KiB");
        fs.set_xattr(file, long_name.as_bytes(), b"long", XattrMode::Any).expect("set a 255-byte name");
        fs.set_xattr(file, b"trusted.t", b"t", XattrMode::Any).expect("set trusted");
        assert_eq!(fs.get_xattr(file, b"user.small").expect("get"), b"1");
        assert_eq!(fs.get_xattr(file, b"user.empty").expect("get empty"), b"");
        assert_eq!(fs.get_xattr(file, b"security.big").expect("get big"), big);
        assert_eq!(fs.get_xattr(file, long_name.as_bytes()).expect("get long"), b"long");
        let mut expected = vec![
            "security.big".to_string(),
            "trusted.t".into(),
            "user.empty".into(),
            "user.small".into(),
            long_name.clone(),
        ];
        expected.sort();
        assert_eq!(names(&fs.list_xattrs(file).expect("list")), expected);

        // Delta commit, then remount: all of it is back.
        fs.fsync(file).expect("fsync");
        let mut fs = remount(fs);
        assert_eq!(fs.get_xattr(file, b"security.big").expect("big after remount"), big);
        assert_eq!(names(&fs.list_xattrs(file).expect("list")), expected);
        let report = fs.fsck(false).expect("fsck");
        assert!(report.is_clean(), "{:?}", report.violations);
        assert_eq!(report.xattrs, 5);

        // XATTR_CREATE / XATTR_REPLACE and a shorter value in place of a longer one.
        assert_eq!(fs.set_xattr(file, b"user.small", b"2", XattrMode::Create), Err(FsError::Exists));
        assert_eq!(fs.set_xattr(file, b"user.none", b"2", XattrMode::Replace), Err(FsError::NoAttribute));
        fs.set_xattr(file, b"security.big", b"short now", XattrMode::Replace).expect("replace");
        assert_eq!(fs.get_xattr(file, b"security.big").expect("get"), b"short now");
        fs.remove_xattr(file, b"user.small").expect("remove");
        assert_eq!(fs.get_xattr(file, b"user.small"), Err(FsError::NoAttribute));
        assert_eq!(fs.remove_xattr(file, b"user.small"), Err(FsError::NoAttribute));
        assert_eq!(FsError::NoAttribute.errno(), 61, "ENODATA");
        assert_clean(&mut fs, "after replace and remove");

        // Unlinking the file removes its attributes with it.
        fs.unlink(b"/d/f").expect("unlink");
        let report = fs.fsck(false).expect("fsck");
        assert!(report.is_clean(), "{:?}", report.violations);
        assert_eq!(report.xattrs, 0, "{profile:?}");
    }
}

#[test]
fn bad_names_and_values_get_linux_errnos() {
    let mut fs = volume(Profile::Mlc);
    let file = inode(&fs, "/d/f");
    let too_long = format!("user.{}", "n".repeat(251));
    assert_eq!(fs.set_xattr(file, too_long.as_bytes(), b"x", XattrMode::Any), Err(FsError::OutOfRange));
    assert_eq!(fs.get_xattr(file, too_long.as_bytes()), Err(FsError::OutOfRange));
    assert_eq!(FsError::OutOfRange.errno(), 34, "ERANGE");
    assert_eq!(fs.set_xattr(file, b"", b"x", XattrMode::Any), Err(FsError::OutOfRange));
    let huge = vec![0u8; XATTR_VALUE_BYTES_MAX + 1];
    assert_eq!(fs.set_xattr(file, b"user.huge", &huge, XattrMode::Any), Err(FsError::TooBig));
    assert_eq!(FsError::TooBig.errno(), 7, "E2BIG");
    assert_eq!(fs.set_xattr(file, b"unknown.x", b"x", XattrMode::Any), Err(FsError::NotSupported));
    assert_eq!(fs.set_xattr(file, b"user.", b"x", XattrMode::Any).map_err(|error| error.errno()), Err(22));
    assert!(matches!(XattrMode::from_flags(3), Err(FsError::InvalidArgument(_))));
    // user. attributes only on files and directories (Linux's xattr_permission).
    fs.symlink_path(b"/d/f", b"/d/link").expect("symlink");
    let link = fs.lookup(inode(&fs, "/d"), b"link").expect("lookup").0;
    assert_eq!(fs.set_xattr(link, b"user.x", b"x", XattrMode::Any), Err(FsError::NotPermitted));
    assert_eq!(fs.get_xattr(link, b"user.x"), Err(FsError::NoAttribute));
    fs.set_xattr(link, b"trusted.x", b"x", XattrMode::Any).expect("trusted. on a symlink");
    // Immutable and append-only inodes take no attribute change (EPERM, as ext4).
    fs.set_xattr(file, b"user.kept", b"k", XattrMode::Any).expect("set");
    for flag in [FS_IMMUTABLE_FL, FS_APPEND_FL] {
        fs.set_inode_flags(file, flag, true).expect("flag");
        assert_eq!(fs.set_xattr(file, b"user.x", b"x", XattrMode::Any), Err(FsError::NotPermitted));
        assert_eq!(fs.remove_xattr(file, b"user.kept"), Err(FsError::NotPermitted));
        assert_eq!(fs.get_xattr(file, b"user.kept").expect("still readable"), b"k");
        fs.set_inode_flags(file, 0, true).expect("clear");
    }
    assert_eq!(fs.get_xattr(999, b"user.x"), Err(FsError::NotFound));
    assert_clean(&mut fs, "after refusals");
}

#[test]
fn an_attribute_change_sets_ctime() {
    let mut fs = volume(Profile::Mlc);
    let file = inode(&fs, "/d/f");
    fs.now_ns = 5_000_000_000;
    fs.set_xattr(file, b"user.a", b"1", XattrMode::Any).expect("set");
    assert_eq!(fs.getattr(file).expect("getattr").ctime_ns, 5_000_000_000);
    fs.now_ns = 6_000_000_000;
    fs.remove_xattr(file, b"user.a").expect("remove");
    assert_eq!(fs.getattr(file).expect("getattr").ctime_ns, 6_000_000_000);
}

#[test]
fn many_attributes_on_many_inodes_survive_a_remount() {
    let mut fs = volume(Profile::Mlc);
    let mut expected = Vec::new();
    for index in 0..60u32 {
        let path = format!("/d/file{index}");
        write_file(&mut fs, &path, b"x").expect("create");
        let file = inode(&fs, &path);
        for attribute in 0..(index % 7) {
            let name = format!("user.attribute{attribute}");
            let value = vec![index as u8; (attribute * 300) as usize];
            fs.set_xattr(file, name.as_bytes(), &value, XattrMode::Any).expect("set");
            expected.push((file, name, value));
        }
    }
    fs.transact().expect("commit");
    let mut fs = remount(fs);
    for (file, name, value) in &expected {
        assert_eq!(&fs.get_xattr(*file, name.as_bytes()).expect("get"), value, "{file} {name}");
    }
    let report = fs.fsck(false).expect("fsck");
    assert!(report.is_clean(), "{:?}", report.violations);
    assert_eq!(report.xattrs, expected.len() as u64);
}

#[test]
fn an_access_acl_sets_the_mode_and_chmod_rewrites_it() {
    let mut fs = volume(Profile::Mlc);
    let file = inode(&fs, "/d/f");
    // Only the three base entries: the mode says it all, so nothing is stored.
    let base = acl(&[(ACL_USER_OBJ, 6, UNDEFINED), (ACL_GROUP_OBJ, 0, UNDEFINED), (ACL_OTHER, 0, UNDEFINED)]);
    fs.set_xattr(file, ACL_ACCESS_NAME, &base, XattrMode::Any).expect("set base ACL");
    assert_eq!(fs.getattr(file).expect("getattr").mode, 0o600);
    assert_eq!(fs.get_xattr(file, ACL_ACCESS_NAME), Err(FsError::NoAttribute));
    // A named user: stored, and the group bits show the mask.
    let named = acl(&[
        (ACL_USER_OBJ, 7, UNDEFINED),
        (ACL_USER, 6, 1000),
        (ACL_GROUP_OBJ, 4, UNDEFINED),
        (ACL_MASK, 6, UNDEFINED),
        (ACL_OTHER, 4, UNDEFINED),
    ]);
    fs.set_xattr(file, ACL_ACCESS_NAME, &named, XattrMode::Any).expect("set ACL");
    assert_eq!(fs.getattr(file).expect("getattr").mode, 0o764);
    assert_eq!(fs.get_xattr(file, ACL_ACCESS_NAME).expect("stored"), named);
    // chmod 640: owner rw, mask r, other none; the named entry keeps its bits.
    fs.chmod(b"/d/f", 0o640).expect("chmod");
    let after = acl(&[
        (ACL_USER_OBJ, 6, UNDEFINED),
        (ACL_USER, 6, 1000),
        (ACL_GROUP_OBJ, 4, UNDEFINED),
        (ACL_MASK, 4, UNDEFINED),
        (ACL_OTHER, 0, UNDEFINED),
    ]);
    assert_eq!(fs.get_xattr(file, ACL_ACCESS_NAME).expect("rewritten"), after);
    // Malformed lists are EINVAL; a default list on a file is EACCES.
    let bad = acl(&[
        (ACL_USER_OBJ, 7, UNDEFINED),
        (ACL_USER, 6, 1000),
        (ACL_GROUP_OBJ, 4, UNDEFINED),
        (ACL_OTHER, 4, UNDEFINED),
    ]);
    assert_eq!(fs.set_xattr(file, ACL_ACCESS_NAME, &bad, XattrMode::Any).map_err(|error| error.errno()), Err(22));
    assert_eq!(fs.set_xattr(file, ACL_ACCESS_NAME, b"junk", XattrMode::Any).map_err(|error| error.errno()), Err(22));
    assert_eq!(fs.set_xattr(file, ACL_DEFAULT_NAME, &named, XattrMode::Any), Err(FsError::AccessDenied));
    assert_eq!(FsError::AccessDenied.errno(), 13, "EACCES");
    assert_clean(&mut fs, "after ACL changes");
}

#[test]
fn new_inodes_inherit_the_default_acl_or_lose_the_umask() {
    let mut fs = volume(Profile::Mlc);
    let directory = inode(&fs, "/d");
    let new =
        |kind, mode, target| NewInode { kind, mode, umask: 0o022, uid: 0, gid: 0, rdev: 0, symlink_target: target };
    // No default ACL: the umask applies.
    let plain = fs.create_masked(directory, b"plain", &new(FileKind::File, 0o666, None)).expect("create");
    assert_eq!(fs.getattr(plain).expect("getattr").mode, 0o644);
    let default = acl(&[
        (ACL_USER_OBJ, 7, UNDEFINED),
        (ACL_USER, 7, 1000),
        (ACL_GROUP_OBJ, 5, UNDEFINED),
        (ACL_MASK, 7, UNDEFINED),
        (ACL_OTHER, 5, UNDEFINED),
    ]);
    fs.set_xattr(directory, ACL_DEFAULT_NAME, &default, XattrMode::Any).expect("set default ACL");
    assert_eq!(fs.getattr(directory).expect("getattr").mode, 0o755, "a default list leaves the mode");
    // A file created 0666 under it: the umask is ignored, the list masked by the mode.
    let file = fs.create_masked(directory, b"file", &new(FileKind::File, 0o666, None)).expect("create");
    assert_eq!(fs.getattr(file).expect("getattr").mode, 0o664);
    let access = acl(&[
        (ACL_USER_OBJ, 6, UNDEFINED),
        (ACL_USER, 7, 1000),
        (ACL_GROUP_OBJ, 5, UNDEFINED),
        (ACL_MASK, 6, UNDEFINED),
        (ACL_OTHER, 4, UNDEFINED),
    ]);
    assert_eq!(fs.get_xattr(file, ACL_ACCESS_NAME).expect("inherited access ACL"), access);
    assert_eq!(fs.get_xattr(file, ACL_DEFAULT_NAME), Err(FsError::NoAttribute), "files take no default list");
    // A directory takes both lists.
    let sub = fs.create_masked(directory, b"sub", &new(FileKind::Directory, 0o777, None)).expect("mkdir");
    assert_eq!(fs.getattr(sub).expect("getattr").mode, 0o775);
    assert_eq!(fs.get_xattr(sub, ACL_DEFAULT_NAME).expect("inherited default ACL"), default);
    // A symlink takes neither.
    let link = fs.create_masked(directory, b"link", &new(FileKind::Symlink, 0o777, Some(b"file"))).expect("symlink");
    assert_eq!(fs.list_xattrs(link).expect("list"), b"");
    assert_clean(&mut fs, "after inheritance");
}

#[test]
fn older_volumes_have_no_attributes() {
    for (fixture, packed) in [
        ("golden-v2", &include_bytes!("fixtures/golden-v2.sparse")[..]),
        ("golden-v3", &include_bytes!("fixtures/golden-v3.sparse")[..]),
    ] {
        let directory = tempfile::tempdir().expect("temporary directory");
        let path = directory.path().join("old.img");
        unpack_sparse(packed, &path);
        let mut fs =
            FileSystem::mount(SimFlash::open_image(&path).expect("open image"), FsConfig::default()).expect("mount");
        assert_eq!(fs.set_xattr(1, b"user.x", b"x", XattrMode::Any), Err(FsError::NotSupported), "{fixture}");
        assert_eq!(fs.remove_xattr(1, b"user.x"), Err(FsError::NotSupported), "{fixture}");
        assert_eq!(fs.get_xattr(1, b"user.x"), Err(FsError::NoAttribute), "{fixture}");
        assert_eq!(fs.list_xattrs(1).expect("list"), b"", "{fixture}");
        assert_clean(&mut fs, fixture);
    }
}

#[test]
fn names_whose_hashes_collide_take_separate_slots() {
    // CRC-32C("user.c1371838") == CRC-32C("user.c2000402") == 3281175643 (found by search).
    let (first, second) = (&b"user.c1371838"[..], &b"user.c2000402"[..]);
    assert_eq!(fsoc_flash::codec::crc32c(first), fsoc_flash::codec::crc32c(second));
    let mut fs = volume(Profile::Mlc);
    let file = inode(&fs, "/d/f");
    fs.set_xattr(file, first, b"one", XattrMode::Create).expect("set first");
    fs.set_xattr(file, second, &[2; 3000], XattrMode::Create).expect("set second");
    assert_eq!(fs.get_xattr(file, first).expect("first"), b"one");
    assert_eq!(fs.get_xattr(file, second).expect("second"), vec![2; 3000]);
    assert_eq!(fs.set_xattr(file, second, b"x", XattrMode::Create), Err(FsError::Exists));
    fs.remove_xattr(file, first).expect("remove first");
    assert_eq!(fs.get_xattr(file, first), Err(FsError::NoAttribute));
    assert_eq!(fs.get_xattr(file, second).expect("second stays"), vec![2; 3000]);
    fs.set_xattr(file, first, b"again", XattrMode::Any).expect("set first again");
    fs.set_xattr(file, second, b"shorter", XattrMode::Replace).expect("replace second");
    assert_eq!(names(&fs.list_xattrs(file).expect("list")), vec!["user.c1371838", "user.c2000402"]);
    fs.transact().expect("commit");
    let mut fs = remount(fs);
    assert_eq!(fs.get_xattr(file, first).expect("first"), b"again");
    assert_eq!(fs.get_xattr(file, second).expect("second"), b"shorter");
    assert_clean(&mut fs, "colliding names");
}

/// Reads or rewrites one allocation-tree record as it is on flash (`craft`: no validation).
fn raw_record(fs: &mut FileSystem<SimFlash>, key: &[u8], value: Option<Option<&[u8]>>) -> Option<Vec<u8>> {
    use fsoc_core::txn::store::LogNodeStore;
    let volume = &mut fs.craft();
    let mut store = LogNodeStore::new(volume.log);
    match value {
        None => volume.allocation.get(&store, key).expect("raw read"),
        Some(Some(value)) => volume.allocation.insert(&mut store, key, value).expect("raw insert"),
        Some(None) => volume.allocation.remove(&mut store, key).expect("raw remove"),
    }
}

fn xattr_key(inode: u64, name: &[u8], slot: u16, chunk: u16) -> Vec<u8> {
    use fsoc_core::fs::records::{allocation_key, xattr_offset, RecordKind};
    allocation_key(inode, RecordKind::Xattr, xattr_offset(fsoc_flash::codec::crc32c(name), slot, chunk))
}

/// docs/FORMAT.md's example record is what a volume stores for `user.a` = `x`.
#[test]
fn the_stored_record_is_the_documented_one() {
    let mut fs = volume(Profile::Mlc);
    let file = inode(&fs, "/d/f");
    fs.set_xattr(file, b"user.a", b"x", XattrMode::Any).expect("set");
    let stored = raw_record(&mut fs, &xattr_key(file, b"user.a", 0, 0), None).expect("record at the documented key");
    assert_eq!(stored, [0x06, 0x01, 0x00, 0x00, 0x00, b'u', b's', b'e', b'r', b'.', b'a', b'x']);
}

/// Damaged attribute records (a missing chunk, a name that does not hash to its key, a
/// header longer than its chunks, a record on an inode's key with a bad header) are EIO for
/// that file and violations for fsck; never a panic or a wrong value.
#[test]
fn damaged_attribute_records_are_refused() {
    let long: Vec<u8> = (0..3000u32).map(|index| index as u8).collect();
    // (slot, chunk, new value or None to remove) edits made from the first chunk's bytes.
    type Damage = fn(&[u8]) -> Vec<(u16, u16, Option<Vec<u8>>)>;
    let cases: [(&str, Damage); 4] = [
        ("a missing middle chunk", |_| vec![(0, 2, None)]),
        ("a last chunk too short", |_| vec![(0, 6, Some(vec![1, 2, 3]))]),
        ("a name of another hash", |first| {
            let mut changed = first.to_vec();
            changed[5] ^= 1;
            vec![(0, 0, Some(changed))]
        }),
        ("a header with a zero-length name", |first| {
            let mut changed = first.to_vec();
            changed[0] = 0;
            vec![(0, 0, Some(changed))]
        }),
    ];
    for (what, damage) in cases {
        let mut fs = volume(Profile::Mlc);
        let file = inode(&fs, "/d/f");
        fs.set_xattr(file, b"user.long", &long, XattrMode::Any).expect("set");
        fs.set_xattr(file, b"user.other", b"fine", XattrMode::Any).expect("set");
        let first = raw_record(&mut fs, &xattr_key(file, b"user.long", 0, 0), None).expect("chunk 0");
        for (slot, chunk, value) in damage(&first) {
            raw_record(&mut fs, &xattr_key(file, b"user.long", slot, chunk), Some(value.as_deref()));
        }
        match fs.get_xattr(file, b"user.long") {
            Err(error) => assert_eq!(error.errno(), 5, "{what}: EIO, got {error:?}"),
            Ok(value) => panic!("{what}: read {} bytes", value.len()),
        }
        let report = fs.fsck(false).expect("fsck");
        assert!(!report.is_clean(), "{what}: fsck must object");
        // The file's data and other files stay readable.
        assert_eq!(read_file(&mut fs, "/d/f").expect("data"), b"contents", "{what}");
    }
}
