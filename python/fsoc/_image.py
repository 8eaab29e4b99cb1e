"""`Image`: an fsoc image file, opened with the same flash model, configuration and lock as
the `fsoc` command, so `fsoc fsck/ls/get` read what Python wrote and Python reads what
`fsoc mkfs/put` wrote.

Paths inside an image are absolute (a relative path is taken from the root), `/`-separated,
without `..`; given as str they are encoded as the OS encodes file names (`os.fsencode`),
and names come back as str when the path was a str, as bytes when it was bytes (as
`os.listdir` does). Symbolic links are never followed inside an image: `stat` is `lstat`,
and opening a link is refused (ELOOP).

Durability: a change is in the volume's working state when its call returns; it is on flash
(in the image file, surviving a crash or power cut) after a transaction point: `sync()`,
`File.sync()`, `close()` (also at the end of a `with` block), and `from_dir`, which ends
with one.
"""

from __future__ import annotations

import errno
import io
import os
import stat as stat_module
import warnings
from typing import (
    IO,
    TYPE_CHECKING,
    Any,
    Dict,
    Iterator,
    List,
    NamedTuple,
    Optional,
    Protocol,
    Set,
    Tuple,
    Union,
    cast,
    overload,
)

from . import _fsoc
from ._file import File

if TYPE_CHECKING:  # pragma: no cover
    from typing_extensions import Literal, Self

StrPath = Union[str, "os.PathLike[str]"]
BytesPath = Union[bytes, "os.PathLike[bytes]"]
AnyPath = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]

#: Bytes copied per read or write call by `from_dir`, `add_tree` and `extract`.
COPY_CHUNK_BYTES = 1 << 20
#: Deepest directory nesting `walk` and `extract` follow in an image (a crafted image may hold
#: a chain deeper than any real tree; `extract` also holds one open local directory per level).
DEPTH_MAX = 1024
#: Names of the simulated NAND profiles (`fsoc mkfs --profile`).
PROFILES: Tuple[str, ...] = tuple(_fsoc.PROFILES)

_KIND_MODE = {
    "f": stat_module.S_IFREG,
    "d": stat_module.S_IFDIR,
    "l": stat_module.S_IFLNK,
    "c": stat_module.S_IFCHR,
    "b": stat_module.S_IFBLK,
    "p": stat_module.S_IFIFO,
    "s": stat_module.S_IFSOCK,
}


class SkippedFileWarning(UserWarning):
    """`from_dir`/`add_tree` skipped a local file fsoc cannot store: a device node, FIFO or
    socket (fsoc stores regular files, directories and symbolic links)."""


class SkippedAttributeWarning(UserWarning):
    """`from_dir`/`add_tree`/`extract` could not copy some extended attributes: the host would
    not let them be read or set (trusted.* and security.* need root; the destination's file
    system may keep fewer or smaller ones), the volume keeps none (a format older than version
    4), or one was refused. Each kind of trouble is said once per call, not once per file."""


#: The POSIX ACLs as Linux stores them in extended attributes.
_ACL_ACCESS = b"system.posix_acl_access"
_ACL_DEFAULT = b"system.posix_acl_default"
#: The namespaces fsoc keeps extended attributes in (besides the two ACL names).
_XATTR_NAMESPACES = (b"user.", b"trusted.", b"security.")
#: errnos with which a host refuses one attribute rather than failing the copy.
_HOST_REFUSALS = (
    errno.EPERM,  # trusted.* and security.* as non-root
    errno.EACCES,
    errno.EOPNOTSUPP,  # a namespace or ACLs the destination's file system does not keep
    errno.E2BIG,  # larger than it keeps
    errno.ENOSPC,  # ext4 without ea_inode: a value that fits no block
    errno.ERANGE,
    errno.EINVAL,  # a value the host will not parse (an ACL or capability)
    errno.ENOENT,  # a link reached through /proc/self/fd without /proc
)


def _kept_xattr(name: bytes) -> bool:
    """Whether fsoc keeps an attribute of this name (as `fsoc put -r` copies them)."""
    if name in (_ACL_ACCESS, _ACL_DEFAULT):
        return True
    return any(name.startswith(prefix) and len(name) > len(prefix) for prefix in _XATTR_NAMESPACES)


def _acls_last(name: bytes) -> int:
    """Sort key: other attributes first, then the default ACL, the access ACL last (it sets
    the mode's permission bits from its list)."""
    return {_ACL_DEFAULT: 1, _ACL_ACCESS: 2}.get(name, 0)


class StatResult(NamedTuple):
    """Attributes of a file, directory or link in an image, named as `os.stat_result`'s.
    `st_mode` holds the type bits too, so `stat.S_ISDIR(result.st_mode)` works."""

    st_mode: int
    st_ino: int
    st_nlink: int
    st_uid: int
    st_gid: int
    st_size: int
    st_atime_ns: int
    st_mtime_ns: int
    st_ctime_ns: int

    @property
    def st_atime(self) -> float:
        return self.st_atime_ns / 1e9

    @property
    def st_mtime(self) -> float:
        return self.st_mtime_ns / 1e9

    @property
    def st_ctime(self) -> float:
        return self.st_ctime_ns / 1e9


class StatVfs(NamedTuple):
    """Space of the volume, as `os.statvfs` names it (blocks of `f_bsize` bytes)."""

    f_bsize: int
    f_blocks: int
    f_bfree: int
    f_namemax: int


def _stat_result(raw: Tuple[int, str, int, int, int, int, int, int, int, int]) -> StatResult:
    inode, kind, mode, uid, gid, nlink, size, atime_ns, mtime_ns, ctime_ns = raw
    return StatResult(_KIND_MODE[kind] | mode, inode, nlink, uid, gid, size, atime_ns, mtime_ns, ctime_ns)


def volume_size_range(profile: str = "mlc", chips: int = 1) -> Tuple[int, int]:
    """The smallest and largest volume, in bytes, `Image.create` makes of `profile` on
    `chips` chips (the format's limits: room for the log and its reserve; the segment
    table's index in one metaroot). Unknown profiles and chip counts raise ValueError."""
    return _fsoc.volume_size_range(profile, chips)


def parse_size(size: Union[int, str]) -> int:
    """Bytes in a size given as an int or as text with a K, M, G or T suffix (binary units,
    as `fsoc mkfs --size`): `parse_size("64M") == 64 << 20`."""
    if isinstance(size, bool) or not isinstance(size, (int, str)):
        raise TypeError(f"size must be an int or a str such as '64M', not {type(size).__name__}")
    if isinstance(size, int):
        if size <= 0:
            raise ValueError(f"size must be positive, not {size}")
        return size
    text = size.strip()
    bare = text.rstrip("bB").rstrip("i")
    multipliers = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    multiplier = multipliers.get(bare[-1:].upper(), 1)
    digits = bare[:-1] if multiplier != 1 else bare
    if not digits.strip().isdigit() or int(digits) == 0:
        raise ValueError(f"invalid size {size!r} (examples: 8M, 1G, 2T)")
    return int(digits) * multiplier


def _image_path(path: AnyPath) -> bytes:
    """`path` as the image's absolute byte path: normalized (no repeated or trailing `/`, no
    `.`), rooted; `..` is refused, since the image resolves no parent links."""
    raw = os.fsencode(path)
    parts = [part for part in raw.split(b"/") if part and part != b"."]
    if b".." in parts:
        raise ValueError(f"{path!r}: '..' is not supported in image paths")
    return b"/" + b"/".join(parts)


def _join(directory: bytes, name: bytes) -> bytes:
    return directory + name if directory.endswith(b"/") else directory + b"/" + name


def _shown(path: bytes, like: AnyPath) -> Any:
    """`path` (from the image) in the type the caller used: str or bytes."""
    return path if isinstance(os.fspath(like), bytes) else os.fsdecode(path)


def _valid_name(name: bytes) -> bool:
    """Whether a name read from an image may be created locally: one path component."""
    return 0 < len(name) <= 255 and name not in (b".", b"..") and b"/" not in name and b"\0" not in name


def _caller_ids() -> Tuple[int, int]:
    return os.geteuid(), os.getegid()


class _ImageOpener(Protocol):
    def __call__(self, path: AnyPath, *, read_only: bool = False) -> "Image": ...


class _FileOpener(Protocol):
    def __call__(
        self,
        path: AnyPath,
        mode: str = "r",
        buffering: int = -1,
        encoding: Optional[str] = None,
        errors: Optional[str] = None,
        newline: Optional[str] = None,
        *,
        permissions: int = 0o644,
    ) -> IO[Any]: ...


class _OpenMethod:
    """`Image.open(path)` on the class opens an image file (`Image._open_image`);
    `image.open(path, mode)` on an image opens a file inside it (`Image._open_file`), as the
    issue's API names both."""

    @overload
    def __get__(self, instance: None, owner: type) -> _ImageOpener: ...
    @overload
    def __get__(self, instance: "Image", owner: type) -> _FileOpener: ...
    def __get__(self, instance: Optional["Image"], owner: type) -> Any:
        if instance is None:
            return owner._open_image  # type: ignore[attr-defined]
        return instance._open_file


class Image:
    """An open fsoc image file. Make one with `Image.create`, `Image.open` or
    `Image.from_dir`; use it as a context manager, or call `close()`, which commits.

    Every method raises `ValueError` once the image is closed, and `OSError` (with the file
    system's errno: FileNotFoundError, FileExistsError, IsADirectoryError,
    NotADirectoryError, OSError with errno ENOSPC, ...) when the file system refuses a call.
    """

    def __init__(self, volume: _fsoc.Volume) -> None:
        """Internal: use `Image.create`, `Image.open` or `Image.from_dir`."""
        self._volume = volume

    # ----- making and opening images -------------------------------------------------------

    @classmethod
    def create(
        cls,
        path: AnyPath,
        profile: str = "mlc",
        chips: int = 1,
        size: Union[int, str, None] = None,
        *,
        blocks: Optional[int] = None,
        seed: int = 1,
        volume_id: Optional[int] = None,
        force: bool = False,
        nvram: Union[int, str, None] = None,
        nvram_technology: str = "feram",
    ) -> "Image":
        """Formats a new image file as `fsoc mkfs` does and returns it open for writing.

        `profile` is a simulated NAND profile (see `PROFILES`: slc, mlc, tlc, mlc8k, mlc16k);
        `chips` the chips striped in the one image file (1 to 64); `size` the volume size in
        bytes or as text ("64M", "1G"); or `blocks`, erase blocks per chip (default 512). A
        size the format cannot hold is refused with the valid range. `seed` chooses the
        simulated device (bit errors, factory bad blocks); `volume_id` defaults to a random
        one, or one derived from SOURCE_DATE_EPOCH and `seed` when that variable is set.
        An existing file is replaced only with `force=True`, and never while it is in use.
        `nvram` (bytes, or text such as "128K") keeps the volume's transaction points in an
        NVRAM of that size (`nvram_technology`: feram, mram or pcm), as `fsoc mkfs --nvram`
        does: the file `PATH.nvram` beside the image, which the volume needs at every open.
        The new, empty volume is on flash when this returns.
        """
        size_bytes = None if size is None else parse_size(size)
        nvram_bytes = None if nvram is None else parse_size(nvram)
        return cls(
            _fsoc.Volume.create(
                os.fsdecode(path),
                profile,
                chips,
                blocks,
                size_bytes,
                seed,
                volume_id,
                force,
                nvram_bytes,
                nvram_technology,
            )
        )

    @classmethod
    def _open_image(cls, path: AnyPath, *, read_only: bool = False) -> "Image":
        """Opens (mounts) an existing image made by `Image.create` or `fsoc mkfs`. A writer
        locks the file exclusively and a reader (`read_only=True`) shares it, so an image
        mounted with `fsoc mount` or open for writing elsewhere is refused (OSError EBUSY)."""
        return cls(_fsoc.Volume.open(os.fsdecode(path), read_only))

    @classmethod
    def from_dir(
        cls,
        source: AnyPath,
        path: AnyPath,
        *,
        profile: str = "mlc",
        chips: int = 1,
        size: Union[int, str, None] = None,
        force: bool = False,
        special: "Literal['warn', 'skip', 'raise']" = "warn",
    ) -> "Image":
        """Creates the image `path` holding a copy of the local directory tree `source` (its
        contents become the image's root), and returns it open; everything is on flash when
        it returns (it ends with a transaction point).

        Copied: regular files, directories, symbolic links (as links, never followed), hard
        links among the copied files (as hard links), permission bits, modification and
        access times, owners when run as root (else the caller's), and extended attributes as
        `fsoc put -r` copies them: `user.`, `trusted.` and `security.` ones, POSIX ACLs and
        file capabilities (what the host will not let us read, or the volume will not keep,
        is skipped with one `SkippedAttributeWarning`). fsoc stores no device
        nodes, FIFOs or sockets: `special="warn"` (the default) skips each with a
        `SkippedFileWarning`, `"skip"` skips them silently, `"raise"` raises OSError
        (EOPNOTSUPP) naming the first. Without `size`, the volume is sized from the tree
        (twice its data plus room for metadata, at least 64 MiB).
        """
        if size is None:
            size_min, size_max = volume_size_range(profile, chips)
            size = min(max(_size_for_tree(os.fsencode(source)), size_min), size_max)
        image = cls.create(path, profile, chips, size, force=force)
        try:
            image.add_tree(source, "/", special=special)
            image.sync()
        except BaseException:
            image.close()
            raise
        return image

    open = _OpenMethod()

    # ----- the image itself ----------------------------------------------------------------

    @property
    def path(self) -> str:
        """The image file's path."""
        return os.fspath(self._volume.path)

    @property
    def closed(self) -> bool:
        return self._volume.closed

    @property
    def read_only(self) -> bool:
        return self._volume.read_only

    def close(self) -> None:
        """Unmounts: commits (everything written is on flash when it returns), flushes the
        image file and releases its lock. Files still open are closed. Closing twice does
        nothing; after `close` every call raises ValueError."""
        self._volume.close()

    def sync(self) -> None:
        """A transaction point: everything written so far is on flash when it returns (a
        crash or power cut afterwards keeps it). Costs a page program or two (a delta
        commit) for small changes."""
        self._volume.sync()

    def __enter__(self) -> "Self":
        return self

    def __exit__(self, *exception: object) -> None:
        """Closes (and so commits) the image, also when the block raised: each call before
        the exception completed, so the committed state is consistent."""
        self.close()

    def __repr__(self) -> str:
        return f"<fsoc.Image {self.path!r}{' closed' if self.closed else ''}>"

    def statvfs(self) -> StatVfs:
        """Block size, blocks and free blocks of the volume, and the longest name."""
        return StatVfs(*self._volume.statfs())

    def fsck(self) -> List[str]:
        """Checks every invariant of the volume's metadata (the trees, the segment table,
        link counts, as `fsoc fsck --metadata-only`); returns the violations found, empty
        when the volume is consistent."""
        return self._volume.fsck()

    # ----- files ---------------------------------------------------------------------------

    def _open_file(
        self,
        path: AnyPath,
        mode: str = "r",
        buffering: int = -1,
        encoding: Optional[str] = None,
        errors: Optional[str] = None,
        newline: Optional[str] = None,
        *,
        permissions: int = 0o644,
    ) -> IO[Any]:
        """Opens a file in the image, as the built-in `open` does: modes r, w, x, a with
        optional + and b (text mode by default, UTF-8 unless `encoding` says otherwise).
        `buffering=0` (binary only) returns the raw `fsoc.File`. A created file gets
        `permissions` and the caller's owner. Symbolic links are not followed (ELOOP).
        Closing the file is not a transaction point: see `sync`."""
        kinds = set(mode)
        if (
            len(mode) != len(kinds)
            or not kinds <= set("rwxab+t")
            or len(kinds & set("rwxa")) != 1
            or {"b", "t"} <= kinds
        ):
            raise ValueError(f"invalid mode: {mode!r}")
        binary = "b" in kinds
        if binary and (encoding is not None or errors is not None or newline is not None):
            raise ValueError("binary mode doesn't take an encoding, errors or newline argument")
        if buffering == 0 and not binary:
            raise ValueError("can't have unbuffered text I/O")
        update = "+" in kinds
        readable = "r" in kinds or update
        writable = "r" not in kinds or update
        create = "r" not in kinds
        exclusive = "x" in kinds
        truncate = "w" in kinds
        append = "a" in kinds
        image_path = _image_path(path)
        uid, gid = _caller_ids()
        descriptor = self._volume.open_file(
            image_path, readable, writable, create, exclusive, truncate, append, permissions, uid, gid
        )
        name = path if isinstance(path, (str, bytes)) else os.fspath(path)
        raw = File(self._volume, descriptor, name, mode, readable, writable, append)
        if append:
            raw.seek(0, os.SEEK_END)
        if buffering == 0:
            return cast(IO[Any], raw)
        buffer_size = COPY_CHUNK_BYTES if buffering in (-1, 1) else buffering
        buffer: Union[io.BufferedRandom, io.BufferedWriter, io.BufferedReader]
        if readable and writable:
            buffer = io.BufferedRandom(raw, buffer_size)
        elif writable:
            buffer = io.BufferedWriter(raw, buffer_size)
        else:
            buffer = io.BufferedReader(raw, buffer_size)
        if binary:
            return buffer
        return io.TextIOWrapper(
            buffer, encoding or "utf-8", errors, newline, line_buffering=buffering == 1
        )

    def read_bytes(self, path: AnyPath) -> bytes:
        """The whole content of a file."""
        with cast(File, self._open_file(path, "rb", buffering=0)) as file:
            return file.readall()

    def write_bytes(self, path: AnyPath, data: bytes, *, permissions: int = 0o644) -> int:
        """Creates or replaces the file `path` with `data`; returns the bytes written."""
        with cast(File, self._open_file(path, "wb", buffering=0, permissions=permissions)) as file:
            view = memoryview(data)
            written = 0
            while written < len(view):
                written += file.write(view[written : written + COPY_CHUNK_BYTES])
            return written

    def read_text(self, path: AnyPath, encoding: str = "utf-8") -> str:
        return self.read_bytes(path).decode(encoding)

    def write_text(self, path: AnyPath, text: str, encoding: str = "utf-8") -> int:
        return self.write_bytes(path, text.encode(encoding))

    # ----- names and attributes ------------------------------------------------------------

    def stat(self, path: AnyPath) -> StatResult:
        """Attributes of `path`; a symbolic link's own (links are not followed)."""
        return _stat_result(self._volume.stat(_image_path(path)))

    def exists(self, path: AnyPath) -> bool:
        try:
            self.stat(path)
        except FileNotFoundError:
            return False
        return True

    def isdir(self, path: AnyPath) -> bool:
        try:
            return stat_module.S_ISDIR(self.stat(path).st_mode)
        except (FileNotFoundError, NotADirectoryError):
            return False

    def isfile(self, path: AnyPath) -> bool:
        try:
            return stat_module.S_ISREG(self.stat(path).st_mode)
        except (FileNotFoundError, NotADirectoryError):
            return False

    def islink(self, path: AnyPath) -> bool:
        try:
            return stat_module.S_ISLNK(self.stat(path).st_mode)
        except (FileNotFoundError, NotADirectoryError):
            return False

    def listdir(self, path: AnyPath = "/") -> List[Any]:
        """Names in the directory `path`, in name order (str, or bytes if `path` is bytes)."""
        entries = self._volume.readdir(_image_path(path))
        return [_shown(name, path) for name, _, _ in entries]

    def walk(self, top: AnyPath = "/", topdown: bool = True) -> Iterator[Tuple[Any, List[Any], List[Any]]]:
        """Like `os.walk`: yields (dirpath, dirnames, filenames) for `top` and every directory
        under it; symbolic links are listed in filenames and never followed. With `topdown`,
        removing names from dirnames prunes the walk. A directory reached twice (only a
        damaged or crafted image has one) raises OSError (EIO), as does nesting deeper than
        `DEPTH_MAX`."""
        start = _image_path(top)
        # (path, inode, depth) to list, or a finished (path, dirs, files) to yield bottom-up.
        pending: List[Any] = [(start, self._volume.stat(start)[0], 1)]
        seen = {pending[0][1]}
        while pending:
            item = pending.pop()
            if len(item) == 3 and isinstance(item[1], list):
                yield item
                continue
            path, _, depth = item
            directories: List[Any] = []
            files: List[Any] = []
            inodes: Dict[bytes, int] = {}
            for name, inode, kind in self._volume.readdir(path):
                if kind == "d":
                    directories.append(_shown(name, top))
                    inodes[name] = inode
                else:
                    files.append(_shown(name, top))
            shown_path = _shown(path, top)
            if topdown:
                yield shown_path, directories, files
            else:
                pending.append((shown_path, directories, files))
            for name in reversed(directories):
                name_bytes = os.fsencode(name)
                child = _join(path, name_bytes)
                inode = inodes[name_bytes]
                if inode in seen:
                    raise OSError(errno.EIO, "directory cycle or second name: not followed", child)
                if depth >= DEPTH_MAX:
                    raise OSError(errno.EIO, f"more than {DEPTH_MAX} nested directories", child)
                seen.add(inode)
                pending.append((child, inode, depth + 1))

    def mkdir(self, path: AnyPath, mode: int = 0o755, *, parents: bool = False, exist_ok: bool = False) -> None:
        """Creates a directory owned by the caller. `parents=True` creates missing parents
        too (as `mkdir -p`); `exist_ok=True` accepts an existing directory."""
        image_path = _image_path(path)
        uid, gid = _caller_ids()
        if parents:
            prefix = b""
            for part in image_path.split(b"/")[1:-1]:
                prefix += b"/" + part
                try:
                    self._volume.mkdir(prefix, mode, uid, gid)
                except FileExistsError:
                    if not self.isdir(prefix):
                        raise
        try:
            self._volume.mkdir(image_path, mode, uid, gid)
        except FileExistsError:
            if not (exist_ok and self.isdir(image_path)):
                raise

    def makedirs(self, path: AnyPath, mode: int = 0o755, exist_ok: bool = False) -> None:
        """`mkdir(path, mode, parents=True, exist_ok=exist_ok)`, as `os.makedirs`."""
        self.mkdir(path, mode, parents=True, exist_ok=exist_ok)

    def remove(self, path: AnyPath) -> None:
        """Removes a file or symbolic link (a directory: IsADirectoryError; see `rmdir`,
        `rmtree`). A file still open stays readable through its open files until closed."""
        self._volume.unlink(_image_path(path))

    unlink = remove

    def rmdir(self, path: AnyPath) -> None:
        """Removes an empty directory."""
        self._volume.rmdir(_image_path(path))

    def rmtree(self, path: AnyPath) -> None:
        """Removes a directory and everything under it."""
        for directory, _, files in self.walk(_image_path(path), topdown=False):
            for name in files:
                self._volume.unlink(_join(directory, name))
            self._volume.rmdir(directory)

    def rename(self, source: AnyPath, target: AnyPath) -> None:
        """Renames atomically; an existing `target` is replaced (as POSIX rename)."""
        self._volume.rename(_image_path(source), _image_path(target))

    replace = rename

    def symlink(self, target: AnyPath, path: AnyPath) -> None:
        """Creates the symbolic link `path` holding `target` (stored as given, not checked)."""
        uid, gid = _caller_ids()
        self._volume.symlink(os.fsencode(target), _image_path(path), uid, gid)

    def readlink(self, path: AnyPath) -> Any:
        """The target of a symbolic link (str, or bytes if `path` is bytes)."""
        return _shown(self._volume.readlink(_image_path(path)), path)

    def link(self, existing: AnyPath, new: AnyPath) -> None:
        """A second name `new` for the file `existing` (a hard link)."""
        self._volume.link(_image_path(existing), _image_path(new))

    def chmod(self, path: AnyPath, mode: int) -> None:
        self._volume.setattr(_image_path(path), mode=mode & 0o7777)

    def chown(self, path: AnyPath, uid: int, gid: int) -> None:
        self._volume.setattr(_image_path(path), uid=uid, gid=gid)

    def utime(self, path: AnyPath, ns: Tuple[int, int]) -> None:
        """Sets (access, modification) times in nanoseconds since the epoch."""
        self._volume.setattr(_image_path(path), atime_ns=ns[0], mtime_ns=ns[1])

    # ----- extended attributes -------------------------------------------------------------

    def getxattr(self, path: AnyPath, name: Union[str, bytes]) -> bytes:
        """The value of the extended attribute `name` of `path` (a link itself: links are
        never followed). OSError ENODATA when it has none (always, on a volume older than
        format version 4)."""
        return self._volume.getxattr(_image_path(path), os.fsencode(name))

    def setxattr(self, path: AnyPath, name: Union[str, bytes], value: bytes, flags: int = 0) -> None:
        """Sets the extended attribute `name` of `path` (a link itself). `flags`: 0,
        `os.XATTR_CREATE` (FileExistsError if it exists) or `os.XATTR_REPLACE` (OSError
        ENODATA if it does not). Names: `user.` (files and directories), `trusted.`,
        `security.`, and the POSIX ACLs `system.posix_acl_access` (which sets the mode's
        permission bits from its list) and `system.posix_acl_default` (directories); any
        other name, or a volume older than format version 4, raises OSError EOPNOTSUPP.
        Names are 1 to 255 bytes (ERANGE), values up to 64 KiB (E2BIG)."""
        self._volume.setxattr(_image_path(path), os.fsencode(name), bytes(value), flags)

    def listxattr(self, path: AnyPath) -> List[str]:
        """The names of the extended attributes of `path` (a link itself)."""
        return [os.fsdecode(name) for name in self._volume.listxattr(_image_path(path))]

    def removexattr(self, path: AnyPath, name: Union[str, bytes]) -> None:
        """Removes the extended attribute `name` of `path` (a link itself); OSError ENODATA
        when it has none."""
        self._volume.removexattr(_image_path(path), os.fsencode(name))

    # ----- trees in and out ----------------------------------------------------------------

    def add_tree(
        self,
        source: AnyPath,
        target: AnyPath = "/",
        *,
        special: "Literal['warn', 'skip', 'raise']" = "warn",
    ) -> List[Any]:
        """Copies the contents of the local directory `source` into the image directory
        `target` (created if missing), as `from_dir` describes; an existing file is replaced.
        Returns the local paths skipped (device nodes, FIFOs, sockets)."""
        if special not in ("warn", "skip", "raise"):
            raise ValueError(f"special must be 'warn', 'skip' or 'raise', not {special!r}")
        root = os.fsencode(source)
        if not stat_module.S_ISDIR(os.stat(root).st_mode):
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), source)
        target_path = _image_path(target)
        if target_path != b"/":
            self.mkdir(target_path, parents=True, exist_ok=True)
        copier = _TreeCopier(self._volume, special)
        copier.copy_contents(root, target_path)
        return [_shown(path, source) for path in copier.skipped]

    def _put(self, local: bytes, target: bytes) -> List[bytes]:
        """`python -m fsoc put`: copies one local file, link or tree to `target`."""
        copier = _TreeCopier(self._volume, "warn")
        copier.copy_entry(local, target)
        return copier.skipped

    def extract(self, destination: AnyPath, source: AnyPath = "/") -> None:
        """Copies the image's `source` out to the local `destination`. A directory's contents
        go into `destination` (created if missing; an existing one gets the image
        directory's permissions and times), with permissions, times, symbolic links (never
        followed), hard links, extended attributes (POSIX ACLs and file capabilities too) and,
        when run as root, owners. Attributes the host refuses (trusted.* and security.* need
        root) are skipped with one `SkippedAttributeWarning`. A file or link is written at
        `destination`, or into it if it is an existing directory.

        Nothing is written outside `destination`: names from the image are checked (one
        path component each), everything is created relative to an open directory without
        following links, and a directory cycle or a tree deeper than `DEPTH_MAX` raises
        OSError (EIO) instead of being followed.
        """
        source_path = _image_path(source)
        local = os.fsencode(destination)
        _Extraction(self._volume).run(source_path, local)


def _size_for_tree(root: bytes) -> int:
    """A volume size that holds the local tree `root`: twice its data (each file rounded up
    to 16 KiB pages: the cleaner needs free segments to work) plus 16 KiB per entry and
    32 MiB, at least 64 MiB."""
    page_bytes = 16 << 10
    total = 0
    for directory, directories, files in os.walk(root):
        for name in directories + files:
            total += page_bytes
            try:
                info = os.lstat(os.path.join(directory, name))
            except OSError:
                continue
            if stat_module.S_ISREG(info.st_mode):
                total += 2 * (-(-info.st_size // page_bytes) * page_bytes)
    return max(64 << 20, total + (32 << 20))


class _AttributeCopy:
    """Extended attributes from local entries into a volume, as `fsoc put -r` copies them,
    and what could not be copied: each kind of trouble is said once, not per file."""

    def __init__(self, volume: _fsoc.Volume) -> None:
        self.volume = volume
        # The volume keeps no attributes (format older than 4): said once, no more tried.
        self.volume_keeps_none = False
        # Attributes the host would not let us read (trusted.* needs root).
        self.unreadable = 0
        self.first_unreadable: Optional[str] = None
        # Names outside the namespaces fsoc keeps, each said once.
        self.foreign: Set[bytes] = set()

    def local(self, local: bytes) -> Tuple[List[Tuple[bytes, bytes]], List[bytes]]:
        """The attributes fsoc keeps of `local` (not following a link), in the host's order,
        and the names the host would not let us read."""
        try:
            names = [os.fsencode(name) for name in os.listxattr(local, follow_symlinks=False)]
        except OSError as error:
            if error.errno == errno.EOPNOTSUPP:
                return [], []
            raise
        kept: List[Tuple[bytes, bytes]] = []
        unreadable: List[bytes] = []
        for name in names:
            if not _kept_xattr(name):
                if name not in self.foreign:
                    self.foreign.add(name)
                    warnings.warn(
                        f"extended attribute {os.fsdecode(name)} (first on {os.fsdecode(local)}) is not copied: "
                        "fsoc keeps user., trusted. and security. attributes and POSIX ACLs",
                        SkippedAttributeWarning,
                        stacklevel=2,
                    )
                continue
            try:
                kept.append((name, os.getxattr(local, name, follow_symlinks=False)))
            except OSError as error:
                if error.errno == errno.ENODATA:
                    continue  # removed since it was listed
                if error.errno not in (errno.EPERM, errno.EACCES, errno.EOPNOTSUPP):
                    raise
                self.unreadable += 1
                if self.first_unreadable is None:
                    self.first_unreadable = f"{os.fsdecode(name)} of {os.fsdecode(local)}: {error.strerror}"
                unreadable.append(name)
        return kept, unreadable

    def copy(self, local: bytes, image_path: bytes, info: os.stat_result) -> None:
        """Makes the attributes of `image_path`, just copied from `local`, the local entry's,
        and its mode the local one (also where the image's directory gave it a default ACL to
        inherit). In this order, as Linux ties ACLs to the mode: attributes the local entry
        lacks are removed; the mode is set; the other attributes, then the default ACL and the
        access ACL last, which sets the mode's permission bits (checked after it)."""
        kept, unreadable = ([], []) if self.volume_keeps_none else self.local(local)
        wanted = {name for name, _ in kept}
        for name in [] if self.volume_keeps_none else self.volume.listxattr(image_path):
            if name not in wanted and name not in unreadable:
                self.volume.removexattr(image_path, name)
        mode = stat_module.S_IMODE(info.st_mode)
        if not stat_module.S_ISLNK(info.st_mode) and self.volume.stat(image_path)[2] & 0o7777 != mode:
            self.volume.setattr(image_path, mode=mode)
        access_set = False
        for name, value in sorted(kept, key=lambda attribute: _acls_last(attribute[0])):
            try:
                self.volume.setxattr(image_path, name, value, 0)
            except OSError as error:
                if error.errno == errno.EOPNOTSUPP:
                    self.volume_keeps_none = True
                    warnings.warn(
                        f"the volume (format version {self.volume.format_version}) keeps no extended attributes; "
                        "they were not copied",
                        SkippedAttributeWarning,
                        stacklevel=2,
                    )
                    return
                if error.errno not in (errno.EPERM, errno.EACCES, errno.EINVAL, errno.ERANGE, errno.E2BIG):
                    raise
                warnings.warn(
                    f"{os.fsdecode(image_path)}: extended attribute {os.fsdecode(name)} not copied: {error.strerror}",
                    SkippedAttributeWarning,
                    stacklevel=2,
                )
                continue
            access_set = access_set or name == _ACL_ACCESS
        if access_set and self.volume.stat(image_path)[2] & 0o7777 != mode:
            warnings.warn(
                f"{os.fsdecode(image_path)}: its access ACL left mode {self.volume.stat(image_path)[2] & 0o7777:o}, "
                f"not {mode:o} as {os.fsdecode(local)} has",
                SkippedAttributeWarning,
                stacklevel=2,
            )

    def report(self) -> None:
        """One warning for the attributes the host would not let us read, if any."""
        if self.first_unreadable is not None:
            warnings.warn(
                f"{self.unreadable} extended attribute(s) could not be read here and were not copied "
                f"(trusted.* needs root); the first: {self.first_unreadable}",
                SkippedAttributeWarning,
                stacklevel=2,
            )
            self.unreadable, self.first_unreadable = 0, None


class _TreeCopier:
    """Copies local trees into a volume, iteratively (a deep tree cannot exhaust Python's
    recursion limit); each directory's entries in name order; a directory's attributes and
    times are set after everything in it is copied (so nothing copied into it inherits its
    default ACL: each entry has its own)."""

    def __init__(self, volume: _fsoc.Volume, special: str) -> None:
        self.volume = volume
        self.special = special
        self.skipped: List[bytes] = []
        self.as_root = os.geteuid() == 0
        self.caller = _caller_ids()
        # (st_dev, st_ino) of a local file with several links -> its path in the image.
        self.linked: Dict[Tuple[int, int], bytes] = {}
        self.attributes = _AttributeCopy(volume)

    def owner(self, info: os.stat_result) -> Tuple[int, int]:
        return (info.st_uid, info.st_gid) if self.as_root else self.caller

    def copy_contents(self, source: bytes, target: bytes) -> None:
        # Work items: (local path, image path, None) to copy, or (local path, image path,
        # stat) to finish a directory.
        pending: List[Tuple[bytes, bytes, Optional[os.stat_result]]] = []
        root_info = os.lstat(source)
        pending.append((source, target, root_info))
        self.push_entries(pending, source, target)
        self.run(pending)

    def copy_entry(self, local: bytes, target: bytes) -> None:
        """Copies one local file, link or directory tree to `target`."""
        self.run([(local, target, None)])

    def run(self, pending: List[Tuple[bytes, bytes, Optional[os.stat_result]]]) -> None:
        while pending:
            local, image_path, info = pending.pop()
            if info is not None:
                # A directory whose entries are all copied: its attributes (and mode), times.
                self.attributes.copy(local, image_path, info)
                self.set_times(image_path, info)
                continue
            info = os.lstat(local)
            if stat_module.S_ISDIR(info.st_mode):
                self.make_directory(image_path, info)
                pending.append((local, image_path, info))
                self.push_entries(pending, local, image_path)
            elif stat_module.S_ISLNK(info.st_mode):
                self.replace_non_directory(image_path)
                uid, gid = self.owner(info)
                self.volume.symlink(os.readlink(local), image_path, uid, gid)
                self.attributes.copy(local, image_path, info)
                self.set_times(image_path, info)
            elif stat_module.S_ISREG(info.st_mode):
                self.copy_file(local, image_path, info)
            else:
                self.skip(local)
        self.attributes.report()

    def push_entries(self, pending: List[Any], local: bytes, image_path: bytes) -> None:
        # Reversed, so the stack hands them out in name order.
        for name in sorted(os.listdir(local), reverse=True):
            pending.append((os.path.join(local, name), _join(image_path, name), None))

    def skip(self, local: bytes) -> None:
        reason = "fsoc stores only regular files, directories and symbolic links"
        if self.special == "raise":
            raise OSError(errno.EOPNOTSUPP, f"cannot store a device node, FIFO or socket: {reason}", os.fsdecode(local))
        if self.special == "warn":
            warnings.warn(f"skipping {os.fsdecode(local)}: {reason}", SkippedFileWarning, stacklevel=5)
        self.skipped.append(local)

    def existing_kind(self, image_path: bytes) -> Optional[str]:
        try:
            return self.volume.stat(image_path)[1]
        except FileNotFoundError:
            return None

    def replace_non_directory(self, image_path: bytes) -> None:
        kind = self.existing_kind(image_path)
        if kind == "d":
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), os.fsdecode(image_path))
        if kind is not None:
            self.volume.unlink(image_path)

    def make_directory(self, image_path: bytes, info: os.stat_result) -> None:
        kind = self.existing_kind(image_path)
        if kind == "d":
            return
        if kind is not None:
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), os.fsdecode(image_path))
        uid, gid = self.owner(info)
        self.volume.mkdir(image_path, stat_module.S_IMODE(info.st_mode), uid, gid)

    def copy_file(self, local: bytes, image_path: bytes, info: os.stat_result) -> None:
        key = (info.st_dev, info.st_ino)
        if info.st_nlink > 1 and key in self.linked:
            self.replace_non_directory(image_path)
            self.volume.link(self.linked[key], image_path)
            return
        if self.existing_kind(image_path) == "l":
            self.volume.unlink(image_path)
        uid, gid = self.owner(info)
        mode = stat_module.S_IMODE(info.st_mode)
        descriptor = self.volume.open_file(image_path, False, True, True, False, True, False, mode, uid, gid)
        try:
            local_descriptor = os.open(local, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                offset = 0
                while True:
                    data = os.read(local_descriptor, COPY_CHUNK_BYTES)
                    if not data:
                        break
                    self.volume.pwrite(descriptor, offset, data)
                    offset += len(data)
            finally:
                os.close(local_descriptor)
        finally:
            self.volume.close_file(descriptor)
        # After the content: a write is what takes a file capability away.
        self.attributes.copy(local, image_path, info)
        self.set_times(image_path, info)
        if info.st_nlink > 1:
            self.linked[key] = image_path

    def set_times(self, image_path: bytes, info: os.stat_result) -> None:
        """The times (the mode is `_AttributeCopy.copy`'s, with the ACLs)."""
        self.volume.setattr(image_path, atime_ns=info.st_atime_ns, mtime_ns=info.st_mtime_ns)


class _Directory:
    """One open local directory of an extraction and the image directory it receives."""

    def __init__(
        self,
        descriptor: int,
        local_path: bytes,
        image_path: bytes,
        entries: List[Tuple[bytes, int, str]],
        info: StatResult,
    ) -> None:
        self.descriptor = descriptor
        # Relative to the extraction's root directory (b"." for the root itself).
        self.local_path = local_path
        self.image_path = image_path
        self.entries = entries
        self.next_index = 0
        self.info = info


class _Extraction:
    """`Image.extract`: see its docstring for the guarantees."""

    def __init__(self, volume: _fsoc.Volume) -> None:
        self.volume = volume
        self.as_root = os.geteuid() == 0
        # Image inode of a file with several links -> its first name, relative to `root`.
        self.linked: Dict[int, bytes] = {}
        self.root: Optional[int] = None
        # Extended attributes the host refused (trusted.* and security.* need root): how many
        # and the first, said in one warning at the end.
        self.refused = 0
        self.first_refused: Optional[str] = None

    def run(self, source: bytes, destination: bytes) -> None:
        self.extract(source, destination)
        if self.first_refused is not None:
            warnings.warn(
                f"{self.refused} extended attribute(s) could not be restored here and were skipped "
                f"(trusted.* and security.* need root); the first: {self.first_refused}",
                SkippedAttributeWarning,
                stacklevel=3,
            )

    def extract(self, source: bytes, destination: bytes) -> None:
        info = _stat_result(self.volume.stat(source))
        if stat_module.S_ISDIR(info.st_mode):
            self.extract_tree(source, destination, info)
            return
        # A file or link: into an existing directory, or at the destination path.
        if os.path.isdir(destination):
            parent, name = destination, source.rsplit(b"/", 1)[-1]
        else:
            parent, name = os.path.split(destination)
            parent = parent or b"."
        descriptor = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            self.extract_entry(descriptor, name, source, info)
        finally:
            os.close(descriptor)

    def extract_tree(self, source: bytes, destination: bytes, info: StatResult) -> None:
        try:
            os.mkdir(destination, 0o700)
        except FileExistsError:
            pass
        root = os.open(destination, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self.root = root
        stack = [_Directory(root, b".", source, self.volume.readdir(source), info)]
        seen = {info.st_ino}
        try:
            while stack:
                directory = stack[-1]
                if directory.next_index == len(directory.entries):
                    stack.pop()
                    # Attributes, permissions and times last, so a read-only directory could
                    # still be filled and nothing extracted into it inherits its default ACL.
                    self.set_attributes(directory.descriptor, directory.info, directory.image_path)
                    os.close(directory.descriptor)
                    continue
                name, inode, kind = directory.entries[directory.next_index]
                directory.next_index += 1
                child = _join(directory.image_path, name)
                if not _valid_name(name):
                    raise OSError(
                        errno.EIO,
                        f"entry {name!r}: not a usable file name; the image is damaged or hostile",
                        os.fsdecode(directory.image_path),
                    )
                child_info = _stat_result(self.volume.stat(child))
                local_path = os.path.join(directory.local_path, name)
                if kind != "d":
                    self.extract_entry(directory.descriptor, name, child, child_info, local_path)
                    continue
                if inode in seen:
                    raise OSError(errno.EIO, "directory cycle or second name in the image: not followed", os.fsdecode(child))
                if len(stack) >= DEPTH_MAX:
                    raise OSError(errno.EIO, f"more than {DEPTH_MAX} nested directories: not followed", os.fsdecode(child))
                seen.add(inode)
                try:
                    os.mkdir(name, 0o700, dir_fd=directory.descriptor)
                except FileExistsError:
                    pass
                flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
                descriptor = os.open(name, flags, dir_fd=directory.descriptor)
                stack.append(_Directory(descriptor, local_path, child, self.volume.readdir(child), child_info))
        finally:
            for directory in stack:
                os.close(directory.descriptor)
            self.root = None

    def extract_entry(
        self, parent: int, name: bytes, source: bytes, info: StatResult, local_path: Optional[bytes] = None
    ) -> None:
        """Extracts a file or link as `name` in the open directory `parent` (`local_path`
        relative to the extraction's root, for hard links)."""
        if stat_module.S_ISLNK(info.st_mode):
            target = self.volume.readlink(source)
            self.remove_in_the_way(parent, name)
            os.symlink(target, name, dir_fd=parent)
            if self.as_root:
                os.chown(name, info.st_uid, info.st_gid, dir_fd=parent, follow_symlinks=False)
            names = self.volume.listxattr(source)
            if names:
                # setxattr refuses an O_PATH descriptor: its /proc/self/fd path is followed to
                # the link itself, never beyond it.
                node = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
                try:
                    self.restore_attributes(f"/proc/self/fd/{node}", source, names, acls=False)
                finally:
                    os.close(node)
            os.utime(name, ns=(info.st_atime_ns, info.st_mtime_ns), dir_fd=parent, follow_symlinks=False)
            return
        if info.st_nlink > 1 and info.st_ino in self.linked and self.root is not None:
            self.remove_in_the_way(parent, name)
            os.link(
                self.linked[info.st_ino], name, src_dir_fd=self.root, dst_dir_fd=parent, follow_symlinks=False
            )
            return
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            local = os.open(name, flags, 0o600, dir_fd=parent)
        except OSError as error:
            if error.errno != errno.ELOOP:
                raise
            # A symbolic link is in the way: replace it, never write through it.
            os.unlink(name, dir_fd=parent)
            local = os.open(name, flags, 0o600, dir_fd=parent)
        try:
            descriptor = self.volume.open_file(source, True, False, False, False, False, False, 0, 0, 0)
            try:
                offset = 0
                while True:
                    data = self.volume.pread(descriptor, offset, COPY_CHUNK_BYTES)
                    if not data:
                        break
                    view = memoryview(data)
                    while view:
                        view = view[os.write(local, view) :]
                    offset += len(data)
            finally:
                self.volume.close_file(descriptor)
            # After the content: a write takes a file capability away.
            self.set_attributes(local, info, source)
        finally:
            os.close(local)
        if info.st_nlink > 1 and local_path is not None:
            self.linked[info.st_ino] = local_path

    def remove_in_the_way(self, parent: int, name: bytes) -> None:
        try:
            os.unlink(name, dir_fd=parent)
        except FileNotFoundError:
            pass

    def set_attributes(self, descriptor: int, info: StatResult, source: bytes) -> None:
        """Owner, extended attributes, mode and times of the open local file or directory,
        from the image's `source`, in the order Linux needs: the owner first (a chown takes a
        file capability away); then the attributes, while the local permissions still let us
        write them; the mode; the ACLs, whose mask is the mode's group bits already; the
        times last (setting an attribute changes only the ctime)."""
        if self.as_root:
            os.chown(descriptor, info.st_uid, info.st_gid)
        names = self.volume.listxattr(source)
        # An ACL the local file inherited from its directory that the image's lacks goes.
        for acl in (_ACL_ACCESS, _ACL_DEFAULT):
            if acl not in names:
                try:
                    os.removexattr(descriptor, acl)
                except OSError as error:
                    if error.errno not in (errno.ENODATA, errno.EOPNOTSUPP):
                        self.refuse(acl, source, error)
        self.restore_attributes(descriptor, source, names, acls=False)
        os.chmod(descriptor, stat_module.S_IMODE(info.st_mode))
        self.restore_attributes(descriptor, source, names, acls=True)
        os.utime(descriptor, ns=(info.st_atime_ns, info.st_mtime_ns))

    def restore_attributes(self, local: Union[int, str], source: bytes, names: List[bytes], acls: bool) -> None:
        """Sets on `local` (a descriptor, or a /proc/self/fd path) the image attributes of
        `source` among `names`: the ACLs (the default one, then the access one), or the
        others. One value is held at a time."""
        if acls:
            chosen = [acl for acl in (_ACL_DEFAULT, _ACL_ACCESS) if acl in names]
        else:
            chosen = [name for name in names if name not in (_ACL_ACCESS, _ACL_DEFAULT)]
        for name in chosen:
            try:
                value = self.volume.getxattr(source, name)
            except OSError as error:
                if error.errno == errno.ENODATA:
                    continue
                raise
            try:
                os.setxattr(local, name, value)
            except OSError as error:
                self.refuse(name, source, error)

    def refuse(self, name: bytes, source: bytes, error: OSError) -> None:
        """Counts an attribute the host refused (re-raises any other error)."""
        if error.errno not in _HOST_REFUSALS:
            raise error
        self.refused += 1
        if self.first_refused is None:
            self.first_refused = f"{os.fsdecode(name)} of {os.fsdecode(source)}: {error.strerror}"
