//! The mount against ext4 (a loop device), differentially: the same script runs with Python's
//! os calls and ioctls on both, and each step's outcome (ok, a value, or the errno name) must
//! be the same. Inode flags (issue 18 point 3: what chattr and lsattr do) and device nodes,
//! FIFOs and sockets (issue 11 point 1). The label goes through FS_IOC_SETFSLABEL/GETFSLABEL
//! on the mount and `fsoc label` on the image.
//!
//! One known difference is left out of the script: an explicit `utime` on an append-only
//! file is EPERM on ext4 and allowed on fsoc's mount, whose kernel write-back cache sends the
//! times it keeps in the same form (docs/MOUNT.md).

mod support;

use std::fs;
use std::path::Path;
use std::process::Command;

use support::{fsoc, require, run, run_ok, Volume, PROGRAM_TIMEOUT};

/// What every script starts with: `step` runs one action in the directory under test and
/// prints `name: ok` (with the action's value, if any) or `name: ERRNO`.
const PRELUDE: &str = r#"
import errno, fcntl, os, socket, stat, struct
def step(name, action):
    try:
        result = action()
        print(f"{name}: ok" + ("" if result is None else f" {result}"))
    except OSError as error:
        print(f"{name}: {errno.errorcode[error.errno]}")
"#;

/// Inode flags: set by ioctl as chattr does, then every operation ext4 refuses or allows.
const SCRIPT: &str = r#"
FLAGS = {"i": 0x10, "a": 0x20, "A": 0x80, "d": 0x40, "S": 0x08}
def flags(path):
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        value = struct.unpack("i", fcntl.ioctl(fd, 0x80086601, b"\0" * 4))[0]
    finally:
        os.close(fd)
    return "".join(letter for letter, bit in FLAGS.items() if value & bit) or "-"
def chattr(change, path):
    # What chattr does: read the flags, change the named ones, write them back (the errno
    # is the kernel's, not a guess from chattr's message).
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        value = struct.unpack("i", fcntl.ioctl(fd, 0x80086601, b"\0" * 4))[0]
        bits = sum(FLAGS[letter] for letter in change[1:])
        value = {"+": value | bits, "-": value & ~bits, "=": (value & ~0xF8) | bits}[change[0]]
        fcntl.ioctl(fd, 0x40086602, struct.pack("i", value))
    finally:
        os.close(fd)
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
step("append 3 MiB", lambda: write_at("f", None, b"z" * (3 << 20), os.O_WRONLY | os.O_APPEND))
step("size", lambda: size("f"))
step("contents", lambda: open("f", "rb").read()[-(3 << 20) - 4:] == b"tail" + b"z" * (3 << 20))
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
step("chattr +i f again", lambda: chattr("+i", "f"))
step("chattr +d on immutable f", lambda: chattr("+d", "f"))
step("chattr -i f", lambda: chattr("-i", "f"))
step("chattr =  f", lambda: chattr("=", "f"))
step("flags f", lambda: flags("f"))
"#;

/// Device nodes, FIFOs and sockets: made, stat'ed, listed, renamed, linked, removed.
const SPECIAL_SCRIPT: &str = r#"
def describe(path):
    st = os.lstat(path)
    return f"{stat.filemode(st.st_mode)} {os.major(st.st_rdev)},{os.minor(st.st_rdev)} {st.st_size} {st.st_nlink}"
def bind(path):
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(path)
step("mknod char", lambda: os.mknod("null", 0o666 | stat.S_IFCHR, os.makedev(1, 3)))
step("mknod block", lambda: os.mknod("disk", 0o600 | stat.S_IFBLK, os.makedev(259, 70000)))
step("mkfifo", lambda: os.mkfifo("fifo", 0o640))
step("socket", lambda: bind("sock"))
step("mknod exists", lambda: os.mkfifo("fifo", 0o640))
for name in ["null", "disk", "fifo", "sock"]:
    step(f"stat {name}", lambda: describe(name))
step("listing", lambda: sorted((entry.name, entry.is_file(), entry.is_dir()) for entry in os.scandir(".")))
step("write the device", lambda: open("null", "wb").write(b"gone"))
step("read the device", lambda: len(open("null", "rb").read()))
step("fifo through", lambda: (os.close(os.open("fifo", os.O_RDONLY | os.O_NONBLOCK)),)[0])
step("rename", lambda: os.rename("fifo", "fifo2"))
step("link", lambda: os.link("null", "null2"))
step("stat link", lambda: describe("null2"))
step("chmod", lambda: os.chmod("disk", 0o640))
step("stat chmod", lambda: describe("disk"))
step("unlink", lambda: os.unlink("null"))
step("unlink", lambda: os.unlink("null2"))
step("rmdir a node", lambda: os.rmdir("disk"))
step("final listing", lambda: sorted(os.listdir(".")))
"#;

/// A file system under test: where the script runs.
fn run_script(directory: &Path) -> String {
    run_python(directory, SCRIPT)
}

/// Runs `script` after `PRELUDE` in `directory`.
fn run_python(directory: &Path, script: &str) -> String {
    run_ok(Command::new("python3").arg("-c").arg(format!("{PRELUDE}{script}")).current_dir(directory)).stdout
}

/// Each line of `found` equals ext4's.
fn assert_same_as_ext4(expected: &str, found: &str) {
    for (line, (want, got)) in expected.lines().zip(found.lines()).enumerate() {
        assert_eq!(got, want, "step {line} differs from ext4\next4:\n{expected}\nfsoc:\n{found}");
    }
    assert_eq!(expected.lines().count(), found.lines().count(), "ext4:\n{expected}\nfsoc:\n{found}");
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
    assert_same_as_ext4(&expected, &found);
    assert!(expected.contains("unlink: EPERM"), "the script checks refusals: {expected}");
    println!("{found}");
    volume.fsck();
}

#[test]
fn device_nodes_fifos_and_sockets_behave_as_on_ext4() {
    let ext4 = Ext4::new();
    let ext4_directory = ext4.mount_point.join("specials");
    fs::create_dir(&ext4_directory).expect("directory");
    let expected = run_python(&ext4_directory, SPECIAL_SCRIPT);
    drop(ext4);
    let volume = Volume::new("64M");
    let mounted = volume.mount();
    fs::create_dir(mounted.path("specials")).expect("directory");
    let found = run_python(&mounted.path("specials"), SPECIAL_SCRIPT);
    // The image tools see them too: ls -l as ls shows them, get -r makes them again.
    mounted.unmount();
    assert_same_as_ext4(&expected, &found);
    assert!(found.contains("stat chmod: ok brw-r----- 259,70000 0 1"), "{found}");
    let listing = fsoc(&["ls", "-l", &format!("{}:/specials", volume.image_arg())]);
    assert!(listing.status.success(), "{}", listing.text());
    assert!(
        listing.stdout.lines().any(|line| line.starts_with("brw-r-----") && line.contains("259, 70000")),
        "{}",
        listing.stdout
    );
    assert!(
        listing.stdout.lines().any(|line| line.starts_with("prw-r-----") && line.ends_with("fifo2")),
        "{}",
        listing.stdout
    );
    assert!(
        listing.stdout.lines().any(|line| line.starts_with("srwx") && line.ends_with("sock")),
        "{}",
        listing.stdout
    );
    let destination = volume.directory.path().join("out");
    fs::create_dir(&destination).expect("destination");
    let output =
        fsoc(&["get", "-r", &format!("{}:/specials", volume.image_arg()), destination.to_str().expect("utf-8")]);
    assert!(output.status.success(), "{}", output.text());
    let extracted = run_python(&destination.join("specials"), "import os, stat\nfor name in sorted(os.listdir('.')):\n    st = os.lstat(name)\n    print(name, stat.filemode(st.st_mode), os.major(st.st_rdev), os.minor(st.st_rdev))\n");
    assert_eq!(extracted, "disk brw-r----- 259 70000\nfifo2 prw-r----- 0 0\nsock srwxr-xr-x 0 0\n", "get -r");
    // And put -r stores them from a staging tree (what an image builder does).
    let output = fsoc(&[
        "put",
        "-r",
        destination.join("specials").to_str().expect("utf-8"),
        &format!("{}:/staged", volume.image_arg()),
    ]);
    assert!(output.status.success(), "{}", output.text());
    let staged = fsoc(&["ls", "-l", &format!("{}:/staged", volume.image_arg())]);
    let kinds: Vec<char> = staged.stdout.lines().filter_map(|line| line.chars().next()).collect();
    assert_eq!(kinds, ['b', 'p', 's'], "{}", staged.stdout);
    assert!(staged.stdout.contains("259, 70000"), "{}", staged.stdout);
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
fd = os.open(".", os.O_RDONLY)
print(fcntl.ioctl(fd, 0x81009431, b"\0" * 256).rstrip(b"\0").decode())
fcntl.ioctl(fd, 0x41009432, b"flash-b".ljust(256, b"\0"))
print(fcntl.ioctl(fd, 0x81009431, b"\0" * 256).rstrip(b"\0").decode())
"#;
    assert_eq!(run_python(mounted.root(), script), "flash-a\nflash-b\n");
    mounted.unmount();
    let output = fsoc(&["label", volume.image_arg()]);
    assert_eq!(output.stdout, "flash-b\n", "{}", output.text());
    let output = fsoc(&["label", volume.image_arg(), &"x".repeat(256)]);
    assert_eq!(output.status.code(), Some(2), "a label of 256 bytes: {}", output.text());
    volume.fsck();
}
