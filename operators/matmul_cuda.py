"""fp32 GEMM C = A @ B on an NVIDIA GPU (CUDA): shared-memory tiles, one thread block
per output tile, a register tile per thread.

Each block computes a BM x BN tile of C (BM = tile_i[1] * tile_i[2], BN likewise)
with tile_i[1] x tile_j[1] threads, each accumulating a tile_i[2] x tile_j[2] tile
in registers. K is walked in steps of BK = tile_k[1]: the block's threads copy the
A and B tiles of a step into shared memory in vectors of `vec` floats (16-byte
loads at vec 4), synchronise, and multiply from there. `stages` 2 double-buffers
those tiles (TVM's software pipeline: the copy of step k+1 overlaps the products of
step k) for twice the shared memory.

A split that would not fit the GPU is not in the space: CONSTRAINTS keep the
threads per block within THREADS and a multiple of WARP, the shared memory of a
block (both tiles, times the stages) within SMEM, the accumulators of a block
within half of REGS, and the copies in whole vectors per thread. The target's
facts come from its dict (`targetinfo`): `check` counts only the legal points, the
search never builds another, and what ptxas reports at the build (registers per
block, spills) fails a point as `resources`.
"""

from __future__ import annotations

import numpy as np

from tvmtune_ci.template import define_constraint, define_knob, define_split, define_structure

TARGET_KINDS = ["cuda"]

WORKLOADS = {
    "m1024": {"M": 1024, "N": 1024, "K": 1024, "dtype": "float32"},
    "m4096": {"M": 4096, "N": 4096, "K": 4096, "dtype": "float32"},
}

KNOBS = [
    # rows of C: blocks x threads x registers (the default: 16 threads of 4 rows)
    define_split("tile_i", "M", parts=3, max_factor=8, default=[None, 16, 4]),
    define_split("tile_j", "N", parts=3, max_factor=8, default=[None, 16, 4]),
    # K: steps x BK, the depth of a shared-memory tile
    define_split("tile_k", "K", parts=2, max_factor=32, default=[None, 16]),
    define_knob("vec", [4, 2, 1]),  # floats per load of the shared-memory copies
    define_knob("unroll", [64, 512, 0]),
    define_structure("stages", [2, 1]),  # the k-stage choice: double-buffered or not
]

CONSTRAINTS = [
    define_constraint("threads", "tile_i[1] * tile_j[1] <= THREADS"),
    define_constraint("warps", "tile_i[1] * tile_j[1] % WARP == 0"),
    define_constraint("smem", "(tile_i[1] * tile_i[2] + tile_j[1] * tile_j[2]) * tile_k[1] * 4 * stages <= SMEM"),
    define_constraint("accumulators", "tile_i[1] * tile_i[2] * tile_j[1] * tile_j[2] <= REGS // 2"),
    define_constraint("vector", "vec <= LANES and tile_k[1] % vec == 0"),
    define_constraint("copy_a", "tile_i[1] * tile_i[2] * tile_k[1] % (tile_i[1] * tile_j[1] * vec) == 0"),
    define_constraint("copy_b", "tile_j[1] * tile_j[2] * tile_k[1] % (tile_i[1] * tile_j[1] * vec) == 0"),
]


def compute(M: int, N: int, K: int, dtype: str):
    from tvm import te

    A = te.placeholder((M, K), dtype, name="A")
    B = te.placeholder((K, N), dtype, name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return te.create_prim_func([A, B, C])


def reference(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    return (A.astype(np.float64) @ B.astype(np.float64)).astype(A.dtype)


def schedule(sch, cfg) -> None:
    if cfg.isa != "cuda":
        raise ValueError(f"matmul_cuda schedules for CUDA targets, not {cfg.isa}")
    C = sch.get_sblock("C")
    i, j, k = sch.get_loops(C)
    bi, ti, ri = cfg.split(sch, i, "tile_i")
    bj, tj, rj = cfg.split(sch, j, "tile_j")
    ko, ki = cfg.split(sch, k, "tile_k")
    sch.reorder(bi, bj, ti, tj, ko, ki, ri, rj)
    block = sch.fuse(bi, bj)
    sch.bind(block, "blockIdx.x")
    thread = sch.fuse(ti, tj)
    sch.bind(thread, "threadIdx.x")
    acc = sch.cache_write(C, 0, "local")
    sch.reverse_compute_at(acc, thread, preserve_unit_loops=True)

    # The block's threads copy each step's tiles into shared memory, vec at a time.
    vec = cfg.knob(sch, "vec")
    threads_i, threads_j = cfg.factors("tile_i")[1], cfg.factors("tile_j")[1]
    for operand in (0, 1):
        shared = sch.cache_read(C, operand, "shared")
        sch.compute_at(shared, ko, preserve_unit_loops=True)
        rows, cols = sch.get_loops(shared)[-2:]
        _, t0, t1, lanes = sch.split(sch.fuse(rows, cols), [None, threads_i, threads_j, vec])
        sch.bind(sch.fuse(t0, t1), "threadIdx.x")
        sch.vectorize(lanes)
    sch.decompose_reduction(C, ko)
    if cfg["stages"] == 2:  # copies of the next step while this one multiplies
        sch.annotate(ko, "software_pipeline_stage", [0, 0, 1])
        sch.annotate(ko, "software_pipeline_order", [0, 1, 2])
    sch.annotate(block, "pragma_auto_unroll_max_step", cfg.knob(sch, "unroll"))
    sch.annotate(block, "pragma_unroll_explicit", 1)
