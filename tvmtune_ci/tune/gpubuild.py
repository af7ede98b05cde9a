"""GPU builds on any machine: a configuration of a template, built by TVM for a CUDA
target and compiled by NVRTC (`nvrtc.py`) to a cubin for the target's arch, with what
ptxas reports held against the target's limits (no GPU needed). Used by the tuner's
builder (a kernel over its GPU's limits fails as `resources`), `check --build` and the
README of a GPU best. Nothing here imports TVM at module level.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType
from typing import Any

from ..core.errors import TvmtuneError
from .builder import build_config
from .workload import Workload


class ResourceError(TvmtuneError):
    """A kernel that compiles but exceeds what its GPU allows, as the compiler reports."""


# Words of ptxas/NVRTC errors that mean a limit of the GPU, not a wrong program.
_RESOURCE_ERRORS = ("too much shared data", "uses too much", "too many resources")


def cuda_cubin(module: Any, target: Mapping[str, Any]) -> Any:
    """The cubin (`nvrtc.Cubin`) of a module TVM built for a CUDA `target`, compiled
    for its arch on this machine (no GPU needed). ResourceError when a kernel exceeds
    a limit the compiler reports (shared memory, registers per block, spills)."""
    from . import nvrtc

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


def compile_cuda_config(
    template: ModuleType, wl: Workload, target: Mapping[str, Any], knobs: Mapping[str, Any] | None = None
) -> Any:
    """Build the template at `knobs` for a CUDA `target` and compile it to a cubin for
    the target's arch on this machine: what a CPU-only runner can check."""
    return cuda_cubin(build_config(template, wl, target, knobs).mod, target)


def gpu_resources(
    template: ModuleType, wl: Workload, target: Mapping[str, Any], knobs: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    """What a CUDA `target`'s build of this configuration reports (its arch, shared
    memory and registers per block, registers per thread, threads, spilled bytes), for
    the README of a best; None on a CPU target."""
    if target.get("kind") != "cuda":
        return None
    cubin = compile_cuda_config(template, wl, target, knobs)
    return {"arch": str(target["arch"]), **cubin.summary(), "cubin_bytes": len(cubin.data)}
