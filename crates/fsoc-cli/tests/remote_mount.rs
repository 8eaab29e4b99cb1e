//! `fsoc mount --remote` under real programs: each test starts `fsoc serve` on a fresh image,
//! mounts it with `fsoc mount --remote`, runs ordinary tools on the mount (cp -a, diff -r, tar,
//! mv, ln, ln -s, sqlite3 and python with fsync'd writes), unmounts, stops the server, then
//! requires `fsoc fsck` to be clean and the contents `fsoc get -r` extracts to equal what was
//! written. Also: the server's secret over TCP.
//!
//! Needs root, /dev/fuse and the programs scripts/setup.sh installs; a missing one fails its
//! test with a message naming it (never a silent pass).

mod support;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::{detach, fsoc, require, run, run_ok, shell, snapshot, source_tree, Volume, FSOC, MOUNT_TIMEOUT};

/// A running `fsoc serve` of a test volume and an `fsoc mount --remote` of it; dropped without
/// `finish`, both are killed and the mount detached.
struct Remote<'v> {
    volume: &'v Volume,
    server: Option<Child>,
    mount: Option<Child>,
    address: String,
}

/// Waits until `ready` holds or `child` exits (a failure, with its log).
fn wait_until(child: &mut Child, log: &Path, what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + MOUNT_TIMEOUT;
    while !ready() {
        if let Some(status) = child.try_wait().expect("wait") {
            panic!("{what} exited with {status}:\n{}", fs::read_to_string(log).unwrap_or_default());
        }
        assert!(Instant::now() < deadline, "{what} not ready within {MOUNT_TIMEOUT:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn log_file(volume: &Volume, name: &str) -> (PathBuf, fs::File) {
    let path = volume.directory.path().join(name);
    // Truncated: a second start must not read the first one's lines.
    let file = fs::File::create(&path).expect("log");
    (path, file)
}

impl<'v> Remote<'v> {
    /// Serves `volume` on `listen` (with `extra` server options) and mounts it remotely.
    fn start(volume: &'v Volume, listen: &str, server_options: &[&str], mount_options: &[&str]) -> Remote<'v> {
        let (server_log, server_log_file) = log_file(volume, "serve.log");
        let mut server = Command::new(FSOC)
            .args(["serve", volume.image_arg(), "--listen", listen])
            .args(server_options)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(server_log_file)
            .spawn()
            .expect("start fsoc serve");
        // The server prints the address it bound (a TCP port 0 resolved).
        let mut address = String::new();
        wait_until(&mut server, &server_log, "fsoc serve", || {
            let log = fs::read_to_string(&server_log).unwrap_or_default();
            // Only once the whole line is there: stderr is unbuffered, so it may come in pieces.
            let line = log.lines().find(|line| line.contains(" (9P2000.L)"));
            match line.and_then(|line| line.split(" on ").nth(1)).and_then(|rest| rest.split(' ').next()) {
                Some(bound) => {
                    address = bound.to_string();
                    true
                }
                None => false,
            }
        });
        let mut remote = Remote { volume, server: Some(server), mount: None, address };
        remote.mount(mount_options);
        remote
    }

    fn mount(&mut self, options: &[&str]) {
        let (mount_log, mount_log_file) = log_file(self.volume, "mount.log");
        let mut mount = Command::new(FSOC)
            .args(["mount", "--remote", &self.address])
            .arg(&self.volume.mount_point)
            .args(options)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(mount_log_file)
            .spawn()
            .expect("start fsoc mount --remote");
        let canonical = self.volume.mount_point.canonicalize().expect("mount point");
        wait_until(&mut mount, &mount_log, "fsoc mount --remote", || fsoc_fuse::is_mount_point(&canonical));
        self.mount = Some(mount);
    }

    fn path(&self, relative: &str) -> PathBuf {
        self.volume.mount_point.join(relative)
    }

    fn root(&self) -> &Path {
        &self.volume.mount_point
    }

    /// `fsoc umount` (the mount process must exit with status 0), then SIGTERM to the server,
    /// which must commit and exit with status 0.
    fn finish(mut self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let output = fsoc(&["umount", self.volume.mount_point.to_str().expect("utf-8")]);
            if output.status.success() {
                break;
            }
            assert!(output.stderr.contains("busy") && Instant::now() < deadline, "umount:\n{}", output.text());
            std::thread::sleep(Duration::from_millis(100));
        }
        for (child, what) in [(self.mount.take(), "fsoc mount --remote"), (self.server.take(), "fsoc serve")] {
            let mut child = child.expect("running");
            if what == "fsoc serve" {
                // SAFETY: kill with the pid of our own child process.
                assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
            }
            let started = Instant::now();
            let status = loop {
                if let Some(status) = child.try_wait().expect("wait") {
                    break status;
                }
                assert!(started.elapsed() < MOUNT_TIMEOUT, "{what} did not exit");
                std::thread::sleep(Duration::from_millis(20));
            };
            let log = fs::read_to_string(self.volume.directory.path().join(if what == "fsoc serve" {
                "serve.log"
            } else {
                "mount.log"
            }))
            .unwrap_or_default();
            assert!(status.success(), "{what} exited with {status}:\n{log}");
        }
    }
}

impl Drop for Remote<'_> {
    fn drop(&mut self) {
        if self.mount.is_some() {
            detach(&self.volume.mount_point);
        }
        for mut child in [self.mount.take(), self.server.take()].into_iter().flatten() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `fsoc get -r IMAGE:/path` into a fresh directory; returns the extracted copy.
fn extract(volume: &Volume, path: &str) -> PathBuf {
    let out = volume.directory.path().join(format!("extracted-{}", path.trim_start_matches('/').replace('/', "_")));
    fs::create_dir(&out).expect("mkdir");
    let source = format!("{}:{path}", volume.image_arg());
    let output = fsoc(&["get", "-r", &source, out.to_str().expect("utf-8")]);
    assert!(output.status.success(), "fsoc get -r {source}:\n{}", output.text());
    out.join(Path::new(path).file_name().expect("a name"))
}

#[test]
fn cp_tar_and_links_through_a_remote_mount() {
    require("diff");
    require("tar");
    let volume = Volume::new("256M");
    let source = source_tree(volume.directory.path());
    let remote =
        Remote::start(&volume, &format!("unix:{}", volume.directory.path().join("s.sock").display()), &[], &[]);
    // cp -a keeps modes, owners, times and links; diff -r compares every byte.
    run_ok(Command::new("cp").arg("-a").arg(&source).arg(remote.path("copy")));
    run_ok(Command::new("diff").arg("-r").arg(&source).arg(remote.path("copy")));
    assert_eq!(snapshot(&source), snapshot(&remote.path("copy")), "cp -a preserved modes, owners and times");
    // tar: an archive written on the mount, extracted there, compared.
    run_ok(Command::new("tar").arg("-cf").arg(remote.path("tree.tar")).arg("-C").arg(&source).arg("."));
    fs::create_dir(remote.path("extracted")).expect("mkdir");
    run_ok(Command::new("tar").arg("-xpf").arg(remote.path("tree.tar")).arg("-C").arg(remote.path("extracted")));
    run_ok(Command::new("diff").arg("-r").arg(&source).arg(remote.path("extracted")));
    // rename, hard and symbolic links, as the local mount's test does them.
    shell(
        remote.root(),
        "mkdir -p links/a/b/c links/d && cd links && echo one > a/one && echo two > a/b/two \
         && echo three > a/b/c/three && ln a/one hard && ln -s a/b/two soft && ln -s ../a d/up \
         && mv a/b d/b && mv hard d/hard && mv d/b/two d/b/renamed && echo replaced > new && mv new d/hard",
    );
    let found = shell(&remote.path("links"), "find . | sort").stdout;
    assert_eq!(found, ".\n./a\n./a/one\n./d\n./d/b\n./d/b/c\n./d/b/c/three\n./d/b/renamed\n./d/hard\n./d/up\n./soft\n");
    assert_eq!(fs::read_to_string(remote.path("links/d/up/one")).expect("through a symlink"), "one\n");
    assert_eq!(fs::read_to_string(remote.path("links/d/hard")).expect("read"), "replaced\n");
    assert_eq!(shell(remote.root(), "stat -c %h links/a/one").stdout, "1\n");
    shell(remote.root(), "ln links/a/one links/second && test $(stat -c %h links/a/one) = 2");
    let errors = run(Command::new("rmdir").arg(remote.path("links/d")), support::PROGRAM_TIMEOUT);
    assert!(errors.stderr.contains("not empty"), "rmdir of a full directory: {}", errors.text());
    let statfs = shell(remote.root(), "stat -f -c '%b %f %l' .").stdout;
    assert!(statfs.ends_with(" 255\n"), "statfs through the mount: {statfs}");
    let mounted_snapshot = snapshot(&remote.path("copy"));
    remote.finish();
    volume.fsck();
    // What the server committed is what was written.
    let copy = extract(&volume, "/copy");
    run_ok(Command::new("diff").arg("-r").arg(&source).arg(&copy));
    let extracted = extract(&volume, "/extracted");
    run_ok(Command::new("diff").arg("-r").arg(&source).arg(&extracted));
    let links = extract(&volume, "/links");
    assert_eq!(fs::read_link(links.join("d/up")).expect("link"), PathBuf::from("../a"));
    assert_eq!(fs::read_to_string(links.join("d/b/renamed")).expect("read"), "two\n");
    // A second mount sees the same tree (times and modes as they were served).
    let remote =
        Remote::start(&volume, &format!("unix:{}", volume.directory.path().join("s.sock").display()), &[], &[]);
    assert_eq!(snapshot(&remote.path("copy")), mounted_snapshot, "the tree is the same after remounting");
    remote.finish();
}

#[test]
fn sqlite_and_python_fsync_through_a_remote_mount() {
    require("sqlite3");
    require("python3");
    let volume = Volume::new("64M");
    let remote =
        Remote::start(&volume, &format!("unix:{}", volume.directory.path().join("s.sock").display()), &[], &[]);
    let database = remote.path("data.sqlite");
    let script =
        "PRAGMA journal_mode=DELETE; PRAGMA synchronous=FULL; CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT); \
                  WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n WHERE i<2000) \
                  INSERT INTO t(v) SELECT hex(randomblob(40)) FROM n; \
                  BEGIN; UPDATE t SET v='x' WHERE id % 3 = 0; COMMIT; DELETE FROM t WHERE id > 1500;";
    run_ok(Command::new("sqlite3").arg(&database).arg(script));
    let count = run_ok(Command::new("sqlite3").arg(&database).arg("SELECT count(*), sum(v='x') FROM t;")).stdout;
    assert_eq!(count, "1500|500\n");
    let integrity = run_ok(Command::new("sqlite3").arg(&database).arg("PRAGMA integrity_check;")).stdout;
    assert_eq!(integrity, "ok\n");
    // fsync'd appends, a rename over an existing file (the atomic-replace idiom) and fdatasync.
    let python = "import os, sys\n\
                  d = sys.argv[1]\n\
                  with open(os.path.join(d, 'log'), 'ab') as f:\n\
                  \x20   for i in range(200):\n\
                  \x20       f.write(b'line %d\\n' % i); f.flush(); os.fsync(f.fileno())\n\
                  for i in range(20):\n\
                  \x20   tmp = os.path.join(d, 'state.tmp')\n\
                  \x20   with open(tmp, 'wb') as f:\n\
                  \x20       f.write(b'state %d\\n' % i); f.flush(); os.fdatasync(f.fileno())\n\
                  \x20   os.replace(tmp, os.path.join(d, 'state'))\n\
                  fd = os.open(d, os.O_RDONLY); os.fsync(fd); os.close(fd)\n";
    run_ok(Command::new("python3").arg("-c").arg(python).arg(remote.root()));
    assert_eq!(fs::read_to_string(remote.path("state")).expect("state"), "state 19\n");
    remote.finish();
    volume.fsck();
    let out = volume.directory.path().join("out");
    fs::create_dir(&out).expect("mkdir");
    for name in ["data.sqlite", "log", "state"] {
        let source = format!("{}:/{name}", volume.image_arg());
        let output = fsoc(&["get", &source, out.to_str().expect("utf-8")]);
        assert!(output.status.success(), "fsoc get {source}:\n{}", output.text());
    }
    let count = run_ok(Command::new("sqlite3").arg(out.join("data.sqlite")).arg("SELECT count(*) FROM t;")).stdout;
    assert_eq!(count, "1500\n", "the database as committed on the image");
    let log = fs::read_to_string(out.join("log")).expect("log");
    assert_eq!(log.lines().count(), 200);
    assert_eq!(log.lines().last(), Some("line 199"));
    assert_eq!(fs::read_to_string(out.join("state")).expect("state"), "state 19\n");
}

#[test]
fn the_secret_is_needed_over_tcp() {
    let volume = Volume::new("64M");
    let secret = volume.directory.path().join("secret");
    fs::write(&secret, "remote-mount-secret-0123\n").expect("secret");
    let secret_arg = secret.to_str().expect("utf-8");
    let remote =
        Remote::start(&volume, "tcp:127.0.0.1:0", &["--secret-file", secret_arg], &["--secret-file", secret_arg]);
    assert!(remote.address.starts_with("tcp:127.0.0.1:"), "{}", remote.address);
    fs::write(remote.path("file"), b"over tcp").expect("write");
    // A second mount without the secret is refused with a message saying why.
    let other = volume.directory.path().join("other");
    fs::create_dir(&other).expect("mkdir");
    let refused =
        run(Command::new(FSOC).args(["mount", "--remote", &remote.address]).arg(&other), support::PROGRAM_TIMEOUT);
    assert!(!refused.status.success(), "mounted without the secret");
    assert!(refused.stderr.contains("secret"), "{}", refused.text());
    assert!(!fsoc_fuse::is_mount_point(&other.canonicalize().expect("path")));
    remote.finish();
    volume.fsck();
    let out = volume.directory.path().join("out");
    fs::create_dir(&out).expect("mkdir");
    let output = fsoc(&["get", &format!("{}:/file", volume.image_arg()), out.to_str().expect("utf-8")]);
    assert!(output.status.success(), "{}", output.text());
    assert_eq!(fs::read(out.join("file")).expect("read"), b"over tcp");
}

/// Another host's changes (here: a second connection through fsoc-client) are seen through
/// the mount once the 1 s attribute and entry TTL has passed: new contents at the next open
/// (no page cache kept across opens, and the open fid reused from an earlier open reads what
/// the server has), a new name (looked up in vain before: a negative entry), a removed one.
#[test]
fn changes_by_another_client_are_seen_within_the_ttl() {
    let volume = Volume::new("64M");
    let socket = volume.directory.path().join("s.sock");
    let remote = Remote::start(&volume, &format!("unix:{}", socket.display()), &[], &[]);
    fs::write(remote.path("shared"), b"first version").expect("write through the mount");
    assert_eq!(fs::read(remote.path("shared")).expect("read"), b"first version");
    fs::write(remote.path("doomed"), b"x").expect("write");
    let other = fsoc_client::Client::connect(&remote.address, &fsoc_client::ConnectOptions::default())
        .expect("a second client");
    // Looked up before it exists: the kernel remembers the name's absence for the TTL only.
    assert_eq!(fs::metadata(remote.path("new")).unwrap_err().kind(), std::io::ErrorKind::NotFound);
    other.write("shared", b"second, longer version").expect("write by the other client");
    other.write("new", b"made elsewhere").expect("create by the other client");
    other.remove_file("doomed").expect("unlink by the other client");
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(fs::read(remote.path("shared")).expect("read"), b"second, longer version");
    assert_eq!(fs::read(remote.path("new")).expect("read"), b"made elsewhere");
    assert_eq!(fs::metadata(remote.path("doomed")).unwrap_err().kind(), std::io::ErrorKind::NotFound);
    drop(other);
    remote.finish();
    volume.fsck();
}

/// Small writes are gathered (write-behind) and sent as a few large Twrites, yet this mount
/// sees them at once (size and contents while the file is still open, through another
/// descriptor and through stat), and another client sees them once the file is closed
/// (close-to-open). The server's `--trace` counts the Twrites.
#[test]
fn small_writes_are_gathered_and_seen_at_once_here_and_after_close_elsewhere() {
    use std::io::{Read, Write};
    let volume = Volume::new("64M");
    let socket = volume.directory.path().join("s.sock");
    let remote = Remote::start(&volume, &format!("unix:{}", socket.display()), &["--trace"], &[]);
    let expected: Vec<u8> = (0..1000u32).flat_map(|index| [(index % 251) as u8; 512]).collect();
    let mut file = fs::File::create(remote.path("gathered")).expect("create");
    for chunk in expected.chunks(512) {
        file.write_all(chunk).expect("a 512-byte write");
    }
    assert_eq!(fs::metadata(remote.path("gathered")).expect("stat").len(), expected.len() as u64, "stat while open");
    let mut seen = Vec::new();
    fs::File::open(remote.path("gathered")).expect("open again").read_to_end(&mut seen).expect("read while open");
    assert!(seen == expected, "another descriptor reads every write at once");
    // A write after the read, then close: the other client sees all of it.
    file.write_all(b"tail").expect("write after the read");
    drop(file);
    let other = fsoc_client::Client::connect(&remote.address, &fsoc_client::ConnectOptions::default())
        .expect("a second client");
    let mut expected_after_close = expected.clone();
    expected_after_close.extend_from_slice(b"tail");
    assert!(other.read("gathered").expect("read by the other client") == expected_after_close, "seen after close");
    drop(other);
    let log = fs::read_to_string(volume.directory.path().join("serve.log")).expect("server log");
    let twrites = log.lines().filter(|line| line.contains(" Twrite ")).count();
    // Without write-behind: 1,001. With it: one per 128 KiB run, the run sent by the read and
    // the tail at close.
    assert!(twrites <= 8, "{twrites} Twrites for 1,001 small writes");
    assert!(twrites >= 4, "{twrites} Twrites cannot carry 500 KiB in runs of 128 KiB");
    remote.finish();
    volume.fsck();
}

/// A gathered write that the server refuses (a full volume) is reported, by a later write or
/// by close, never lost silently: writing past the volume's capacity must fail somewhere.
#[test]
fn a_failed_write_behind_is_reported_by_a_later_write_or_by_close() {
    use std::io::Write;
    use std::os::fd::IntoRawFd;
    let volume = Volume::new("16M");
    let socket = volume.directory.path().join("s.sock");
    let remote = Remote::start(&volume, &format!("unix:{}", socket.display()), &[], &[]);
    let mut file = fs::File::create(remote.path("filler")).expect("create");
    let chunk = [0x5au8; 4096];
    let mut written = 0u64;
    let mut write_error = None;
    // Twice the volume's size: some write must fail.
    while written < 32 << 20 {
        match file.write_all(&chunk) {
            Ok(()) => written += chunk.len() as u64,
            Err(error) => {
                write_error = Some(error);
                break;
            }
        }
    }
    // SAFETY: closing a descriptor this test owns (into_raw_fd gave it up).
    let closed = unsafe { libc::close(file.into_raw_fd()) };
    let close_error = (closed != 0).then(std::io::Error::last_os_error);
    let reported = write_error.or(close_error).expect("a write past the volume's capacity was reported");
    assert_eq!(reported.raw_os_error(), Some(libc::ENOSPC), "{reported}");
    remote.finish();
    volume.fsck();
}
