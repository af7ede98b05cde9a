"""A module TVM built for a CUDA target, compiled to a cubin for the target's arch
(`nvrtc.py`, no GPU needed), with what ptxas reports held against the target's limits:
a kernel over them is a `ResourceError`. The tuner's builder (`builder.py`) and the
builds of one configuration (`gpubuild.py`) both use it; it imports neither. Nothing
here imports TVM at module level.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..core.errors import TvmtuneError
from . import nvrtc


class ResourceError(TvmtuneError):
    """A kernel that compiles but exceeds what its GPU allows, as the compiler reports."""


# Words of ptxas/NVRTC errors that mean a limit of the GPU, not a wrong program.
_RESOURCE_ERRORS = ("too much shared data", "uses too much", "too many resources")


def cuda_cubin(module: Any, target: Mapping[str, Any]) -> Any:
    """The cubin (`nvrtc.Cubin`) of a module TVM built for a CUDA `target`, compiled
    for its arch on this machine (no GPU needed). ResourceError when a kernel exceeds
    a limit the compiler reports (shared memory, registers per block, spills)."""
    try:
        cubin = nvrtc.compile_cached(nvrtc.cuda_source(module), str(target["arch"]))
    except nvrtc.CudaCompileError as e:
        if any(w in e.log for w in _RESOURCE_ERRORS):
            raise ResourceError(str(e)) from None
        raise
    over = cubin.over(target)
    if over:
        raise ResourceError("; ".join(over))
    return cubin
