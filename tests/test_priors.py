"""The old log's records as the cost model's prior (TVM-free parts; the child process
and the training run in tests/test_tuner.py and tests/commands/test_retune.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tvmtune_ci.core.manifest import read_manifest
from tvmtune_ci.core.template import define_knob, define_split
from tvmtune_ci.tune import priors

WORKLOAD = {"M": 64, "N": 64}
KNOBS = [define_split("tile_i", "M", parts=2, max_factor=16), define_knob("unroll", [0, 16, 64])]
TARGET = {"kind": "llvm", "num-cores": 2}


def test_records_map_into_the_new_space_distinct_fastest_first_without_the_replayed() -> None:
    records = [
        ({"tile_i": [8, 8], "unroll": 16}, 3e-3),
        ({"tile_i": [8, 8], "unroll": 16, "gone": 1}, 2e-3),  # the same point now: faster kept
        ({"tile_i": [32, 2], "unroll": 64}, 1e-3),  # the replayed one: measured again
        ({"tile_i": [2, 32], "unroll": 0}, 5e-3),  # 32 > max_factor: repaired, still kept
        ({"other": 1}, 1e-4),  # keeps no knob: only the default, not evidence
        ({"tile_i": [4, 16], "unroll": 0}, 0.0),  # no latency
    ]
    out = priors.prior_for(records, KNOBS, WORKLOAD, TARGET,
                           exclude=[{"tile_i": [32, 2], "unroll": 64}])
    assert [secs for _, secs in out] == [2e-3, 5e-3]
    assert out[0][0] == {"tile_i": [8, 8], "unroll": 16}
    assert out[1][0]["unroll"] == 0 and out[1][0]["tile_i"][1] <= 16


def test_a_log_git_cannot_read_costs_the_prior_with_a_reason(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[1]
    mpath = next((root / "tuning_logs").glob("*/*/manifest.json"))
    manifest = read_manifest(mpath)
    assert manifest.template_commit  # what old_commit falls back to outside a repository
    with pytest.raises(priors.PriorError, match="git cannot read the templates of commit"):
        priors.old_records(tmp_path, tmp_path / "manifest.json", manifest,
                           list(manifest.workloads), tmp_path / "scratch")
