"""Copying a sandbox's disk image: holes kept, blocks shared where the filesystem can, and
the copy on its way to the disk while it is made.

A copied image is set up as a loop device soon after (a fork's or a restored sandbox's
disk), and setting one up flushes the file first: with `cp`, a 1 GB copy took 0.4 s into
the page cache and then 0.5 s more to reach the disk, one after the other. Here each chunk's
write-back is started (sync_file_range, SYNC_FILE_RANGE_WRITE: not waited for) as soon as
it is copied, so the disk writes while the next chunks are copied, and little is left dirty
for the flush.

- Reflink first (the FICLONE ioctl, as `cp --reflink=auto`): on btrfs or xfs the copy shares
  every block and costs nothing to write.
- Otherwise the source's data extents (SEEK_DATA / SEEK_HOLE), each copied in the kernel
  (copy_file_range: no bytes through this process; read and written here where the kernel
  refuses the pair of files), the holes left holes and the size set at the end (`cp
  --sparse=always` does the same for a disk image, whose unwritten blocks are holes).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import fcntl
import os
from pathlib import Path

FICLONE = 0x40049409  # _IOW(0x94, 9, int), linux/fs.h
SYNC_FILE_RANGE_WRITE = 2
CHUNK = 32 * 1024 * 1024  # bytes copied between two write-back starts

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_sync_file_range = getattr(_libc, "sync_file_range", None)
if _sync_file_range is not None:
    _sync_file_range.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)


def copy_image(source: Path, target: Path) -> None:
    """`target` (made, mode 0600; it must not exist) holding what `source` holds. OSError on
    failure, with `target` removed."""
    with open(source, "rb") as reading:
        descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(descriptor, "wb") as writing:
                if not _reflinked(reading.fileno(), writing.fileno()):
                    _copy_extents(reading.fileno(), writing.fileno())
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(target)
            raise


def _reflinked(source: int, target: int) -> bool:
    try:
        fcntl.ioctl(target, FICLONE, source)
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.ENOTTY, errno.EXDEV, errno.EINVAL, errno.ENOSYS):
            return False  # a filesystem without shared blocks: copy
        raise
    return True


def _copy_extents(source: int, target: int) -> None:
    size = os.fstat(source).st_size
    position = 0
    while position < size:
        try:
            start = os.lseek(source, position, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:
                break  # only a hole from here to the end
            raise
        end = os.lseek(source, start, os.SEEK_HOLE)
        _copy_range(source, target, start, end)
        position = end
    os.ftruncate(target, size)


# copy_file_range refuses some pairs of files (two filesystems of different kinds: EXDEV;
# an old kernel: ENOSYS); those ranges go through this process instead.
_IN_KERNEL_REFUSED = (errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL)


def _copy_range(source: int, target: int, start: int, end: int) -> None:
    offset = start
    in_kernel = True
    while offset < end:
        wanted = min(CHUNK, end - offset)
        copied = 0
        if in_kernel:
            try:
                copied = os.copy_file_range(source, target, wanted, offset, offset)
            except OSError as exc:
                if exc.errno not in _IN_KERNEL_REFUSED:
                    raise
                in_kernel = False
        if not in_kernel:
            copied = _copy_through(source, target, offset, wanted)
        if copied == 0:
            raise OSError(errno.EIO, f"the source ended early at byte {offset}")
        _start_write_back(target, offset, copied)
        offset += copied


def _copy_through(source: int, target: int, offset: int, length: int) -> int:
    """Up to `length` bytes at `offset` read and written by this process, 1 MB at a time."""
    done = 0
    while done < length:
        block = os.pread(source, min(1024 * 1024, length - done), offset + done)
        if not block:
            break
        view = memoryview(block)
        while view:
            written = os.pwrite(target, view, offset + done)
            view = view[written:]
            done += written
    return done


def _start_write_back(descriptor: int, offset: int, length: int) -> None:
    """Start writing these bytes to the disk without waiting (an optimisation only: where
    the call is missing or refused, the flush at the loop device's setup writes them)."""
    if _sync_file_range is not None:
        _sync_file_range(descriptor, offset, length, SYNC_FILE_RANGE_WRITE)
