"""Files inside an image as Python file objects: `File` is a raw (unbuffered) binary file;
`Image.open` wraps it in the io module's buffers and text layer, as the built-in `open` does.

Durability: bytes written reach the volume's working state at once (another `open` of the
same image sees them), but they are on flash only after a transaction point: `File.sync()`,
`Image.sync()` or `Image.close()`. Closing a file is not a transaction point.
"""

from __future__ import annotations

import io
import os
from typing import TYPE_CHECKING, List, Optional

if TYPE_CHECKING:  # pragma: no cover
    from _typeshed import ReadableBuffer, WriteableBuffer

    from . import _fsoc


class File(io.RawIOBase):
    """An open file in an image (binary, unbuffered). Made by `Image.open(..., buffering=0)`
    or, buffered, by `Image.open`. Reads and writes at its own position; seekable."""

    def __init__(
        self,
        volume: _fsoc.Volume,
        descriptor: int,
        name: str | bytes,
        mode: str,
        readable: bool,
        writable: bool,
        append: bool,
    ) -> None:
        super().__init__()
        self._volume = volume
        self._descriptor: Optional[int] = descriptor
        self._readable = readable
        self._writable = writable
        self._append = append
        self._position = 0
        self.name = name
        self.mode = mode

    def __repr__(self) -> str:
        return f"<fsoc.File name={self.name!r} mode={self.mode!r}{' closed' if self.closed else ''}>"

    def _open_descriptor(self) -> int:
        if self._descriptor is None:
            raise ValueError("I/O operation on closed file")
        return self._descriptor

    def readable(self) -> bool:
        self._open_descriptor()
        return self._readable

    def writable(self) -> bool:
        self._open_descriptor()
        return self._writable

    def seekable(self) -> bool:
        self._open_descriptor()
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        descriptor = self._open_descriptor()
        if not self._readable:
            raise io.UnsupportedOperation("File not open for reading")
        view = memoryview(buffer).cast("B")
        data = self._volume.pread(descriptor, self._position, len(view))
        count = len(data)
        view[:count] = data
        self._position += count
        return count

    def readall(self) -> bytes:
        descriptor = self._open_descriptor()
        if not self._readable:
            raise io.UnsupportedOperation("File not open for reading")
        chunks: List[bytes] = []
        while True:
            data = self._volume.pread(descriptor, self._position, 1 << 20)
            if not data:
                return b"".join(chunks)
            chunks.append(data)
            self._position += len(data)

    def write(self, data: ReadableBuffer) -> int:
        descriptor = self._open_descriptor()
        if not self._writable:
            raise io.UnsupportedOperation("File not open for writing")
        payload = data if isinstance(data, bytes) else bytes(memoryview(data).cast("B"))
        if self._append:
            self._position = self._size(descriptor)
        count = self._volume.pwrite(descriptor, self._position, payload)
        self._position += count
        return count

    def _size(self, descriptor: int) -> int:
        return self._volume.fstat(descriptor)[6]

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        descriptor = self._open_descriptor()
        if whence == os.SEEK_SET:
            position = offset
        elif whence == os.SEEK_CUR:
            position = self._position + offset
        elif whence == os.SEEK_END:
            position = self._size(descriptor) + offset
        else:
            raise ValueError(f"invalid whence ({whence}, should be 0, 1 or 2)")
        if position < 0:
            raise OSError(22, "Invalid argument: seek before the start of the file", self.name)
        self._position = position
        return position

    def tell(self) -> int:
        self._open_descriptor()
        return self._position

    def truncate(self, size: Optional[int] = None) -> int:
        descriptor = self._open_descriptor()
        if not self._writable:
            raise io.UnsupportedOperation("File not open for writing")
        size = self._position if size is None else size
        self._volume.ftruncate(descriptor, size)
        return size

    def sync(self) -> None:
        """A transaction point: this file's data, and everything written to the image before,
        is on flash when it returns (as `fsync`)."""
        self._volume.fsync(self._open_descriptor())

    def close(self) -> None:
        """Closes the file (not a transaction point: see `sync`). Closing twice does nothing;
        a file of an image closed first is simply marked closed."""
        descriptor, self._descriptor = self._descriptor, None
        try:
            if descriptor is not None and not self._volume.closed:
                self._volume.close_file(descriptor)
        finally:
            super().close()
