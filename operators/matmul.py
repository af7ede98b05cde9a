"""fp32 matmul C = A @ B, scheduled for x86 CPUs (AVX2/AVX-512).

Blocked like a BLAS micro-kernel: i and j tiled in three levels, k in two; the
outer tiles run in parallel, the innermost j tile is vectorised and the register
tile is accumulated in a local cache (`cache_write`) when `write_cache` is set.
"""

from __future__ import annotations

import numpy as np

from tvmtune_ci.template import define_knob, define_split, define_structure

WORKLOADS = {
    "m512": {"M": 512, "N": 512, "K": 512, "dtype": "float32"},
}

KNOBS = [
    define_split("tile_i", "M", parts=3, max_factor=8),
    define_split("tile_j", "N", parts=3, max_factor=64),
    define_split("tile_k", "K", parts=2, max_factor=16),
    define_knob("unroll", [0, 16, 64]),
    define_structure("write_cache", [True, False]),
]


def compute(M: int, N: int, K: int, dtype: str):
    from tvm import te

    A = te.placeholder((M, K), dtype, name="A")
    B = te.placeholder((K, N), dtype, name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return te.create_prim_func([A, B, C])


def reference(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    return A @ B


def schedule(sch, cfg) -> None:
    block = sch.get_sblock("C")
    i, j, k = sch.get_loops(block)
    i0, i1, i2 = cfg.split(sch, i, "tile_i")
    j0, j1, j2 = cfg.split(sch, j, "tile_j")
    k0, k1 = cfg.split(sch, k, "tile_k")
    # Register tile (i2 x j2) innermost, k just outside it: a micro-kernel.
    sch.reorder(i0, j0, i1, j1, k0, k1, i2, j2)
    outer = sch.fuse(i0, j0)
    sch.parallel(outer)
    if cfg["write_cache"]:
        # Accumulate the (i1, j1) tile in a local buffer; write it back once.
        cache = sch.cache_write(block, 0, "global")
        sch.reverse_compute_at(cache, j1, preserve_unit_loops=True)
        sch.vectorize(sch.get_loops(cache)[-1])
    sch.vectorize(j2)
    init = sch.decompose_reduction(block, k0)
    sch.vectorize(sch.get_loops(init)[-1])
    sch.annotate(sch.get_sblock("root"), "pragma_auto_unroll_max_step", cfg.knob(sch, "unroll"))
    sch.annotate(sch.get_sblock("root"), "pragma_unroll_explicit", 1)
