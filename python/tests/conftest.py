"""Shared fixtures: a fresh image per test, and the `fsoc` command for the tests that check
the image format against it (FSOC_BIN, else target/release/fsoc, else built here once)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

import fsoc

REPOSITORY = Path(__file__).resolve().parents[2]


@pytest.fixture
def image(tmp_path: Path) -> Iterator[fsoc.Image]:
    """A new, empty 64 MiB MLC image, closed after the test."""
    with fsoc.Image.create(tmp_path / "test.img", "mlc", 1, "64M") as made:
        yield made


@pytest.fixture(scope="session")
def fsoc_bin() -> str:
    """The `fsoc` command of this repository: $FSOC_BIN, or target/release/fsoc (CI builds it
    with the workspace tests), else built now (the command without the benchmark lab)."""
    given = os.environ.get("FSOC_BIN")
    if given:
        return given
    built = REPOSITORY / "target" / "release" / "fsoc"
    if not built.exists():
        if shutil.which("cargo") is None:
            pytest.fail("no fsoc command: set FSOC_BIN or build it (cargo build --release -p fsoc-cli)")
        subprocess.run(
            ["cargo", "build", "--quiet", "--release", "-p", "fsoc-cli", "--no-default-features"],
            cwd=REPOSITORY,
            check=True,
        )
    return str(built)


def run(*arguments: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Runs a command, capturing its output; fails the test with its stderr if `check`."""
    result = subprocess.run(arguments, capture_output=True, text=True)
    if check and result.returncode != 0:
        pytest.fail(f"{' '.join(arguments)} exited {result.returncode}:\n{result.stdout}{result.stderr}")
    return result
