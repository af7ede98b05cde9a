"""fp32 batched matmul C[b] = A[b] @ B[b]: attention's Q.K^T and P.V, for the target CPU.

BERT's attention runs 12 heads of 128 x 128 x 64 matmuls: too small for one GEMM to
keep two cores busy, so the heads are the parallel axis. The same micro-kernel as
`matmul` and `dense` (`operators/_gemm.py`): the batch loop is fused with the row and
column tiles into the parallel loop (tile_i's outer factor 1 leaves a head's rows in
its task, as a dense layer's few tokens). B is read in place or packed per tile; a
whole-B packed copy ("global") is for a weight, which attention's B never is.

Q.K^T's B is the keys transposed: the model's `permute_dims` runs as a copy of its
own (TVM's kernel, 12 x 64 x 128 floats) and this kernel reads its output as B. The
attention scale after Q.K^T can run on the output tile (the `scale` epilogue).
"""

from __future__ import annotations

import numpy as np

from operators._gemm import schedule_gemm
from tvmtune_ci.template import define_split, define_structure

WORKLOADS = {
    # BERT-base attention, 128 tokens, 12 heads of 64: Q [12, 128, 64] @ K^T [12, 64, 128],
    # then the scale 1/sqrt(64); probabilities [12, 128, 128] @ V [12, 128, 64].
    "bert_qk": {"B": 12, "M": 128, "N": 128, "K": 64, "dtype": "float32", "epilogue": ["scale"]},
    "bert_pv": {"B": 12, "M": 128, "N": 64, "K": 128, "dtype": "float32"},
}

# The Relax calls this kernel implements (docs/models.md): x[..., M, K] @ y[..., K, N]
# with the same leading (batch) dimensions, folded into B. Not part of the fingerprint:
# it does not change the kernel.
IMPLEMENTS = [
    {"op": "relax.matmul", "args": [["*B", "M", "K"], ["*B", "K", "N"]], "dtype": "dtype", "epilogues": {"scale": True}}
]

KNOBS = [
    # rows: parallel tiles x mc/mr x mr (a single head, or a few, still fills the cores)
    define_split("tile_i", "(M + 15)//16*16", parts=3, max_factor=8),
    # columns in vectors of LANES: parallel panels x nc/nr x nr/LANES (fits the registers)
    define_split("tile_j", "(N + 15)//16*16//LANES", parts=3, max_factor="VREGS//8"),
    # k in steps of 16: K/kc x kc/16
    define_split("tile_k", "(K + 15)//16", parts=2, max_factor=32),
    define_structure("accumulate", ["register", "memory"]),
    define_structure("pack_b", ["tile", "none"]),
]


def compute(B: int, M: int, N: int, K: int, dtype: str):
    from tvm import te

    X = te.placeholder((B, M, K), dtype, name="X")
    Y = te.placeholder((B, K, N), dtype, name="Y")
    k = te.reduce_axis((0, K), name="k")
    Z = te.compute((B, M, N), lambda b, i, j: te.sum(X[b, i, k] * Y[b, k, j], axis=k), name="Z")
    return te.create_prim_func([X, Y, Z])


def reference(X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    return np.matmul(X.astype(np.float64), Y.astype(np.float64)).astype(X.dtype)


def schedule(sch, cfg) -> None:
    schedule_gemm(sch, cfg, "Z")
