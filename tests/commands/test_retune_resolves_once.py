"""Along one re-tune, each workload's facts are computed once (workload.Workload): the
template's `compute()`, the parameters looked up in WORKLOADS, the FLOP count and the
TVM target, counted in a real `tvmtune-ci retune` of a two-workload template.

The counts come from the process tree of the re-tune: `compute()` appends to a file
named by an environment variable (so a child process would count too), and a driver
wraps `workload.workload_params`, TVM's FLOP estimate and `tvm.target.Target` before the
command's modules are imported.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import git_env, make_repo
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

DRIVER = textwrap.dedent('''\
    import collections, json, sys
    counts = collections.Counter()
    import tvm
    import tvm.s_tir.analysis as analysis
    from tvmtune_ci.tune import workload as W  # before the modules that import its names

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
    code = main(["retune"])
    print("COUNTS " + json.dumps(counts))
    sys.exit(code)
''')


def test_one_retune_computes_each_workload_fact_once(tmp_path: Path) -> None:
    assert COUNTING_MM.count("COUNT_COMPUTE") == 1 and '"s32"' in COUNTING_MM
    root = make_repo(tmp_path, config=CONFIG, files={"operators/mm.py": COUNTING_MM}, operators=False)
    count_file = tmp_path / "compute.txt"
    r = subprocess.run([sys.executable, "-c", DRIVER], cwd=root, capture_output=True, text=True,
                       env={**git_env(), "COUNT_COMPUTE": str(count_file)})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    counts = json.loads(next(x for x in r.stdout.splitlines() if x.startswith("COUNTS "))[7:])
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
