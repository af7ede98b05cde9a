"""fp32 matmul C = A @ B, scheduled for the target CPU's vectors (AVX-512, AVX2, NEON).

Blocked like a BLAS micro-kernel (see `operators/_gemm.py`): an mr x nr register
tile (mr = tile_i's innermost factor, nr = LANES x tile_j's innermost factor), outer
tiles fused and run in parallel, k split into kc blocks of 16 x tile_k's inner
factor. Design spaces: where the tile accumulates (`register`: a local tile over
all of K, stored once; `memory`: BLAS-like kc blocking) x whether the B panel is
packed into a contiguous buffer first.

The awkward workload `m1021` (all three dimensions the prime 1021) is padded to
1024 by `sch.pad_einsum`; the declared extents below are the padded ones.
"""

from __future__ import annotations

import numpy as np

from operators._gemm import schedule_gemm
from tvmtune_ci.template import define_split, define_structure

WORKLOADS = {
    "m1024": {"M": 1024, "N": 1024, "K": 1024, "dtype": "float32"},
    "m1021": {"M": 1021, "N": 1021, "K": 1021, "dtype": "float32"},
}

# The Relax calls this kernel implements (docs/models.md): a plain 2-D
# A[M, K] @ B[K, N]; B may arrive packed (pack_b="global"'s panels, made once) where a
# workload says "prepack": true and B is a weight. Not part of the fingerprint: it
# does not change the kernel.
IMPLEMENTS = [{"op": "relax.matmul", "args": [["M", "K"], ["K", "N"]], "dtype": "dtype", "prepack": [1]}]

KNOBS = [
    # rows: parallel tiles x mc/mr x mr (the register tile's rows)
    define_split("tile_i", "(M + 15)//16*16", parts=3, max_factor=8),
    # columns in vectors of LANES: parallel tiles x nc/nr x nr/LANES (fits the registers)
    define_split("tile_j", "(N + 15)//16*16//LANES", parts=3, max_factor="VREGS//8"),
    # k in steps of 16: K/kc x kc/16
    define_split("tile_k", "(K + 15)//16", parts=2, max_factor=32),
    define_structure("accumulate", ["register", "memory"]),
    define_structure("pack_b", ["tile", "global"]),
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
    schedule_gemm(sch, cfg, "C")
