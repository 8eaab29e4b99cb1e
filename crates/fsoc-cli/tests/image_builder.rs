//! Issue 11 point 5: `fsoc mkfs IMAGE --from DIR` builds a volume holding DIR exactly, and
//! `fsoc get -r` gives it back. Each test builds a host tree on tmpfs (/dev/shm: it keeps
//! user.* attributes and nanosecond times), then checks one promise:
//!
//! - every kind of entry and every piece of metadata survives build, fsck and extraction
//!   (`diff -r --no-dereference` and a per-path comparison of lstat, link targets, attributes
//!   and `getfacl`), hard links included;
//! - a Debian-like root stand-in (this machine's /usr/bin and /usr/lib/x86_64-linux-gnu, to
//!   100 MiB, with /dev nodes, file capabilities and ACLs) reads back through `fsoc mount`
//!   with no difference by `tar --compare` and by the `tar -tvv --xattrs --acls` listings;
//! - with SOURCE_DATE_EPOCH the image is byte-identical whatever order the host lists the
//!   tree in, later times are clamped to it, and a changed tree changes the image;
//! - `--size auto` picks a small volume that holds the tree with its free margin;
//! - `--squash-uids`, `--uid-map` and `--gid-map` set the owners, also for a build by an
//!   ordinary user;
//! - bad input is refused with a clear message and leaves nothing behind.
//!
//! They need root (chown, mknod, setcap, trusted.* attributes): as another user each test
//! says so and skips.

mod support;

use std::collections::BTreeMap;
use std::fs;
use std::hash::{Hash, Hasher};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use support::{fsoc, require, run, run_ok, set_attribute, shell, Output, Volume, FSOC, PROGRAM_TIMEOUT};

/// An unprivileged user and group, for the build by an ordinary user.
const NOBODY: u32 = 65534;

/// Whether the test may run; as another user than root it says why not.
fn running_as_root(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        eprintln!("skipping {test}: it needs root (chown, mknod, setcap and trusted.* attributes)");
    }
    root
}

fn arg(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

fn fsoc_ok(arguments: &[&str]) -> Output {
    let output = fsoc(arguments);
    assert!(output.status.success(), "fsoc {arguments:?} failed:\n{}", output.text());
    output
}

/// `fsoc mkfs IMAGE --from DIR ARGUMENTS...` with SOURCE_DATE_EPOCH as given (or unset).
fn build(image: &Path, from: &Path, arguments: &[&str], epoch: Option<&str>) -> Output {
    let mut command = Command::new(FSOC);
    command.arg("mkfs").arg(image).arg("--from").arg(from).args(arguments);
    match epoch {
        Some(epoch) => command.env("SOURCE_DATE_EPOCH", epoch),
        None => command.env_remove("SOURCE_DATE_EPOCH"),
    };
    run(&mut command, PROGRAM_TIMEOUT)
}

fn build_ok(image: &Path, from: &Path, arguments: &[&str], epoch: Option<&str>) -> Output {
    let output = build(image, from, arguments, epoch);
    assert!(output.status.success(), "mkfs --from {} failed:\n{}", from.display(), output.text());
    output
}

fn fsck_clean(image: &Path) {
    let output = fsoc(&["fsck", arg(image)]);
    assert!(output.status.success() && output.stdout.contains("clean: no violations"), "fsck:\n{}", output.text());
}

/// A temporary directory on tmpfs.
fn tmpfs_directory() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("fsoc-from-").tempdir_in("/dev/shm").expect("a temporary directory on /dev/shm")
}

/// The attributes of `path` (not following a link), sorted by name, values in hex.
fn attributes(path: &Path) -> Vec<String> {
    let hex = |value: &[u8]| value.iter().map(|byte| format!("{byte:02x}")).collect::<String>();
    support::attributes(path).into_iter().map(|(name, value)| format!("{name}={}", hex(&value))).collect()
}

/// For each path under `root` (itself as ""): its kind, mode, owner, link count, device
/// number, size, modification time in nanoseconds, link target or content hash, and sorted
/// attributes with their values. Directories' sizes are the host file system's, not compared.
fn describe(root: &Path) -> BTreeMap<String, String> {
    let mut entries = BTreeMap::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(path) = pending.pop() {
        let metadata = fs::symlink_metadata(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
        let file_type = metadata.file_type();
        let what = if file_type.is_symlink() {
            format!("link -> {}", fs::read_link(&path).expect("readlink").display())
        } else if file_type.is_dir() {
            pending.extend(fs::read_dir(&path).expect("read_dir").map(|entry| entry.expect("entry").path()));
            "dir".to_string()
        } else if file_type.is_file() {
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            fs::read(&path).expect("read").hash(&mut hasher);
            format!("file size {} hash {:016x}", metadata.len(), hasher.finish())
        } else {
            format!("node rdev {:#x}", metadata.rdev())
        };
        let mut description = format!(
            "{what} mode {:o} owner {}:{} nlink {} mtime {}.{:09}",
            metadata.mode(),
            metadata.uid(),
            metadata.gid(),
            metadata.nlink(),
            metadata.mtime(),
            metadata.mtime_nsec()
        );
        for attribute in attributes(&path) {
            description.push_str("\n  ");
            description.push_str(&attribute);
        }
        entries.insert(path.strip_prefix(root).expect("under root").display().to_string(), description);
    }
    entries
}

/// The entries of two descriptions that differ (at most 20), for a readable failure.
fn differences(before: &BTreeMap<String, String>, after: &BTreeMap<String, String>) -> Vec<String> {
    let paths: std::collections::BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    paths
        .into_iter()
        .filter(|path| before.get(*path) != after.get(*path))
        .take(20)
        .map(|path| format!("{path}:\n  was {:?}\n  now {:?}", before.get(path), after.get(path)))
        .collect()
}

/// `getfacl` of every path under `root` (physical walk, numeric ids, relative names), one
/// entry per path in name order (getfacl walks in the order the host lists).
fn getfacl(root: &Path) -> Vec<String> {
    let output = run_ok(Command::new("getfacl").args(["-R", "-P", "-n", "."]).current_dir(root)).stdout;
    let mut entries: Vec<String> = output.split("\n\n").map(str::to_owned).collect();
    entries.sort();
    entries
}

/// `diff -r --no-dereference`: nothing but the lines saying that two special files of the
/// same kind are there (diff cannot compare their contents).
fn diff_clean(source: &Path, copy: &Path) {
    let output = run(Command::new("diff").arg("-r").arg("--no-dereference").arg(source).arg(copy), PROGRAM_TIMEOUT);
    assert!(output.status.code().is_some_and(|code| code <= 1), "diff: {}", output.text());
    let unexpected: Vec<&str> = output
        .stdout
        .lines()
        .filter(|line| {
            // "File A is a fifo while file B is a fifo": the same kind on both sides.
            let Some(rest) = line.strip_prefix("File ") else { return true };
            let Some((first, second)) = rest.split_once(" while file ") else { return true };
            let kind = |side: &str| side.rsplit_once(" is a ").map(|(_, kind)| kind.to_string());
            kind(first).is_none() || kind(first) != kind(second)
        })
        .collect();
    assert!(unexpected.is_empty(), "diff -r found differences:\n{}", unexpected.join("\n"));
}

/// Sets a path's access and modification times (not following a link).
fn touch(path: &Path, date: &str) {
    run_ok(Command::new("touch").arg("-h").arg("-d").arg(date).arg(path));
}

/// Every kind of entry and metadata the builder keeps (see the module doc).
fn build_full_tree(tree: &Path) {
    fs::create_dir(tree).expect("mkdir tree");
    fs::write(tree.join("empty"), b"").expect("write");
    fs::write(tree.join("small.txt"), b"small\n").expect("write");
    let pages: Vec<u8> = (0..300_000u32).map(|index| (index * 31 % 251) as u8).collect();
    fs::write(tree.join("pages.bin"), &pages).expect("write");
    shell(tree, "truncate -s 5M sparse.bin && printf 'middle' | dd of=sparse.bin bs=1 seek=2500000 conv=notrunc 2>/dev/null && printf 'end' >> sparse.bin");
    fs::set_permissions(tree.join("small.txt"), fs::Permissions::from_mode(0o4755)).expect("chmod setuid");

    for (name, mode) in [("setgid", 0o2775), ("sticky", 0o1777), ("private", 0o700)] {
        let directory = tree.join(name);
        fs::create_dir(&directory).expect("mkdir");
        fs::write(directory.join("inside"), name).expect("write");
        fs::set_permissions(&directory, fs::Permissions::from_mode(mode)).expect("chmod");
    }
    let owned = tree.join("owned");
    fs::create_dir(&owned).expect("mkdir");
    fs::write(owned.join("by-1000"), b"1000\n").expect("write");
    fs::write(owned.join("by-1001"), b"1001\n").expect("write");
    std::os::unix::fs::chown(&owned, Some(1000), Some(1001)).expect("chown");
    std::os::unix::fs::chown(owned.join("by-1000"), Some(1000), Some(1000)).expect("chown");
    std::os::unix::fs::chown(owned.join("by-1001"), Some(1001), Some(1001)).expect("chown");

    // A hard-linked pair and a triple, across directories.
    fs::write(tree.join("pair-a"), b"pair\n").expect("write");
    fs::hard_link(tree.join("pair-a"), tree.join("setgid/pair-b")).expect("link");
    fs::write(tree.join("triple-1"), b"triple\n").expect("write");
    fs::hard_link(tree.join("triple-1"), tree.join("owned/triple-2")).expect("link");
    fs::hard_link(tree.join("triple-1"), tree.join("triple-3")).expect("link");

    std::os::unix::fs::symlink("small.txt", tree.join("relative-link")).expect("symlink");
    std::os::unix::fs::symlink("/etc/hostname", tree.join("absolute-link")).expect("symlink");
    std::os::unix::fs::symlink("nowhere/at/all", tree.join("dangling-link")).expect("symlink");
    std::os::unix::fs::lchown(tree.join("relative-link"), Some(1000), Some(1001)).expect("lchown");

    let dev = tree.join("dev");
    fs::create_dir(&dev).expect("mkdir dev");
    shell(&dev, "mknod -m 666 null c 1 3 && mknod -m 660 loop0 b 7 0 && mkfifo -m 640 fifo");
    std::os::unix::fs::chown(dev.join("loop0"), Some(0), Some(6)).expect("chown");
    run_ok(
        Command::new("python3")
            .args(["-c", "import socket; socket.socket(socket.AF_UNIX).bind('socket')"])
            .current_dir(&dev),
    );

    set_attribute(&tree.join("small.txt"), "user.comment", b"hello");
    set_attribute(&tree.join("small.txt"), "user.empty", b"");
    set_attribute(&tree.join("pages.bin"), "trusted.origin", b"build_full_tree");
    set_attribute(&tree.join("pages.bin"), "security.label", b"label");
    set_attribute(&dev.join("fifo"), "trusted.fifo", b"on the FIFO");
    set_attribute(&tree.join("dangling-link"), "trusted.link", b"on the link itself");
    set_attribute(&tree.join("setgid"), "user.directory", b"on a directory");

    let ping = tree.join("ping");
    fs::write(&ping, b"\x7fELF not really").expect("write");
    fs::set_permissions(&ping, fs::Permissions::from_mode(0o755)).expect("chmod");
    run_ok(Command::new("setcap").arg("cap_net_raw+ep").arg(&ping));
    run_ok(Command::new("setfacl").args(["-m", "u:1000:rw,g:1001:r"]).arg(tree.join("pages.bin")));
    let shared = tree.join("shared");
    fs::create_dir(&shared).expect("mkdir");
    run_ok(Command::new("setfacl").args(["-d", "-m", "u:1000:rwx"]).arg(&shared));
    fs::write(shared.join("inherited"), b"inherits the default ACL\n").expect("write");

    // Times in the past, directories last (what is made in them changes theirs).
    let mut paths: Vec<PathBuf> = Vec::new();
    let mut pending = vec![tree.to_path_buf()];
    while let Some(path) = pending.pop() {
        if fs::symlink_metadata(&path).expect("lstat").is_dir() {
            pending.extend(fs::read_dir(&path).expect("read_dir").map(|entry| entry.expect("entry").path()));
        }
        paths.push(path);
    }
    for (index, path) in paths.iter().rev().enumerate() {
        touch(path, &format!("2001-02-03 04:05:{:02}.{:09}", index % 60, 123_456_789 + index));
    }
}

/// (1) The full tree: build, fsck, extract, and nothing differs; hard links stay links.
#[test]
fn a_tree_with_every_kind_of_entry_survives_build_and_extraction() {
    if !running_as_root("a_tree_with_every_kind_of_entry_survives_build_and_extraction") {
        return;
    }
    for program in ["setcap", "setfacl", "getfacl", "mknod", "mkfifo", "python3", "diff", "truncate"] {
        require(program);
    }
    let host = tmpfs_directory();
    let tree = host.path().join("tree");
    build_full_tree(&tree);
    let before = describe(&tree);
    assert!(before["ping"].contains("security.capability"), "{}", before["ping"]);
    assert!(before["shared"].contains("system.posix_acl_default"), "{}", before["shared"]);
    assert!(before["dev/socket"].starts_with("node"), "{}", before["dev/socket"]);

    let image = host.path().join("tree.img");
    let output = build_ok(&image, &tree, &["--size", "32M"], None);
    assert_eq!(output.stderr, "", "mkfs --from said something:\n{}", output.text());
    assert!(output.stdout.contains("3 hard links"), "{}", output.stdout);
    fsck_clean(&image);

    let out = host.path().join("out");
    fs::create_dir(&out).expect("mkdir out");
    let get = run_ok(Command::new(FSOC).arg("get").arg("-r").arg(format!("{}:/", image.display())).arg(&out));
    assert_eq!(get.stderr, "", "get -r said something:\n{}", get.text());
    let extracted = out.join("root");
    diff_clean(&tree, &extracted);
    let after = describe(&extracted);
    assert!(before == after, "the extracted tree differs:\n{}", differences(&before, &after).join("\n"));
    assert_eq!(getfacl(&tree), getfacl(&extracted), "getfacl differs");
    let inode = |path: &str| fs::symlink_metadata(extracted.join(path)).expect("lstat").ino();
    assert_eq!(inode("pair-a"), inode("setgid/pair-b"), "the pair is one file");
    assert_eq!(inode("triple-1"), inode("owned/triple-2"), "the triple is one file");
    assert_eq!(inode("triple-1"), inode("triple-3"), "the triple is one file");
    assert_ne!(inode("pair-a"), inode("triple-1"));
    // The sparse file stays sparse in the image: far fewer data pages than its size.
    let info = fsoc_ok(&["fsck", arg(&image)]).stdout;
    let data_pages: u64 = info
        .split(", ")
        .find_map(|part| part.strip_suffix(" data pages"))
        .and_then(|count| count.parse().ok())
        .unwrap_or_else(|| panic!("no data page count in:\n{info}"));
    assert!(data_pages < 200, "{data_pages} data pages: the 5 MiB sparse file was written out whole");
}

/// The tree of `--from` for the root stand-in: this machine's /usr/bin and
/// /usr/lib/x86_64-linux-gnu (files in name order while they fit 60 and 40 MiB), with /dev
/// nodes, file capabilities, an ACL'd directory with a default ACL, owners and a hard link.
fn build_root_stand_in(root: &Path) {
    let mut list = String::new();
    for (base, budget) in [("usr/bin", 60u64 << 20), ("usr/lib/x86_64-linux-gnu", 40 << 20)] {
        let mut total = 0u64;
        let mut pending = vec![Path::new("/").join(base)];
        let mut files = Vec::new();
        while let Some(path) = pending.pop() {
            let Ok(metadata) = fs::symlink_metadata(&path) else { continue };
            if metadata.is_dir() {
                let mut entries: Vec<PathBuf> =
                    fs::read_dir(&path).expect("read_dir").map(|entry| entry.expect("entry").path()).collect();
                entries.sort();
                pending.extend(entries.into_iter().rev());
            } else if metadata.is_file() || metadata.file_type().is_symlink() {
                let size = if metadata.is_file() { metadata.len() } else { 0 };
                if total + size <= budget {
                    total += size;
                    files.push(path);
                }
            }
        }
        for file in files {
            list.push_str(file.strip_prefix("/").expect("absolute").to_str().expect("utf-8"));
            list.push('\n');
        }
    }
    fs::create_dir(root).expect("mkdir root");
    let list_path = root.with_extension("list");
    fs::write(&list_path, list).expect("write list");
    shell(
        root,
        &format!(
            "tar -C / --xattrs --xattrs-include='*' --acls -cpf - --no-recursion -T {} | tar --xattrs \
             --xattrs-include='*' --acls -xpf -",
            list_path.display()
        ),
    );
    shell(
        root,
        "mkdir -p dev etc srv/shared home/user && chmod 1777 srv && \
         mknod -m 666 dev/null c 1 3 && mknod -m 666 dev/zero c 1 5 && mknod -m 620 dev/console c 5 1 && \
         mknod -m 660 dev/sda b 8 0 && mknod -m 660 dev/loop0 b 7 0 && mkfifo -m 600 dev/initctl && \
         chown 0:6 dev/sda dev/loop0 && chown 0:5 dev/console && \
         cp /usr/bin/tar usr/bin/ping-stand-in && setcap cap_net_raw+ep usr/bin/ping-stand-in && \
         cp /usr/bin/tar usr/bin/caps && setcap 'cap_net_admin,cap_sys_time+eip' usr/bin/caps && \
         setfacl -m u:1000:rwx,g:1001:rx srv/shared && setfacl -d -m u:1000:rwx srv/shared && \
         echo data > srv/shared/file && echo hostname > etc/hostname && ln etc/hostname etc/hostname.link && \
         chown -R 1000:1000 home/user && chmod 700 home/user && echo secret > home/user/.profile",
    );
}

/// The `tar -tvv --xattrs --acls` listing of an archive (made with --sort=name, so two trees
/// list in the same order whatever order their directories are read in), each entry's
/// attribute lines ("  x: SIZE NAME") in name order (tar keeps the host's list order).
fn tar_listing(archive: &Path) -> Vec<String> {
    let output = run_ok(
        Command::new("tar").args(["--xattrs", "--xattrs-include=*", "--acls", "--numeric-owner", "-tvvf"]).arg(archive),
    );
    let mut lines: Vec<String> = Vec::new();
    let mut attributes: Vec<String> = Vec::new();
    for line in output.stdout.lines() {
        if line.starts_with("  x: ") {
            attributes.push(line.to_owned());
            continue;
        }
        attributes.sort_by_key(|attribute| attribute.split_whitespace().nth(2).map(str::to_owned));
        lines.append(&mut attributes);
        lines.push(line.to_owned());
    }
    attributes.sort_by_key(|attribute| attribute.split_whitespace().nth(2).map(str::to_owned));
    lines.append(&mut attributes);
    lines
}

/// (2) The issue's target: a Debian-like root stand-in, built and mounted, reads back with
/// no difference: `tar --compare` of the source's archive against the mount is silent, and
/// the archives of the source and of the mount list the same (names, modes, owners, sizes,
/// times, link targets, device numbers, attribute names and ACLs), with the same attributes.
#[test]
fn a_root_file_system_stand_in_reads_back_through_the_mount_with_no_difference() {
    if !running_as_root("a_root_file_system_stand_in_reads_back_through_the_mount_with_no_difference") {
        return;
    }
    for program in ["tar", "setcap", "setfacl", "mknod", "fusermount3"] {
        require(program);
    }
    assert!(Path::new("/dev/fuse").exists(), "/dev/fuse is missing: the mount needs it");
    let host = tmpfs_directory();
    let root = host.path().join("root");
    build_root_stand_in(&root);
    let (files, bytes) = {
        let mut files = 0u64;
        let mut bytes = 0u64;
        let mut pending = vec![root.clone()];
        while let Some(path) = pending.pop() {
            let metadata = fs::symlink_metadata(&path).expect("lstat");
            if metadata.is_dir() {
                pending.extend(fs::read_dir(&path).expect("read_dir").map(|entry| entry.expect("entry").path()));
            }
            files += 1;
            bytes += if metadata.is_file() { metadata.len() } else { 0 };
        }
        (files, bytes)
    };
    assert!(files > 500 && bytes > 50 << 20, "a small stand-in: {files} names, {bytes} bytes");

    let directory = tempfile::tempdir_in("/dev/shm").expect("tempdir");
    let volume =
        Volume { image: directory.path().join("root.img"), mount_point: directory.path().join("mnt"), directory };
    fs::create_dir(&volume.mount_point).expect("mount point");
    let started = Instant::now();
    let output = build_ok(&volume.image, &root, &["--size", "auto"], None);
    let build_seconds = started.elapsed().as_secs_f64();
    eprintln!("root stand-in: {files} names, {bytes} bytes, built in {build_seconds:.1} s:\n{}", output.stdout);
    assert_eq!(output.stderr, "", "{}", output.text());
    fsck_clean(&volume.image);

    let tar = |directory: &Path, archive: &Path| {
        run_ok(
            Command::new("tar")
                .args(["--xattrs", "--xattrs-include=*", "--acls", "--numeric-owner", "--sort=name", "-cpf"])
                .arg(archive)
                .arg("-C")
                .arg(directory)
                .arg("."),
        );
    };
    let source_archive = host.path().join("source.tar");
    tar(&root, &source_archive);
    let mounted = volume.mount();
    let compare = run(
        Command::new("tar")
            .args(["--xattrs", "--xattrs-include=*", "--acls", "--numeric-owner", "--compare", "-f"])
            .arg(&source_archive)
            .arg("-C")
            .arg(mounted.root()),
        PROGRAM_TIMEOUT,
    );
    assert!(
        compare.status.success() && compare.stdout.is_empty(),
        "tar --compare found differences:\n{}",
        compare.text()
    );
    let mount_archive = host.path().join("mount.tar");
    tar(mounted.root(), &mount_archive);
    let mount_description = describe(mounted.root());
    mounted.unmount();
    let (source_listing, mount_listing) = (tar_listing(&source_archive), tar_listing(&mount_archive));
    assert!(source_listing.iter().any(|line| line.contains("security.capability")), "the listing shows attributes");
    let differing: Vec<String> = source_listing
        .iter()
        .zip(&mount_listing)
        .filter(|(source, mount)| source != mount)
        .take(20)
        .map(|(source, mount)| format!("source: {source}\nmount:  {mount}"))
        .collect();
    assert!(
        differing.is_empty() && source_listing.len() == mount_listing.len(),
        "the archives list differently ({} and {} lines):\n{}",
        source_listing.len(),
        mount_listing.len(),
        differing.join("\n")
    );
    // Attribute values too (tar's listing names them only), and link counts.
    let source_description = describe(&root);
    assert!(
        source_description == mount_description,
        "the mount differs from the source:\n{}",
        differences(&source_description, &mount_description).join("\n")
    );
    fsck_clean(&volume.image);
}

/// A small tree of files, links and attributes, made in `order` (names in this order, or
/// reversed), with every time set to a fixed past date afterwards: two such trees differ in
/// nothing but the order the host lists them in (and their inode numbers).
fn build_small_tree(tree: &Path, reversed: bool) {
    fs::create_dir(tree).expect("mkdir tree");
    let mut names: Vec<String> = (0..40).map(|index| format!("file-{index:02}")).collect();
    if reversed {
        names.reverse();
    }
    fs::create_dir(tree.join("sub")).expect("mkdir");
    for name in &names {
        let content: Vec<u8> = name.bytes().cycle().take(1000 + 300 * name.len()).collect();
        fs::write(tree.join(name), &content).expect("write");
        fs::write(tree.join("sub").join(name), name).expect("write");
        set_attribute(&tree.join(name), "user.name", name.as_bytes());
        set_attribute(&tree.join(name), "user.other", b"x");
    }
    fs::hard_link(tree.join("file-07"), tree.join("sub/link-07")).expect("link");
    std::os::unix::fs::symlink("file-01", tree.join("link")).expect("symlink");
    shell(tree, "find . -depth -exec touch -h -d '2020-01-02 03:04:05.5' {} +");
}

/// (3) Reproducible: byte-identical twice and whatever the listing order; SOURCE_DATE_EPOCH
/// clamps later times and is every change time; a changed tree gives another image.
#[test]
fn images_are_reproducible_with_source_date_epoch() {
    if !running_as_root("images_are_reproducible_with_source_date_epoch") {
        return;
    }
    let host = tmpfs_directory();
    let (forward, backward) = (host.path().join("forward"), host.path().join("backward"));
    build_small_tree(&forward, false);
    build_small_tree(&backward, true);
    let listing = |tree: &Path| -> Vec<String> {
        fs::read_dir(tree)
            .expect("read_dir")
            .map(|entry| entry.expect("entry").file_name().into_string().expect("utf-8"))
            .collect()
    };
    assert_ne!(listing(&forward), listing(&backward), "the two trees list in different orders");
    // Later than the trees' times: nothing is clamped but the times the build itself makes.
    let epoch = Some("1700000000");
    let image = |name: &str| host.path().join(name);
    for (name, tree) in [("one.img", &forward), ("two.img", &forward), ("three.img", &backward)] {
        build_ok(&image(name), tree, &["--size", "auto"], epoch);
    }
    let bytes = |name: &str| fs::read(image(name)).expect("read image");
    assert!(bytes("one.img") == bytes("two.img"), "two builds of one tree differ");
    assert!(bytes("one.img") == bytes("three.img"), "the same tree listed in another order gives another image");
    fsck_clean(&image("one.img"));

    // Without SOURCE_DATE_EPOCH the volume id is random: another image.
    build_ok(&image("random.img"), &forward, &["--size", "auto"], None);
    assert!(bytes("one.img") != bytes("random.img"), "a build without SOURCE_DATE_EPOCH is the same");
    // A tree that differs in one byte (same size, same times) gives another image.
    let changed = forward.join("file-03");
    let mut content = fs::read(&changed).expect("read");
    content[10] ^= 1;
    fs::write(&changed, &content).expect("write");
    touch(&changed, "2020-01-02 03:04:05.5");
    build_ok(&image("changed.img"), &forward, &["--size", "auto"], epoch);
    assert!(bytes("one.img") != bytes("changed.img"), "a changed byte left the image the same");

    // An epoch earlier than the tree's times: every time is clamped to it (and ctimes are
    // it), so an extraction shows it; a time already earlier stays.
    touch(&forward.join("file-05"), "2001-01-01 00:00:00");
    build_ok(&image("clamped.img"), &forward, &["--size", "auto"], Some("1500000000"));
    let out = host.path().join("out");
    fs::create_dir(&out).expect("mkdir");
    run_ok(Command::new(FSOC).arg("get").arg("-r").arg(format!("{}:/", image("clamped.img").display())).arg(&out));
    for (path, expected) in [
        ("root", 1_500_000_000),
        ("root/file-01", 1_500_000_000),
        ("root/sub/link-07", 1_500_000_000),
        ("root/link", 1_500_000_000),
        ("root/file-05", 978_307_200),
    ] {
        let metadata = fs::symlink_metadata(out.join(path)).expect("lstat");
        assert_eq!((metadata.mtime(), metadata.mtime_nsec(), metadata.atime()), (expected, 0, expected), "{path}");
    }
}

/// The erase-block count `mkfs` reports ("… × N blocks × …").
fn reported_blocks(output: &str) -> u64 {
    output
        .split(" blocks × ")
        .next()
        .and_then(|head| head.rsplit(' ').next())
        .and_then(|count| count.parse().ok())
        .unwrap_or_else(|| panic!("no block count in:\n{output}"))
}

/// (4) `--size auto`: the chosen volume holds the tree, leaves the margin free, and is small:
/// no more than the data with the margin and a few erase blocks; a smaller margin gives a
/// volume no larger.
#[test]
fn size_auto_picks_a_small_volume_that_holds_the_tree() {
    if !running_as_root("size_auto_picks_a_small_volume_that_holds_the_tree") {
        return;
    }
    let host = tmpfs_directory();
    let tree = host.path().join("tree");
    fs::create_dir(&tree).expect("mkdir");
    let mut data_bytes = 0u64;
    for index in 0..200u32 {
        let directory = tree.join(format!("d{}", index % 10));
        fs::create_dir_all(&directory).expect("mkdir");
        let content: Vec<u8> = (0..(index * 997 % 120_000)).map(|byte| (byte * index % 253) as u8).collect();
        data_bytes += content.len() as u64;
        fs::write(directory.join(format!("f{index}")), &content).expect("write");
    }
    // mlc: 2 KiB pages, 64 to an erase block.
    let data_pages: u64 = fs::read_dir(&tree)
        .expect("read_dir")
        .flat_map(|directory| fs::read_dir(directory.expect("entry").path()).expect("read_dir"))
        .map(|file| fs::metadata(file.expect("entry").path()).expect("stat").len().div_ceil(2048))
        .sum();
    let mut blocks_by_margin = Vec::new();
    for margin in ["20", "0"] {
        let image = host.path().join(format!("auto-{margin}.img"));
        let output = build_ok(&image, &tree, &["--size", "auto", "--free-margin", margin], None);
        assert!(output.stdout.contains("--size auto:"), "{}", output.stdout);
        let blocks = reported_blocks(&output.stdout);
        let margin_percent: u64 = margin.parse().expect("number");
        // The data pages with the margin, plus the format's fixed segments (superblocks,
        // metaroots, reserve: 11 blocks) and the trees: a few blocks more.
        let bound = (data_pages * 100).div_ceil(64 * (100 - margin_percent)) + 16;
        assert!(
            blocks <= bound,
            "margin {margin}%: {blocks} blocks for {data_bytes} bytes ({data_pages} pages) of data (bound {bound})"
        );
        fsck_clean(&image);
        let info = fsoc_ok(&["info", arg(&image)]).stdout;
        let line = info.lines().find(|line| line.starts_with("space")).expect("space line");
        let free: f64 = line
            .split('(')
            .nth(1)
            .and_then(|rest| rest.split('%').next())
            .and_then(|used| used.parse().ok())
            .map(|used: f64| 100.0 - used)
            .expect("used %");
        assert!(free + 0.2 >= margin_percent as f64, "margin {margin}%: only {free}% free ({line})");
        let out = host.path().join(format!("out-{margin}"));
        fs::create_dir(&out).expect("mkdir");
        run_ok(Command::new(FSOC).arg("get").arg("-r").arg(format!("{}:/", image.display())).arg(&out));
        diff_clean(&tree, &out.join("root"));
        blocks_by_margin.push(blocks);
    }
    assert!(blocks_by_margin[1] < blocks_by_margin[0], "margin 0 gave no smaller volume: {blocks_by_margin:?}");
}

/// Owners in an image, by path, from `fsoc ls -l -r`.
fn image_owners(image: &Path) -> BTreeMap<String, (u32, u32)> {
    let output = fsoc_ok(&["ls", "-l", "-r", &format!("{}:/", image.display())]).stdout;
    output
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (uid, gid) = (fields.get(2)?.parse().ok()?, fields.get(3)?.parse().ok()?);
            let name = fields.get(7..)?.join(" ");
            let name = name.split(" -> ").next()?.trim_start_matches('/').to_string();
            Some((name, (uid, gid)))
        })
        .collect()
}

/// (5) `--squash-uids` makes every owner root; `--uid-map`/`--gid-map` change the ids they
/// name (ACL entries included) and leave the rest; a build by an ordinary user keeps the
/// tree's owners and can squash them.
#[test]
fn squash_and_id_maps_set_the_owners() {
    if !running_as_root("squash_and_id_maps_set_the_owners") {
        return;
    }
    require("setfacl");
    require("getfacl");
    let host = tmpfs_directory();
    let tree = host.path().join("tree");
    fs::create_dir(&tree).expect("mkdir");
    for (name, uid, gid) in [("mine", 1000, 1000), ("theirs", 1001, 1002), ("roots", 0, 0)] {
        fs::write(tree.join(name), name).expect("write");
        std::os::unix::fs::lchown(tree.join(name), Some(uid), Some(gid)).expect("chown");
    }
    std::os::unix::fs::symlink("mine", tree.join("link")).expect("symlink");
    std::os::unix::fs::lchown(tree.join("link"), Some(1000), Some(1000)).expect("lchown");
    run_ok(Command::new("setfacl").args(["-m", "u:1000:rw,u:1001:r,g:1000:r"]).arg(tree.join("mine")));
    for path in [host.path(), tree.as_path()] {
        fs::set_permissions(path, fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    std::os::unix::fs::chown(&tree, Some(1000), Some(1000)).expect("chown");
    let image = |name: &str| host.path().join(name);

    build_ok(&image("kept.img"), &tree, &["--size", "8M"], None);
    let kept = image_owners(&image("kept.img"));
    assert_eq!(kept["theirs"], (1001, 1002), "{kept:?}");
    assert_eq!(kept["link"], (1000, 1000), "{kept:?}");

    build_ok(&image("squashed.img"), &tree, &["--size", "8M", "--squash-uids"], None);
    let squashed = image_owners(&image("squashed.img"));
    assert!(squashed.len() >= 4 && squashed.values().all(|&owner| owner == (0, 0)), "{squashed:?}");

    build_ok(
        &image("mapped.img"),
        &tree,
        &["--size", "8M", "--uid-map", "1000:0,1001:2001", "--gid-map", "1000:100:3"],
        None,
    );
    let mapped = image_owners(&image("mapped.img"));
    assert_eq!(
        (mapped["mine"], mapped["theirs"], mapped["roots"], mapped["link"]),
        ((0, 100), (2001, 102), (0, 0), (0, 100))
    );
    let out = host.path().join("out");
    fs::create_dir(&out).expect("mkdir");
    run_ok(Command::new(FSOC).arg("get").arg("-r").arg(format!("{}:/", image("mapped.img").display())).arg(&out));
    let acl = run_ok(Command::new("getfacl").args(["-n", "-c"]).arg(out.join("root/mine"))).stdout;
    assert!(acl.contains("user:0:rw-") && acl.contains("user:2001:r--") && acl.contains("group:100:r--"), "{acl}");
    assert_eq!(fs::metadata(out.join("root")).expect("stat").uid(), 0, "the root directory's owner is mapped too");

    // An ordinary user builds from a tree it can read: the owners are the tree's, or root's.
    let work = host.path().join("work");
    fs::create_dir(&work).expect("mkdir");
    std::os::unix::fs::chown(&work, Some(NOBODY), Some(NOBODY)).expect("chown");
    for (name, extra) in [("user-kept.img", None), ("user-squashed.img", Some("--squash-uids"))] {
        let output = run(
            Command::new(FSOC)
                .arg("mkfs")
                .arg(work.join(name))
                .arg("--from")
                .arg(&tree)
                .args(["--size", "8M"])
                .args(extra)
                .uid(NOBODY)
                .gid(NOBODY),
            PROGRAM_TIMEOUT,
        );
        assert!(output.status.success(), "mkfs --from as an ordinary user:\n{}", output.text());
        let owners = image_owners(&work.join(name));
        let expected = if extra.is_some() { (0, 0) } else { (1001, 1002) };
        assert_eq!(owners["theirs"], expected, "{name}: {owners:?}");
    }
}

/// (6) Bad input: a clear message, exit status 2, and nothing left behind.
#[test]
fn bad_input_is_refused_clearly_and_leaves_nothing_behind() {
    if !running_as_root("bad_input_is_refused_clearly_and_leaves_nothing_behind") {
        return;
    }
    let host = tmpfs_directory();
    let tree = host.path().join("tree");
    fs::create_dir(&tree).expect("mkdir");
    let big: Vec<u8> = (0..6u32 << 20).map(|index| (index % 251) as u8).collect();
    fs::write(tree.join("big"), &big).expect("write");
    let work = host.path().join("work");
    fs::create_dir(&work).expect("mkdir");
    let image = work.join("out.img");
    let refused = |output: Output, expected: &[&str]| {
        assert_eq!(output.status.code(), Some(2), "{}", output.text());
        for text in expected {
            assert!(output.stderr.contains(text), "stderr lacks {text:?}:\n{}", output.text());
        }
        let left: Vec<_> =
            fs::read_dir(&work).expect("read_dir").map(|entry| entry.expect("entry").file_name()).collect();
        left
    };
    let left = refused(build(&image, &host.path().join("missing"), &[], None), &["missing: no such directory"]);
    assert!(left.is_empty(), "{left:?}");
    let left = refused(build(&image, &tree.join("big"), &[], None), &["is not a directory"]);
    assert!(left.is_empty(), "{left:?}");
    let left = refused(build(&image, &tree, &["--size", "2M"], None), &["does not fit in 2.0M", "--size auto"]);
    assert!(left.is_empty(), "a failed build left {left:?}");
    let left = refused(fsoc(&["mkfs", arg(&image), "--size", "auto"]), &["--size auto", "--from"]);
    assert!(left.is_empty(), "{left:?}");
    let left = refused(build(&tree.join("inside.img"), &tree, &[], None), &["copied into itself"]);
    assert!(left.is_empty() && !tree.join("inside.img").exists(), "{left:?}");
    let bad_map = fsoc(&["mkfs", arg(&image), "--from", arg(&tree), "--uid-map", "1000"]);
    assert_eq!(bad_map.status.code(), Some(2), "{}", bad_map.text());
    assert!(bad_map.stderr.contains("FROM:TO"), "{}", bad_map.text());
    let squash_and_map = fsoc(&["mkfs", arg(&image), "--from", arg(&tree), "--squash-uids", "--uid-map", "1:2"]);
    assert_eq!(squash_and_map.status.code(), Some(2), "{}", squash_and_map.text());

    // An image that exists is replaced only with --force, and kept when the build fails.
    build_ok(&image, &tree, &["--size", "auto"], None);
    let before = fs::read(&image).expect("read");
    let left = refused(build(&image, &tree, &[], None), &["exists; pass --force"]);
    assert_eq!(left.len(), 1, "{left:?}");
    let left = refused(build(&image, &tree, &["--size", "2M", "--force"], None), &["does not fit"]);
    assert_eq!(left.len(), 1, "a failed build left {left:?}");
    assert!(fs::read(&image).expect("read") == before, "a failed build changed the existing image");
}

/// `put -r` keeps what `mkfs --from` keeps (it is the same copy): owners, times of links and
/// special files, hard links and holes; `get -r` gives it all back.
#[test]
fn put_and_get_keep_hard_links_owners_and_times() {
    if !running_as_root("put_and_get_keep_hard_links_owners_and_times") {
        return;
    }
    for program in ["setcap", "setfacl", "mknod", "mkfifo", "python3", "truncate"] {
        require(program);
    }
    let host = tmpfs_directory();
    let tree = host.path().join("tree");
    build_full_tree(&tree);
    let before = describe(&tree);
    let image = host.path().join("put.img");
    fsoc_ok(&["mkfs", arg(&image), "--size", "32M"]);
    let put = run_ok(Command::new(FSOC).arg("put").arg("-r").arg(&tree).arg(format!("{}:/", image.display())));
    assert_eq!(put.stderr, "", "{}", put.text());
    fsck_clean(&image);
    let out = host.path().join("out");
    fs::create_dir(&out).expect("mkdir out");
    run_ok(Command::new(FSOC).arg("get").arg("-r").arg(format!("{}:/tree", image.display())).arg(&out));
    let after = describe(&out.join("tree"));
    assert!(before == after, "put -r then get -r differs:\n{}", differences(&before, &after).join("\n"));
    let inode = |path: &str| fs::symlink_metadata(out.join("tree").join(path)).expect("lstat").ino();
    assert_eq!(inode("triple-1"), inode("owned/triple-2"), "the triple is one file");
}
