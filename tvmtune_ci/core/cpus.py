"""The CPUs this process may run on (TVM-free: `check` imports it)."""

from __future__ import annotations

import os


def usable_cores() -> int:
    """CPUs this process may run on: its affinity mask where the OS has one (a
    container or `taskset` can give it fewer than the machine has), else the machine's."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1
