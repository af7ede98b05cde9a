"""Atomic writes, hashing and bounded reads: a killed run never leaves a half-written
file, and a committed link to /dev/zero or a FIFO is never read."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any


def _umask() -> int:
    # Read, not set-and-restore: os.umask changes it for every thread meanwhile.
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temp file in the same folder and `os.replace`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # mkstemp creates 0600: the file replaced keeps its mode, a new one gets what
        # open() would give it (a log or manifest others on the runner must read).
        try:
            mode = stat.S_IMODE(os.stat(path).st_mode)
        except OSError:
            mode = 0o666 & ~_umask()
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def atomic_write_text(path: Path, text: str) -> None:
    """Write `text` to `path` through a temp file in the same folder and
    `os.replace`: a kill leaves the old file or the new one, never half of one."""
    atomic_write_bytes(path, text.encode("utf-8"))


def canonical_json(obj: Any) -> str:
    """Deterministic JSON: sorted keys, fixed separators, trailing newline."""
    return json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def atomic_write_json(path: Path, obj: Any) -> None:
    """`atomic_write_text` of canonical JSON."""
    atomic_write_text(path, canonical_json(obj))


def sha256_bytes(data: bytes) -> str:
    """Hex SHA-256 of `data`."""
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of the file at `path`, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class NotRegularFileError(OSError):
    """A path in a log folder that is not a plain file we may read (symlink, device, FIFO, too big)."""


def what_is(path: Path, st: os.stat_result | None) -> str:
    """What `path` is when it is not a regular file, in words (for an error)."""
    if st is None or stat.S_ISLNK(st.st_mode):
        try:
            return f"a symbolic link (to {os.readlink(path)})"
        except OSError:
            return "a symbolic link"
    if stat.S_ISDIR(st.st_mode):
        return "a folder"
    if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
        return "a device"
    if stat.S_ISFIFO(st.st_mode):
        return "a named pipe"
    if stat.S_ISSOCK(st.st_mode):
        return "a socket"
    return "not a regular file"


def read_regular_file(path: Path, limit: int) -> bytes:
    """The bytes of `path` when it is a regular file of at most `limit` bytes.

    Symlinks are not followed (a committed link to /dev/zero would hash forever,
    one to a copy outside the repository would read as fresh); devices, FIFOs and
    oversized files are refused: NotRegularFileError saying what the path is.
    FileNotFoundError when it does not exist.
    """
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise NotRegularFileError(f"{path} is {what_is(path, None)}") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFileError(f"{path} is {what_is(path, st)}")
        chunks, size = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise NotRegularFileError(f"{path} is larger than {limit >> 20} MiB")
        return b"".join(chunks)
    finally:
        os.close(fd)
