"""`python -m fsoc`: the image tools of the `fsoc` command, in Python, with the same
arguments and output: mkfs, ls, put, get, cat, rm, mkdir, mv, and fsck (metadata only).
Paths inside images are written `IMAGE:/path`, as for `fsoc`. Exit status 0 on success, 1
with a message on stderr on failure (2 for a usage error, from argparse).
"""

from __future__ import annotations

import argparse
import datetime
import os
import stat
import sys
import unicodedata
import warnings
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from ._image import Image, SkippedAttributeWarning, SkippedFileWarning, _join, _valid_name


class CommandError(Exception):
    """A failure to report as `fsoc: MESSAGE` with exit status 1."""


# ----- IMAGE:/path arguments ------------------------------------------------------------------


def normalize(path: str) -> bytes:
    """The absolute, normalized image path of the text after `IMAGE:` (as `fsoc` does)."""
    path = path or "/"
    if not path.startswith("/"):
        raise CommandError(f"{path!r}: the path inside the image must be absolute (start with /)")
    parts = [part for part in path.split("/") if part and part != "."]
    if ".." in parts:
        raise CommandError(f"{path!r}: `..` is not supported in image paths")
    return os.fsencode("/" + "/".join(parts))


def parse_target(text: str) -> Tuple[str, bytes]:
    """`IMAGE:/path` split into the image file and the path: the image is the shortest prefix
    before a `:` that names an existing file, so image names may contain colons."""
    fallback: Optional[str] = None
    for index, character in enumerate(text):
        if character != ":" or index == 0:
            continue
        image = text[:index]
        if os.path.isfile(image):
            return image, normalize(text[index + 1 :])
        fallback = fallback or image
    if fallback is not None:
        if os.path.isdir(fallback):
            raise CommandError(f"{fallback}: is a directory, not an image file")
        raise CommandError(f"{fallback}: no such image file")
    raise CommandError(f"{text!r}: expected IMAGE:/path (for example disk.img:/docs/a.txt)")


def parse_targets(texts: Sequence[str]) -> Tuple[str, List[bytes]]:
    """Targets that must all be in one image."""
    pairs = [parse_target(text) for text in texts]
    images = {image for image, _ in pairs}
    if len(images) > 1:
        raise CommandError(f"all paths must be in one image ({', '.join(sorted(images))})")
    return pairs[0][0], [path for _, path in pairs]


# ----- printing names from an image (hostile input) -------------------------------------------


def escaped(name: bytes) -> str:
    """`name` for a terminal, as `fsoc` and `ls -b` print it: printable text as it is, control
    and bidirectional-formatting characters and invalid UTF-8 as octal escapes."""
    text = []
    for character in name.decode("utf-8", errors="surrogateescape"):
        code = ord(character)
        if 0xDC80 <= code <= 0xDCFF:  # an invalid byte
            text.append(f"\\{code - 0xDC00:03o}")
        elif character in "\\\n\t\r":
            text.append({"\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}[character])
        elif unicodedata.category(character) == "Cc" or _bidirectional(code):
            text.extend(f"\\{byte:03o}" for byte in character.encode("utf-8"))
        else:
            text.append(character)
    return "".join(text)


def _bidirectional(code: int) -> bool:
    return code in (0x200E, 0x200F, 0x061C) or 0x202A <= code <= 0x202E or 0x2066 <= code <= 0x2069


def _shown(path: bytes) -> str:
    return escaped(path)


# ----- the commands ---------------------------------------------------------------------------


def mkfs(arguments: argparse.Namespace) -> None:
    if arguments.blocks is not None and arguments.size is not None:
        raise CommandError("give --blocks or --size, not both")
    if arguments.source is not None and arguments.nvram is not None:
        raise CommandError("--nvram cannot be given with --from")
    if arguments.source is not None:
        image = Image.from_dir(
            arguments.source,
            arguments.image,
            profile=arguments.profile,
            chips=arguments.chips,
            size=arguments.size,
            force=arguments.force,
        )
    else:
        image = Image.create(
            arguments.image,
            arguments.profile,
            arguments.chips,
            arguments.size,
            blocks=arguments.blocks,
            seed=arguments.seed,
            volume_id=arguments.volume_id,
            nvram=arguments.nvram,
            nvram_technology=arguments.nvram_technology,
            force=arguments.force,
        )
    space = image.statvfs()
    image.close()
    print(
        f"formatted {arguments.image}: {arguments.profile}, {arguments.chips} chip(s), "
        f"{space.f_blocks * space.f_bsize / (1 << 20):.1f} MiB usable, "
        f"{(space.f_blocks - space.f_bfree) * space.f_bsize / (1 << 20):.1f} MiB used"
    )


def _long_line(image: Image, path: bytes, shown: bytes) -> str:
    attributes = image.stat(path)
    when = datetime.datetime.fromtimestamp(attributes.st_mtime_ns // 1_000_000_000, datetime.timezone.utc)
    line = (
        f"{stat.filemode(attributes.st_mode)} {attributes.st_nlink:>3} {attributes.st_uid:>5} "
        f"{attributes.st_gid:>5} {attributes.st_size:>10} {when:%Y-%m-%d %H:%M} {escaped(shown)}"
    )
    if stat.S_ISLNK(attributes.st_mode):
        line += " -> " + escaped(image.readlink(path))
    return line


def ls(arguments: argparse.Namespace) -> None:
    image_path, path = parse_target(arguments.target)
    with Image.open(image_path, read_only=True) as image:
        attributes = image.stat(path)
        lines: List[str] = []

        def entry(entry_path: bytes, shown: bytes, kind: str) -> None:
            if arguments.long:
                lines.append(_long_line(image, entry_path, shown))
            else:
                lines.append(escaped(shown) + ("/" if kind == "d" else ""))

        if not stat.S_ISDIR(attributes.st_mode):
            name = path.rsplit(b"/", 1)[-1]
            entry(path, name, "f")
        else:
            # Each entry before what is under it, in name order (as `find`), iteratively.
            pending: List[Tuple[bytes, int]] = [(path, 0)]
            listings: Dict[bytes, List[Tuple[bytes, int, str]]] = {}
            seen = {attributes.st_ino}
            while pending:
                directory, index = pending.pop()
                if directory not in listings:
                    listings[directory] = image._volume.readdir(directory)
                children = listings[directory]
                if index == len(children):
                    del listings[directory]
                    continue
                pending.append((directory, index + 1))
                name, inode, kind = children[index]
                if not _valid_name(name):
                    raise CommandError(f"{image_path}:{_shown(directory)}: entry {escaped(name)!r}: invalid name")
                child = _join(directory, name)
                entry(child, child if arguments.recursive else name, kind)
                if arguments.recursive and kind == "d":
                    if inode in seen:
                        raise CommandError(f"{image_path}:{_shown(child)}: directory cycle or second name; not followed")
                    seen.add(inode)
                    pending.append((child, 0))
        output = "\n".join(lines)
        try:
            sys.stdout.write(output + ("\n" if lines else ""))
            sys.stdout.flush()
        except BrokenPipeError:
            # `python -m fsoc ls ... | head`: not an error, as for ls.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())


def put(arguments: argparse.Namespace) -> None:
    *sources, destination_text = arguments.paths
    image_path, destination = parse_target(destination_text)
    for source in sources:
        if os.path.isdir(source) and not os.path.islink(source) and not arguments.recursive:
            raise CommandError(f"{source}: is a directory (use -r)")
    with Image.open(image_path) as image:
        into_directory = image.isdir(destination)
        if destination_text.endswith("/") and destination != b"/" and not into_directory:
            what = "not a directory" if image.exists(destination) else "no such directory"
            raise CommandError(f"{image_path}:{_shown(destination)}/: {what}")
        if len(sources) > 1 and not into_directory:
            raise CommandError(f"{image_path}:{_shown(destination)}: not a directory")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", SkippedFileWarning)
            warnings.simplefilter("always", SkippedAttributeWarning)
            for source in sources:
                local = os.fsencode(source)
                name = os.path.basename(local.rstrip(b"/")) or local
                target = _join(destination, name) if into_directory else destination
                image._put(local, target)
        # Each source is copied on its own: a warning they share is said once.
        for message in dict.fromkeys(str(warning.message) for warning in caught):
            print(f"fsoc put: {message}", file=sys.stderr)


def get(arguments: argparse.Namespace) -> None:
    image_path, source = parse_target(arguments.source)
    with Image.open(image_path, read_only=True) as image:
        if image.isdir(source) and not arguments.recursive:
            raise CommandError(f"{image_path}:{_shown(source)}: is a directory (use -r)")
        destination = os.fsencode(arguments.destination)
        if os.path.isdir(destination):
            name = source.rsplit(b"/", 1)[-1] or b"root"
            destination = os.path.join(destination, name)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", SkippedAttributeWarning)
            image.extract(destination, source)
        for warning in caught:
            print(f"fsoc get: {warning.message}", file=sys.stderr)


def cat(arguments: argparse.Namespace) -> None:
    image_path, path = parse_target(arguments.target)
    with Image.open(image_path, read_only=True) as image:
        if image.isdir(path):
            raise CommandError(f"{image_path}:{_shown(path)}: is a directory")
        with image.open(path, "rb", buffering=0) as file:
            try:
                while True:
                    chunk = file.read(1 << 20)
                    if not chunk:
                        break
                    sys.stdout.buffer.write(chunk)
                sys.stdout.buffer.flush()
            except BrokenPipeError:
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, sys.stdout.fileno())


def rm(arguments: argparse.Namespace) -> None:
    image_path, paths = parse_targets(arguments.targets)
    with Image.open(image_path) as image:
        for path in paths:
            if path == b"/":
                raise CommandError(f"{image_path}:/: the root directory cannot be removed")
            if image.isdir(path):
                if not arguments.recursive:
                    raise CommandError(f"{image_path}:{_shown(path)}: is a directory (use -r)")
                image.rmtree(path)
            else:
                image.remove(path)


def mkdir(arguments: argparse.Namespace) -> None:
    image_path, paths = parse_targets(arguments.targets)
    with Image.open(image_path) as image:
        for path in paths:
            image.mkdir(path, parents=arguments.parents, exist_ok=arguments.parents)


def mv(arguments: argparse.Namespace) -> None:
    image_path, (source, target) = parse_targets([arguments.source, arguments.destination])
    with Image.open(image_path) as image:
        if image.isdir(target) and not image.islink(target):
            target = _join(target, source.rsplit(b"/", 1)[-1])
        image.rename(source, target)


def fsck(arguments: argparse.Namespace) -> None:
    with Image.open(arguments.image, read_only=True) as image:
        violations = image.fsck()
    for violation in violations:
        print(violation)
    if violations:
        raise CommandError(f"{arguments.image}: {len(violations)} violation(s) listed above")
    print(f"{arguments.image}: clean (metadata; `fsoc fsck` also reads every data page)")


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="python -m fsoc",
        description="Work on fsoc image files without mounting them (as the fsoc command's image tools).",
    )
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, function: Callable[[argparse.Namespace], None], help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        sub.set_defaults(function=function)
        return sub

    sub = command("mkfs", mkfs, "Creates an image file: python -m fsoc mkfs IMAGE [--size 64M]")
    sub.add_argument("image", help="the image file to create")
    sub.add_argument("--profile", default="mlc", help="NAND profile: slc, mlc, tlc, mlc8k or mlc16k (default mlc)")
    sub.add_argument("--chips", type=int, default=1, help="chips in the volume (striped), 1 to 64")
    sub.add_argument("--blocks", type=int, help="erase blocks per chip (default 512, or enough for --size)")
    sub.add_argument("--size", help="volume size with a K, M, G or T suffix, e.g. 64M")
    sub.add_argument("--seed", type=int, default=1, help="simulator seed (bit errors, factory bad blocks)")
    sub.add_argument("--volume-id", type=lambda text: int(text, 0), help="volume id (default random)")
    sub.add_argument("--force", action="store_true", help="replace an existing image")
    sub.add_argument(
        "--nvram",
        metavar="SIZE",
        help="keep transaction points in an NVRAM of this size (1K to 16M), the file IMAGE.nvram",
    )
    sub.add_argument(
        "--nvram-technology", default="feram", help="the NVRAM's technology: feram, mram or pcm (default feram)"
    )
    sub.add_argument(
        "--from", dest="source", metavar="DIR", help="copy this directory tree in (sized from it unless --size)"
    )

    sub = command("ls", ls, "Lists a directory (or describes a file): python -m fsoc ls [-l] [-r] IMAGE:/path")
    sub.add_argument("target", help="IMAGE:/path of a directory or file")
    sub.add_argument("-l", "--long", action="store_true", help="mode, links, owner, group, size, time")
    sub.add_argument("-r", "--recursive", action="store_true", help="list subdirectories too, as full paths")

    sub = command(
        "put",
        put,
        "Copies local files into an image, extended attributes included: python -m fsoc put [-r] LOCAL... IMAGE:/path",
    )
    sub.add_argument("paths", nargs="+", metavar="PATH", help="local sources, then the destination IMAGE:/path")
    sub.add_argument("-r", "--recursive", action="store_true", help="copy directories and everything in them")

    sub = command(
        "get", get, "Copies out of an image, extended attributes included: python -m fsoc get [-r] IMAGE:/path LOCAL"
    )
    sub.add_argument("source", help="IMAGE:/path to copy")
    sub.add_argument("destination", help="local file or directory (into it, if it is a directory)")
    sub.add_argument("-r", "--recursive", action="store_true", help="copy a directory and everything in it")

    sub = command("cat", cat, "Writes a file of an image to standard output")
    sub.add_argument("target", help="IMAGE:/path of a file")

    sub = command("rm", rm, "Removes files from an image: python -m fsoc rm [-r] IMAGE:/path...")
    sub.add_argument("targets", nargs="+", metavar="IMAGE:/path")
    sub.add_argument("-r", "--recursive", action="store_true", help="remove directories and everything in them")

    sub = command("mkdir", mkdir, "Creates directories in an image: python -m fsoc mkdir [-p] IMAGE:/path...")
    sub.add_argument("targets", nargs="+", metavar="IMAGE:/path")
    sub.add_argument("-p", "--parents", action="store_true", help="create missing parents; existing is fine")

    sub = command("mv", mv, "Renames or moves within an image: python -m fsoc mv IMAGE:/old IMAGE:/new")
    sub.add_argument("source")
    sub.add_argument("destination")

    sub = command("fsck", fsck, "Checks the metadata invariants of an image")
    sub.add_argument("image")
    return top


def main(argv: Optional[Sequence[str]] = None) -> int:
    arguments = parser().parse_args(argv)
    try:
        arguments.function(arguments)
    except (CommandError, OSError, ValueError) as error:
        print(f"fsoc: {error}", file=sys.stderr)
        return 1
    return 0
