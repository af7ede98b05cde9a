"""One writer per (operator, target) log folder.

An advisory `flock` on a file beside the folder (not inside it: the folder is
swapped atomically when a new set is published). The holder writes who it is into
the file so a second process can name it. The kernel drops the lock when the
holder dies, so a SIGKILLed run never leaves a stale lock behind.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import LockError


@contextmanager
def hold(path: Path, what: str) -> Iterator[None]:
    """Hold the advisory lock of one log folder for `what` ("operator/target"); a
    second holder gets LockError (exit 6) naming the first (pid, host, since)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 4096).decode("utf-8", "replace").strip()
            try:
                h = json.loads(holder)
                who = f"pid {h['pid']} on {h['host']} since {h['since']} ({h['command']})"
            except (ValueError, KeyError, TypeError):
                who = holder or "another process"
            raise LockError(f"{what} is being re-tuned by {who}; wait for it to finish (lock: {path})") from None
        info = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "command": " ".join(sys.argv[:6]),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(info).encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock
