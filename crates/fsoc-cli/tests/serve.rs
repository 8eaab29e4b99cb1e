//! `fsoc serve` as a program: an outside 9P client (the PyPI package p9fs, an fsspec file
//! system in pure Python) writes, reads, lists, makes directories, moves and removes through
//! it; SIGTERM commits and closes the image; a public address is refused without a secret and
//! a secret is enforced at attach. python3 and p9fs are installed by scripts/setup.sh: the
//! tests fail, never skip, when they are missing.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::{fsoc, require, run, FSOC};

/// How long `fsoc serve` may take to print its address.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A running `fsoc serve`; killed if dropped without `stop`.
struct Serving {
    child: Option<Child>,
    log: PathBuf,
    port: u16,
}

impl Serving {
    /// Starts `fsoc serve IMAGE --listen tcp:127.0.0.1:0 EXTRA...` and waits for its address.
    fn start(directory: &Path, image: &Path, extra: &[&str]) -> Serving {
        let log = directory.join("serve.log");
        let child = Command::new(FSOC)
            .arg("serve")
            .arg(image)
            .args(["--listen", "tcp:127.0.0.1:0"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("start fsoc serve");
        let mut serving = Serving { child: Some(child), log, port: 0 };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let text = std::fs::read_to_string(&serving.log).unwrap_or_default();
            if let Some(port) = text
                .split_once("on tcp:127.0.0.1:")
                .and_then(|(_, rest)| rest.split(|c: char| !c.is_ascii_digit()).next())
                .and_then(|port| port.parse().ok())
            {
                serving.port = port;
                return serving;
            }
            let exited = serving.child.as_mut().and_then(|child| child.try_wait().expect("wait"));
            assert!(exited.is_none(), "fsoc serve exited at start ({exited:?}):\n{text}");
            assert!(Instant::now() < deadline, "fsoc serve printed no address within {START_TIMEOUT:?}:\n{text}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, then the exit status and the log.
    fn stop(mut self) -> (std::process::ExitStatus, String) {
        let mut child = self.child.take().expect("running");
        // SAFETY: kill(2) on our own child's pid.
        assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0, "kill");
        let deadline = Instant::now() + START_TIMEOUT;
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait") {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!(
                    "fsoc serve did not exit after SIGTERM:\n{}",
                    std::fs::read_to_string(&self.log).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        (status, std::fs::read_to_string(&self.log).unwrap_or_default())
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn require_p9fs() {
    require("python3");
    let output = run(Command::new("python3").args(["-c", "import p9fs"]), Duration::from_secs(60));
    assert!(
        output.status.success(),
        "the Python package p9fs is missing: run `bash scripts/setup.sh` (it pip-installs p9fs):\n{}",
        output.text()
    );
}

fn mkfs(directory: &Path) -> PathBuf {
    let image = directory.join("volume.img");
    let output = fsoc(&["mkfs", image.to_str().expect("utf-8 path"), "--size", "64M"]);
    assert!(output.status.success(), "mkfs:\n{}", output.text());
    image
}

/// Runs a Python script with `port` as its argument; it must print `ok` last.
fn python(directory: &Path, script: &str, port: u16) -> String {
    let path = directory.join("client.py");
    std::fs::write(&path, script).expect("script");
    let output = run(Command::new("python3").arg(&path).arg(port.to_string()), Duration::from_secs(120));
    assert!(output.status.success() && output.stdout.trim_end().ends_with("ok"), "python client:\n{}", output.text());
    output.stdout
}

/// p9fs through `fsoc serve`: open/write/read/ls/mkdir/rm/mv, files larger than one message,
/// and the two ways p9fs removes (Tunlinkat without an aname, Tremove with one). After
/// SIGTERM the server exits 0 and the image holds exactly what the client left, fsck-clean.
#[test]
fn p9fs_writes_reads_lists_moves_and_removes_through_fsoc_serve() {
    require_p9fs();
    let directory = tempfile::tempdir().expect("tempdir");
    let image = mkfs(directory.path());
    let serving = Serving::start(directory.path(), &image, &["--commit-interval", "1"]);
    let script = r#"
import errno, sys
import p9fs
port = int(sys.argv[1])
fs = p9fs.P9FileSystem(host='127.0.0.1', port=port, username='tester', version='9P2000.L')
big = bytes((i * 7) % 251 for i in range(300000))
with fs.open('hello.txt', 'wb') as f:
    f.write(b'hello, 9p\n')
with fs.open('big.bin', 'wb') as f:
    f.write(big)
assert fs.cat_file('hello.txt') == b'hello, 9p\n'
assert fs.cat_file('big.bin') == big
assert fs.info('big.bin')['size'] == 300000 and fs.info('big.bin')['type'] == 'file'
fs.mkdir('docs/deep')
with fs.open('docs/deep/note', 'wb') as f:
    f.write(b'note')
assert sorted(fs.ls('', detail=False)) == ['big.bin', 'docs/', 'hello.txt'], fs.ls('', detail=False)
assert fs.ls('docs', detail=False) == ['docs/deep/']
assert fs.isdir('docs/deep') and fs.isfile('docs/deep/note') and not fs.exists('missing')
with fs.open('hello.txt', 'wb') as f:
    f.write(b'rewritten')
assert fs.cat_file('hello.txt') == b'rewritten'
fs.mv('big.bin', 'docs/moved.bin')
assert fs.cat_file('docs/moved.bin') == big and not fs.exists('big.bin')
fs.rm('hello.txt')
assert not fs.exists('hello.txt')
# Without an aname p9fs removes a directory with Tunlinkat(flags 0), which is unlink(2) on a
# directory: EISDIR, as on Linux. With an aname it uses Tremove, which removes it.
try:
    fs.rm('docs/deep', recursive=True)
    raise SystemExit('unlinkat without AT_REMOVEDIR removed a directory')
except Exception as error:
    assert error.args[0] == errno.EISDIR, repr(error)
remover = p9fs.P9FileSystem(host='127.0.0.1', port=port, username='tester', version='9P2000.L', aname='/')
remover.rm('docs/deep', recursive=True)
assert remover.ls('docs', detail=False) == ['docs/moved.bin'], remover.ls('docs', detail=False)
with fs.open('kept', 'wb') as f:
    f.write(b'kept across the restart')
print('ok')
"#;
    python(directory.path(), script, serving.port);
    let (status, log) = serving.stop();
    assert!(status.success(), "fsoc serve after SIGTERM: {status}\n{log}");
    assert!(log.contains("committed and closed"), "{log}");
    let listing = fsoc(&["ls", "-r", &format!("{}:/", image.display())]);
    assert!(listing.status.success(), "ls:\n{}", listing.text());
    let mut names: Vec<&str> = listing.stdout.lines().collect();
    names.sort();
    assert_eq!(names, ["/docs/", "/docs/moved.bin", "/kept"], "{}", listing.text());
    let kept = fsoc(&["cat", &format!("{}:/kept", image.display())]);
    assert_eq!(kept.stdout, "kept across the restart", "{}", kept.text());
    let fsck = fsoc(&["fsck", image.to_str().expect("utf-8 path")]);
    assert!(fsck.status.success() && fsck.stdout.contains("clean"), "fsck:\n{}", fsck.text());
}

/// TCP beyond loopback needs --secret-file; with one, only a client giving the secret (as
/// aname or uname) attaches, and repeated failures close the connection.
#[test]
fn a_secret_is_required_off_loopback_and_enforced_at_attach() {
    require_p9fs();
    let directory = tempfile::tempdir().expect("tempdir");
    let image = mkfs(directory.path());
    let refused = fsoc(&["serve", image.to_str().expect("utf-8 path"), "--listen", "tcp:0.0.0.0:0"]);
    assert_eq!(refused.status.code(), Some(2), "{}", refused.text());
    assert!(refused.stderr.contains("--secret-file"), "{}", refused.text());
    let secret_file = directory.path().join("secret");
    std::fs::write(&secret_file, "correct-horse-battery-staple\n").expect("secret");
    let short = directory.path().join("short");
    std::fs::write(&short, "tiny").expect("secret");
    let too_short = fsoc(&[
        "serve",
        image.to_str().expect("utf-8 path"),
        "--listen",
        "tcp:0.0.0.0:0",
        "--secret-file",
        short.to_str().expect("utf-8"),
    ]);
    assert!(too_short.stderr.contains("16 to 255"), "{}", too_short.text());
    let serving = Serving::start(directory.path(), &image, &["--secret-file", secret_file.to_str().expect("utf-8")]);
    let script = r#"
import errno, sys
import p9fs
port = int(sys.argv[1])
for credentials in [dict(username='tester'), dict(username='tester', aname='wrong-secret-wrong-secret')]:
    try:
        p9fs.P9FileSystem(host='127.0.0.1', port=port, version='9P2000.L', **credentials)
        raise SystemExit('attached without the secret')
    except Exception as error:
        assert error.args[0] == errno.EACCES, repr(error)
by_aname = p9fs.P9FileSystem(host='127.0.0.1', port=port, username='tester', version='9P2000.L', aname='correct-horse-battery-staple')
by_aname.mkdir('made')
by_uname = p9fs.P9FileSystem(host='127.0.0.1', port=port, username='correct-horse-battery-staple', version='9P2000.L')
assert by_uname.ls('', detail=False) == ['made/']
print('ok')
"#;
    python(directory.path(), script, serving.port);
    let (status, log) = serving.stop();
    assert!(status.success(), "{status}\n{log}");
}

/// `fsoc serve --raw`: the host runs fsoc itself over the image's raw pages (seed 000's
/// conventional device), through `fsoc_serve::RemoteFlash`. What it writes is in the image
/// after SIGTERM, readable by the tools and fsck-clean; the server reports its wire totals.
#[test]
fn raw_mode_exports_pages_to_a_host_that_runs_the_file_system() {
    use fsoc_core::{FileSystem, FsConfig, OpenFlags};
    let directory = tempfile::tempdir().expect("tempdir");
    let image = mkfs(directory.path());
    let serving = Serving::start(directory.path(), &image, &["--raw"]);
    let address = fsoc_serve::ListenAddress::parse(&format!("tcp:127.0.0.1:{}", serving.port)).expect("address");
    let flash = fsoc_serve::RemoteFlash::connect(&address, None).expect("connect to the raw device");
    let mut fs = FileSystem::mount(flash, FsConfig::default()).expect("the host mounts the remote pages");
    let flags = OpenFlags { read: true, write: true, create: true, ..OpenFlags::default() };
    let fd = fs.open(b"/from-the-host", flags, 0o644).expect("open");
    fs.pwrite(fd, 0, b"written by a host running fsoc over raw pages").expect("pwrite");
    fs.fsync_fd(fd).expect("fsync");
    fs.close(fd).expect("close");
    drop(fs.unmount().expect("unmount: a clean commit over the wire"));
    let (status, log) = serving.stop();
    assert!(status.success(), "fsoc serve --raw after SIGTERM: {status}\n{log}");
    assert!(log.contains("bytes on the wire"), "{log}");
    let cat = fsoc(&["cat", &format!("{}:/from-the-host", image.display())]);
    assert_eq!(cat.stdout, "written by a host running fsoc over raw pages", "{}", cat.text());
    let fsck = fsoc(&["fsck", image.to_str().expect("utf-8 path")]);
    assert!(fsck.status.success() && fsck.stdout.contains("clean"), "fsck:\n{}", fsck.text());
}

/// An array of chip files served (file system and raw): SIGTERM stops the server cleanly, the
/// volume committed and closed. The chip workers start when the volume opens; they must not
/// take the signal (they once did, and the process died without its clean stop).
#[test]
fn an_array_server_stops_cleanly_on_sigterm() {
    let directory = tempfile::tempdir().expect("tempdir");
    let base = directory.path().join("array");
    let output = fsoc(&["array", "mkfs", base.to_str().expect("utf-8"), "--chips", "3", "--blocks", "32"]);
    assert!(output.status.success(), "{}", output.text());
    for extra in [&[][..], &["--raw"][..]] {
        for round in 0..3 {
            let serving = Serving::start(directory.path(), &base, extra);
            let (status, log) = serving.stop();
            assert!(
                status.success(),
                "fsoc serve {extra:?} of an array, round {round}, after SIGTERM: {status}\n{log}"
            );
        }
    }
    let fsck = fsoc(&["fsck", base.to_str().expect("utf-8")]);
    assert!(fsck.status.success() && fsck.stdout.contains("clean"), "{}", fsck.text());
}
