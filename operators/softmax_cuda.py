"""fp32 softmax over the last axis of a [R, N] matrix on an NVIDIA GPU (CUDA).

Each thread block handles tile_r[1] rows (threadIdx.y), each row with
`row_threads` threads (threadIdx.x). The row's max and sum are cross-thread
reductions, which TVM lowers by their width: `row_threads` 32, one warp per row,
is a warp-level reduction (register shuffles only); 128 or 256 is a block-level
one (shuffles within each warp, then the warps' partial results through shared
memory). exp(x - max) is computed where it is used (in the sum and in the
normalisation: no buffer); the normalisation writes `vec` floats per store.

CONSTRAINTS keep a block within THREADS and its rows' columns in whole vectors.
Which reduction wins depends on N: a 512-wide row keeps one warp busy for 16
elements per lane, a 32000-wide row wants a whole block.
"""

from __future__ import annotations

import numpy as np

from tvmtune_ci.template import define_constraint, define_knob, define_split, define_structure

TARGET_KINDS = ["cuda"]

WORKLOADS = {
    # attention probabilities: 16 heads x 512 queries, over 512 keys
    "attn_512": {"R": 8192, "N": 512, "dtype": "float32"},
    # a language-model head over a 32000-token vocabulary, 64 positions
    "vocab_32k": {"R": 64, "N": 32000, "dtype": "float32"},
}

KNOBS = [
    define_split("tile_r", "R", parts=2, max_factor=16, default=[None, 1]),  # rows per block
    define_knob("vec", [1, 2, 4]),  # floats per store of the normalisation
    define_knob("unroll", [16, 64, 0]),
    define_structure("row_threads", [32, 128, 256]),  # 32: a warp per row; more: a block
]

CONSTRAINTS = [
    define_constraint("threads", "tile_r[1] * row_threads <= THREADS"),
    define_constraint("vector", "vec <= LANES and N % (row_threads * vec) == 0"),
]


def compute(R: int, N: int, dtype: str):
    from tvm import te

    x = te.placeholder((R, N), dtype, name="x")
    j = te.reduce_axis((0, N), name="j")
    row_max = te.compute((R,), lambda r: te.max(x[r, j], axis=j), name="row_max")
    e = te.compute((R, N), lambda r, c: te.exp(x[r, c] - row_max[r]), name="e")
    j2 = te.reduce_axis((0, N), name="j2")
    row_sum = te.compute((R,), lambda r: te.sum(e[r, j2], axis=j2), name="row_sum")
    out = te.compute((R, N), lambda r, c: e[r, c] / row_sum[r], name="out")
    return te.create_prim_func([x, out])


def reference(x: np.ndarray) -> np.ndarray:
    z = x.astype(np.float64)
    z = np.exp(z - z.max(axis=-1, keepdims=True))
    return (z / z.sum(axis=-1, keepdims=True)).astype(x.dtype)


def schedule(sch, cfg) -> None:
    if cfg.isa != "cuda":
        raise ValueError(f"softmax_cuda schedules for CUDA targets, not {cfg.isa}")
    threads = cfg["row_threads"]
    sch.compute_inline(sch.get_sblock("e"))
    out = sch.get_sblock("out")
    r, c = sch.get_loops(out)
    rb, ry = cfg.split(sch, r, "tile_r")
    sch.bind(rb, "blockIdx.x")
    sch.bind(ry, "threadIdx.y")
    _, cx, lanes = sch.split(c, [None, threads, cfg.knob(sch, "vec")])
    sch.bind(cx, "threadIdx.x")
    sch.vectorize(lanes)
    # The row's reductions run in its block, each over the row's threads.
    for name in ("row_sum", "row_max"):
        blk = sch.get_sblock(name)
        sch.set_scope(blk, 0, "shared")  # one float per row, read by all its threads
        sch.compute_at(blk, ry, preserve_unit_loops=True)
        _, tx = sch.split(sch.get_loops(blk)[-1], [None, threads])
        sch.bind(tx, "threadIdx.x")
    sch.annotate(rb, "pragma_auto_unroll_max_step", cfg.knob(sch, "unroll"))
    sch.annotate(rb, "pragma_unroll_explicit", 1)
