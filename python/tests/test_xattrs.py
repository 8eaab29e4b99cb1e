"""Extended attributes (format version 4): the Image calls and their errors, and trees in and
out with their attributes, POSIX ACLs and file capabilities, as `fsoc put -r`/`get -r` copy
them (both ways against the command). A volume older than format version 4 keeps none:
`add_tree` warns once and copies the files.

The local trees live on tmpfs (/dev/shm), which keeps 60 KiB values (ext4 without ea_inode
does not). Trees with trusted.* attributes, setcap and setfacl need root, as CI runs."""

from __future__ import annotations

import errno
import os
import shutil
import stat
import struct
import tempfile
import warnings
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

import pytest

import fsoc
from conftest import REPOSITORY, run

NOBODY = 65534
BIG_VALUE = bytes(index * 7 % 251 for index in range(60 * 1024))
LONG_NAME = "user." + "n" * 250

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="trusted.* attributes, setcap and setfacl need root")


def acl(*entries: Tuple[int, int, int]) -> bytes:
    """A POSIX ACL attribute value: version 2, then (tag, perm, id) entries."""
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", tag, perm, ident) for tag, perm, ident in entries)


UNDEFINED = 0xFFFFFFFF
# user::rw- user:1000:rw- group::r-- mask::rw- other::r--
ACCESS_ACL = acl(
    (0x01, 6, UNDEFINED), (0x02, 6, 1000), (0x04, 4, UNDEFINED), (0x10, 6, UNDEFINED), (0x20, 4, UNDEFINED)
)
# user::rw- user:1000:rwx group::r-- mask::rw- other::r--
DEFAULT_ACL = acl(
    (0x01, 6, UNDEFINED), (0x02, 7, 1000), (0x04, 4, UNDEFINED), (0x10, 6, UNDEFINED), (0x20, 4, UNDEFINED)
)


@pytest.fixture
def tmpfs() -> Iterator[Path]:
    """A temporary directory on tmpfs that keeps user.* attributes (Linux 6.6 and later)."""
    directory = Path(tempfile.mkdtemp(prefix="fsoc-xattr-", dir="/dev/shm"))
    try:
        probe = directory / "probe"
        probe.write_bytes(b"")
        try:
            os.setxattr(probe, "user.probe", b"1")
        except OSError as error:
            pytest.fail(f"/dev/shm (tmpfs) keeps no user.* attributes here ({error}): Linux 6.6 or later needed")
        probe.unlink()
        yield directory
    finally:
        shutil.rmtree(directory)


def describe(root: Path) -> Dict[str, str]:
    """For each path under `root` (itself as "."): kind, permission bits and its attributes
    sorted by name (values in hex), links not followed."""
    entries: Dict[str, str] = {}
    pending = [root]
    while pending:
        path = pending.pop()
        info = os.lstat(path)
        if stat.S_ISDIR(info.st_mode):
            pending.extend(path.iterdir())
        kind = "link" if stat.S_ISLNK(info.st_mode) else "dir" if stat.S_ISDIR(info.st_mode) else "file"
        lines = [f"{kind} {stat.S_IMODE(info.st_mode):o}"]
        for name in sorted(os.listxattr(path, follow_symlinks=False)):
            value = os.getxattr(path, name, follow_symlinks=False)
            lines.append(f"  {name} ({len(value)} bytes) {value.hex()}")
        entries[str(path.relative_to(root))] = "\n".join(lines)
    return entries


def make_tree(root: Path, privileged: bool) -> None:
    """user.* attributes (a 60 KiB value, a 255-byte name, an empty value), an access ACL and
    a directory with a default ACL and what inherited it; with `privileged`, trusted.* and
    security.* attributes, a file capability (setcap) and a link's trusted.* attribute."""
    root.mkdir()
    file = root / "file.txt"
    file.write_text("extended attributes\n")
    os.chmod(file, 0o640)
    os.setxattr(file, "user.comment", b"hello")
    os.setxattr(file, "user.big", BIG_VALUE)
    os.setxattr(file, LONG_NAME, b"the longest name Linux allows")
    os.setxattr(file, "user.empty", b"")
    shared = root / "shared.txt"
    shared.write_text("shared\n")
    os.setxattr(shared, "system.posix_acl_access", ACCESS_ACL)
    dropbox = root / "dropbox"
    dropbox.mkdir()
    os.setxattr(dropbox, "system.posix_acl_default", DEFAULT_ACL)
    (dropbox / "inherited.txt").write_text("inherited\n")
    (dropbox / "sub").mkdir()
    readonly = root / "readonly"
    readonly.mkdir()
    (readonly / "inside").write_text("inside\n")
    os.setxattr(readonly, "user.note", b"read-only directory")
    os.chmod(readonly, 0o555)
    os.symlink("file.txt", root / "link")
    if privileged:
        os.setxattr(file, "trusted.origin", b"make_tree")
        os.setxattr(file, "security.fsoc-test", b"label")
        os.setxattr(root / "link", "trusted.link", b"on the link itself", follow_symlinks=False)
        ping = root / "ping"
        ping.write_bytes(b"\x7fELF not really")
        os.chmod(ping, 0o755)
        run("setcap", "cap_net_raw+ep", str(ping))
        run("setfacl", "-m", "u:1001:rw", str(root / "readonly" / "inside"))


# ----- the Image calls ---------------------------------------------------------------------------


def test_set_get_list_remove(image: fsoc.Image) -> None:
    image.write_bytes("/file", b"data")
    image.setxattr("/file", "user.a", b"1")
    image.setxattr("/file", b"user.big", BIG_VALUE)
    image.setxattr("/file", LONG_NAME, b"long")
    assert image.getxattr("/file", "user.a") == b"1"
    assert image.getxattr("/file", "user.big") == BIG_VALUE
    assert sorted(image.listxattr("/file")) == sorted(["user.a", "user.big", LONG_NAME])
    image.setxattr("/file", "user.a", b"2", os.XATTR_REPLACE)
    assert image.getxattr("/file", "user.a") == b"2"
    image.removexattr("/file", "user.a")
    with pytest.raises(OSError) as missing:
        image.getxattr("/file", "user.a")
    assert missing.value.errno == errno.ENODATA
    image.mkdir("/dir")
    assert image.listxattr("/dir") == []


def test_attributes_survive_reopen(tmp_path: Path) -> None:
    path = tmp_path / "disk.img"
    with fsoc.Image.create(path, "mlc", 1, "64M") as image:
        image.write_bytes("/file", b"data")
        image.setxattr("/file", "user.kept", b"across a remount")
    with fsoc.Image.open(path, read_only=True) as image:
        assert image.getxattr("/file", "user.kept") == b"across a remount"
        assert image.listxattr("/file") == ["user.kept"]


def test_errors_carry_the_errno(image: fsoc.Image) -> None:
    image.write_bytes("/file", b"data")
    image.symlink("file", "/link")
    image.setxattr("/file", "user.a", b"1")
    with pytest.raises(FileExistsError):
        image.setxattr("/file", "user.a", b"again", os.XATTR_CREATE)
    cases = [
        (lambda: image.setxattr("/file", "user.b", b"x", os.XATTR_REPLACE), errno.ENODATA),
        (lambda: image.getxattr("/file", "user.none"), errno.ENODATA),
        (lambda: image.removexattr("/file", "user.none"), errno.ENODATA),
        (lambda: image.setxattr("/file", "other.name", b"x"), errno.EOPNOTSUPP),
        (lambda: image.setxattr("/file", "user." + "n" * 251, b"x"), errno.ERANGE),
        (lambda: image.setxattr("/file", "user.huge", bytes(65537)), errno.E2BIG),
        (lambda: image.setxattr("/file", "user.a", b"x", 7), errno.EINVAL),
        (lambda: image.setxattr("/link", "user.a", b"x"), errno.EPERM),  # user.* only on files and directories
        (lambda: image.setxattr("/file", "system.posix_acl_default", ACCESS_ACL), errno.EACCES),
        (lambda: image.setxattr("/file", "system.posix_acl_access", b"not an ACL"), errno.EINVAL),
    ]
    for call, expected in cases:
        with pytest.raises(OSError) as raised:
            call()
        assert raised.value.errno == expected, raised.value
    with pytest.raises(FileNotFoundError):
        image.listxattr("/nowhere")
    # Links are never followed: the link itself has no attributes.
    assert image.listxattr("/link") == []
    image.close()
    with pytest.raises(ValueError):
        image.listxattr("/file")


def test_access_acl_sets_the_mode(image: fsoc.Image) -> None:
    image.write_bytes("/file", b"data", permissions=0o600)
    image.setxattr("/file", "system.posix_acl_access", ACCESS_ACL)
    assert stat.S_IMODE(image.stat("/file").st_mode) == 0o664  # group bits from the mask
    assert image.getxattr("/file", "system.posix_acl_access") == ACCESS_ACL


def test_version_3_volume_keeps_none(tmp_path: Path) -> None:
    golden = unpack_golden_v3(tmp_path / "v3.img")
    with fsoc.Image.open(golden) as image:
        assert image.listxattr("/hello.txt") == []
        with pytest.raises(OSError) as raised:
            image.setxattr("/hello.txt", "user.a", b"1")
        assert raised.value.errno == errno.EOPNOTSUPP
        with pytest.raises(OSError) as missing:
            image.getxattr("/hello.txt", "user.a")
        assert missing.value.errno == errno.ENODATA


# ----- trees in and out --------------------------------------------------------------------------


def test_from_dir_and_extract_keep_user_attributes_and_acls(tmpfs: Path) -> None:
    source = tmpfs / "source"
    make_tree(source, privileged=False)
    before = describe(source)
    assert "system.posix_acl_access" in before["dropbox/sub"]  # inherited on the host
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing may be skipped
        with fsoc.Image.from_dir(source, tmpfs / "tree.img") as image:
            assert image.fsck() == []
            assert image.getxattr("/file.txt", "user.big") == BIG_VALUE
            image.extract(tmpfs / "out")
            # Into an image directory and a local one with default ACLs: what is made in them
            # does not keep the ACL it inherits there (the source's entries have their own).
            image.mkdir("/inheriting")
            image.setxattr("/inheriting", "system.posix_acl_default", ACCESS_ACL)
            image.add_tree(source, "/inheriting")
            (tmpfs / "again").mkdir()
            os.setxattr(tmpfs / "again", "system.posix_acl_default", ACCESS_ACL)
            image.extract(tmpfs / "again", "/inheriting")
    assert describe(tmpfs / "out") == before
    assert describe(tmpfs / "again") == before


@as_root
def test_trees_round_trip_with_the_command_both_ways(tmpfs: Path, fsoc_bin: str) -> None:
    """Python in, `fsoc get -r` out; `fsoc put -r` in, Python out: the same attributes, ACLs
    and capabilities, and the images pass `fsoc fsck`."""
    source = tmpfs / "source"
    make_tree(source, privileged=True)
    before = describe(source)
    assert "security.capability" in before["ping"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fsoc.Image.from_dir(source, tmpfs / "python.img").close()
    assert "clean: no violations" in run(fsoc_bin, "fsck", str(tmpfs / "python.img")).stdout
    got = run(fsoc_bin, "get", "-r", f"{tmpfs / 'python.img'}:/", str(tmpfs / "by-fsoc"))
    assert got.stderr == ""
    assert describe(tmpfs / "by-fsoc") == before

    run(fsoc_bin, "mkfs", str(tmpfs / "command.img"), "--size", "64M")
    put = run(fsoc_bin, "put", "-r", str(source), f"{tmpfs / 'command.img'}:/")
    assert put.stderr == ""
    with fsoc.Image.open(tmpfs / "command.img", read_only=True) as image:
        assert image.getxattr("/source/file.txt", "trusted.origin") == b"make_tree"
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            image.extract(tmpfs / "by-python", "/source")
    assert describe(tmpfs / "by-python") == before


@as_root
def test_extract_as_non_root_warns_once(tmpfs: Path) -> None:
    """`extract` run as nobody (the effective ids only, for the call): trusted.* and
    security.* are refused, one SkippedAttributeWarning says so, everything else is
    restored."""
    source = tmpfs / "source"
    make_tree(source, privileged=True)
    before = describe(source)
    work = tmpfs / "work"
    work.mkdir()
    fsoc.Image.from_dir(source, work / "tree.img").close()
    for path in (work, work / "tree.img"):
        os.chown(path, NOBODY, NOBODY)
    os.chmod(tmpfs, 0o755)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        os.setegid(NOBODY)
        os.seteuid(NOBODY)
        try:
            with fsoc.Image.open(work / "tree.img", read_only=True) as image:
                image.extract(work / "out")
        finally:
            os.seteuid(0)
            os.setegid(0)
    messages = [str(warning.message) for warning in caught]
    assert [warning.category for warning in caught] == [fsoc.SkippedAttributeWarning], messages
    assert "could not be restored" in messages[0] and "need root" in messages[0], messages

    def unprivileged(tree: Dict[str, str]) -> Dict[str, str]:
        kept = lambda line: not line.startswith(("  trusted.", "  security."))  # noqa: E731
        return {path: "\n".join(filter(kept, text.splitlines())) for path, text in tree.items()}

    after = describe(work / "out")
    assert unprivileged(after) == unprivileged(before)
    assert after == unprivileged(after)


def test_add_tree_into_a_version_3_volume_warns_once(tmp_path: Path, tmpfs: Path) -> None:
    source = tmpfs / "source"
    (source / "sub").mkdir(parents=True)
    for name in ("one.txt", "sub/two.txt"):
        (source / name).write_text(name)
        os.setxattr(source / name, "user.kept", b"not on version 3")
    golden = unpack_golden_v3(tmp_path / "v3.img")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with fsoc.Image.open(golden) as image:
            image.add_tree(source, "/tree")
            assert image.read_text("/tree/sub/two.txt") == "sub/two.txt"
            assert image.listxattr("/tree/one.txt") == []
            assert image.fsck() == []
    messages: List[str] = [str(warning.message) for warning in caught]
    assert [warning.category for warning in caught] == [fsoc.SkippedAttributeWarning], messages
    assert messages == ["the volume (format version 3) keeps no extended attributes; they were not copied"]


def unpack_golden_v3(path: Path) -> Path:
    """The golden image of format version 3 (crates/fsoc-core/tests/fixtures/README.md),
    rebuilt from its sparse form: `FSOCSPRS`, the file size, then (offset u64, length u32,
    bytes) chunks."""
    packed = (REPOSITORY / "crates" / "fsoc-core" / "tests" / "fixtures" / "golden-v3.sparse").read_bytes()
    assert packed[:8] == b"FSOCSPRS"
    (size,) = struct.unpack_from("<Q", packed, 8)
    with open(path, "wb") as file:
        file.truncate(size)
        offset = 16
        while offset < len(packed):
            at, length = struct.unpack_from("<QI", packed, offset)
            file.seek(at)
            file.write(packed[offset + 12 : offset + 12 + length])
            offset += 12 + length
    return path
