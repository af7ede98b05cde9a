"""fp32 1x1 convolution, NCHW input, KC11 weight, NCHW output, as the GEMM it is.

A 1x1 convolution with stride 1 and no padding is out[n, k, p] = sum_c W[k, c] x
data[n, c, p] over the H*W positions p: a matmul whose A is the weight [K, C] and
whose B is the input [C, H*W], contiguous along p. So it runs the GEMM micro-kernel of
`matmul` and `dense` (`operators/_gemm.py`): an mr x nr register tile of output
channels x positions, the positions in vector lanes, the outer tiles fused and run in
parallel. The direct convolution of `conv2d` tiles the 56 columns of a row in vectors
(3.5 of 16 lanes) and reuses each input load C times only; here a vector spans rows.

The GEMM writes [N, K, H*W]; the NCHW view of it is the same bytes, and the reshape
stage is inlined into the tile's store. The GEMM's dimensions must be multiples of 16
(H*W, C and K: ResNet's 56x56 and 28x28 stages); other shapes run on `conv2d`. A
strided 1x1 convolution (a projection shortcut of a later stage) reads a strided B:
`conv2d` runs it.
"""

from __future__ import annotations

import numpy as np

from operators._gemm import PAD, schedule_gemm
from tvmtune_ci.template import define_split, define_structure

WORKLOADS = {
    # ResNet-50 conv2_x (models/resnet50_stage.py), each batch norm folded into a bias
    # applied on the output tile with what follows it. Block 1's reduce, 64 -> 64, +
    # bias + ReLU:
    "resnet50_reduce": {"N": 1, "C": 64, "H": 56, "W": 56, "K": 64, "dtype": "float32", "epilogue": ["bias", "relu"]},
    # blocks 2 and 3's reduce, 256 -> 64, + bias + ReLU
    "resnet50_reduce256": {
        "N": 1,
        "C": 256,
        "H": 56,
        "W": 56,
        "K": 64,
        "dtype": "float32",
        "epilogue": ["bias", "relu"],
    },
    # the expand, 64 -> 256, + bias + the residual + ReLU (3 blocks)
    "resnet50_expand": {
        "N": 1,
        "C": 64,
        "H": 56,
        "W": 56,
        "K": 256,
        "dtype": "float32",
        "epilogue": ["bias", "residual", "relu"],
    },
    # block 1's projection shortcut, 64 -> 256, + bias
    "resnet50_project": {"N": 1, "C": 64, "H": 56, "W": 56, "K": 256, "dtype": "float32", "epilogue": ["bias"]},
}

# The Relax calls this kernel implements (docs/models.md): conv2d of data [N, C, H, W]
# (NCHW) by a weight [K, C, 1, 1] (OIHW), stride 1, no padding, no dilation, one
# group. The epilogues it runs on its output tile before storing it (a workload that
# lists them in "epilogue" does): the per-channel bias, a residual add, ReLU. Not part
# of the fingerprint: it does not change the kernel.
IMPLEMENTS = [
    {
        "op": "relax.nn.conv2d",
        "args": [["N", "C", "H", "W"], ["K", "C", 1, 1]],
        "attrs": {
            "strides": [1, 1],
            "padding": [0, 0, 0, 0],
            "dilation": [1, 1],
            "groups": 1,
            "data_layout": "NCHW",
            "kernel_layout": "OIHW",
            "out_layout": "NCHW",
        },
        "dtype": "dtype",
        "epilogues": {"bias": [1, "K", 1, 1], "residual": True, "relu": True},
    }
]

KNOBS = [
    # output channels (the GEMM's rows): parallel tiles x mc/mr x mr
    define_split("tile_i", "K", parts=3, max_factor=8),
    # positions in vectors of LANES: parallel panels x nc/nr x nr/LANES (fits the registers)
    define_split("tile_j", "H*W//LANES", parts=3, max_factor="VREGS//8"),
    # input channels in steps of 16: C/kc x kc/16
    define_split("tile_k", "C//16", parts=2, max_factor=32),
    # the tile accumulates over all of C in registers and is stored once, through the
    # NCHW view ("memory"'s in-place updates would leave the view a pass of its own)
    define_structure("accumulate", ["register"]),
    # B is the input itself, read in place: contiguous along the positions, and its
    # rows 4*H*W bytes apart (no 4 KiB-stride cache-set conflicts at 56x56 or 28x28)
    define_structure("pack_b", ["none"]),
]


def compute(N: int, C: int, H: int, W: int, K: int, dtype: str):
    from tvm import te

    for name, extent in (("C", C), ("K", K), ("H*W", H * W)):
        if extent % PAD:
            raise ValueError(
                f"conv2d_1x1 needs {name} = {extent} to be a multiple of {PAD} (the GEMM's tiles); "
                "declare this shape in operators/conv2d.py instead"
            )
    data = te.placeholder((N, C, H, W), dtype, name="data")
    kernel = te.placeholder((K, C, 1, 1), dtype, name="kernel")
    c = te.reduce_axis((0, C), name="c")
    gemm = te.compute(
        (N, K, H * W), lambda n, k, p: te.sum(kernel[k, c, 0, 0] * data[n, c, p // W, p % W], axis=c), name="conv"
    )
    out = te.compute((N, K, H, W), lambda n, k, h, w: gemm[n, k, h * W + w], name="conv_nchw")
    return te.create_prim_func([data, kernel, out])


def reference(data: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    """The GEMM in float64."""
    out = np.einsum("nchw,kc->nkhw", data.astype(np.float64), kernel[:, :, 0, 0].astype(np.float64))
    return out.astype(data.dtype)


def schedule(sch, cfg) -> None:
    schedule_gemm(sch, cfg, "conv")
    # The NCHW view: stored straight from the tile (the same bytes), no pass of its own.
    sch.reverse_compute_inline(sch.get_sblock("conv_nchw"))
