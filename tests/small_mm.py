"""A 64x64x64 matmul template small enough to tune in seconds (shared by tests)."""

SMALL_MM = """\
import numpy as np
from tvmtune_ci.template import define_knob, define_split, define_structure

WORKLOADS = {"s64": {"M": 64, "N": 64, "K": 64, "dtype": "float32"}}
KNOBS = [
    define_split("tile_i", "M", parts=2, max_factor=8),
    define_split("tile_j", "N", parts=2, max_factor=32),
    define_knob("unroll", [0, 16]),
    define_structure("cache", [False, True]),
]


def compute(M, N, K, dtype):
    from tvm import te

    A = te.placeholder((M, K), dtype, name="A")
    B = te.placeholder((K, N), dtype, name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return te.create_prim_func([A, B, C])


def reference(A, B):
    return A @ B


def schedule(sch, cfg):
    b = sch.get_sblock("C")
    i, j, k = sch.get_loops(b)
    i0, i1 = cfg.split(sch, i, "tile_i")
    j0, j1 = cfg.split(sch, j, "tile_j")
    sch.reorder(i0, j0, k, i1, j1)
    sch.parallel(i0)
    if cfg["cache"]:
        c = sch.cache_write(b, 0, "global")
        sch.reverse_compute_at(c, j0)
    sch.vectorize(j1)
    sch.decompose_reduction(b, k)
    sch.annotate(sch.get_sblock("root"), "pragma_auto_unroll_max_step", cfg.knob(sch, "unroll"))
"""
