"""Along one re-tune, each workload's facts are computed once (workload.Workload): the
template's `compute()`, the parameters looked up in WORKLOADS, the FLOP count and the
TVM target, counted in a real `tvmtune-ci retune` of a two-workload template: a cold
one, a warm one after an edit (its carry refused, the old log replayed), and the GPU
builds of `check --build`.

The counts come from the process tree of the re-tune: `compute()` appends to a file
named by an environment variable (so a child process would count too), and a driver
wraps `workload.workload_params`, the module's computation, TVM's FLOP estimate and
`tvm.target.Target` before the command's modules are imported.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import commit_all, edit_results, freshen_all, git_env, make_repo
from small_mm import SMALL_MM

pytest.importorskip("tvm")

from tvmtune_ci.tune.hostcheck import host_target  # noqa: E402

TARGET = host_target(2)

CONFIG = f"""\
format: 1
trials: 8
batch_size: 8
measure: {{time_cap_s: 0.5, usable_precision: 10, history_s: 1}}
targets:
  host:
    target: {json.dumps(TARGET)}
    runs-on: [linux, x64]
"""

# SMALL_MM with a second workload, and a compute() that counts its calls in a file.
COUNTING_MM = SMALL_MM.replace(
    'WORKLOADS = {"s64": {"M": 64, "N": 64, "K": 64, "dtype": "float32"}}',
    'WORKLOADS = {"s64": {"M": 64, "N": 64, "K": 64, "dtype": "float32"},\n'
    '             "s32": {"M": 32, "N": 64, "K": 32, "dtype": "float32"}}',
).replace(
    "def compute(M, N, K, dtype):\n",
    "def compute(M, N, K, dtype):\n"
    "    import os\n"
    "    with open(os.environ['COUNT_COMPUTE'], 'a') as f:\n"
    "        f.write(f'{M}x{N}x{K}\\n')\n",
)

DRIVER = textwrap.dedent("""\
    import collections, json, sys
    counts = collections.Counter()
    import tvm
    import tvm.s_tir.analysis as analysis
    from tvmtune_ci.tune import workload as W  # before the modules that import its names

    real_compute = W._compute_module  # what Workload.mod runs, in this process
    def _compute_module(template, params):
        counts["compute " + ",".join(f"{k}={v}" for k, v in sorted(params.items()))] += 1
        return real_compute(template, params)
    W._compute_module = _compute_module

    real_params = W.workload_params
    def workload_params(template, workload):
        if isinstance(workload, str):  # a lookup in WORKLOADS; a Workload has its params
            counts["params " + workload] += 1
        return real_params(template, workload)
    W.workload_params = workload_params

    real_flops = analysis.estimate_tir_flops
    def estimate_tir_flops(mod):
        counts["flops"] += 1
        return real_flops(mod)
    analysis.estimate_tir_flops = estimate_tir_flops

    real_init = tvm.target.Target.__init__
    def init(self, target, *a, **k):
        if isinstance(target, dict):  # built from a target dict (TVM builds "llvm" hosts itself)
            counts["target " + json.dumps(target, sort_keys=True)] += 1
        real_init(self, target, *a, **k)
    tvm.target.Target.__init__ = init

    from tvmtune_ci.cli import main
    code = main(json.loads(sys.argv[1]) if len(sys.argv) > 1 else ["retune"])
    print("COUNTS " + json.dumps(counts))
    sys.exit(code)
""")


def _run(root: Path, count_file: Path, *argv: str) -> tuple[dict[str, int], str]:
    """The driver's counts of one command in `root` (compute() calls go to `count_file`),
    and what it printed."""
    count_file.unlink(missing_ok=True)
    r = subprocess.run(
        [sys.executable, "-c", DRIVER, json.dumps(list(argv) or ["retune"])],
        cwd=root,
        capture_output=True,
        text=True,
        env={**git_env(), "COUNT_COMPUTE": str(count_file)},
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return json.loads(next(x for x in r.stdout.splitlines() if x.startswith("COUNTS "))[7:]), r.stdout


def _retune_after(tmp_path: Path, change: Callable[[str], str], message: str) -> tuple[dict[str, int], str, list[str]]:
    """COUNTING_MM tuned and committed, then `change`d (it must change it) and committed:
    the second retune's counts, what it printed, and its compute() calls."""
    root = make_repo(tmp_path, config=CONFIG, files={"operators/mm.py": COUNTING_MM}, operators=False)
    count_file = tmp_path / "compute.txt"
    _run(root, count_file)
    commit_all(root, "tuned")
    path = root / "operators/mm.py"
    text = path.read_text()
    assert change(text) != text
    path.write_text(change(text))
    commit_all(root, message)
    counts, out = _run(root, count_file)
    return counts, out, count_file.read_text().split()


def test_one_retune_computes_each_workload_fact_once(tmp_path: Path) -> None:
    assert COUNTING_MM.count("COUNT_COMPUTE") == 1 and '"s32"' in COUNTING_MM
    root = make_repo(tmp_path, config=CONFIG, files={"operators/mm.py": COUNTING_MM}, operators=False)
    count_file = tmp_path / "compute.txt"
    counts, _ = _run(root, count_file)
    # compute(): once per workload, whatever checks, measurements and runs follow.
    calls = count_file.read_text().split()
    assert sorted(calls) == ["32x64x32", "64x64x64"], calls
    # WORKLOADS looked up once per workload, when it is resolved.
    assert counts.get("params s64") == 1 and counts.get("params s32") == 1, counts
    # One FLOP count per workload (the baseline's, the search's and the log's are one).
    assert counts.get("flops") == 2, counts
    # One TVM target for the set's target dict, however many builds, checks and
    # measurements use it.
    assert counts.get("target " + json.dumps(TARGET, sort_keys=True)) == 1, counts


@pytest.mark.slow
def test_a_warm_retune_whose_carry_is_refused_computes_each_workload_once(tmp_path: Path) -> None:
    """An edit that changes every program (the outer loop no longer parallel) and no
    knob: the carry step compares the programs (computing the workload) and refuses,
    the re-tune replays the old log's configurations and searches on. The carry, the
    replay, the search, the finals and the history run share one Workload here; the
    priors' child process, which decodes the old log with the old template, computes
    each workload once more there (its own process), not once per old record."""
    counts, out, calls = _retune_after(
        tmp_path, lambda text: text.replace("    sch.parallel(i0)\n", ""), "edit: no parallel loop"
    )
    assert "not carried forward: the edit changed a program" in out, out[-3000:]
    assert "replaying" in out, out[-3000:]
    # Each workload: once in this process, once in the priors' child.
    assert sorted(calls) == ["32x64x32", "32x64x32", "64x64x64", "64x64x64"], calls
    assert sorted(v for k, v in counts.items() if k.startswith("compute ")) == [1, 1], counts
    assert counts.get("params s64") == 1 and counts.get("params s32") == 1, counts
    assert counts.get("flops") == 2, counts
    assert counts.get("target " + json.dumps(TARGET, sort_keys=True)) == 1, counts


@pytest.mark.slow
def test_a_new_shape_s_siblings_are_decoded_in_this_process_from_their_own_workloads(tmp_path: Path) -> None:
    """One workload added and the template otherwise as tuned: the log's records are
    decoded with the template as imported (no checkout, no child process that imports
    TVM and computes each sibling again), from the workloads this re-tune resolved. Each
    workload is computed once in all: the siblings for their records and FLOPs, the new
    one for its search. A child process's decode would compute s64 and s32 again."""
    added = '             "s32": {"M": 32, "N": 64, "K": 32, "dtype": "float32"}}'
    counts, out, calls = _retune_after(
        tmp_path,
        lambda text: text.replace(
            added, added[:-1] + ',\n             "s48": {"M": 48, "N": 48, "K": 48, "dtype": "float32"}}'
        ),
        "a new shape",
    )
    assert "partial re-tune: only workloads changed (added s48): tuned s48" in out, out[-3000:]
    assert "s48: a new shape: seeded from its siblings" in out, out[-3000:]
    assert "the cost model also learned from" in out, out[-3000:]  # the siblings' records were read
    assert "not trained on the previous log's other records" not in out, out[-3000:]
    assert sorted(calls) == ["32x64x32", "48x48x48", "64x64x64"], calls
    assert counts.get("target " + json.dumps(TARGET, sort_keys=True)) == 1, counts


GPU_CONFIG = """\
format: 1
tvm_version: "0.27"
targets:
  h100:
    target: nvidia/nvidia-h100
    runs-on: [self-hosted, linux, x64, gpu, h100]
operators:
  matmul_cuda: {targets: [h100]}
"""


@pytest.mark.extra("cuda")
def test_the_gpu_builds_compute_each_workload_once(tmp_path: Path) -> None:
    """`check --build` compiles a GPU template's default and its best for each
    workload (here m1024's two and m4096's default) from one Workload each: the CUDA
    build, its knobs' check and the cubin do not compute the module again."""
    root = make_repo(tmp_path, config=GPU_CONFIG, operators=["matmul_cuda"])
    freshen_all(root)
    best = {"tile_i": [16, 16, 4], "tile_j": [32, 16, 2], "tile_k": [64, 16], "vec": 2, "unroll": 512, "stages": 1}

    def set_best(results: dict) -> None:
        results["m1024"]["best"]["knobs"] = dict(best)

    edit_results(root / "tuning_logs" / "matmul_cuda" / "h100", set_best)
    commit_all(root, "tuned")
    counts, _ = _run(root, tmp_path / "compute.txt", "check", "--build")
    computed = {k: v for k, v in counts.items() if k.startswith("compute ")}
    assert len(computed) == 2 and set(computed.values()) == {1}, counts
