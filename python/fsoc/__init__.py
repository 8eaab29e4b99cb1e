"""fsoc for Python: make, read and write fsoc flash images from scripts, as littlefs-python
does for littlefs. An image made here is exactly what `fsoc mkfs` makes (same format, same
simulated NAND), so `fsoc fsck`, `fsoc ls/get` and `fsoc mount` take it, and Python opens
images made by the `fsoc` command.

    import fsoc
    with fsoc.Image.create("disk.img", "mlc", chips=1, size="64M") as image:
        image.mkdir("/etc")
        with image.open("/etc/hostname", "w") as file:
            file.write("device-1\\n")
    with fsoc.Image.open("disk.img", read_only=True) as image:
        print(image.listdir("/etc"), image.read_text("/etc/hostname"))

`Image.from_dir(src, path)` builds an image from a directory tree, `Image.extract(dst)`
copies one out; `python -m fsoc mkfs|ls|put|get|cat|rm|mkdir|mv|fsck` mirrors the command.
Durability: changes are on flash after `Image.sync()`, `File.sync()` or `Image.close()`.
"""

from ._file import File
from ._image import (
    COPY_CHUNK_BYTES,
    DEPTH_MAX,
    PROFILES,
    Image,
    SkippedAttributeWarning,
    SkippedFileWarning,
    StatResult,
    StatVfs,
    parse_size,
    volume_size_range,
)

__version__ = "0.1.0"

__all__ = [
    "COPY_CHUNK_BYTES",
    "DEPTH_MAX",
    "File",
    "Image",
    "PROFILES",
    "SkippedAttributeWarning",
    "SkippedFileWarning",
    "StatResult",
    "StatVfs",
    "parse_size",
    "volume_size_range",
]
