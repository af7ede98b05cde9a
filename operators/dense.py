"""fp32 dense layer Y = X @ W.T (weight [N, K], as torch.nn.Linear), for the target CPU.

The feed-forward projections of a BERT-base layer over 128 tokens. Same
micro-kernel as `matmul` (`operators/_gemm.py`); here B is the weight stored
[N, K], so packing it (`pack_b`) also transposes it so that the kernel's vector
loads run along N. With only 128 rows (tokens), the rows are not split across the
cores: tile_i is [mc/mr, mr] and the parallel loop runs over column panels.
"""

from __future__ import annotations

import numpy as np

from operators._gemm import schedule_gemm
from tvmtune_ci.template import define_split, define_structure

WORKLOADS = {
    # BERT-base FFN, 128 tokens: 768 -> 3072 and 3072 -> 768.
    "bert_ffn1": {"M": 128, "N": 3072, "K": 768, "dtype": "float32"},
    "bert_ffn2": {"M": 128, "N": 768, "K": 3072, "dtype": "float32"},
    # The same layer as bert_layer runs it (models/bert_layer.py): weights packed once
    # at load, the epilogues on the output tile. Q, K and V projections + bias; the
    # attention output projection + bias + the residual; FFN1 + bias + GELU; FFN2 +
    # bias + the residual.
    "bert_qkv": {"M": 128, "N": 768, "K": 768, "dtype": "float32", "epilogue": ["bias"], "prepack": True},
    "bert_attn_out": {
        "M": 128,
        "N": 768,
        "K": 768,
        "dtype": "float32",
        "epilogue": ["bias", "residual"],
        "prepack": True,
    },
    "bert_ffn1_gelu": {
        "M": 128,
        "N": 3072,
        "K": 768,
        "dtype": "float32",
        "epilogue": ["bias", "gelu"],
        "prepack": True,
    },
    "bert_ffn2_residual": {
        "M": 128,
        "N": 768,
        "K": 3072,
        "dtype": "float32",
        "epilogue": ["bias", "residual"],
        "prepack": True,
    },
}

# The Relax calls this kernel implements (docs/models.md): nn.Linear's
# x[..., M, K] @ permute_dims(W[N, K]); leading dimensions fold into M. The kernel
# takes W itself, so the transpose before the matmul does not run. And the form
# exporters write nn.Linear in, x[..., M, K] @ W[K, N] (ONNX MatMul over a weight
# stored transposed): the kernel takes W's transpose, folded at build where W is a
# constant. Both run nn.Linear's bias add, a residual add, a scale, ReLU or GELU on the
# output tile where a workload lists them in "epilogue", and take a weight W already
# packed (pack_b="global"'s panels, made once at load) where a workload says
# "prepack": true. Not part of the fingerprint: it does not change the kernel.
IMPLEMENTS = [
    {
        "op": "relax.matmul",
        "args": [["*M", "K"], {"permute_dims": ["N", "K"]}],
        "dtype": "dtype",
        "epilogues": {"bias": ["N"], "residual": True, "scale": True, "relu": True, "gelu": True},
        "prepack": [1],
    },
    {
        "op": "relax.matmul",
        "args": [["*M", "K"], {"transposed": ["K", "N"]}],
        "dtype": "dtype",
        "epilogues": {"bias": ["N"], "residual": True, "scale": True, "relu": True, "gelu": True},
        "prepack": [1],
    },
]

KNOBS = [
    # rows: mc/mr x mr (all rows in every parallel task)
    define_split("tile_i", "(M + 15)//16*16", parts=2, max_factor=8),
    # columns in vectors of LANES: parallel panels x nc/nr x nr/LANES (fits the registers)
    define_split("tile_j", "(N + 15)//16*16//LANES", parts=3, max_factor="VREGS//8"),
    # k in steps of 16: K/kc x kc/16
    define_split("tile_k", "(K + 15)//16", parts=2, max_factor=32),
    define_structure("accumulate", ["register", "memory"]),
    define_structure("pack_b", ["tile", "global"]),
]


def compute(M: int, N: int, K: int, dtype: str):
    from tvm import te

    X = te.placeholder((M, K), dtype, name="X")
    W = te.placeholder((N, K), dtype, name="W")
    k = te.reduce_axis((0, K), name="k")
    Y = te.compute((M, N), lambda i, j: te.sum(X[i, k] * W[j, k], axis=k), name="Y")
    return te.create_prim_func([X, W, Y])


def reference(X: np.ndarray, W: np.ndarray) -> np.ndarray:
    return X @ W.T


def schedule(sch, cfg) -> None:
    schedule_gemm(sch, cfg, "Y", b_transposed=True)
