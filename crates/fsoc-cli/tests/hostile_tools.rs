//! The image tools against hostile images (issue 14, S1, S2 and the tool papercuts): names
//! from an image are never followed, `get -r` never writes outside its destination, directory
//! cycles are reported instead of overflowing the stack, unprintable names are escaped, a
//! closed pipe ends `ls` quietly, `--keep-going` extracts around unreadable files, and a
//! trailing slash on `put` names a directory. Each test crafts its own image: files made with
//! the engine, then one directory record rewritten through the public tree and committed, so
//! the checksums are right and only the record is hostile.

mod support;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use fsoc_core::fs::records::{allocation_key, directory_key, DirectoryValue, FileKind, RecordKind, ROOT_INODE};
use fsoc_core::txn::store::LogNodeStore;
use fsoc_core::{FileSystem, FsConfig, OpenFlags};
use fsoc_media::SimFlash;
use support::{fsoc, run, FSOC};

/// A fresh image in a temporary directory, with a handle to craft it.
struct Crafted {
    directory: tempfile::TempDir,
    image: PathBuf,
}

impl Crafted {
    fn new() -> Crafted {
        let directory = tempfile::tempdir().expect("tempdir");
        let image = directory.path().join("hostile.img");
        let output = fsoc(&["mkfs", image.to_str().expect("utf-8"), "--size", "8M", "--seed", "3"]);
        assert!(output.status.success(), "mkfs: {}", output.text());
        Crafted { directory, image }
    }

    fn arg(&self, path: &str) -> String {
        format!("{}:{path}", self.image.display())
    }

    /// Opens the image with the engine, runs `craft`, commits and closes it.
    fn craft(&self, craft: impl FnOnce(&mut FileSystem<fsoc_media::SimFlash<fsoc_media::ImageStore>>)) {
        let flash = SimFlash::open_image(&self.image).expect("open image");
        let mut fs = FileSystem::mount(flash, FsConfig::default()).expect("mount");
        craft(&mut fs);
        fs.commit().expect("commit");
        let mut flash = fs.unmount().expect("unmount");
        fsoc_media::Flash::flush(&mut flash).expect("flush");
    }

    /// A destination directory inside a sentinel directory, so escapes can be seen.
    fn destination(&self) -> (PathBuf, PathBuf) {
        let sentinel = self.directory.path().join("sentinel");
        let destination = sentinel.join("dest");
        fs::create_dir_all(&destination).expect("destination");
        (sentinel, destination)
    }
}

fn write(fs: &mut FileSystem<impl fsoc_media::Flash>, path: &str, data: &[u8]) {
    let fd = fs.open(path.as_bytes(), OpenFlags { write: true, create: true, truncate: true, ..Default::default() }, 0o644).expect("create");
    fs.pwrite(fd, 0, data).expect("write");
    fs.close(fd).expect("close");
}

/// Adds a raw directory entry `name` in `parent` naming `inode`, bypassing every check.
fn raw_entry(fs: &mut FileSystem<impl fsoc_media::Flash>, parent: u64, name: &[u8], inode: u64, kind: FileKind) {
    let volume = &mut fs.volume;
    let mut store = LogNodeStore::new(&mut volume.log);
    let value = DirectoryValue { inode, kind }.encode();
    volume.directory.insert(&mut store, &directory_key(parent, name), &value).expect("raw insert");
}

fn inode_of(fs: &mut FileSystem<impl fsoc_media::Flash>, path: &str) -> u64 {
    fs.stat(path.as_bytes()).expect("stat").0
}

/// Every path under `root`, sorted (to compare before and after a command).
fn tree(root: &Path) -> Vec<String> {
    let mut paths = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(path) = pending.pop() {
        paths.push(path.strip_prefix(root).expect("under root").display().to_string());
        if fs::symlink_metadata(&path).map(|metadata| metadata.is_dir()).unwrap_or(false) {
            for entry in fs::read_dir(&path).expect("read_dir") {
                pending.push(entry.expect("entry").path());
            }
        }
    }
    paths.sort();
    paths
}

fn assert_failed_cleanly(output: &support::Output, context: &str) {
    assert!(!output.status.success(), "{context}: exit 0\n{}", output.text());
    assert_eq!(output.status.code(), Some(2), "{context}: killed or crashed instead of a clean error\n{}", output.text());
}

/// S1: hostile names in a directory: `get -r` refuses (exit 2) and writes nothing outside
/// DEST; with --skip-bad-names it extracts the rest; `ls -r` refuses or skips the same way.
#[test]
fn hostile_names_never_lead_outside_the_destination() {
    let long = "n".repeat(256);
    let names: [&[u8]; 8] = [b"..", b".", b"", b"a/b", b"/etc/escaped", b"../../../../tmp/escaped", b"nul\0byte", long.as_bytes()];
    for name in names {
        let crafted = Crafted::new();
        crafted.craft(|fs| {
            fs.mkdir(b"/x", 0o755).expect("mkdir");
            fs.mkdir(b"/x/victim", 0o755).expect("mkdir");
            write(fs, "/x/victim/payload", b"must not escape");
            write(fs, "/x/plain", b"an ordinary file");
            let x = inode_of(fs, "/x");
            let victim = inode_of(fs, "/x/victim");
            raw_entry(fs, x, name, victim, FileKind::Directory);
        });
        let context = format!("name {:?}", String::from_utf8_lossy(name));
        let (sentinel, destination) = crafted.destination();
        let before = tree(crafted.directory.path());
        let output = fsoc(&["get", "-r", &crafted.arg("/x"), destination.to_str().expect("utf-8")]);
        assert_failed_cleanly(&output, &context);
        assert!(output.stderr.contains("--skip-bad-names"), "{context}: the message does not say how to go on\n{}", output.text());
        let after = tree(crafted.directory.path());
        let outside: Vec<&String> = after.iter().filter(|path| !before.contains(path) && !path.starts_with("sentinel/dest")).collect();
        assert!(outside.is_empty(), "{context}: created outside DEST: {outside:?}");
        assert!(!Path::new("/tmp/escaped").exists() && !Path::new("/etc/escaped").exists(), "{context}: escaped to an absolute path");

        let output = fsoc(&["get", "-r", "--skip-bad-names", &crafted.arg("/x"), destination.to_str().expect("utf-8")]);
        assert!(output.status.success(), "{context}: --skip-bad-names\n{}", output.text());
        assert!(output.stderr.contains("skipping"), "{context}: no warning\n{}", output.text());
        assert_eq!(fs::read(destination.join("x/plain")).expect("the rest is extracted"), b"an ordinary file");
        let after = tree(crafted.directory.path());
        let outside: Vec<&String> = after.iter().filter(|path| !before.contains(path) && !path.starts_with("sentinel/dest")).collect();
        assert!(outside.is_empty(), "{context}: created outside DEST with --skip-bad-names: {outside:?}");
        let _ = sentinel;

        let output = fsoc(&["ls", "-r", &crafted.arg("/")]);
        assert_failed_cleanly(&output, &format!("ls {context}"));
        let output = fsoc(&["ls", "-r", "--skip-bad-names", &crafted.arg("/")]);
        assert!(output.status.success(), "ls --skip-bad-names {context}\n{}", output.text());
        assert!(output.stdout.contains("/x/plain"), "{context}: {}", output.stdout);
    }
}

/// A symbolic link in the image that points outside, with files "beneath" it in the image's
/// namespace is impossible, but a link planted in DEST by someone else must not be written
/// through: extraction replaces it instead of following it.
#[test]
fn extraction_creates_links_and_never_follows_them() {
    let crafted = Crafted::new();
    crafted.craft(|fs| {
        fs.mkdir(b"/x", 0o755).expect("mkdir");
        fs.symlink_path(b"/etc/passwd", b"/x/link").expect("symlink");
        write(fs, "/x/file", b"new contents");
    });
    let (sentinel, destination) = crafted.destination();
    let outside = sentinel.join("outside-target");
    fs::write(&outside, b"untouched").expect("outside file");
    fs::create_dir_all(destination.join("x")).expect("x");
    std::os::unix::fs::symlink(&outside, destination.join("x/file")).expect("planted link");
    let output = fsoc(&["get", "-r", &crafted.arg("/x"), destination.to_str().expect("utf-8")]);
    assert!(output.status.success(), "{}", output.text());
    assert_eq!(fs::read(&outside).expect("outside"), b"untouched", "a planted link was written through");
    assert_eq!(fs::read(destination.join("x/file")).expect("file"), b"new contents");
    assert_eq!(fs::read_link(destination.join("x/link")).expect("link"), PathBuf::from("/etc/passwd"));
}

/// S2: directory entries pointing back at the root, at an ancestor, at the directory itself:
/// `ls -r` and `get -r` report the cycle and exit 2 (no SIGABRT), promptly.
#[test]
fn directory_cycles_are_reported() {
    for (label, target) in [("root", "/"), ("ancestor", "/x"), ("self", "/x/sub")] {
        let crafted = Crafted::new();
        crafted.craft(|fs| {
            fs.mkdir(b"/x", 0o755).expect("mkdir");
            fs.mkdir(b"/x/sub", 0o755).expect("mkdir");
            write(fs, "/x/sub/inner", b"inner");
            let sub = inode_of(fs, "/x/sub");
            let target = if target == "/" { ROOT_INODE } else { inode_of(fs, target) };
            raw_entry(fs, sub, b"loop", target, FileKind::Directory);
        });
        let context = format!("cycle to {label}");
        let output = run(Command::new(FSOC).args(["ls", "-r", &crafted.arg("/")]), Duration::from_secs(30));
        assert_failed_cleanly(&output, &context);
        assert!(output.stderr.contains("cycle"), "{context}: {}", output.text());
        let (_, destination) = crafted.destination();
        let output = run(Command::new(FSOC).args(["get", "-r", &crafted.arg("/"), destination.to_str().expect("utf-8")]), Duration::from_secs(30));
        assert_failed_cleanly(&output, &context);
        assert!(output.stderr.contains("cycle"), "{context}: {}", output.text());
        let output = run(Command::new(FSOC).args(["rm", "-r", &crafted.arg("/x")]), Duration::from_secs(30));
        assert_failed_cleanly(&output, &format!("rm -r, {context}"));
    }
}

/// Unprintable names are listed with C escapes (ls -b style), never raw.
#[test]
fn unprintable_names_are_escaped() {
    let crafted = Crafted::new();
    crafted.craft(|fs| {
        write(fs, "/red\x1b[31m", b"x");
        write(fs, "/line\nbreak", b"x");
        let inode = inode_of(fs, "/red\x1b[31m");
        raw_entry(fs, ROOT_INODE, b"bad\xffutf8", inode, FileKind::File);
    });
    let output = fsoc(&["ls", &crafted.arg("/")]);
    assert!(output.status.success(), "{}", output.text());
    assert!(output.stdout.contains("red\\033[31m"), "{}", output.stdout);
    assert!(output.stdout.contains("line\\nbreak"), "{}", output.stdout);
    assert!(output.stdout.contains("bad\\377utf8"), "{}", output.stdout);
    assert!(!output.stdout.contains('\x1b'), "a raw escape byte reached the terminal");
}

/// `fsoc ls IMAGE:/ | head` ends quietly: no "Broken pipe", exit 0.
#[test]
fn a_closed_pipe_ends_ls_quietly() {
    let crafted = Crafted::new();
    crafted.craft(|fs| {
        for index in 0..3000 {
            write(fs, &format!("/a-rather-long-file-name-to-fill-the-pipe-{index:05}"), b"");
        }
    });
    let script = format!("'{FSOC}' ls -l '{}' | head -1 >/dev/null; echo \"status ${{PIPESTATUS[0]}}\"", crafted.arg("/"));
    let output = run(Command::new("bash").arg("-c").arg(script), Duration::from_secs(60));
    assert!(output.stdout.contains("status 0"), "{}", output.text());
    assert!(!output.stderr.contains("Broken pipe"), "{}", output.text());
}

/// `get -r --keep-going` extracts around an unreadable file, names it, and exits non-zero;
/// without it, get stops at that file with a clear error.
#[test]
fn keep_going_extracts_around_unreadable_files() {
    let crafted = Crafted::new();
    crafted.craft(|fs| {
        fs.mkdir(b"/x", 0o755).expect("mkdir");
        write(fs, "/x/a-first", b"readable");
        write(fs, "/x/b-broken", &vec![7u8; 20_000]);
        write(fs, "/x/c-last", b"readable too");
        // Point the broken file's extent outside the volume (checksums stay valid).
        let inode = inode_of(fs, "/x/b-broken");
        let volume = &mut fs.volume;
        let mut store = LogNodeStore::new(&mut volume.log);
        let mut value = 0xFFFF_FF00u32.to_le_bytes().to_vec();
        value.extend_from_slice(&4u32.to_le_bytes());
        volume.allocation.insert(&mut store, &allocation_key(inode, RecordKind::Extent, 0), &value).expect("raw extent");
    });
    let (_, destination) = crafted.destination();
    let output = fsoc(&["get", "-r", &crafted.arg("/x"), destination.to_str().expect("utf-8")]);
    assert_failed_cleanly(&output, "get without --keep-going");
    assert!(output.stderr.contains("b-broken"), "{}", output.text());

    let output = fsoc(&["get", "-r", "--keep-going", &crafted.arg("/x"), destination.to_str().expect("utf-8")]);
    assert_failed_cleanly(&output, "get --keep-going");
    assert!(output.stderr.contains("skipped") && output.stderr.contains("b-broken"), "{}", output.text());
    assert!(output.stderr.contains("1 entry of") && output.stderr.contains("could not be extracted"), "{}", output.text());
    assert_eq!(fs::read(destination.join("x/a-first")).expect("first"), b"readable");
    assert_eq!(fs::read(destination.join("x/c-last")).expect("last"), b"readable too");
    assert!(!destination.join("x/b-broken").exists(), "a half-copied file was left behind");
}

/// `put FILE IMAGE:/missing/` refuses, as `cp` does, instead of creating a file `missing`.
#[test]
fn put_onto_a_trailing_slash_needs_a_directory() {
    let crafted = Crafted::new();
    let notes = crafted.directory.path().join("notes.txt");
    fs::write(&notes, b"notes").expect("notes");
    let output = fsoc(&["put", notes.to_str().expect("utf-8"), &crafted.arg("/Documents/")]);
    assert_failed_cleanly(&output, "put onto a missing directory");
    assert!(output.stderr.contains("no such directory"), "{}", output.text());
    let output = fsoc(&["ls", &crafted.arg("/")]);
    assert!(!output.stdout.contains("Documents"), "a file named Documents was created: {}", output.stdout);
    assert!(fsoc(&["mkdir", &crafted.arg("/Documents")]).status.success());
    let output = fsoc(&["put", notes.to_str().expect("utf-8"), &crafted.arg("/Documents/")]);
    assert!(output.status.success(), "{}", output.text());
    assert!(fsoc(&["ls", &crafted.arg("/Documents")]).stdout.contains("notes.txt"));
}

/// Peak memory of ls -r and get -r on a tree of 20,000 files stays far below 64 MiB plus the
/// node cache (measured as the children's maximum resident set size).
#[test]
fn tools_run_in_bounded_memory() {
    let crafted = Crafted::new();
    crafted.craft(|fs| {
        for directory in 0..20 {
            fs.mkdir(format!("/d{directory}").as_bytes(), 0o755).expect("mkdir");
            for file in 0..1000 {
                write(fs, &format!("/d{directory}/file-{file:04}"), b"small");
            }
        }
    });
    let output = fsoc(&["ls", "-r", &crafted.arg("/")]);
    assert!(output.status.success(), "{}", output.text());
    let (_, destination) = crafted.destination();
    let output = fsoc(&["get", "-r", &crafted.arg("/"), destination.to_str().expect("utf-8")]);
    assert!(output.status.success(), "{}", output.text());
    // SAFETY: getrusage fills the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) }, 0);
    let peak_kib = usage.ru_maxrss as u64;
    println!("peak resident set of the tools: {peak_kib} KiB");
    assert!(peak_kib < (64 + 32) * 1024, "a tool used {peak_kib} KiB (limit 64 MiB plus a 32 MiB node cache)");
}
