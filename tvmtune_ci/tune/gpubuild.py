"""GPU builds on any machine: a configuration of a template, built by TVM for a CUDA
target and compiled by NVRTC to a cubin for the target's arch, with what ptxas reports
held against the target's limits (`cubin.py`; no GPU needed). Used by `check --build`
and the README of a GPU best; the tuner's builder compiles its batches with
`cubin.cuda_cubin` itself (a kernel over its GPU's limits fails as `resources`).
Nothing here imports TVM at module level.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType
from typing import Any

from .builder import build_config
from .cubin import cuda_cubin
from .workload import Workload


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
