//! Inode flags and the volume label through the mount (issue 18 point 3), differentially: the
//! same script runs with `chattr` and Python's os calls on ext4 (a loop device) and on `fsoc
//! mount`, and each step's outcome (ok or the errno name) must be the same on both. The label
//! goes through FS_IOC_SETFSLABEL/GETFSLABEL on the mount and `fsoc label` on the image.
//!
//! One known difference is left out of the script: an explicit `utime` on an append-only
//! file is EPERM on ext4 and allowed on fsoc's mount, whose kernel write-back cache sends the
//! times it keeps in the same form (docs/MOUNT.md).

mod support;

use std::fs;
use std::path::Path;
use std::process::Command;

use support::{fsoc, require, run, run_ok, Volume, PROGRAM_TIMEOUT};

/// Python, run in the directory under test: each step prints `name: ok` or `name: ERRNO`.
const SCRIPT: &str = r#"
import errno, fcntl, os, struct, subprocess
FLAGS = {"i": 0x10, "a": 0x20, "A": 0x80, "d": 0x40, "S": 0x08}
def step(name, action):
    try:
        result = action()
        print(f"{name}: ok" + ("" if result is None else f" {result}"))
    except OSError as error:
        print(f"{name}: {errno.errorcode[error.errno]}")
def flags(path):
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        value = struct.unpack("i", fcntl.ioctl(fd, 0x80086601, b"\0" * 4))[0]
    finally:
        os.close(fd)
    return "".join(letter for letter, bit in FLAGS.items() if value & bit) or "-"
def chattr(change, path):
    done = subprocess.run(["chattr", change, path], capture_output=True)
    if done.returncode != 0:
        raise OSError(errno.EPERM, done.stderr.decode())
def write_at(path, offset, data, flags):
    fd = os.open(path, flags)
    try:
        os.pwrite(fd, data, offset) if offset is not None else os.write(fd, data)
    finally:
        os.close(fd)
def size(path):
    return os.stat(path).st_size
with open("f", "wb") as out:
    out.write(b"x" * 5000)
os.mkdir("d")
open("d/inner", "w").close()
open("other", "w").close()

step("chattr +i f", lambda: chattr("+i", "f"))
step("flags f", lambda: flags("f"))
step("open for writing", lambda: write_at("f", 0, b"y", os.O_WRONLY))
step("open for appending", lambda: write_at("f", None, b"y", os.O_WRONLY | os.O_APPEND))
step("truncate", lambda: os.truncate("f", 10))
step("chmod", lambda: os.chmod("f", 0o600))
step("chown", lambda: os.chown("f", 1, 1))
step("utime", lambda: os.utime("f", (1, 2)))
step("utime now", lambda: os.utime("f"))
step("unlink", lambda: os.unlink("f"))
step("rename", lambda: os.rename("f", "g"))
step("rename over", lambda: os.rename("other", "f"))
step("link", lambda: os.link("f", "h"))
step("read", lambda: len(open("f", "rb").read()))
step("chattr -i f", lambda: chattr("-i", "f"))
step("write after -i", lambda: write_at("f", 0, b"y", os.O_WRONLY))

step("chattr +a f", lambda: chattr("+a", "f"))
step("flags f", lambda: flags("f"))
step("open for writing", lambda: write_at("f", 0, b"y", os.O_WRONLY))
step("open with O_TRUNC", lambda: os.close(os.open("f", os.O_WRONLY | os.O_APPEND | os.O_TRUNC)))
step("append", lambda: write_at("f", None, b"tail", os.O_WRONLY | os.O_APPEND))
step("size", lambda: size("f"))
step("truncate", lambda: os.truncate("f", 10))
step("chmod", lambda: os.chmod("f", 0o600))
step("chown", lambda: os.chown("f", 1, 1))
step("utime now", lambda: os.utime("f"))
step("unlink", lambda: os.unlink("f"))
step("rename", lambda: os.rename("f", "g"))
step("link", lambda: os.link("f", "h"))
step("chattr -a f", lambda: chattr("-a", "f"))

step("chattr +i d", lambda: chattr("+i", "d"))
step("create in d", lambda: open("d/new", "w").close())
step("mkdir in d", lambda: os.mkdir("d/sub"))
step("unlink in d", lambda: os.unlink("d/inner"))
step("rename into d", lambda: os.rename("other", "d/other"))
step("write d/inner", lambda: write_at("d/inner", 0, b"z", os.O_WRONLY))
step("chattr -i d", lambda: chattr("-i", "d"))
step("chattr +a d", lambda: chattr("+a", "d"))
step("create in d", lambda: open("d/new", "w").close())
step("unlink in d", lambda: os.unlink("d/new"))
step("rename out of d", lambda: os.rename("d/inner", "inner"))
step("chattr -a d", lambda: chattr("-a", "d"))

step("chattr +AdS f", lambda: chattr("+AdS", "f"))
step("flags f", lambda: flags("f"))
step("chattr =  f", lambda: chattr("=", "f"))
step("flags f", lambda: flags("f"))
"#;

/// A file system under test: where the script runs.
fn run_script(directory: &Path) -> String {
    run_ok(Command::new("python3").arg("-c").arg(SCRIPT).current_dir(directory)).stdout
}

/// An ext4 volume on a loop device in a temporary directory, unmounted when dropped.
struct Ext4 {
    _directory: tempfile::TempDir,
    mount_point: std::path::PathBuf,
}

impl Ext4 {
    fn new() -> Ext4 {
        for program in ["mkfs.ext4", "mount", "umount", "chattr", "python3"] {
            require(program);
        }
        let directory = tempfile::tempdir().expect("tempdir");
        let image = directory.path().join("ext4.img");
        fs::File::create(&image).expect("image").set_len(32 << 20).expect("size");
        run_ok(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&image));
        let mount_point = directory.path().join("mnt");
        fs::create_dir(&mount_point).expect("mount point");
        run_ok(Command::new("mount").args(["-o", "loop"]).arg(&image).arg(&mount_point));
        Ext4 { _directory: directory, mount_point }
    }
}

impl Drop for Ext4 {
    fn drop(&mut self) {
        let _ = run(Command::new("umount").arg(&self.mount_point), PROGRAM_TIMEOUT);
    }
}

#[test]
fn chattr_behaves_as_on_ext4() {
    let ext4 = Ext4::new();
    let expected = run_script(&ext4.mount_point);
    drop(ext4);
    let volume = Volume::new("64M");
    let mounted = volume.mount();
    let found = run_script(mounted.root());
    mounted.unmount();
    for (line, (want, got)) in expected.lines().zip(found.lines()).enumerate() {
        assert_eq!(got, want, "step {line} differs from ext4\next4:\n{expected}\nfsoc:\n{found}");
    }
    assert_eq!(expected.lines().count(), found.lines().count(), "ext4:\n{expected}\nfsoc:\n{found}");
    assert!(expected.contains("unlink: EPERM"), "the script checks refusals: {expected}");
    println!("{found}");
    volume.fsck();
}

#[test]
fn the_label_through_the_mount_and_the_image_tools() {
    let volume = Volume::new("64M");
    let output = fsoc(&["label", volume.image_arg(), "flash-a"]);
    assert!(output.status.success(), "{}", output.text());
    let output = fsoc(&["info", volume.image_arg()]);
    assert!(
        output.stdout.lines().any(|line| line.starts_with("label ") && line.ends_with(" flash-a")),
        "{}",
        output.text()
    );
    let mounted = volume.mount();
    let script = r#"
import fcntl, os
fd = os.open(".", os.O_RDONLY)
print(fcntl.ioctl(fd, 0x81009431, b"\0" * 256).rstrip(b"\0").decode())
fcntl.ioctl(fd, 0x41009432, b"flash-b".ljust(256, b"\0"))
print(fcntl.ioctl(fd, 0x81009431, b"\0" * 256).rstrip(b"\0").decode())
"#;
    let output = run_ok(Command::new("python3").arg("-c").arg(script).current_dir(mounted.root()));
    assert_eq!(output.stdout, "flash-a\nflash-b\n");
    mounted.unmount();
    let output = fsoc(&["label", volume.image_arg()]);
    assert_eq!(output.stdout, "flash-b\n", "{}", output.text());
    let output = fsoc(&["label", volume.image_arg(), &"x".repeat(256)]);
    assert_eq!(output.status.code(), Some(2), "a label of 256 bytes: {}", output.text());
    volume.fsck();
}
