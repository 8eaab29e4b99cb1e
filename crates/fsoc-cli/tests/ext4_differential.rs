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

/// Extended attributes, POSIX ACLs and file capabilities (issue 11 point 2): every namespace,
/// Linux's errnos, ACLs enforced for other users and inherited from default lists, and the
/// set-id bits and capabilities a write, truncate or chown takes away.
const XATTR_SCRIPT: &str = r#"
import subprocess
os.umask(0o022)
def as_user(uid, action):
    # The action in a child that has become `uid` (no supplementary groups).
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            result = action()
            message = "ok" + ("" if result is None else f" {result}")
        except OSError as error:
            message = errno.errorcode[error.errno]
        os.write(write_end, message.encode())
        os._exit(0)
    os.close(write_end)
    message = os.read(read_end, 65536).decode()
    os.close(read_end)
    os.waitpid(pid, 0)
    return message
def ustep(name, uid, action):
    print(f"{name}: {as_user(uid, action)}")
def attrs(path):
    names = sorted(os.listxattr(path, follow_symlinks=False))
    return [(name, os.getxattr(path, name, follow_symlinks=False)[:16].hex()) for name in names]
def tool(*command):
    done = subprocess.run(command, capture_output=True, text=True)
    return f"{done.returncode} {done.stdout.strip()}"
def write(path, data=b"w", flags=os.O_WRONLY):
    fd = os.open(path, flags)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
def mode(path):
    return oct(os.stat(path).st_mode & 0o7777)
def acl(*entries):
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", tag, perm, uid) for tag, perm, uid in entries)
U = 0xFFFFFFFF

open("f", "w").close()
os.chmod("f", 0o666)
os.chmod(".", 0o777)
step("set user", lambda: os.setxattr("f", "user.colour", b"blue"))
step("set trusted", lambda: os.setxattr("f", "trusted.t", b"\0\1\2"))
step("set security", lambda: os.setxattr("f", "security.s", b"s" * 300))
step("set empty value", lambda: os.setxattr("f", "user.empty", b""))
step("set 255-byte name", lambda: os.setxattr("f", "user." + "n" * 250, b"long name"))
step("set 256-byte name", lambda: os.setxattr("f", "user." + "n" * 251, b"x"))
step("set 64 KiB", lambda: os.setxattr("f", "user.big", bytes(range(256)) * 256))
step("get 64 KiB", lambda: len(os.getxattr("f", "user.big")))
step("set 64 KiB + 1", lambda: os.setxattr("f", "user.huge", b"x" * 65537))
step("list", lambda: sorted(os.listxattr("f")))
step("get", lambda: os.getxattr("f", "user.colour"))
step("get missing", lambda: os.getxattr("f", "user.none"))
step("create existing", lambda: os.setxattr("f", "user.colour", b"red", os.XATTR_CREATE))
step("replace missing", lambda: os.setxattr("f", "user.none", b"red", os.XATTR_REPLACE))
step("replace", lambda: os.setxattr("f", "user.colour", b"red", os.XATTR_REPLACE))
step("get replaced", lambda: os.getxattr("f", "user.colour"))
step("remove", lambda: os.removexattr("f", "user.colour"))
step("remove again", lambda: os.removexattr("f", "user.colour"))
step("unknown namespace", lambda: os.setxattr("f", "other.x", b"x"))
step("attrs", lambda: attrs("f"))
os.symlink("f", "link")
os.mkfifo("fifo")
os.mkdir("d")
step("user. on a symlink", lambda: os.setxattr("link", "user.x", b"x", follow_symlinks=False))
step("trusted. on a symlink", lambda: os.setxattr("link", "trusted.x", b"x", follow_symlinks=False))
step("user. on a fifo", lambda: os.setxattr("fifo", "user.x", b"x"))
step("user. on a directory", lambda: os.setxattr("d", "user.x", b"dir"))
step("attrs of the symlink", lambda: attrs("link"))
ustep("user sets user. on a file of root's mode 666", 1000, lambda: os.setxattr("f", "user.by1000", b"u"))
ustep("user sets trusted.", 1000, lambda: os.setxattr("f", "trusted.by1000", b"u"))
ustep("user lists", 1000, lambda: sorted(os.listxattr("f")))
step("chattr +i", lambda: subprocess.run(["chattr", "+i", "f"], check=True) and None)
step("set on immutable", lambda: os.setxattr("f", "user.x", b"x"))
step("remove on immutable", lambda: os.removexattr("f", "user.empty"))
step("chattr -i", lambda: subprocess.run(["chattr", "-i", "f"], check=True) and None)

open("g", "w").close()
os.chmod("g", 0o640)
step("setfacl u:1000:rw", lambda: tool("setfacl", "-m", "u:1000:rw", "g"))
step("getfacl", lambda: tool("getfacl", "-c", "g"))
step("mode after setfacl", lambda: mode("g"))
ustep("1000 writes g", 1000, lambda: write("g"))
ustep("1001 writes g", 1001, lambda: write("g"))
ustep("1001 reads g", 1001, lambda: len(open("g").read()))
step("chmod 600 g", lambda: os.chmod("g", 0o600))
step("getfacl after chmod", lambda: tool("getfacl", "-c", "g"))
ustep("1000 writes g after chmod", 1000, lambda: write("g"))
step("setfacl g:1002:r", lambda: tool("setfacl", "-m", "g:1002:r,m::r", "g"))
ustep("1002 reads g", 1002, lambda: len(open("g").read()))
step("setfacl -b", lambda: tool("setfacl", "-b", "g"))
step("attrs after -b", lambda: attrs("g"))
step("equivalent list", lambda: os.setxattr("g", "system.posix_acl_access", acl((1, 7, U), (4, 5, U), (0x20, 1, U))))
step("mode from equivalent list", lambda: mode("g"))
step("attrs after equivalent", lambda: attrs("g"))
step("list without mask", lambda: os.setxattr("g", "system.posix_acl_access", acl((1, 7, U), (2, 7, 5), (4, 5, U), (0x20, 1, U))))
step("list out of order", lambda: os.setxattr("g", "system.posix_acl_access", acl((4, 5, U), (1, 7, U), (0x20, 1, U))))
step("default list on a file", lambda: os.setxattr("g", "system.posix_acl_default", acl((1, 7, U), (4, 5, U), (0x20, 1, U))))

os.mkdir("shared")
step("setfacl -d", lambda: tool("setfacl", "-d", "-m", "u:1000:rwx,g::rx,o::-", "shared"))
step("getfacl shared", lambda: tool("getfacl", "-c", "shared"))
open("shared/file", "w").close()
os.mkdir("shared/sub", 0o777)
os.mknod("shared/pipe", 0o666 | stat.S_IFIFO)
os.symlink("file", "shared/link")
for name in ["file", "sub", "pipe"]:
    step(f"inherited {name}", lambda: (mode(f"shared/{name}"), tool("getfacl", "-c", f"shared/{name}")))
step("symlink takes none", lambda: attrs("shared/link"))
ustep("1000 writes the inherited file", 1000, lambda: write("shared/file"))
ustep("1001 writes the inherited file", 1001, lambda: write("shared/file"))
ustep("1000 creates in sub", 1000, lambda: open("shared/sub/mine", "w").close())

open("cap", "w").close()
step("setcap", lambda: tool("setcap", "cap_net_raw+ep", "cap"))
step("getcap", lambda: tool("getcap", "cap"))
step("write as root drops it", lambda: write("cap"))
step("getcap after write", lambda: tool("getcap", "cap"))
step("setcap again", lambda: tool("setcap", "cap_net_raw+ep", "cap"))
step("truncate drops it", lambda: os.truncate("cap", 0))
step("getcap after truncate", lambda: tool("getcap", "cap"))
step("setcap once more", lambda: tool("setcap", "cap_net_raw+ep", "cap"))
step("chown drops it", lambda: os.chown("cap", 0, 0))
step("getcap after chown", lambda: tool("getcap", "cap"))

open("suid", "w").close()
os.chmod("suid", 0o6777)
ustep("1000 writes a set-id file", 1000, lambda: write("suid"))
step("mode after the write", lambda: mode("suid"))
os.chmod("suid", 0o6777)
step("root writes a set-id file", lambda: write("suid"))
step("mode after root's write", lambda: mode("suid"))
ustep("1000 truncates a set-id file", 1000, lambda: os.truncate("suid", 0))
step("mode after the truncate", lambda: mode("suid"))
os.chmod("suid", 0o6755)
step("chown", lambda: os.chown("suid", 1000, 1000))
step("mode after chown", lambda: mode("suid"))
os.chmod("suid", 0o2745)
step("chown of sgid without group x", lambda: os.chown("suid", 0, 0))
step("mode after that chown", lambda: mode("suid"))
"#;

/// The rest of the file API (issue 11 point 3): renameat2's EXCHANGE, NOREPLACE and
/// WHITEOUT, fallocate's modes, SEEK_DATA/SEEK_HOLE, copy_file_range and relatime access
/// times. Offsets are multiples of 4 KiB, so ext4's blocks and fsoc's 2 KiB pages report the
/// same holes. fallocate's COLLAPSE_RANGE and INSERT_RANGE are left out: ext4 shifts extents,
/// fsoc answers EOPNOTSUPP (docs/MOUNT.md).
const FILE_API_SCRIPT: &str = r#"
import ctypes, time
libc = ctypes.CDLL(None, use_errno=True)
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
libc.renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
AT_FDCWD = -100
NOREPLACE, EXCHANGE, WHITEOUT = 1, 2, 4
KEEP, PUNCH, ZERO = 0x01, 0x02, 0x10
def checked(result):
    if result == -1:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
def renameat2(a, b, flags):
    checked(libc.renameat2(AT_FDCWD, a.encode(), AT_FDCWD, b.encode(), flags))
def fallocate(path, mode, offset, length):
    fd = os.open(path, os.O_RDWR)
    try:
        checked(libc.fallocate(fd, mode, offset, length))
    finally:
        os.close(fd)
def put(path, data, offset=0):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, data, offset)
    finally:
        os.close(fd)
def read(path):
    with open(path, "rb") as source:
        return source.read()
def shape(data):
    # Runs of equal bytes: (byte, count), so a megabyte prints as one line.
    runs = []
    for byte in data:
        if runs and runs[-1][0] == byte:
            runs[-1][1] += 1
        else:
            runs.append([byte, 1])
    return [tuple(run) for run in runs]
def describe(path):
    st = os.lstat(path)
    # A directory's size is the file system's own (ext4: its blocks).
    size = "-" if stat.S_ISDIR(st.st_mode) else st.st_size
    return f"{stat.filemode(st.st_mode)} {os.major(st.st_rdev)},{os.minor(st.st_rdev)} size={size} nlink={st.st_nlink} uid={st.st_uid}"
def seek(path, offset, whence):
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.lseek(fd, offset, whence)
    finally:
        os.close(fd)
def copy(source, destination, count, offset_in, offset_out):
    fd_in, fd_out = os.open(source, os.O_RDONLY), os.open(destination, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        return os.copy_file_range(fd_in, fd_out, count, offset_in, offset_out)
    finally:
        os.close(fd_in)
        os.close(fd_out)
def changed(path, action, field="st_ctime_ns"):
    before = getattr(os.stat(path), field)
    time.sleep(0.02)
    action()
    return getattr(os.stat(path), field) != before
def drop_cache(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)

put("a", b"A" * 100)
put("b", b"B" * 5000)
os.mkdir("d1")
put("d1/x", b"x")
os.mkdir("d2")
put("d2/y", b"y")
step("exchange files", lambda: renameat2("a", "b", EXCHANGE))
step("a after", lambda: (read("a")[:1], len(read("a"))))
step("b after", lambda: (read("b")[:1], len(read("b"))))
step("exchange changes ctime", lambda: changed("a", lambda: renameat2("a", "b", EXCHANGE)))
step("exchange with a missing name", lambda: renameat2("a", "missing", EXCHANGE))
step("exchange a missing name", lambda: renameat2("missing", "a", EXCHANGE))
step("exchange with itself", lambda: renameat2("a", "a", EXCHANGE))
step("exchange | noreplace", lambda: renameat2("a", "b", EXCHANGE | NOREPLACE))
step("exchange | whiteout", lambda: renameat2("a", "b", EXCHANGE | WHITEOUT))
step("exchange file and directory", lambda: renameat2("a", "d1", EXCHANGE))
step("a is", lambda: describe("a"))
step("d1 is", lambda: describe("d1"))
step("a/x", lambda: read("a/x"))
step("root links", lambda: os.stat(".").st_nlink)
step("exchange across directories", lambda: renameat2("a", "d2/y", EXCHANGE))
step("root links after", lambda: os.stat(".").st_nlink)
step("d2 links after", lambda: os.stat("d2").st_nlink)
step("y is a directory", lambda: sorted(os.listdir("d2/y")))
step("a is the file", lambda: read("a"))
step("exchange a directory into itself", lambda: renameat2("d2", "d2/y/x", EXCHANGE))
step("exchange into a subdirectory of itself", lambda: renameat2("d2/y", "d2/y/x", EXCHANGE))
step("exchange two directories", lambda: renameat2("d2", "d2/y", EXCHANGE))
step("exchange directories across parents", lambda: (os.mkdir("e1"), os.mkdir("e2"), os.mkdir("e2/inner"), renameat2("e1", "e2/inner", EXCHANGE))[3])
step("e2/inner is empty", lambda: os.listdir("e2/inner"))
step("e1 links", lambda: os.stat("e1").st_nlink)
step("noreplace onto a name", lambda: renameat2("a", "b", NOREPLACE))
step("noreplace onto a free name", lambda: renameat2("a", "c", NOREPLACE))
step("whiteout", lambda: renameat2("c", "w", WHITEOUT))
step("the whiteout", lambda: describe("c"))
step("the moved file", lambda: (describe("w"), read("w")))
step("whiteout onto a name", lambda: renameat2("w", "b", WHITEOUT))
step("whiteout over a whiteout", lambda: renameat2("c", "w", WHITEOUT))
step("listing", lambda: sorted(os.listdir(".")))
step("whiteout | noreplace onto a name", lambda: renameat2("b", "c", WHITEOUT | NOREPLACE))
step("unlink a whiteout", lambda: os.unlink("w"))
os.mkdir("sg")
os.chown("sg", 0, 1234)
os.chmod("sg", 0o2775)
put("sg/f", b"f")
step("whiteout in a set-group-id directory", lambda: renameat2("sg/f", "sg/g", WHITEOUT))
step("its group", lambda: os.lstat("sg/f").st_gid)

step("fallocate mode 0", lambda: fallocate("n", 0, 0, 65536) if put("n", b"") is None else None)
step("size", lambda: describe("n"))
step("reads zeros", lambda: shape(read("n")))
step("fallocate keep size past the end", lambda: fallocate("n", KEEP, 65536, 65536))
step("size unchanged", lambda: os.stat("n").st_size)
step("fallocate inside, size unchanged", lambda: (fallocate("n", 0, 4096, 4096), os.stat("n").st_size)[1])
step("fallocate of nothing", lambda: fallocate("n", 0, 0, 0))
# ext4 keeps what it allocated before running out (fsoc refuses before allocating): the
# file goes, so both continue with the same free space.
step("fallocate beyond the free space", lambda: fallocate("big", 0, 0, 1 << 30) if put("big", b"") is None else None)
os.unlink("big")
step("fallocate changes mtime", lambda: changed("n", lambda: fallocate("n", 0, 0, 131072), "st_mtime_ns"))
put("p", b"p" * 65536)
step("punch", lambda: fallocate("p", PUNCH | KEEP, 8192, 16384))
step("punched", lambda: shape(read("p")))
step("punch without keep size", lambda: fallocate("p", PUNCH, 0, 4096))
step("seek data", lambda: [seek("p", offset, os.SEEK_DATA) for offset in (0, 8192, 20000, 24576)])
step("seek hole", lambda: [seek("p", offset, os.SEEK_HOLE) for offset in (0, 8192, 24576, 65535)])
step("seek data at the end", lambda: seek("p", 65536, os.SEEK_DATA))
step("seek hole at the end", lambda: seek("p", 65536, os.SEEK_HOLE))
step("zero range", lambda: fallocate("p", ZERO, 2048, 2048))
step("zeroed", lambda: shape(read("p")))
step("zero range past the end", lambda: fallocate("p", ZERO, 65536, 8192))
step("size after zero range", lambda: os.stat("p").st_size)
step("zero range past the end, keep size", lambda: fallocate("p", ZERO | KEEP, 73728, 8192))
step("size after keep size", lambda: os.stat("p").st_size)
step("zeroed again", lambda: shape(read("p")))
put("ap", b"log")
step("chattr +a", lambda: __import__("subprocess").run(["chattr", "+a", "ap"], check=True) and None)
step("fallocate append-only", lambda: fallocate("ap", 0, 0, 8192))
step("fallocate append-only keep size", lambda: fallocate("ap", KEEP, 0, 16384))
step("punch append-only", lambda: fallocate("ap", PUNCH | KEEP, 0, 4096))
step("zero range append-only", lambda: fallocate("ap", ZERO, 0, 4096))
step("append-only size", lambda: os.stat("ap").st_size)
step("chattr -a", lambda: __import__("subprocess").run(["chattr", "-a", "ap"], check=True) and None)

put("src", bytes(range(256)) * 40)
put("sparse", b"s" * 4096, 1 << 20)
step("copy", lambda: copy("src", "dst", 5000, 100, 50))
step("copied", lambda: (len(read("dst")), read("dst")[:50] == b"\0" * 50, read("dst")[50:] == read("src")[100:5100]))
step("copy past the end", lambda: copy("src", "dst", 5000, 20000, 0))
step("copy to the end", lambda: copy("src", "dst", 100000, 8000, 6000))
step("dst size", lambda: os.stat("dst").st_size)
step("copy overlapping in one file", lambda: copy("src", "src", 1000, 0, 500))
step("copy within one file", lambda: copy("src", "src", 1000, 0, 8192))
step("src", lambda: read("src")[8192:9192] == read("src")[:1000])
step("copy a sparse file", lambda: copy("sparse", "sparse-copy", 2 << 20, 0, 0))
step("sparse copy", lambda: shape(read("sparse-copy")))
step("copy from a directory", lambda: copy("d2", "dst", 10, 0, 0))

put("t", b"t" * 10000)
time.sleep(0.02)
drop_cache("t")
step("read updates atime (relatime, atime before mtime)", lambda: changed("t", lambda: read("t"), "st_atime_ns"))
drop_cache("t")
step("read again leaves it (relatime)", lambda: changed("t", lambda: read("t"), "st_atime_ns"))
os.utime("t", (1, os.stat("t").st_mtime))
drop_cache("t")
step("read updates an old atime", lambda: changed("t", lambda: read("t"), "st_atime_ns"))
step("listing updates a directory's atime", lambda: changed("d2", lambda: os.listdir("d2"), "st_atime_ns") if os.utime("d2", (1, 1)) is None else None)
step("listing again leaves it", lambda: changed("d2", lambda: os.listdir("d2"), "st_atime_ns"))
step("noatime flag", lambda: __import__("subprocess").run(["chattr", "+A", "t"], check=True) and None)
os.utime("t", (1, os.stat("t").st_mtime))
drop_cache("t")
step("read of a noatime file leaves it", lambda: changed("t", lambda: read("t"), "st_atime_ns"))
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
        // ea_inode: attribute values up to 64 KiB, as fsoc keeps them (without it ext4 keeps
        // at most a block of them per inode).
        run_ok(Command::new("mkfs.ext4").args(["-q", "-F", "-O", "ea_inode"]).arg(&image));
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
fn extended_attributes_and_acls_behave_as_on_ext4() {
    for program in ["setfacl", "getfacl", "setcap", "getcap"] {
        require(program);
    }
    let ext4 = Ext4::new();
    let ext4_directory = ext4.mount_point.join("xattrs");
    fs::create_dir(&ext4_directory).expect("directory");
    let expected = run_python(&ext4_directory, XATTR_SCRIPT);
    drop(ext4);
    // With the write-back cache (the default) and without it: the kernel asks the server to
    // take set-id bits away in other requests then (a write's removal and chown(-1, -1) both
    // arrive as a SETATTR of nothing).
    let volume = Volume::new("64M");
    let mut found = String::new();
    for mount_arguments in [&[][..], &["--no-writeback-cache"][..]] {
        let mounted = volume.mount_with(mount_arguments);
        let directory = mounted.path("xattrs");
        if directory.exists() {
            run_ok(Command::new("rm").arg("-rf").arg(&directory));
        }
        fs::create_dir(&directory).expect("directory");
        found = run_python(&directory, XATTR_SCRIPT);
        mounted.unmount();
        assert_same_as_ext4(&expected, &found);
    }
    for refusal in [
        "get missing: ENODATA",
        "set 256-byte name: ERANGE",
        "1001 writes g: EACCES",
        "getcap: ok 0 cap cap_net_raw=ep",
    ] {
        assert!(expected.contains(refusal), "the script checks {refusal}: {expected}");
    }
    println!("{found}");
    volume.fsck();
}

#[test]
fn the_file_api_behaves_as_on_ext4() {
    let ext4 = Ext4::new();
    let ext4_directory = ext4.mount_point.join("api");
    fs::create_dir(&ext4_directory).expect("directory");
    let expected = run_python(&ext4_directory, FILE_API_SCRIPT);
    drop(ext4);
    let volume = Volume::new("64M");
    let mounted = volume.mount();
    fs::create_dir(mounted.path("api")).expect("directory");
    let found = run_python(&mounted.path("api"), FILE_API_SCRIPT);
    mounted.unmount();
    println!("{found}");
    assert_same_as_ext4(&expected, &found);
    for checked in [
        "exchange file and directory: ok",
        "the whiteout: ok c--------- 0,0",
        "fallocate beyond the free space: ENOSPC",
        "read again leaves it (relatime): ok False",
        "read updates an old atime: ok True",
    ] {
        assert!(expected.contains(checked), "the script checks {checked}: {expected}");
    }
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
