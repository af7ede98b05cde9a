"""fp32 3x3 convolution, stride 1, NCHW: Winograd F(2x2, 3x3), its products a GEMM.

Each 2 x 2 block of outputs is A^T [G g G^T . B^T d B] A (Lavin and Gray, 2015): the
4 x 4 input tile d and the 3 x 3 filter g carried into a 16-point transform domain,
multiplied pointwise there and summed over the channels, then carried back. Summing
over the channels at each of the 16 points is a GEMM, M[e] = U[e] @ V[e]: U[e] the
transformed weight [K, C], V[e] the transformed input [C, tiles], the tiles (2 x 2
output blocks) in vector lanes. It runs on the GEMM micro-kernel of `matmul`, `dense`
and `conv2d_1x1` (`operators/_gemm.py`), 16 GEMMs in one parallel loop, and does 2.25x
fewer multiplications than the direct convolution of `conv2d`: on ResNet-50's 3x3 at
56 x 56 (64 -> 64 channels), 103 MFLOP of products against 231.

The stages, each a parallel pass of its own:
- `kernel_pack`: the weight with its channels contiguous [R, S, K, C] (a copy: a
  prepacked workload runs it once, at load);
- `wino_weight`: U = G g G^T, vectorized over the input channels (every call: 16 x K x
  C points, a few vector adds each);
- `data_pad`: the padded input with its columns split by parity, [C, rows, 2, cols/2]:
  the tiles overlap by 2 columns, so tile t's 4 columns are even and odd columns t and
  t + 1, and the input transform reads contiguous vectors of tiles;
- `wino_in`: V = B^T d B, vectorized over a row of tiles;
- `wino_gemm`: the GEMM, the knobs' tiles;
- `conv`: Y = A^T M A into the NCHW output, the epilogue (bias, residual, ReLU) on it
  before the store.

The transforms of F(2x2, 3x3) only add, subtract and halve: its rounding error is that
of the direct convolution's sums, within the checks' fp32 tolerance (tests).
"""

from __future__ import annotations

import numpy as np

from operators._gemm import schedule_gemm
from tvmtune_ci.template import define_split, define_structure

WORKLOADS = {
    # ResNet-50 conv2_x's 3x3 (models/resnet50_stage.py, 3 blocks): 64 -> 64 channels on
    # 56 x 56, its batch norm folded into a bias, + ReLU on the output, the weight's
    # layout packed once at load.
    "resnet50_3x3_relu": {
        "N": 1,
        "C": 64,
        "H": 56,
        "W": 56,
        "K": 64,
        "pad": 1,
        "dtype": "float32",
        "epilogue": ["bias", "relu"],
        "prepack": True,
    }
}

# The Relax calls this kernel implements (docs/models.md): conv2d of data [N, C, H, W]
# (NCHW) by a weight [K, C, 3, 3] (OIHW), the same zero padding on all four sides,
# stride 1, no dilation, one group. The epilogues it can run before the store: the
# per-channel bias, a residual add, ReLU. The weight (argument 1) can be taken with its
# layout packed (a workload's "prepack": true). Not part of the fingerprint: it does not
# change the kernel.
IMPLEMENTS = [
    {
        "op": "relax.nn.conv2d",
        "args": [["N", "C", "H", "W"], ["K", "C", 3, 3]],
        "attrs": {
            "strides": [1, 1],
            "padding": ["pad", "pad", "pad", "pad"],
            "dilation": [1, 1],
            "groups": 1,
            "data_layout": "NCHW",
            "kernel_layout": "OIHW",
            "out_layout": "NCHW",
        },
        "dtype": "dtype",
        "epilogues": {"bias": [1, "K", 1, 1], "residual": True, "relu": True},
        "prepack": [1],
    }
]

# The GEMM's tiles, as in `conv2d_1x1`, over M[e] = U[e] @ V[e]: rows the output
# channels, columns the tiles ((H+1)//2 x (W+1)//2 of them, padded to 16), the
# reduction the input channels. The columns' register factor goes to 8 vectors: at
# 56 x 56 (784 tiles, 49 AVX-512 vectors) it is 1 or 7.
KNOBS = [
    define_split("tile_i", "(K + 15)//16*16", parts=3, max_factor=8),
    define_split("tile_j", "(((H + 2*pad - 1)//2)*((W + 2*pad - 1)//2) + 15)//16*16//LANES", parts=3, max_factor=8),
    define_split("tile_k", "(C + 15)//16", parts=2, max_factor=32),
    # the GEMM's tile accumulates over all of C in registers and is stored once
    define_structure("accumulate", ["register"]),
    # V is made for the GEMM: contiguous along the tiles already
    define_structure("pack_b", ["none"]),
]

# F(2x2, 3x3)'s B^T, row by row: t[i] = d[_P[i]] + _S[i] * d[_Q[i]]
# (d0 - d2, d1 + d2, d2 - d1, d1 - d3).
_P, _Q, _S = (0, 1, 2, 1), (2, 2, 1, 3), (-1.0, 1.0, -1.0, -1.0)


def _pick(index, values):
    """values[index] as an expression: a select chain that folds to one value once the
    loop over `index` is unrolled (every transform's loop over its 4 or 16 points is)."""
    from tvm import tirx

    out = values[-1]
    for i in range(len(values) - 2, -1, -1):
        out = tirx.Select(index == i, values[i], out)
    return out


def compute(N: int, C: int, H: int, W: int, K: int, pad: int, dtype: str):
    from tvm import te, tirx

    OH, OW = H + 2 * pad - 2, W + 2 * pad - 2
    if OH < 1 or OW < 1:
        raise ValueError(f"conv2d_winograd: a {H} x {W} input with pad {pad} has no 3x3 output")
    nH, nW = (OH + 1) // 2, (OW + 1) // 2

    def const(v: float):
        return tirx.const(v, dtype)

    data = te.placeholder((N, C, H, W), dtype, name="data")
    kernel = te.placeholder((K, C, 3, 3), dtype, name="kernel")

    packed = te.compute((3, 3, K, C), lambda r, s, k, c: kernel[k, c, r, s], name="kernel_pack")

    def weight(e, k, c):  # U[e] = G g G^T at point e = (a, b)
        def g_rows(v):  # G's 4 rows applied to 3 values
            half = const(0.5)
            return [v[0], half * (v[0] + v[1] + v[2]), half * (v[0] - v[1] + v[2]), v[2]]

        def row(r):
            return _pick(e % 4, g_rows([packed[r, s, k, c] for s in range(3)]))

        return _pick(e // 4, g_rows([row(r) for r in range(3)]))

    U = te.compute((16, K, C), weight, name="wino_weight")

    def padded(n, c, y, parity, x):  # column 2x + parity of the padded input
        h, w = y - pad, 2 * x + parity - pad
        return te.if_then_else(te.all(h >= 0, h < H, w >= 0, w < W), data[n, c, h, w], const(0.0))

    D = te.compute((N, C, 2 * nH + 2, 2, nW + 1), padded, name="data_pad")

    def transformed(n, e, c, q):  # V[e] = B^T d B at point e, tile q
        th, tw = q // nW, q % nW

        def d(y, col):  # the tile's column col (0-3): even/odd column tw + col//2
            return D[n, c, 2 * th + y, col % 2, tw + col // 2]

        def row(y):  # input row y of the tile, transformed along the columns
            return _pick(e % 4, [d(y, _P[j]) + const(_S[j]) * d(y, _Q[j]) for j in range(4)])

        return _pick(e // 4, [row(_P[i]) + const(_S[i]) * row(_Q[i]) for i in range(4)])

    V = te.compute((N, 16, C, nH * nW), transformed, name="wino_in")
    c = te.reduce_axis((0, C), name="c")
    M = te.compute((N, 16, K, nH * nW), lambda n, e, k, q: te.sum(U[e, k, c] * V[n, e, c, q], axis=c), name="wino_gemm")

    def output(n, k, h, w):  # Y = A^T M A, A^T = [[1, 1, 1, 0], [0, 1, -1, -1]]
        q = (h // 2) * nW + w // 2

        def col(a):
            m = [M[n, a * 4 + b, k, q] for b in range(4)]
            return _pick(w % 2, [m[0] + m[1] + m[2], m[1] - m[2] - m[3]])

        return _pick(h % 2, [col(0) + col(1) + col(2), col(1) - col(2) - col(3)])

    out = te.compute((N, K, OH, OW), output, name="conv")
    return te.create_prim_func([data, kernel, out])


def reference(data: np.ndarray, kernel: np.ndarray, *, pad: int) -> np.ndarray:
    """The direct convolution in float64, one einsum per (r, s) tap."""
    n, c, h, w = data.shape
    k = kernel.shape[0]
    oh, ow = h + 2 * pad - 2, w + 2 * pad - 2
    x = np.pad(data.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    out = np.zeros((n, k, oh, ow))
    for r in range(3):
        for s in range(3):
            out += np.einsum("nchw,kc->nkhw", x[:, :, r : r + oh, s : s + ow], kernel[:, :, r, s].astype(np.float64))
    return out.astype(data.dtype)


def schedule(sch, cfg) -> None:
    lanes = cfg.vector_lanes(cfg["dtype"])
    schedule_gemm(sch, cfg, "wino_gemm")

    def parallel_vectorized(block: str, order: list[int], unrolled: list[int], fused: int) -> None:
        """Loops in `order`; the first `fused` fused and parallel, `unrolled` (indices
        into the original loops) unrolled, the last vectorized in lanes."""
        loops = sch.get_loops(sch.get_sblock(block))
        sch.reorder(*[loops[i] for i in order])
        for i in unrolled:
            sch.unroll(loops[i])
        inner = loops[order[-1]]
        if int(sch.get(inner).extent) % lanes == 0:
            _, inner = sch.split(inner, [None, lanes])
        sch.vectorize(inner)
        head = [loops[i] for i in order[:fused]]
        sch.parallel(sch.fuse(*head) if len(head) > 1 else head[0])

    # The weight's copy: along C (the packed layout's contiguous axis).
    parallel_vectorized("kernel_pack", [0, 1, 2, 3], [], 3)
    # U: a task per output channel, the 16 points unrolled, C in lanes.
    parallel_vectorized("wino_weight", [1, 0, 2], [0], 1)
    # The padded input, split by column parity: a row's two halves in one task.
    loops = sch.get_loops(sch.get_sblock("data_pad"))
    sch.parallel(sch.fuse(*loops[:3]))
    sch.unroll(loops[3])
    # V: a row of tiles is the vector; (n, c, tile row) the tasks, the 16 points unrolled.
    # The tile index q splits into (tile row, tile column), so q // nW and q % nW fold.
    vin = sch.get_sblock("wino_in")
    n, e, c, q = sch.get_loops(vin)
    n_w = (int(sch.get(sch.get_loops(sch.get_sblock("conv"))[-1]).extent) + 1) // 2
    th, tw = sch.split(q, [None, n_w])
    sch.reorder(n, c, th, e, tw)
    sch.parallel(sch.fuse(n, c, th))
    sch.unroll(e)
    sch.vectorize(tw)
    # Y: a task per (n, k, tile row); the block's 2 x 2 outputs unrolled, a row of tiles
    # in lanes (the even and odd output columns interleaved on the store).
    conv = sch.get_sblock("conv")
    n, k, h, w = sch.get_loops(conv)
    th, i = sch.split(h, [None, 2])
    tw, j = sch.split(w, [None, 2])
    sch.reorder(n, k, th, i, j, tw)
    sch.parallel(sch.fuse(n, k, th))
    sch.unroll(i)
    sch.unroll(j)
    sch.vectorize(tw)
