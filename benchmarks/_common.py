"""Shared by the benchmarks (run as scripts: this folder is on sys.path)."""

from __future__ import annotations

import os
import time


def wait_idle(limit_s: float) -> float:
    """Seconds waited (at most limit_s) for the 1-minute load average to drop below 0.5.

    Other processes' load is noise in every ratio a benchmark prints.
    """
    t0 = time.monotonic()
    while os.getloadavg()[0] >= 0.5 and time.monotonic() - t0 < limit_s:
        time.sleep(5)
    return time.monotonic() - t0
