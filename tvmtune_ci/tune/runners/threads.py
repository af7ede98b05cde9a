"""How many threads a local measurement uses, and TVM told so: the thread policy the
re-tune (`pipeline.py`) and the history run (`remeasure.py`) both measure under. Here,
below both, so neither imports the other for it."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from ...core.configschema import TargetConfig


def measure_threads(target: TargetConfig) -> int | None:
    """Threads a local measurement uses: the target's num-cores (None: TVM's default)."""
    cores = target.target.get("num-cores")
    if target.rpc is not None or not isinstance(cores, int) or cores < 1:
        return None
    return cores


@contextlib.contextmanager
def tvm_threads(threads: int | None) -> Iterator[None]:
    """TVM sizes its thread pool from TVM_NUM_THREADS, else half the cores it sees (it
    assumes hyper-threading): a 2-core runner would tune on one thread. The measuring
    worker inherits it when it starts; restored afterwards for the next entry."""
    if threads is None:
        yield
        return
    old = os.environ.get("TVM_NUM_THREADS")
    os.environ["TVM_NUM_THREADS"] = str(threads)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TVM_NUM_THREADS", None)
        else:
            os.environ["TVM_NUM_THREADS"] = old
