"""Trees in and out: Image.from_dir / extract round trips (contents, links, permissions,
times, odd names), what happens to special files, and the /usr/share/doc round trip of the
issue's target, checked with `diff -r --no-dereference`."""

from __future__ import annotations

import errno
import os
import socket
import stat
import subprocess
import warnings
from pathlib import Path

import pytest

import fsoc
from conftest import run


def make_tree(root: Path) -> None:
    """A small tree with what a root file system holds: nested directories, empty and large
    files, symbolic links (relative, absolute, dangling, to a directory), a hard link, a
    read-only directory, odd permissions and names that are not UTF-8."""
    (root / "a" / "b" / "c").mkdir(parents=True)
    (root / "empty").write_bytes(b"")
    (root / "a" / "small.txt").write_text("hello\n")
    (root / "a" / "b" / "big.bin").write_bytes(os.urandom(3 << 20))
    (root / "a" / "b" / "c" / "exec.sh").write_text("#!/bin/sh\necho hi\n")
    os.chmod(root / "a" / "b" / "c" / "exec.sh", 0o4755)
    os.symlink("small.txt", root / "a" / "relative")
    os.symlink("/etc/passwd", root / "absolute")
    os.symlink("../nowhere/at all", root / "a" / "dangling")
    os.symlink("a/b", root / "to-directory")
    os.link(root / "a" / "small.txt", root / "hard-link")
    os.mkdir(os.path.join(os.fsencode(root), b"caf\xe9-latin1"))
    (root / "sp ace & $(quote)'\"").write_bytes(b"x")
    (root / "readonly").mkdir()
    (root / "readonly" / "inside").write_bytes(b"still copied")
    os.chmod(root / "readonly", 0o555)
    os.utime(root / "a" / "small.txt", ns=(1_500_000_000_123_456_789, 1_600_000_000_987_654_321))


def same_tree(left: Path, right: Path, link_times: bool = True) -> None:
    """Same contents (diff -r, links compared as links) and the same type, permissions and
    modification time for every entry (for links only with `link_times`: the `fsoc`
    command's put and get keep no link times; the Python package keeps them)."""
    diff = subprocess.run(["diff", "-r", "--no-dereference", str(left), str(right)], capture_output=True)
    assert diff.returncode == 0, diff.stdout.decode(errors="replace") + diff.stderr.decode(errors="replace")

    def listing(root: Path) -> list:
        rows = []
        for directory, directories, files in os.walk(os.fsencode(root)):
            for name in directories + files:
                path = os.path.join(directory, name)
                info = os.lstat(path)
                keep_time = link_times or not stat.S_ISLNK(info.st_mode)
                mtime_ns = info.st_mtime_ns if keep_time else None
                rows.append((os.path.relpath(path, os.fsencode(root)), info.st_mode, mtime_ns))
        return sorted(rows)

    assert listing(left) == listing(right)


def test_from_dir_and_extract_round_trip(tmp_path: Path) -> None:
    source, out = tmp_path / "source", tmp_path / "out"
    source.mkdir()
    make_tree(source)
    with fsoc.Image.from_dir(source, tmp_path / "tree.img") as image:
        assert image.stat("/hard-link").st_nlink == 2, "hard links stay hard links"
        assert image.readlink("/absolute") == "/etc/passwd"
        assert b"caf\xe9-latin1" in image.listdir(b"/")
        assert image.fsck() == []
    with fsoc.Image.open(tmp_path / "tree.img", read_only=True) as image:
        image.extract(out)
        image.extract(tmp_path / "one.txt", "/a/small.txt")
    try:
        same_tree(source, out)
        assert os.stat(out / "hard-link").st_ino == os.stat(out / "a" / "small.txt").st_ino
        assert (tmp_path / "one.txt").read_text() == "hello\n"
    finally:
        os.chmod(source / "readonly", 0o755)
        os.chmod(out / "readonly", 0o755)


def test_special_files_warn_skip_or_raise(tmp_path: Path) -> None:
    """fsoc stores files, directories and links only: a FIFO and a socket are skipped with a
    SkippedFileWarning by default, silently with special='skip', refused with 'raise'."""
    source = tmp_path / "special"
    source.mkdir()
    (source / "regular").write_bytes(b"kept")
    os.mkfifo(source / "fifo")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(source / "socket"))
    try:
        with pytest.warns(fsoc.SkippedFileWarning) as caught:
            with fsoc.Image.from_dir(source, tmp_path / "warn.img") as image:
                assert image.listdir("/") == ["regular"]
        assert sorted(str(warning.message).split(":")[0].rsplit("/", 1)[1] for warning in caught) == [
            "fifo",
            "socket",
        ]
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with fsoc.Image.create(tmp_path / "skip.img") as image:
                skipped = image.add_tree(source, "/copy", special="skip")
                assert sorted(os.path.basename(path) for path in skipped) == ["fifo", "socket"]
                assert image.listdir("/copy") == ["regular"]
        with pytest.raises(OSError) as refused:
            fsoc.Image.from_dir(source, tmp_path / "raise.img", special="raise")
        assert refused.value.errno == errno.EOPNOTSUPP and refused.value.filename.endswith("fifo")
    finally:
        server.close()


def test_extract_refuses_to_write_through_links(tmp_path: Path) -> None:
    """A symbolic link planted at the destination where the image has a file is replaced,
    never written through."""
    outside = tmp_path / "outside"
    outside.write_bytes(b"precious")
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(outside, out / "file")
    with fsoc.Image.create(tmp_path / "x.img") as image:
        image.write_bytes("/file", b"from the image")
        image.extract(out)
    assert outside.read_bytes() == b"precious"
    assert not (out / "file").is_symlink() and (out / "file").read_bytes() == b"from the image"


@pytest.mark.skipif(not os.path.isdir("/usr/share/doc"), reason="no /usr/share/doc on this system")
def test_usr_share_doc_round_trips_with_no_difference(tmp_path: Path, fsoc_bin: str) -> None:
    """The issue's target: from_dir on /usr/share/doc, extract, `diff -r --no-dereference`
    finds nothing; and the image passes `fsoc fsck` (which also reads every data page)."""
    image_path, out = tmp_path / "doc.img", tmp_path / "doc"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a skipped file would be a difference
        image = fsoc.Image.from_dir("/usr/share/doc", image_path)
    with image:
        image.extract(out)
        files = sum(len(names) for _, _, names in image.walk("/"))
    same_tree(Path("/usr/share/doc"), out)
    assert files > 0
    run(fsoc_bin, "fsck", str(image_path))
