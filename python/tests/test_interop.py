"""The image format is the `fsoc` command's: an image made from Python passes `fsoc fsck`
and `fsoc get` extracts it; one made by `fsoc mkfs` and `fsoc put` opens from Python; and
`python -m fsoc` prints what `fsoc` prints."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import fsoc
from conftest import run
from test_trees import make_tree, same_tree


def python_fsoc(*arguments: str, check: bool = True) -> subprocess.CompletedProcess:
    return run(sys.executable, "-m", "fsoc", *arguments, check=check)


def test_python_image_passes_fsoc_fsck_and_get(tmp_path: Path, fsoc_bin: str) -> None:
    source = tmp_path / "source"
    source.mkdir()
    make_tree(source)
    os.chmod(source / "readonly", 0o755)
    image_path = tmp_path / "python.img"
    fsoc.Image.from_dir(source, image_path, profile="mlc8k", chips=4).close()
    check = run(fsoc_bin, "fsck", str(image_path))
    assert "clean: no violations" in check.stdout and "6 files, 6 directories, 4 symlinks" in check.stdout
    run(fsoc_bin, "get", "-r", f"{image_path}:/", str(tmp_path / "by-fsoc"))
    same_tree(source, tmp_path / "by-fsoc", link_times=False)


def test_fsoc_command_image_opens_in_python(tmp_path: Path, fsoc_bin: str) -> None:
    source = tmp_path / "source"
    source.mkdir()
    make_tree(source)
    os.chmod(source / "readonly", 0o755)
    image_path = tmp_path / "command.img"
    run(fsoc_bin, "mkfs", str(image_path), "--profile", "slc", "--chips", "2", "--size", "128M")
    run(fsoc_bin, "put", "-r", str(source), f"{image_path}:/")
    with fsoc.Image.open(image_path) as image:
        assert image.fsck() == []
        image.extract(tmp_path / "by-python", "/source")
        image.write_bytes("/from-python", b"written by Python")
    same_tree(source, tmp_path / "by-python", link_times=False)
    assert run(fsoc_bin, "cat", f"{image_path}:/from-python").stdout == "written by Python"
    run(fsoc_bin, "fsck", str(image_path))


def test_an_image_with_nvram_opens_in_python_with_its_nvram_file(tmp_path: Path, fsoc_bin: str) -> None:
    image_path = tmp_path / "nvram.img"
    nvram_path = tmp_path / "nvram.img.nvram"
    run(fsoc_bin, "mkfs", str(image_path), "--size", "64M", "--nvram", "16K")
    assert nvram_path.stat().st_size == 16 * 1024
    with fsoc.Image.open(image_path) as image:
        image.write_bytes("/from-python", b"kept beside its NVRAM")
    assert run(fsoc_bin, "cat", f"{image_path}:/from-python").stdout == "kept beside its NVRAM"
    # Without its NVRAM file the volume is refused by name, not mounted without its commits.
    nvram_path.rename(tmp_path / "aside")
    with pytest.raises(OSError, match="NVRAM"):
        fsoc.Image.open(image_path)
    (tmp_path / "aside").rename(nvram_path)
    # Replacing the image replaces its NVRAM file too (refused without force).
    with pytest.raises(FileExistsError):
        fsoc.Image.create(image_path, "mlc", 1, "64M")
    with fsoc.Image.create(image_path, "mlc", 1, "64M", force=True) as image:
        image.write_bytes("/new", b"no NVRAM")
    assert not nvram_path.exists()
    with fsoc.Image.open(image_path) as image:
        assert image.read_bytes("/new") == b"no NVRAM"


def test_python_makes_an_image_with_nvram_as_the_command_does(tmp_path: Path, fsoc_bin: str) -> None:
    image_path = tmp_path / "made-by-python.img"
    with fsoc.Image.create(image_path, "mlc", 1, "64M", nvram="8K", nvram_technology="mram") as image:
        image.write_bytes("/f", b"through the NVRAM tier")
    assert (tmp_path / "made-by-python.img.nvram").stat().st_size == 8192
    info = run(fsoc_bin, "info", str(image_path)).stdout
    assert "NVRAM             8 KiB mram" in info, info
    assert run(fsoc_bin, "cat", f"{image_path}:/f").stdout == "through the NVRAM tier"
    with pytest.raises(OSError, match="NVRAM"):
        fsoc.Image.create(tmp_path / "bad.img", "mlc", 1, "64M", nvram=100)


def test_python_m_fsoc_mirrors_the_command(tmp_path: Path, fsoc_bin: str) -> None:
    source = tmp_path / "source"
    source.mkdir()
    make_tree(source)
    os.chmod(source / "readonly", 0o755)
    image_path = str(tmp_path / "cli.img")
    python_fsoc("mkfs", image_path, "--size", "128M")
    python_fsoc("put", "-r", str(source), f"{image_path}:/")
    python_fsoc("mkdir", "-p", f"{image_path}:/x/y")
    python_fsoc("mv", f"{image_path}:/x/y", f"{image_path}:/z")
    for arguments in (["-l", "-r"], ["-r"], ["-l"], []):
        ours = python_fsoc("ls", *arguments, f"{image_path}:/").stdout
        theirs = run(fsoc_bin, "ls", *arguments, f"{image_path}:/").stdout
        assert ours == theirs, arguments
    python_fsoc("get", "-r", f"{image_path}:/source", str(tmp_path))
    same_tree(source, tmp_path / "source")
    assert python_fsoc("cat", f"{image_path}:/source/a/small.txt").stdout == "hello\n"
    python_fsoc("rm", "-r", f"{image_path}:/source", f"{image_path}:/z")
    assert python_fsoc("ls", f"{image_path}:/").stdout == "x/\n"
    python_fsoc("fsck", image_path)
    run(fsoc_bin, "fsck", image_path)
    failed = python_fsoc("get", f"{image_path}:/x", str(tmp_path / "y"), check=False)
    assert failed.returncode == 1 and "is a directory (use -r)" in failed.stderr
    missing = python_fsoc("ls", f"{tmp_path / 'nope.img'}:/", check=False)
    assert missing.returncode == 1 and "no such image file" in missing.stderr
