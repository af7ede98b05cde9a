"""Cyclic garbage collection paused while a bulk read builds its result.

`check` builds tens of thousands of small containers (manifests, reasons, parsed
ASTs) that reference counting frees; the cyclic collector would scan them again and
again while they grow, and once more, whole, on the first allocation after it is
re-enabled while they are still alive (40-70 ms at 1,000 operators x 2 targets,
measured in benchmarks/bench_check.py). Pausing it around the work and resuming it
once the result is dropped costs neither.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """The cyclic collector off inside; back on after, if it was on (nests)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
