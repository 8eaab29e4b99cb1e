//! Issue 11: a root file system image keeps extended attributes, POSIX ACLs and file
//! capabilities. `fsoc put -r` stores them from a host tree and `fsoc get -r` restores them:
//! a tree made with setfattr-like calls, setcap and setfacl comes back out of the image with
//! the same modes and the same attributes, byte for byte. A volume older than format version
//! 4 keeps none: `put -r` says so once and copies the files. A host that refuses some
//! attributes (trusted.* and security.* as non-root) gets the rest, with one warning.
//!
//! The trees live on tmpfs (/dev/shm): it keeps 60 KiB values, which ext4 without the
//! ea_inode feature refuses (ENOSPC).

mod support;

use std::collections::BTreeMap;
use std::ffi::CString;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

use support::{attributes, c_path, fsoc, require, run_ok, set_attribute, PROGRAM_TIMEOUT};

/// An unprivileged user and group for the non-root extraction.
const NOBODY: u32 = 65534;

/// For each path under `root` (itself included, as ""): its kind, permission bits and its
/// attributes, sorted (a value shown by its length and bytes in hex, so two trees compare
/// exactly and a difference is readable).
fn describe(root: &Path) -> BTreeMap<String, String> {
    let mut entries = BTreeMap::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(path) = pending.pop() {
        let metadata = fs::symlink_metadata(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
        let kind = if metadata.file_type().is_symlink() {
            "link"
        } else if metadata.is_dir() {
            for entry in fs::read_dir(&path).expect("read_dir") {
                pending.push(entry.expect("entry").path());
            }
            "dir"
        } else if metadata.is_file() {
            "file"
        } else {
            "node"
        };
        let mut description = format!("{kind} {:o}", metadata.mode() & 0o7777);
        for (name, value) in attributes(&path) {
            let hex: String = value.iter().map(|byte| format!("{byte:02x}")).collect();
            description.push_str(&format!("\n  {name} ({} bytes) {hex}", value.len()));
        }
        let relative = path.strip_prefix(root).expect("under root").display().to_string();
        entries.insert(relative, description);
    }
    entries
}

/// A temporary directory on tmpfs, checked to keep user.* attributes (Linux 6.6 and later).
fn tmpfs_directory() -> tempfile::TempDir {
    let directory = tempfile::Builder::new()
        .prefix("fsoc-xattr-")
        .tempdir_in("/dev/shm")
        .expect("a temporary directory on /dev/shm (tmpfs)");
    let probe = directory.path().join("probe");
    fs::write(&probe, b"").expect("probe file");
    let name = CString::new("user.probe").expect("name");
    // SAFETY: NUL-terminated path and name, and one byte of value.
    let done = unsafe { libc::lsetxattr(c_path(&probe).as_ptr(), name.as_ptr(), b"1".as_ptr().cast(), 1, 0) };
    assert_eq!(
        done,
        0,
        "/dev/shm (tmpfs) keeps no user.* attributes here ({}): the test needs Linux 6.6 or later",
        std::io::Error::last_os_error()
    );
    fs::remove_file(&probe).expect("remove probe");
    directory
}

/// The host tree: user.* attributes (one of 60 KiB, one with a 255-byte name), trusted.* and
/// security.* ones, a file capability, access ACLs (one set, one inherited from a default ACL),
/// a file whose inherited ACL was removed, default ACLs on directories, a read-only directory
/// with an attribute, a symlink and a FIFO with trusted.* attributes.
fn build_tree(tree: &Path) {
    fs::create_dir(tree).expect("mkdir tree");
    let file = tree.join("file.txt");
    fs::write(&file, b"extended attributes\n").expect("write");
    fs::set_permissions(&file, fs::Permissions::from_mode(0o640)).expect("chmod");
    set_attribute(&file, "user.comment", b"hello");
    let big: Vec<u8> = (0..60 * 1024u32).map(|index| (index * 7 % 251) as u8).collect();
    set_attribute(&file, "user.big", &big);
    let long_name = format!("user.{}", "n".repeat(250));
    assert_eq!(long_name.len(), 255);
    set_attribute(&file, &long_name, b"the longest name Linux allows");
    set_attribute(&file, "user.empty", b"");
    set_attribute(&file, "trusted.origin", b"build_tree");
    set_attribute(&file, "security.fsoc-test", b"label");

    let ping = tree.join("ping");
    fs::write(&ping, b"\x7fELF not really").expect("write");
    fs::set_permissions(&ping, fs::Permissions::from_mode(0o755)).expect("chmod");
    run_ok(Command::new("setcap").arg("cap_net_raw+ep").arg(&ping));

    let shared = tree.join("shared.txt");
    fs::write(&shared, b"shared\n").expect("write");
    fs::set_permissions(&shared, fs::Permissions::from_mode(0o640)).expect("chmod");
    run_ok(Command::new("setfacl").args(["-m", "u:1000:rw"]).arg(&shared));

    let dropbox = tree.join("dropbox");
    fs::create_dir(&dropbox).expect("mkdir");
    run_ok(Command::new("setfacl").args(["-d", "-m", "u:1000:rwx"]).arg(&dropbox));
    // Made after the default ACL: they inherit it on the host, as they will in the image.
    fs::write(dropbox.join("inherited.txt"), b"inherited\n").expect("write");
    fs::create_dir(dropbox.join("sub")).expect("mkdir");
    let plain = dropbox.join("plain.txt");
    fs::write(&plain, b"plain\n").expect("write");
    run_ok(Command::new("setfacl").arg("-b").arg(&plain));
    fs::set_permissions(&plain, fs::Permissions::from_mode(0o600)).expect("chmod");

    let readonly = tree.join("readonly");
    fs::create_dir(&readonly).expect("mkdir");
    fs::write(readonly.join("inside.txt"), b"inside\n").expect("write");
    set_attribute(&readonly, "user.note", b"read-only directory");
    fs::set_permissions(&readonly, fs::Permissions::from_mode(0o555)).expect("chmod");

    let link = tree.join("link");
    std::os::unix::fs::symlink("file.txt", &link).expect("symlink");
    set_attribute(&link, "trusted.link", b"on the link itself");

    let fifo = tree.join("pipe");
    run_ok(Command::new("mkfifo").arg(&fifo));
    set_attribute(&fifo, "trusted.fifo", b"on the FIFO");
}

fn mkfs(image: &Path) {
    let output = fsoc(&["mkfs", image.to_str().expect("utf-8 path"), "--size", "64M"]);
    assert!(output.status.success(), "mkfs failed:\n{}", output.text());
}

fn fsck_clean(image: &Path) {
    let output = fsoc(&["fsck", image.to_str().expect("utf-8 path")]);
    assert!(output.status.success() && output.stdout.contains("clean"), "fsck:\n{}", output.text());
}

/// The whole tree goes in and comes back out with every mode and attribute as it was, with
/// nothing said on stderr, and the image is clean.
#[test]
fn put_and_get_keep_attributes_acls_and_capabilities() {
    require("setcap");
    require("setfacl");
    require("mkfifo");
    let host = tmpfs_directory();
    let tree = host.path().join("tree");
    build_tree(&tree);
    let before = describe(&tree);
    // The tree holds what the test means it to (not a tree setfacl or setcap left bare).
    let describe_of = |path: &str| before.get(path).unwrap_or_else(|| panic!("{path} in the tree")).clone();
    assert!(describe_of("ping").contains("security.capability"), "{}", describe_of("ping"));
    assert!(describe_of("shared.txt").contains("system.posix_acl_access"), "{}", describe_of("shared.txt"));
    assert!(describe_of("dropbox").contains("system.posix_acl_default"), "{}", describe_of("dropbox"));
    assert!(describe_of("dropbox/sub").contains("system.posix_acl_access"), "{}", describe_of("dropbox/sub"));
    assert!(!describe_of("dropbox/plain.txt").contains("system.posix_acl"), "{}", describe_of("dropbox/plain.txt"));

    let work = tempfile::tempdir().expect("tempdir");
    let image = work.path().join("root.img");
    mkfs(&image);
    let image_arg = format!("{}:/", image.display());
    let put = run_ok(Command::new(support::FSOC).arg("put").arg("-r").arg(&tree).arg(&image_arg));
    assert_eq!(put.stderr, "", "put -r said something:\n{}", put.text());
    fsck_clean(&image);

    let out = host.path().join("out");
    fs::create_dir(&out).expect("mkdir out");
    let get =
        run_ok(Command::new(support::FSOC).arg("get").arg("-r").arg(format!("{}:/tree", image.display())).arg(&out));
    assert_eq!(get.stderr, "", "get -r said something:\n{}", get.text());
    assert_eq!(describe(&out.join("tree")), before, "the extracted tree differs from the source");

    // A second put over the same tree replaces what it copied, and what is copied anew into
    // the image's directory with a default ACL does not keep the ACL it inherits there (the
    // host's plain.txt has none); extracted into a local directory with a default ACL, the
    // tree does not keep what it inherits there either. Still the same, still clean.
    let removed = format!("{}:/tree/dropbox/plain.txt", image.display());
    run_ok(Command::new(support::FSOC).arg("rm").arg(&removed));
    run_ok(Command::new(support::FSOC).arg("rm").arg("-r").arg(format!("{}:/tree/dropbox/sub", image.display())));
    let put = run_ok(Command::new(support::FSOC).arg("put").arg("-r").arg(&tree).arg(&image_arg));
    assert_eq!(put.stderr, "", "put -r said something:\n{}", put.text());
    fsck_clean(&image);
    let again = host.path().join("again");
    fs::create_dir(&again).expect("mkdir again");
    run_ok(Command::new("setfacl").args(["-d", "-m", "u:1000:rwx"]).arg(&again));
    let get =
        run_ok(Command::new(support::FSOC).arg("get").arg("-r").arg(format!("{}:/tree", image.display())).arg(&again));
    assert_eq!(get.stderr, "", "get -r said something:\n{}", get.text());
    assert_eq!(describe(&again.join("tree")), before, "the tree put twice differs from the source");
}

/// Extracted by a user who may not set trusted.* or security.* attributes: everything else
/// is restored, one warning line says what was not, and the exit status is 0.
#[test]
fn get_as_non_root_warns_once_and_succeeds() {
    require("setcap");
    require("setfacl");
    require("mkfifo");
    let host = tmpfs_directory();
    let tree = host.path().join("tree");
    build_tree(&tree);
    let before = describe(&tree);
    // Owned by the unprivileged user, who must be able to open the image and write the output.
    let work = host.path().join("work");
    fs::create_dir(&work).expect("mkdir work");
    let image = work.join("root.img");
    mkfs(&image);
    run_ok(Command::new(support::FSOC).arg("put").arg("-r").arg(&tree).arg(format!("{}:/", image.display())));
    let out = work.join("out");
    fs::create_dir(&out).expect("mkdir out");
    for path in [&work, &image, &out] {
        std::os::unix::fs::chown(path, Some(NOBODY), Some(NOBODY)).expect("chown");
    }
    fs::set_permissions(host.path(), fs::Permissions::from_mode(0o755)).expect("chmod host");
    let get = support::run(
        Command::new(support::FSOC)
            .arg("get")
            .arg("-r")
            .arg(format!("{}:/tree", image.display()))
            .arg(&out)
            .uid(NOBODY)
            .gid(NOBODY),
        PROGRAM_TIMEOUT,
    );
    assert!(get.status.success(), "get -r as non-root failed:\n{}", get.text());
    let warnings: Vec<&str> = get.stderr.lines().collect();
    assert_eq!(warnings.len(), 1, "one warning line expected:\n{}", get.text());
    assert!(
        warnings[0].contains("extended attributes could not be restored") && warnings[0].contains("need root"),
        "{}",
        get.text()
    );
    // Everything but trusted.* and security.* is there, modes and ACLs included.
    let privileged = |line: &&str| line.starts_with("  trusted.") || line.starts_with("  security.");
    let unprivileged = |tree: &BTreeMap<String, String>| -> BTreeMap<String, String> {
        tree.iter()
            .map(|(path, description)| {
                let lines: Vec<&str> = description.lines().filter(|line| !privileged(line)).collect();
                (path.clone(), lines.join("\n"))
            })
            .collect()
    };
    let after = describe(&out.join("tree"));
    assert_eq!(unprivileged(&after), unprivileged(&before), "the unprivileged extraction differs");
    assert!(!after.values().any(|description| description.lines().any(|line| privileged(&line))));
}

/// A volume of format version 3 keeps no attributes: `put -r` copies the files and says so,
/// once; the volume stays clean.
#[test]
fn put_into_a_version_3_volume_warns_once_and_copies_the_files() {
    let host = tmpfs_directory();
    let tree = host.path().join("tree");
    fs::create_dir_all(tree.join("sub")).expect("mkdir");
    for (name, content) in [("one.txt", &b"one\n"[..]), ("sub/two.txt", b"two\n")] {
        let path = tree.join(name);
        fs::write(&path, content).expect("write");
        set_attribute(&path, "user.kept", b"not on version 3");
    }
    set_attribute(&tree.join("sub"), "user.directory", b"nor this");
    let work = tempfile::tempdir().expect("tempdir");
    let image = work.path().join("golden-v3.img");
    unpack_sparse(include_bytes!("../../fsoc-core/tests/fixtures/golden-v3.sparse"), &image);
    let put = run_ok(Command::new(support::FSOC).arg("put").arg("-r").arg(&tree).arg(format!("{}:/", image.display())));
    let expected = "the volume (format version 3) keeps no extended attributes; they were not copied";
    assert_eq!(put.stderr.matches(expected).count(), 1, "{}", put.text());
    assert_eq!(put.stderr.lines().count(), 1, "{}", put.text());
    for (name, content) in [("one.txt", "one\n"), ("sub/two.txt", "two\n")] {
        let cat = run_ok(Command::new(support::FSOC).arg("cat").arg(format!("{}:/tree/{name}", image.display())));
        assert_eq!(cat.stdout, content);
    }
    fsck_clean(&image);
    // And out again: the files, no attributes, nothing said.
    let out = host.path().join("out");
    fs::create_dir(&out).expect("mkdir out");
    let get =
        run_ok(Command::new(support::FSOC).arg("get").arg("-r").arg(format!("{}:/tree", image.display())).arg(&out));
    assert_eq!(get.stderr, "", "{}", get.text());
    assert_eq!(fs::read(out.join("tree/sub/two.txt")).expect("read"), b"two\n");
    assert!(attributes(&out.join("tree/one.txt")).is_empty());
}

/// The help says what is copied.
#[test]
fn help_mentions_extended_attributes() {
    for command in ["put", "get"] {
        let help = run_ok(Command::new(support::FSOC).arg(command).arg("--help"));
        assert!(help.stdout.contains("extended attributes"), "fsoc {command} --help:\n{}", help.stdout);
    }
    let help = run_ok(Command::new(support::FSOC).arg("--help"));
    assert!(help.stdout.contains("extended attributes"), "fsoc --help:\n{}", help.stdout);
}

/// Rebuilds an image file from a golden image stored sparsely (crates/fsoc-core/tests/
/// fixtures/README.md): `FSOCSPRS`, the file size, then (offset u64, length u32, bytes)
/// chunks. A copy of fsoc-core's test helper, so this test does not depend on its test code.
fn unpack_sparse(packed: &[u8], path: &Path) {
    use std::os::unix::fs::FileExt;
    let (magic, rest) = packed.split_at(8);
    assert_eq!(magic, b"FSOCSPRS", "not a sparse golden image");
    let (size, mut rest) = rest.split_at(8);
    let file_size_bytes = u64::from_le_bytes(size.try_into().expect("8 bytes"));
    let file = fs::File::create(path).expect("create unpacked image");
    file.set_len(file_size_bytes).expect("size unpacked image");
    while !rest.is_empty() {
        let offset = u64::from_le_bytes(rest[..8].try_into().expect("8 bytes"));
        let length = u32::from_le_bytes(rest[8..12].try_into().expect("4 bytes")) as usize;
        file.write_all_at(&rest[12..12 + length], offset).expect("write unpacked image");
        rest = &rest[12 + length..];
    }
}
