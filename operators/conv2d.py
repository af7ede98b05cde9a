"""fp32 2-D convolution, NCHW input, KCRS weight, NCHW output, for CPUs with vectors.

A direct convolution vectorised along the output row: the register tile is
(tile_k's inner factor) output channels x (tile_h's inner factor) output rows x
(tile_w's inner factor) output columns, the columns in vector lanes. One step of the
c, r, s reduction broadcasts a weight per channel and loads an input row segment
per output row; the tile is accumulated over all of C x R x S in a local buffer
(cache_write) and stored once, contiguous in the NCHW output. The outer tiles of
k, h and w are fused and run in parallel.

Structural: `pad` computes the zero-padded input once (`stage`, a parallel pass)
or reads the input through a bounds check in the kernel (`inline`).
"""

from __future__ import annotations

import numpy as np

from tvmtune_ci.template import define_knob, define_split, define_structure

WORKLOADS = {
    # ResNet-50 stage 1, 3x3 convolution: 64 -> 64 channels on 56 x 56.
    "resnet50_3x3": {
        "N": 1,
        "C": 64,
        "H": 56,
        "W": 56,
        "K": 64,
        "R": 3,
        "S": 3,
        "pad": 1,
        "stride": 1,
        "dtype": "float32",
    }
}

# The Relax calls this kernel implements (docs/models.md): conv2d of data
# [N, C, H, W] (NCHW) by a weight [K, C, R, S] (OIHW), the same zero padding `pad`
# on all four sides, the same `stride` on both axes, no dilation, one group. The
# epilogues it can run on its output tile before storing it (a workload that lists
# them in "epilogue" does): the per-channel bias, a residual add, ReLU. Not part of
# the fingerprint: it does not change the kernel.
IMPLEMENTS = [
    {
        "op": "relax.nn.conv2d",
        "args": [["N", "C", "H", "W"], ["K", "C", "R", "S"]],
        "attrs": {
            "strides": ["stride", "stride"],
            "padding": ["pad", "pad", "pad", "pad"],
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
    # output channels: parallel tiles x register rows (8 on AVX-512 and NEON, 4 on
    # AVX2: half the vector registers of AVX-512's 32)
    define_split("tile_k", "K", parts=2, max_factor="VREGS//4"),
    # output rows: parallel tiles x register rows
    define_split("tile_h", "(H + 2*pad - R)//stride + 1", parts=2, max_factor=4),
    # output columns: parallel tiles x vector lanes (56: 3.5 zmm, 7 ymm)
    define_split("tile_w", "(W + 2*pad - S)//stride + 1", parts=2, max_factor=64),
    define_knob("unroll", [0, 16, 64]),
    define_structure("pad", ["stage", "inline"]),
]


def compute(N: int, C: int, H: int, W: int, K: int, R: int, S: int, pad: int, stride: int, dtype: str):
    from tvm import te

    data = te.placeholder((N, C, H, W), dtype, name="data")
    kernel = te.placeholder((K, C, R, S), dtype, name="kernel")
    OH = (H + 2 * pad - R) // stride + 1
    OW = (W + 2 * pad - S) // stride + 1
    padded = te.compute(
        (N, C, H + 2 * pad, W + 2 * pad),
        lambda n, c, h, w: te.if_then_else(
            te.all(h >= pad, h < H + pad, w >= pad, w < W + pad), data[n, c, h - pad, w - pad], te.const(0.0, dtype)
        ),
        name="data_pad",
    )
    c = te.reduce_axis((0, C), name="c")
    r = te.reduce_axis((0, R), name="r")
    s = te.reduce_axis((0, S), name="s")
    out = te.compute(
        (N, K, OH, OW),
        lambda n, k, h, w: te.sum(padded[n, c, h * stride + r, w * stride + s] * kernel[k, c, r, s], axis=[c, r, s]),
        name="conv",
    )
    return te.create_prim_func([data, kernel, out])


def reference(data: np.ndarray, kernel: np.ndarray, *, pad: int, stride: int) -> np.ndarray:
    """Direct convolution in float64 via one einsum per (r, s) tap."""
    n, c, h, w = data.shape
    k, _, kr, ks = kernel.shape
    oh = (h + 2 * pad - kr) // stride + 1
    ow = (w + 2 * pad - ks) // stride + 1
    x = np.pad(data.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    out = np.zeros((n, k, oh, ow))
    for r in range(kr):
        for s in range(ks):
            patch = x[:, :, r : r + stride * oh : stride, s : s + stride * ow : stride]
            out += np.einsum("nchw,kc->nkhw", patch, kernel[:, :, r, s].astype(np.float64))
    return out.astype(data.dtype)


def schedule(sch, cfg) -> None:
    conv = sch.get_sblock("conv")
    n, k, h, w, c, r, s = sch.get_loops(conv)
    k0, k1 = cfg.split(sch, k, "tile_k")
    h0, h1 = cfg.split(sch, h, "tile_h")
    w0, w1 = cfg.split(sch, w, "tile_w")
    sch.reorder(n, k0, h0, w0, c, r, s, k1, h1, w1)
    outer = sch.fuse(n, k0, h0, w0)
    sch.parallel(outer)

    # The register tile: k1 x h1 rows of w1 lanes, summed over c, r, s.
    cache = sch.cache_write(conv, 0, "global")
    sch.reverse_compute_at(cache, outer, preserve_unit_loops=True)
    sch.vectorize(sch.get_loops(cache)[-1])
    sch.vectorize(w1)
    sch.unroll(h1)
    sch.unroll(k1)
    init = sch.decompose_reduction(conv, c)
    sch.vectorize(sch.get_loops(init)[-1])
    sch.annotate(c, "pragma_auto_unroll_max_step", cfg.knob(sch, "unroll"))
    sch.annotate(c, "pragma_unroll_explicit", 1)

    data_pad = sch.get_sblock("data_pad")
    if cfg["pad"] == "inline":
        sch.compute_inline(data_pad)
    else:
        loops = sch.get_loops(data_pad)
        sch.parallel(sch.fuse(*loops[:-1]))
        sch.vectorize(loops[-1])
