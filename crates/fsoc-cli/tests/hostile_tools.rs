//! The image tools against hostile images (issue 14, S1, S2 and the tool papercuts): names
//! from an image are never followed, `get -r` never writes outside its destination, directory
//! cycles are reported instead of overflowing the stack, unprintable names are escaped, a
//! closed pipe ends `ls` quietly, `--keep-going` extracts around unreadable files, and a
//! trailing slash on `put` names a directory. Each test crafts its own image: files made with
//! the engine, then one directory record rewritten through the public tree and committed, so
//! the checksums are right and only the record is hostile.

mod support;

use std::fs;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fsoc_core::fs::records::{allocation_key, directory_key, DirectoryValue, Extent, FileKind, RecordKind, ROOT_INODE};
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
        let output = fsoc(&["mkfs", image.to_str().expect("utf-8"), "--size", "12M", "--seed", "3"]);
        assert!(output.status.success(), "mkfs: {}", output.text());
        Crafted { directory, image }
    }

    fn arg(&self, path: &str) -> String {
        format!("{}:{path}", self.image.display())
    }

    /// Opens the image with the engine, runs `craft`, commits and closes it.
    fn craft<T>(&self, craft: impl FnOnce(&mut FileSystem<fsoc_media::SimFlash<fsoc_media::ImageStore>>) -> T) -> T {
        let flash = SimFlash::open_image(&self.image).expect("open image");
        let mut fs = FileSystem::mount(flash, FsConfig::default()).expect("mount");
        let result = craft(&mut fs);
        fs.commit().expect("commit");
        let mut flash = fs.unmount().expect("unmount");
        fsoc_media::Flash::flush(&mut flash).expect("flush");
        result
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
    let fd = fs
        .open(path.as_bytes(), OpenFlags { write: true, create: true, truncate: true, ..Default::default() }, 0o644)
        .expect("create");
    fs.pwrite(fd, 0, data).expect("write");
    fs.close(fd).expect("close");
}

/// Adds a raw directory entry `name` in `parent` naming `inode`, bypassing every check.
fn raw_entry(fs: &mut FileSystem<impl fsoc_media::Flash>, parent: u64, name: &[u8], inode: u64, kind: FileKind) {
    let volume = &mut fs.craft();
    let mut store = LogNodeStore::new(volume.log);
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

/// Runs `fsoc` within `timeout` and returns what it printed and its own peak resident set in
/// KiB. The kernel folds the peak of the address space a process replaces at exec into the
/// figure wait4 reports, and a child of this test starts from this (large) test process: so
/// the child is started by a small helper process (this test binary, running only
/// `measure_helper`), whose own child's figure is then the tool's alone (at least the
/// helper's few MiB).
fn fsoc_measured(arguments: &[&str], timeout: Duration) -> (support::Output, u64) {
    let directory = tempfile::tempdir().expect("tempdir for output");
    let report = directory.path().join("report");
    let helper = run(
        Command::new(std::env::current_exe().expect("test binary"))
            .args(["--ignored", "--exact", "measure_helper", "--test-threads", "1"])
            .env("FSOC_MEASURE_ARGUMENTS", arguments.join("\u{1f}"))
            .env("FSOC_MEASURE_DIRECTORY", directory.path())
            .env("FSOC_MEASURE_TIMEOUT_SECONDS", timeout.as_secs().to_string()),
        timeout + Duration::from_secs(60),
    );
    let report =
        fs::read_to_string(&report).unwrap_or_else(|_| panic!("measure_helper wrote no report:\n{}", helper.text()));
    let [status, peak_kib] =
        report.split_whitespace().map(|field| field.parse::<i64>().expect("number")).collect::<Vec<_>>()[..]
    else {
        panic!("measure_helper report {report:?}")
    };
    assert!(status >= 0, "fsoc {arguments:?} did not finish within {timeout:?}");
    let output = support::Output {
        status: std::process::ExitStatus::from_raw(status as i32),
        stdout: fs::read_to_string(directory.path().join("stdout")).unwrap_or_default(),
        stderr: fs::read_to_string(directory.path().join("stderr")).unwrap_or_default(),
    };
    (output, peak_kib as u64)
}

/// Not a test: the small process `fsoc_measured` starts fsoc from. Runs fsoc with the
/// arguments in FSOC_MEASURE_ARGUMENTS (separated by U+001F), its output to files in
/// FSOC_MEASURE_DIRECTORY, and writes "STATUS PEAK_KIB" to its `report` (STATUS -1 when
/// fsoc overran FSOC_MEASURE_TIMEOUT_SECONDS and was killed).
#[test]
#[ignore = "a helper process for tools_run_in_bounded_memory and over_deep_trees_stop_at_the_depth_limit"]
#[allow(clippy::zombie_processes)] // the child is reaped by wait4, which also gives its rusage
fn measure_helper() {
    let (Ok(arguments), Ok(directory), Ok(timeout)) = (
        std::env::var("FSOC_MEASURE_ARGUMENTS"),
        std::env::var("FSOC_MEASURE_DIRECTORY"),
        std::env::var("FSOC_MEASURE_TIMEOUT_SECONDS"),
    ) else {
        return; // run by hand without a request: nothing to measure
    };
    let directory = PathBuf::from(directory);
    let timeout = Duration::from_secs(timeout.parse().expect("seconds"));
    let mut child = Command::new(FSOC)
        .args(arguments.split('\u{1f}'))
        .stdin(Stdio::null())
        .stdout(fs::File::create(directory.join("stdout")).expect("stdout file"))
        .stderr(fs::File::create(directory.join("stderr")).expect("stderr file"))
        .spawn()
        .expect("start fsoc");
    let pid = child.id() as libc::pid_t;
    let deadline = Instant::now() + timeout;
    let (status, usage) = loop {
        let mut status = 0;
        // SAFETY: wait4 fills the status and rusage it is given.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: as above; `pid` is this process's own child, not yet reaped.
        let waited = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        assert!(waited >= 0, "wait4: {}", std::io::Error::last_os_error());
        if waited == pid {
            break (status, usage);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break (-1, usage);
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    fs::write(directory.join("report"), format!("{status} {}", usage.ru_maxrss)).expect("report");
}

/// Peak memory allowed to a tool: 64 MiB plus the node cache (4096 nodes of at most 8 KiB).
const PEAK_KIB_MAX: u64 = (64 + 32) * 1024;

/// Removes a deep local tree with `rm -rf` (the standard library's removal recurses).
fn remove_deep(path: &Path) {
    let _ = Command::new("rm").arg("-rf").arg(path).status();
}

fn assert_failed_cleanly(output: &support::Output, context: &str) {
    assert!(!output.status.success(), "{context}: exit 0\n{}", output.text());
    assert_eq!(
        output.status.code(),
        Some(2),
        "{context}: killed or crashed instead of a clean error\n{}",
        output.text()
    );
}

/// S1: hostile names in a directory: `get -r` refuses (exit 2) and writes nothing outside
/// DEST; with --skip-bad-names it extracts the rest; `ls -r` refuses or skips the same way.
#[test]
fn hostile_names_never_lead_outside_the_destination() {
    let long = "n".repeat(256);
    let names: [&[u8]; 8] =
        [b"..", b".", b"", b"a/b", b"/etc/escaped", b"../../../../tmp/escaped", b"nul\0byte", long.as_bytes()];
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
        assert!(
            output.stderr.contains("--skip-bad-names"),
            "{context}: the message does not say how to go on\n{}",
            output.text()
        );
        let after = tree(crafted.directory.path());
        let outside: Vec<&String> =
            after.iter().filter(|path| !before.contains(path) && !path.starts_with("sentinel/dest")).collect();
        assert!(outside.is_empty(), "{context}: created outside DEST: {outside:?}");
        assert!(
            !Path::new("/tmp/escaped").exists() && !Path::new("/etc/escaped").exists(),
            "{context}: escaped to an absolute path"
        );

        let output = fsoc(&["get", "-r", "--skip-bad-names", &crafted.arg("/x"), destination.to_str().expect("utf-8")]);
        assert!(output.status.success(), "{context}: --skip-bad-names\n{}", output.text());
        assert!(output.stderr.contains("skipping"), "{context}: no warning\n{}", output.text());
        assert_eq!(fs::read(destination.join("x/plain")).expect("the rest is extracted"), b"an ordinary file");
        let after = tree(crafted.directory.path());
        let outside: Vec<&String> =
            after.iter().filter(|path| !before.contains(path) && !path.starts_with("sentinel/dest")).collect();
        assert!(outside.is_empty(), "{context}: created outside DEST with --skip-bad-names: {outside:?}");
        let _ = sentinel;

        let output = fsoc(&["ls", "-r", &crafted.arg("/")]);
        assert_failed_cleanly(&output, &format!("ls {context}"));
        let output = fsoc(&["ls", "-r", "--skip-bad-names", &crafted.arg("/")]);
        assert!(output.status.success(), "ls --skip-bad-names {context}\n{}", output.text());
        assert!(output.stdout.contains("/x/plain"), "{context}: {}", output.stdout);
    }
}

/// A symbolic link in the image that points outside is created as a link and never followed:
/// neither a link planted in DEST by someone else (extraction replaces it instead of writing
/// through it) nor a link extracted from one image when a second image has a directory of the
/// same name with files in it (extraction refuses instead of descending through the link).
#[test]
fn extraction_creates_links_and_never_follows_them() {
    let crafted = Crafted::new();
    let (sentinel, destination) = crafted.destination();
    let outside_directory = sentinel.join("outside-directory");
    fs::create_dir_all(&outside_directory).expect("outside directory");
    let outside_link_target = outside_directory.to_str().expect("utf-8").as_bytes().to_vec();
    crafted.craft(|fs| {
        fs.mkdir(b"/x", 0o755).expect("mkdir");
        fs.symlink_path(b"/etc/passwd", b"/x/link").expect("symlink");
        fs.symlink_path(&outside_link_target, b"/x/escape").expect("symlink");
        write(fs, "/x/file", b"new contents");
    });
    let outside = sentinel.join("outside-target");
    fs::write(&outside, b"untouched").expect("outside file");
    fs::create_dir_all(destination.join("x")).expect("x");
    std::os::unix::fs::symlink(&outside, destination.join("x/file")).expect("planted link");
    let output = fsoc(&["get", "-r", &crafted.arg("/x"), destination.to_str().expect("utf-8")]);
    assert!(output.status.success(), "{}", output.text());
    assert_eq!(fs::read(&outside).expect("outside"), b"untouched", "a planted link was written through");
    assert_eq!(fs::read(destination.join("x/file")).expect("file"), b"new contents");
    assert_eq!(fs::read_link(destination.join("x/link")).expect("link"), PathBuf::from("/etc/passwd"));
    assert_eq!(
        fs::read_link(destination.join("x/escape")).expect("link"),
        outside_directory,
        "the link is created as a link"
    );

    // A second image where `escape` is a directory with a file in it, extracted over the first.
    let second = Crafted::new();
    second.craft(|fs| {
        fs.mkdir(b"/x", 0o755).expect("mkdir");
        fs.mkdir(b"/x/escape", 0o755).expect("mkdir");
        write(fs, "/x/escape/planted", b"must not land outside");
    });
    let output = fsoc(&["get", "-r", &second.arg("/x"), destination.to_str().expect("utf-8")]);
    assert_failed_cleanly(&output, "a directory over an extracted link");
    assert!(output.stderr.contains("/x/escape: a symbolic link or a file is in the way"), "{}", output.text());
    assert_eq!(
        fs::read_dir(&outside_directory).expect("outside directory").count(),
        0,
        "written through an extracted link"
    );
}

/// S2: directory entries pointing back at the root, at an ancestor, at the directory itself,
/// and a second name of a directory: `ls -r` and `get -r` report the cycle with the path and
/// exit 2 (no SIGABRT), promptly; `get -r --keep-going` extracts everything else; `rm -r`
/// refuses before removing anything.
#[test]
fn directory_cycles_are_reported() {
    for (label, target, expected) in [
        ("root", "/", "leads back to / "),
        ("ancestor", "/x", "leads back to /x "),
        ("self", "/x/sub", "leads back to /x/sub "),
        ("second name", "/a", "a directory has one name"),
    ] {
        let crafted = Crafted::new();
        crafted.craft(|fs| {
            fs.mkdir(b"/x", 0o755).expect("mkdir");
            fs.mkdir(b"/x/sub", 0o755).expect("mkdir");
            fs.mkdir(b"/a", 0o755).expect("mkdir");
            write(fs, "/x/sub/inner", b"inner");
            write(fs, "/a/other", b"other");
            let sub = inode_of(fs, "/x/sub");
            let target = if target == "/" { ROOT_INODE } else { inode_of(fs, target) };
            raw_entry(fs, sub, b"loop", target, FileKind::Directory);
        });
        let context = format!("cycle to {label}");
        let timeout = Duration::from_secs(60);
        let output = run(Command::new(FSOC).args(["ls", "-r", &crafted.arg("/")]), timeout);
        assert_failed_cleanly(&output, &context);
        assert!(
            output.stderr.contains("/x/sub/loop: directory cycle") && output.stderr.contains(expected),
            "{context}: {}",
            output.text()
        );
        let (_, destination) = crafted.destination();
        let output = run(
            Command::new(FSOC).args(["get", "-r", &crafted.arg("/"), destination.to_str().expect("utf-8")]),
            timeout,
        );
        assert_failed_cleanly(&output, &context);
        assert!(output.stderr.contains("/x/sub/loop: directory cycle"), "{context}: {}", output.text());

        let output = run(
            Command::new(FSOC).args([
                "get",
                "-r",
                "--keep-going",
                &crafted.arg("/"),
                destination.to_str().expect("utf-8"),
            ]),
            timeout,
        );
        assert_failed_cleanly(&output, &format!("get --keep-going, {context}"));
        assert!(
            output.stderr.contains("skipped") && output.stderr.contains("1 entry of"),
            "{context}: {}",
            output.text()
        );
        assert_eq!(fs::read(destination.join("root/x/sub/inner")).expect("inner extracted"), b"inner");
        assert_eq!(fs::read(destination.join("root/a/other")).expect("other extracted"), b"other");
        assert!(!destination.join("root/x/sub/loop/x").exists(), "{context}: the cycle was followed");

        let output = run(Command::new(FSOC).args(["rm", "-r", &crafted.arg("/x")]), timeout);
        assert_failed_cleanly(&output, &format!("rm -r, {context}"));
        assert!(output.stderr.contains("nothing was removed"), "{context}: {}", output.text());
        let output = fsoc(&["cat", &crafted.arg("/x/sub/inner")]);
        assert_eq!(output.stdout, "inner", "rm -r removed part of the tree before refusing: {}", output.text());
    }
}

/// S2: a chain of directories deeper than any real tree (4,100 levels) stops `ls -r`, `get -r`
/// and `rm -r` at the depth limit with a clear error: no stack overflow, bounded time and
/// memory, and `rm -r` changes nothing.
#[test]
fn over_deep_trees_stop_at_the_depth_limit() {
    let crafted = Crafted::new();
    crafted.craft(|fs| {
        let mut parent = ROOT_INODE;
        for _ in 0..4100 {
            parent = fs.create(parent, b"d", FileKind::Directory, 0o755, 0, 0, None).expect("mkdir");
        }
    });
    let timeout = Duration::from_secs(120);
    let (output, ls_peak_kib) = fsoc_measured(&["ls", "-r", &crafted.arg("/")], timeout);
    assert_failed_cleanly(&output, "ls -r");
    assert!(output.stderr.contains("more than 4096 nested directories; not followed"), "{}", output.status);
    assert_eq!(output.stdout.lines().count(), 4096, "ls -r lists down to the limit");

    let (_, destination) = crafted.destination();
    let (output, get_peak_kib) =
        fsoc_measured(&["get", "-r", &crafted.arg("/d"), destination.to_str().expect("utf-8")], timeout);
    remove_deep(&destination.join("d"));
    assert_failed_cleanly(&output, "get -r");
    assert!(output.stderr.contains("nested directories; not followed"), "{}", output.status);

    let output = run(Command::new(FSOC).args(["rm", "-r", &crafted.arg("/d")]), timeout);
    assert_failed_cleanly(&output, "rm -r");
    assert!(
        output.stderr.contains("more than 4096 nested directories; not followed; nothing was removed"),
        "{}",
        output.status
    );
    assert_eq!(fsoc(&["ls", &crafted.arg("/d/d/d")]).stdout, "d/\n", "rm -r removed part of the tree");
    println!("4,100-level chain: peak resident set ls -r {ls_peak_kib} KiB, get -r {get_peak_kib} KiB");
    assert!(
        ls_peak_kib < PEAK_KIB_MAX && get_peak_kib < PEAK_KIB_MAX,
        "ls -r {ls_peak_kib} KiB, get -r {get_peak_kib} KiB"
    );
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
    let output = fsoc(&["ls", "-r", &crafted.arg("/")]);
    assert!(output.stdout.contains("/red\\033[31m") && !output.stdout.contains('\x1b'), "{}", output.stdout);

    // A refused name is escaped in the error message too.
    crafted.craft(|fs| {
        // Any write first: a raw tree insert alone finds the segment table not yet loaded.
        write(fs, "/plain", b"x");
        let inode = inode_of(fs, "/line\nbreak");
        raw_entry(fs, ROOT_INODE, b"\x1b[2J/clear", inode, FileKind::File);
    });
    let output = fsoc(&["ls", &crafted.arg("/")]);
    assert!(output.stderr.contains("entry \"\\033[2J/clear\": name contains `/`"), "{}", output.text());
    assert!(!output.stderr.contains('\x1b'), "a raw escape byte reached the terminal in a message");
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
    for options in ["-l", "-r"] {
        let script = format!(
            "'{FSOC}' ls {options} '{}' | head -1 >/dev/null; echo \"status ${{PIPESTATUS[0]}}\"",
            crafted.arg("/")
        );
        let output = run(Command::new("bash").arg("-c").arg(script), Duration::from_secs(60));
        assert!(output.stdout.contains("status 0"), "ls {options}: {}", output.text());
        assert!(output.stderr.is_empty(), "ls {options}: {}", output.text());
    }
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
        let volume = &mut fs.craft();
        let mut store = LogNodeStore::new(volume.log);
        let mut value = 0xFFFF_FF00u32.to_le_bytes().to_vec();
        value.extend_from_slice(&4u32.to_le_bytes());
        volume
            .allocation
            .insert(&mut store, &allocation_key(inode, RecordKind::Extent, 0), &value)
            .expect("raw extent");
    });
    let (_, destination) = crafted.destination();
    let output = fsoc(&["get", "-r", &crafted.arg("/x"), destination.to_str().expect("utf-8")]);
    assert_failed_cleanly(&output, "get without --keep-going");
    assert!(output.stderr.contains("b-broken"), "{}", output.text());

    let output = fsoc(&["get", "-r", "--keep-going", &crafted.arg("/x"), destination.to_str().expect("utf-8")]);
    assert_failed_cleanly(&output, "get --keep-going");
    assert!(output.stderr.contains("skipped") && output.stderr.contains("b-broken"), "{}", output.text());
    assert!(
        output.stderr.contains("1 entry of") && output.stderr.contains("could not be extracted"),
        "{}",
        output.text()
    );
    assert_eq!(fs::read(destination.join("x/a-first")).expect("first"), b"readable");
    assert_eq!(fs::read(destination.join("x/c-last")).expect("last"), b"readable too");
    assert!(!destination.join("x/b-broken").exists(), "a half-copied file was left behind");
}

/// `get -r --keep-going` on a damaged device: one data page of a file is beyond what ECC
/// corrects (as a worn NAND page is). The other files come out whole, the damaged one is named
/// and left out, and the exit status says the copy is incomplete.
#[test]
fn keep_going_extracts_around_an_uncorrectable_page() {
    let crafted = Crafted::new();
    let page = crafted.craft(|fs| {
        fs.mkdir(b"/x", 0o755).expect("mkdir");
        fs.mkdir(b"/x/sub", 0o755).expect("mkdir");
        write(fs, "/x/a-first", b"readable");
        write(fs, "/x/b-worn", &vec![7u8; 40_000]);
        write(fs, "/x/sub/c-last", b"readable too");
        fs.commit().expect("commit");
        // The physical page holding the worn file's first page of data.
        let inode = inode_of(fs, "/x/b-worn");
        let volume = &mut fs.craft();
        let layout = volume.layout();
        let store = LogNodeStore::new(volume.log);
        let (key, value) = volume
            .allocation
            .first_at_or_after(&store, &allocation_key(inode, RecordKind::Extent, 0))
            .expect("allocation tree")
            .expect("an extent record");
        assert_eq!(key, allocation_key(inode, RecordKind::Extent, 0), "the file's first extent");
        layout.physical(Extent::decode(0, &value).expect("extent").address)
    });
    let mut flash = SimFlash::open_image(&crafted.image).expect("open image");
    flash.inject_bit_flips(page, 64).expect("wear the page out");
    fsoc_media::Flash::flush(&mut flash).expect("flush");
    drop(flash);

    let (_, destination) = crafted.destination();
    let output = fsoc(&["get", "-r", &crafted.arg("/x"), destination.to_str().expect("utf-8")]);
    assert_failed_cleanly(&output, "get without --keep-going");
    assert!(output.stderr.contains("/x/b-worn"), "{}", output.text());

    let output = fsoc(&["get", "-r", "--keep-going", &crafted.arg("/x"), destination.to_str().expect("utf-8")]);
    assert_failed_cleanly(&output, "get --keep-going");
    assert!(output.stderr.contains("fsoc get: skipped ") && output.stderr.contains("/x/b-worn: "), "{}", output.text());
    assert!(
        output.stderr.contains("1 entry of") && output.stderr.contains("could not be extracted"),
        "{}",
        output.text()
    );
    assert_eq!(fs::read(destination.join("x/a-first")).expect("first"), b"readable");
    assert_eq!(fs::read(destination.join("x/sub/c-last")).expect("last"), b"readable too");
    assert!(!destination.join("x/b-worn").exists(), "a half-copied file was left behind");
    println!("get --keep-going on a worn page:\n{}", output.stderr);
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

/// Peak memory of `ls -r` and `get -r` stays below 64 MiB plus the node cache: on a tree of
/// 20,000 files, and on a wide tree of 3,000 directories with 255-byte names (a listing
/// that a tool collecting paths would hold whole). Each figure is the child's own peak
/// resident set (wait4).
#[test]
fn tools_run_in_bounded_memory() {
    let many_files = Crafted::new();
    many_files.craft(|fs| {
        for directory in 0..20 {
            fs.mkdir(format!("/d{directory}").as_bytes(), 0o755).expect("mkdir");
            for file in 0..1000 {
                write(fs, &format!("/d{directory}/file-{file:04}"), b"small");
            }
        }
    });
    let wide = Crafted::new();
    wide.craft(|fs| {
        for directory in 0..3000 {
            let name = format!("{directory:05}{}", "w".repeat(250));
            let inode = fs.create(ROOT_INODE, name.as_bytes(), FileKind::Directory, 0o755, 0, 0, None).expect("mkdir");
            fs.create(inode, "f".repeat(255).as_bytes(), FileKind::File, 0o644, 0, 0, None).expect("create");
        }
    });
    let timeout = Duration::from_secs(300);
    let mut figures = Vec::new();
    for (label, crafted, entries) in [("20,000 files", &many_files, 20_020), ("3,000 wide directories", &wide, 6_000)] {
        let (output, ls_peak_kib) = fsoc_measured(&["ls", "-r", &crafted.arg("/")], timeout);
        assert!(output.status.success(), "{label}: {}", output.text());
        assert_eq!(output.stdout.lines().count(), entries, "{label}");
        let (_, destination) = crafted.destination();
        let (output, get_peak_kib) =
            fsoc_measured(&["get", "-r", &crafted.arg("/"), destination.to_str().expect("utf-8")], timeout);
        assert!(output.status.success(), "{label}: {}", output.text());
        figures.push(format!("{label}: ls -r {ls_peak_kib} KiB, get -r {get_peak_kib} KiB"));
        assert!(
            ls_peak_kib < PEAK_KIB_MAX && get_peak_kib < PEAK_KIB_MAX,
            "{label}: ls -r {ls_peak_kib} KiB, get -r {get_peak_kib} KiB"
        );
    }
    println!("peak resident set: {}", figures.join("; "));
}
