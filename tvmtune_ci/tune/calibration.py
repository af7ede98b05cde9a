"""Fixed reference kernels, measured beside a tuned kernel to take the runner's speed
out of a figure.

A shared VM runs the same kernel at 1.00, 1.09 or 1.30x for stretches of seconds
(`benchmarks/study_modes.py`): an absolute latency depends on the stretch it was
measured in. Two kernels measured in tight alternation (a few samples each, in turns)
see the same stretches, so their ratio keeps much less of it. These kernels are the
other side of that ratio: one compute-bound (a register-tiled fp32 matmul that stays
in L2) and one memory-bound (a triad over arrays far larger than any L3). They are
never tuned and never change within a CALIBRATION_VERSION, so a ratio recorded a year
ago compares with one measured today on the same target. Which figure is published
and decided on is measured in `docs/measurement.md` (`benchmarks/study_drift.py`).

Nothing here imports TVM at module level.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..core.targetinfo import target_facts
from . import tvmsetup

# Bump when a kernel or its schedule changes: ratios of another version do not compare.
CALIBRATION_VERSION = 1

COMPUTE = "compute"
MEMORY = "memory"
KINDS = (COMPUTE, MEMORY)

_MM = 256  # 3 x 256 KB: inside every L2 we tune for
_TRIAD = 1 << 23  # 3 x 32 MB: outside every L3 of a 2-core runner


@dataclass(frozen=True)
class Calibration:
    """One reference kernel: its schedule (built for the target), the FLOPs and bytes
    one run does."""

    kind: str
    sch: Any
    flops: float
    bytes: float

    @property
    def name(self) -> str:
        return f"calibration-{self.kind}-v{CALIBRATION_VERSION}"


def _te() -> tuple[Any, Any]:
    tvm = tvmsetup.load()
    return tvm.s_tir, tvm.te


def _lanes(target: Mapping[str, Any]) -> int:
    facts = target_facts(target)
    return max(1, facts.lanes("float32")) if facts.vector_bits else 1


def compute_kernel(target: Mapping[str, Any]) -> Calibration:
    """C = A @ B, 256^3 fp32, 4 rows x 2 vectors register tile, rows in parallel."""
    s_tir, te = _te()
    n = _MM
    a = te.placeholder((n, n), "float32", name="A")
    b = te.placeholder((n, n), "float32", name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute((n, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    sch = s_tir.Schedule(te.create_prim_func([a, b, c]))
    blk = sch.get_sblock("C")
    i, j, kk = sch.get_loops(blk)
    lanes = _lanes(target)
    i0, i1 = sch.split(i, [None, 4])
    j0, j1, j2 = sch.split(j, [None, 2, lanes])
    sch.reorder(i0, j0, kk, i1, j1, j2)
    sch.parallel(i0)
    sch.unroll(i1)
    sch.unroll(j1)
    sch.vectorize(j2)
    sch.decompose_reduction(blk, kk)
    return Calibration(COMPUTE, sch, 2.0 * n**3, 3.0 * 4 * n * n)


def memory_kernel(target: Mapping[str, Any]) -> Calibration:
    """C = A + 3 B over 8 Mi fp32 (two streams read, one written), in parallel chunks."""
    s_tir, te = _te()
    n = _TRIAD
    a = te.placeholder((n,), "float32", name="A")
    b = te.placeholder((n,), "float32", name="B")
    c = te.compute((n,), lambda i: a[i] + te.const(3.0, "float32") * b[i], name="C")
    sch = s_tir.Schedule(te.create_prim_func([a, b, c]))
    (i,) = sch.get_loops(sch.get_sblock("C"))
    lanes = _lanes(target)
    i0, i1, i2 = sch.split(i, [64, None, lanes])
    sch.parallel(i0)
    sch.vectorize(i2)
    del i1
    return Calibration(MEMORY, sch, 2.0 * n, 3.0 * 4 * n)


def kernels(target: Mapping[str, Any]) -> list[Calibration] | None:
    """Both reference kernels for a CPU target; None for a target they do not serve
    (a GPU: its figures are ratios to its default configuration only)."""
    if str(target.get("kind", "llvm")) not in ("llvm", "c"):
        return None
    return [compute_kernel(target), memory_kernel(target)]
