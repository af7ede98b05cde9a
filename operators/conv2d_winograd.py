"""fp32 3x3 convolution, stride 1, NCHW: Winograd F(m x m, 3x3), its products a GEMM.

Each m x m block of outputs is A^T [G g G^T . B^T d B] A (Lavin and Gray, 2015): the
alpha x alpha input tile d (alpha = m + 2) and the 3 x 3 filter g carried into an
alpha^2-point transform domain, multiplied pointwise there and summed over the
channels, then carried back. Summing over the channels at each point is a GEMM, M[e] =
U[e] @ V[e]: U[e] the transformed weight [K, C], V[e] the transformed input [C, tiles],
the tiles (m x m output blocks) in vector lanes. It runs on the GEMM micro-kernel of
`matmul`, `dense` and `conv2d_1x1` (`operators/_gemm.py`), the alpha^2 GEMMs in one
parallel loop. The workload's `m` is the output tile: 2 (16 GEMMs, 2.25x fewer
multiplications than the direct convolution of `conv2d`) or 4 (36 GEMMs, 4x fewer;
on ResNet-50's 3x3 at 56 x 56, 64 -> 64 channels, 58 MFLOP of products against 231).

The stages, each a parallel pass of its own:
- `kernel_pack`: the weight with its channels contiguous [R, S, K, C] (a copy: a
  prepacked workload runs it once, at load);
- `wino_weight`: U = G g G^T, vectorized over the input channels (every call:
  alpha^2 x K x C points, a few vector operations each);
- `data_pad`: the padded input with its columns split by their residue mod m, [C,
  rows, m, cols/m]: the tiles overlap by 2 columns, so tile t's alpha columns are
  columns t and t + 1 of the residues, and the input transform reads contiguous vectors
  of tiles;
- `wino_in`: V = B^T d B, vectorized over a row of tiles;
- `wino_gemm`: the GEMM, the knobs' tiles;
- `conv`: Y = A^T M A into the NCHW output, the epilogue (bias, residual, ReLU) on it
  before the store.

Rounding: F(2x2, 3x3)'s transforms only add, subtract and halve; F(4x4, 3x3)'s scale
by up to 8 (and 1/24), and its error grows with them. Measured on ResNet's 3x3 (unit
normal input, weights 0.05 x normal), the largest error over the largest output:
2.8e-7 for m = 2, 4.9e-6 for m = 4, both well inside the checks' fp32 tolerance
(1e-4). The model runs m = 4 (tests compare both with the direct convolution).
"""

from __future__ import annotations

import numpy as np

from operators._gemm import schedule_gemm
from tvmtune_ci.template import define_split, define_structure

WORKLOADS = {
    # ResNet-50 conv2_x's 3x3 (models/resnet50_stage.py, 3 blocks): 64 -> 64 channels on
    # 56 x 56, its batch norm folded into a bias, + ReLU on the output, the weight's
    # layout packed once at load. F(4x4, 3x3): 0.44 ms against F(2x2)'s 0.60 at
    # hand-picked tiles (time_evaluator, the same process, Zen 4).
    "resnet50_3x3_relu": {
        "N": 1,
        "C": 64,
        "H": 56,
        "W": 56,
        "K": 64,
        "pad": 1,
        "m": 4,
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
# channels, columns the tiles (ceil(OH/m) x ceil(OW/m) of them, padded to 16), the
# reduction the input channels. The columns' register factor goes to 8 vectors: at
# 56 x 56 and m = 4 (196 tiles, padded to 13 AVX-512 vectors) it is 1; the output
# channels then give the register tile its rows.
KNOBS = [
    define_split("tile_i", "(K + 15)//16*16", parts=3, max_factor=8),
    define_split(
        "tile_j", "(((H + 2*pad - 3 + m)//m)*((W + 2*pad - 3 + m)//m) + 15)//16*16//LANES", parts=3, max_factor=8
    ),
    define_split("tile_k", "(C + 15)//16", parts=2, max_factor=32),
    # the GEMM's tile accumulates over all of C in registers and is stored once
    define_structure("accumulate", ["register"]),
    # V is made for the GEMM: contiguous along the tiles already
    define_structure("pack_b", ["none"]),
]

# The transforms of F(m x m, 3x3), m = 2 or 4 (the workload's "m"; Lavin and Gray's
# matrices): B^T (alpha x alpha), G (alpha x 3), A^T (m x alpha), alpha = m + 2.
_MATRICES = {
    2: (
        ((1, 0, -1, 0), (0, 1, 1, 0), (0, -1, 1, 0), (0, 1, 0, -1)),
        ((1, 0, 0), (0.5, 0.5, 0.5), (0.5, -0.5, 0.5), (0, 0, 1)),
        ((1, 1, 1, 0), (0, 1, -1, -1)),
    ),
    4: (
        (
            (4, 0, -5, 0, 1, 0),
            (0, -4, -4, 1, 1, 0),
            (0, 4, -4, -1, 1, 0),
            (0, -2, -1, 2, 1, 0),
            (0, 2, -1, -2, 1, 0),
            (0, 4, 0, -5, 0, 1),
        ),
        (
            (1 / 4, 0, 0),
            (-1 / 6, -1 / 6, -1 / 6),
            (-1 / 6, 1 / 6, -1 / 6),
            (1 / 24, 1 / 12, 1 / 6),
            (1 / 24, -1 / 12, 1 / 6),
            (0, 0, 1),
        ),
        ((1, 1, 1, 1, 1, 0), (0, 1, -1, 2, -2, 0), (0, 1, 1, 4, 4, 0), (0, 1, -1, 8, -8, 1)),
    ),
}


def _pick(index, values):
    """values[index] as an expression: a select chain that folds to one value once the
    loop over `index` is unrolled (every transform's loop over its points is)."""
    from tvm import tirx

    out = values[-1]
    for i in range(len(values) - 2, -1, -1):
        out = tirx.Select(index == i, values[i], out)
    return out


def _rows(matrix, values, const):
    """matrix @ values, row by row, as expressions: the zero terms left out, a 1 or -1
    an add or a subtract (so the transforms of F(2x2, 3x3) only add and subtract)."""
    out = []
    for row in matrix:
        expr = None
        for coef, v in zip(row, values, strict=True):
            if coef == 0:
                continue
            term = v if abs(coef) == 1 else const(abs(coef)) * v
            if expr is None:
                expr = term if coef > 0 else const(-1.0) * term
            else:
                expr = expr + term if coef > 0 else expr - term
        out.append(expr)
    return out


def compute(N: int, C: int, H: int, W: int, K: int, pad: int, m: int, dtype: str):
    from tvm import te, tirx

    if m not in _MATRICES:
        raise ValueError(f"conv2d_winograd: m = {m} (the output tile); F(2x2, 3x3) and F(4x4, 3x3) are m = 2 and 4")
    BT, G, AT = _MATRICES[m]
    alpha = m + 2
    OH, OW = H + 2 * pad - 2, W + 2 * pad - 2
    if OH < 1 or OW < 1:
        raise ValueError(f"conv2d_winograd: a {H} x {W} input with pad {pad} has no 3x3 output")
    nH, nW = (OH + m - 1) // m, (OW + m - 1) // m

    def const(v: float):
        return tirx.const(v, dtype)

    data = te.placeholder((N, C, H, W), dtype, name="data")
    kernel = te.placeholder((K, C, 3, 3), dtype, name="kernel")

    packed = te.compute((3, 3, K, C), lambda r, s, k, c: kernel[k, c, r, s], name="kernel_pack")

    def weight(e, k, c):  # U[e] = G g G^T at point e = (a, b)
        def row(r):  # filter row r, transformed along the columns
            return _pick(e % alpha, _rows(G, [packed[r, s, k, c] for s in range(3)], const))

        return _pick(e // alpha, _rows(G, [row(r) for r in range(3)], const))

    U = te.compute((alpha * alpha, K, C), weight, name="wino_weight")

    def padded(n, c, y, residue, x):  # column m*x + residue of the padded input
        h, w = y - pad, m * x + residue - pad
        return te.if_then_else(te.all(h >= 0, h < H, w >= 0, w < W), data[n, c, h, w], const(0.0))

    D = te.compute((N, C, m * nH + alpha - m, m, nW + (alpha - 1) // m), padded, name="data_pad")

    def transformed(n, e, c, q):  # V[e] = B^T d B at point e, tile q
        th, tw = q // nW, q % nW

        def row(y):  # input row y of the tile, transformed along the columns
            cols = [D[n, c, m * th + y, j % m, tw + j // m] for j in range(alpha)]
            return _pick(e % alpha, _rows(BT, cols, const))

        return _pick(e // alpha, _rows(BT, [row(y) for y in range(alpha)], const))

    V = te.compute((N, alpha * alpha, C, nH * nW), transformed, name="wino_in")
    c = te.reduce_axis((0, C), name="c")
    M = te.compute(
        (N, alpha * alpha, K, nH * nW), lambda n, e, k, q: te.sum(U[e, k, c] * V[n, e, c, q], axis=c), name="wino_gemm"
    )

    def output(n, k, h, w):  # Y = A^T M A
        q = (h // m) * nW + w // m

        def col(a):  # the tile's row a of M, carried back along the columns
            return _pick(w % m, _rows(AT, [M[n, a * alpha + b, k, q] for b in range(alpha)], const))

        return _pick(h % m, _rows(AT, [col(a) for a in range(alpha)], const))

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
    m = int(sch.get(sch.get_loops(sch.get_sblock("data_pad"))[3]).extent)  # the output tile
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
    # U: a task per output channel, the alpha^2 points unrolled, C in lanes.
    parallel_vectorized("wino_weight", [1, 0, 2], [0], 1)
    # The padded input, split by column residue: a row's m parts in one task.
    loops = sch.get_loops(sch.get_sblock("data_pad"))
    sch.parallel(sch.fuse(*loops[:3]))
    sch.unroll(loops[3])
    # V: a row of tiles is the vector; (n, c, tile row) the tasks, the points unrolled.
    # The tile index q splits into (tile row, tile column), so q // nW and q % nW fold.
    vin = sch.get_sblock("wino_in")
    n, e, c, q = sch.get_loops(vin)
    n_w = (int(sch.get(sch.get_loops(sch.get_sblock("conv"))[-1]).extent) + m - 1) // m
    th, tw = sch.split(q, [None, n_w])
    sch.reorder(n, c, th, e, tw)
    sch.parallel(sch.fuse(n, c, th))
    sch.unroll(e)
    sch.vectorize(tw)
    # Y: a task per (n, k, tile row); the block's m x m outputs unrolled, a row of tiles
    # in lanes (the m columns of each tile interleaved on the store).
    conv = sch.get_sblock("conv")
    n, k, h, w = sch.get_loops(conv)
    th, i = sch.split(h, [None, m])
    tw, j = sch.split(w, [None, m])
    sch.reorder(n, k, th, i, j, tw)
    sch.parallel(sch.fuse(n, k, th))
    sch.unroll(i)
    sch.unroll(j)
    sch.vectorize(tw)
