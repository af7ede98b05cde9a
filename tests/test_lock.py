from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tvmtune_ci.core.errors import LockError
from tvmtune_ci.core.lock import hold

HOLDER = """
import sys, time
from pathlib import Path
from tvmtune_ci.core.lock import hold
with hold(Path(sys.argv[1]), "matmul/cpu"):
    print("locked", flush=True)
    time.sleep(60)
"""


def test_second_writer_is_refused_and_told_who_holds_it(tmp_path: Path) -> None:
    lock = tmp_path / ".cpu.tvmtune-lock"
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(lock)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
        with pytest.raises(LockError) as e:
            with hold(lock, "matmul/cpu"):
                pass
        assert f"pid {proc.pid}" in str(e.value) and "matmul/cpu" in str(e.value)
        # Another entry's lock is independent: different entries run in parallel.
        with hold(tmp_path / ".other.tvmtune-lock", "conv2d/cpu"):
            pass
    finally:
        proc.kill()
        proc.wait()
    # The kernel released the lock of the killed holder: no stale lock.
    deadline = time.monotonic() + 5
    while True:
        try:
            with hold(lock, "matmul/cpu"):
                break
        except LockError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
