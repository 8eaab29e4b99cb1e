"""The Image API: create/open/close, files, names, attributes and the errors each refusal
raises (the errno subclasses of OSError), on a fresh image per test."""

from __future__ import annotations

import errno
import io
import os
import stat
import threading
from pathlib import Path

import pytest

import fsoc


def test_write_close_reopen_read(tmp_path: Path) -> None:
    path = tmp_path / "disk.img"
    with fsoc.Image.create(path, "slc", 2, "32M") as image:
        image.mkdir("/etc")
        with image.open("/etc/hostname", "w") as file:
            file.write("device-1\n")
        image.write_bytes("/blob", bytes(range(256)) * 5000)
    with fsoc.Image.open(path, read_only=True) as image:
        assert image.read_only
        assert image.listdir("/") == ["blob", "etc"]
        assert image.read_text("/etc/hostname") == "device-1\n"
        assert image.read_bytes("/blob") == bytes(range(256)) * 5000
        assert image.stat("/blob").st_size == 1_280_000
        assert image.fsck() == []


def test_file_objects_behave_like_python_files(image: fsoc.Image) -> None:
    with image.open("/f", "wb") as file:
        assert file.write(b"hello world") == 11
        file.seek(6)
        file.write(b"WORLD")
    with image.open("/f", "r+b") as file:
        assert file.read(5) == b"hello"
        file.seek(-5, io.SEEK_END)
        assert file.read() == b"WORLD"
        file.truncate(5)
    with image.open("/f", "ab") as file:
        file.write(b"!")
    assert image.read_bytes("/f") == b"hello!"
    with image.open("/f", "rb", buffering=0) as raw:
        assert isinstance(raw, fsoc.File)
        buffer = bytearray(3)
        assert raw.readinto(buffer) == 3 and buffer == b"hel"
        assert raw.tell() == 3
    with image.open("/text", "w", encoding="utf-8") as text:
        text.write("ünïcode\nline 2\n")
    with image.open("/text") as text:
        assert text.readlines() == ["ünïcode\n", "line 2\n"]
    with pytest.raises(FileExistsError):
        image.open("/text", "x")
    with pytest.raises(ValueError, match="invalid mode"):
        image.open("/text", "rw")
    with image.open("/text", "rb") as file, pytest.raises(io.UnsupportedOperation):
        file.write(b"x")


def test_a_large_file_round_trips_through_buffers(image: fsoc.Image) -> None:
    data = os.urandom(5 << 20) + b"tail"
    with image.open("/big", "wb") as file:
        for start in range(0, len(data), 100_000):
            file.write(data[start : start + 100_000])
    with image.open("/big", "rb") as file:
        assert file.read() == data


def test_names_attributes_and_links(image: fsoc.Image) -> None:
    image.makedirs("/a/b/c")
    image.makedirs("/a/b/c", exist_ok=True)
    image.write_bytes("/a/b/c/file", b"x")
    image.symlink("../target with space", "/a/link")
    image.link("/a/b/c/file", "/a/hard")
    assert image.readlink("/a/link") == "../target with space"
    assert image.readlink(b"/a/link") == b"../target with space"
    assert image.islink("/a/link") and not image.isfile("/a/link")
    assert image.stat("/a/hard").st_nlink == 2
    assert stat.S_ISDIR(image.stat("/a").st_mode) and image.isdir("a/b")
    image.chmod("/a/b/c/file", 0o600)
    image.utime("/a/b/c/file", ns=(1_000_000_000, 2_000_000_000))
    attributes = image.stat("/a/b/c/file")
    assert stat.S_IMODE(attributes.st_mode) == 0o600
    assert (attributes.st_atime_ns, attributes.st_mtime_ns) == (1_000_000_000, 2_000_000_000)
    assert attributes.st_uid == os.geteuid()
    image.rename("/a/b/c/file", "/a/moved")
    assert image.listdir("/a") == ["b", "hard", "link", "moved"]
    assert image.listdir(b"/a") == [b"b", b"hard", b"link", b"moved"]
    assert list(image.walk("/")) == [
        ("/", ["a"], []),
        ("/a", ["b"], ["hard", "link", "moved"]),
        ("/a/b", ["c"], []),
        ("/a/b/c", [], []),
    ]
    assert [entry[0] for entry in image.walk("/", topdown=False)] == ["/a/b/c", "/a/b", "/a", "/"]
    image.remove("/a/moved")
    image.rmtree("/a")
    assert image.listdir() == []


def test_refusals_raise_the_errno_subclasses(image: fsoc.Image) -> None:
    image.mkdir("/d")
    image.write_bytes("/d/f", b"1")
    with pytest.raises(FileNotFoundError) as missing:
        image.stat("/nope")
    assert missing.value.errno == errno.ENOENT and missing.value.filename == "/nope"
    with pytest.raises(FileExistsError):
        image.mkdir("/d")
    with pytest.raises(IsADirectoryError):
        image.open("/d", "w")
    with pytest.raises(IsADirectoryError):
        image.remove("/d")
    with pytest.raises(NotADirectoryError):
        image.open("/d/f/g", "w")
    with pytest.raises(NotADirectoryError):
        image.listdir("/d/f")
    with pytest.raises(OSError) as not_empty:
        image.rmdir("/d")
    assert not_empty.value.errno == errno.ENOTEMPTY
    with pytest.raises(OSError) as too_long:
        image.write_bytes("/" + "n" * 256, b"")
    assert too_long.value.errno == errno.ENAMETOOLONG
    image.symlink("/d", "/link")
    with pytest.raises(OSError) as loop:
        image.open("/link")
    assert loop.value.errno == errno.ELOOP
    with pytest.raises(ValueError, match=r"'\.\.'"):
        image.stat("/d/../d")
    with pytest.raises(OSError) as invalid:
        image.mkdir("/nul\0name")
    assert invalid.value.errno == errno.EINVAL
    # The extension's own calls refuse descriptors it never handed out (no panic).
    for call in (lambda: image._volume.pread(999, 0, 10), lambda: image._volume.close_file(3)):
        with pytest.raises(OSError) as bad:
            call()
        assert bad.value.errno == errno.EBADF
    with pytest.raises(OSError) as not_absolute:
        image._volume.stat(b"relative")
    assert not_absolute.value.errno == errno.EINVAL


def test_a_full_volume_is_enospc_and_stays_usable(tmp_path: Path) -> None:
    with fsoc.Image.create(tmp_path / "small.img", "slc", 1, blocks=64) as image:
        chunk = os.urandom(64 << 10)
        with pytest.raises(OSError) as full:
            for index in range(10_000):
                image.write_bytes(f"/f{index}", chunk)
        assert full.value.errno == errno.ENOSPC and type(full.value) is OSError
        for name in image.listdir("/"):
            image.remove("/" + name)
        image.write_bytes("/after", b"room again")
        assert image.fsck() == []


def test_closed_images_and_files_raise(tmp_path: Path) -> None:
    image = fsoc.Image.create(tmp_path / "c.img")
    file = image.open("/f", "wb", buffering=0)
    image.close()
    assert image.closed
    image.close()  # twice is fine
    with pytest.raises(ValueError, match="closed image"):
        image.listdir("/")
    with pytest.raises(ValueError, match="closed image"):
        file.write(b"x")
    file.close()
    assert file.closed


def test_image_files_are_locked_and_checked(tmp_path: Path) -> None:
    path = tmp_path / "locked.img"
    with fsoc.Image.create(path):
        with pytest.raises(OSError) as busy:
            fsoc.Image.open(path)
        assert busy.value.errno == errno.EBUSY and "in use" in str(busy.value)
        with pytest.raises(OSError):
            fsoc.Image.open(path, read_only=True)
    with fsoc.Image.open(path, read_only=True), fsoc.Image.open(path, read_only=True):
        pass  # readers share
    with pytest.raises(FileExistsError, match="force=True"):
        fsoc.Image.create(path)
    fsoc.Image.create(path, "slc", force=True).close()
    with pytest.raises(FileNotFoundError):
        fsoc.Image.open(tmp_path / "missing.img")
    with pytest.raises(IsADirectoryError):
        fsoc.Image.open(tmp_path)
    junk = tmp_path / "junk.img"
    junk.write_bytes(b"not an image at all" * 100)
    with pytest.raises(OSError, match="not an fsoc image"):
        fsoc.Image.open(junk)


def test_bad_create_arguments_say_what_is_valid(tmp_path: Path) -> None:
    with pytest.raises(OSError, match="give one of slc, mlc, tlc, mlc8k, mlc16k"):
        fsoc.Image.create(tmp_path / "p.img", "qlc")
    with pytest.raises(OSError, match="give 1 to 64"):
        fsoc.Image.create(tmp_path / "c.img", chips=0)
    with pytest.raises(OSError, match="must be"):
        fsoc.Image.create(tmp_path / "s.img", size="100K")
    with pytest.raises(ValueError, match="invalid size"):
        fsoc.Image.create(tmp_path / "s.img", size="lots")
    assert fsoc.parse_size("64M") == 64 << 20 and fsoc.parse_size("1GiB") == 1 << 30
    assert not list(tmp_path.iterdir()), "a refused create leaves nothing behind"


def test_sync_makes_changes_durable_before_close(tmp_path: Path) -> None:
    """A copy of the image file taken after sync (as a power cut would leave it, since the
    image stays open) mounts with the synced file; one taken before does not have it."""
    path = tmp_path / "sync.img"
    with fsoc.Image.create(path) as image:
        image.write_bytes("/kept", b"durable")
        image.sync()
        (tmp_path / "after_sync.img").write_bytes(path.read_bytes())
        image.write_bytes("/unsynced", b"in the working state only")
        (tmp_path / "before_close.img").write_bytes(path.read_bytes())
    with fsoc.Image.open(tmp_path / "after_sync.img") as copy:
        assert copy.read_bytes("/kept") == b"durable"
    with fsoc.Image.open(tmp_path / "before_close.img") as copy:
        assert copy.listdir("/") == ["kept"]


def test_threads_share_an_image(image: fsoc.Image) -> None:
    def writer(index: int) -> None:
        for round_index in range(20):
            image.write_bytes(f"/t{index}-{round_index}", bytes([index]) * 10_000)

    threads = [threading.Thread(target=writer, args=(index,)) for index in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(image.listdir("/")) == 80
    assert image.read_bytes("/t3-19") == bytes([3]) * 10_000
    assert image.fsck() == []
