"""benchmarks/bench_transfer.py's pure helpers: the WORKLOADS edit, the models' new
shapes, and the curve and progress readings its figures come from."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import bench_transfer as bt  # noqa: E402 - benchmarks/ is not a package

TEMPLATE = '''"""doc"""
from tvmtune_ci.template import define_split

WORKLOADS = {
    # a comment
    "a": {"M": 8, "N": 16, "dtype": "float32"},
    "b": {"M": 7, "N": 16, "dtype": "float32"},
}

KNOBS = [define_split("tile_m", "M", parts=2)]
'''


def test_with_workloads_edits_only_the_workloads() -> None:
    out = bt.with_workloads(TEMPLATE, {"b": {"M": 7, "N": 16, "dtype": "float32"}})
    assert bt.declared(out) == {"b": {"M": 7, "N": 16, "dtype": "float32"}}
    before, _, after = TEMPLATE.partition("WORKLOADS = {")
    assert out.startswith(before)
    assert out.endswith('\nKNOBS = [define_split("tile_m", "M", parts=2)]\n')


def test_with_workloads_is_a_function_of_the_set() -> None:
    """The same set gives the same file, whatever the text held before: a set tuned once
    serves as the cold repo of one case and the siblings' repo of another."""
    one = {"a": {"M": 8, "N": 16, "dtype": "float32"}}
    via_both = bt.with_workloads(bt.with_workloads(TEMPLATE, bt.declared(TEMPLATE)), one)
    assert bt.with_workloads(TEMPLATE, one) == via_both
    assert bt.declared(bt.with_workloads(TEMPLATE, bt.declared(TEMPLATE))) == bt.declared(TEMPLATE)


def test_declared_needs_a_workloads_literal() -> None:
    with pytest.raises(ValueError):
        bt.declared("KNOBS = []\n")


def test_new_shapes_from_coverage() -> None:
    cov = {
        "calls": [
            {"coverage": {"status": "covered", "template": "dense", "params": {"M": 1}}},
            {"coverage": {"status": "uncovered_shape", "template": "dense", "params": {"M": 128, "N": 768}}},
            {"coverage": {"status": "uncovered_shape", "template": "dense", "params": {"M": 128, "N": 768}}},
            {"coverage": {"status": "uncovered_shape", "template": "conv2d", "params": {"K": 1}}},
            {"coverage": {"status": "uncovered_op", "note": "no template"}},
        ]
    }
    assert bt.new_shapes(cov, "dense") == [{"M": 128, "N": 768}]
    assert bt.new_shapes(cov, "softmax") == []


def test_shape_name_says_what_differs() -> None:
    first = {"M": 128, "N": 3072, "K": 768, "dtype": "float32"}
    assert bt.shape_name("bert_layer", {"M": 128, "N": 768, "K": 768, "dtype": "float32"}, first) == "bert_layer_n768"


def test_progress_points_and_seconds() -> None:
    lines = [
        (1.0, "  softmax/this-cpu: workload_changed"),
        (6.0, "softmax/this-cpu/a: 4/8 trials, search best 1.000 ms, 5s"),
        (7.0, "softmax/this-cpu/b: 4/8 trials, search best 2.000 ms, 1s"),
        (10.0, "softmax/this-cpu/a: 8/8 trials, search best 0.900 ms, 9s"),
    ]
    points = bt.progress_points(lines, "softmax/this-cpu/a")
    assert points == [(4, 6.0), (8, 10.0)]
    curve = [(1, 10.0), (2, 10.0), (3, 12.0), (4, 12.0), (5, 15.0), (6, 15.0), (7, 15.0), (8, 15.0)]
    assert bt.trials_to(curve, 12.0) == 3
    assert bt.seconds_at(points, 3) == 6.0  # the end of the batch holding trial 3
    assert bt.trials_to(curve, 14.0) == 5
    assert bt.seconds_at(points, 5) == 10.0
    assert bt.trials_to(curve, 16.0) is None
    assert bt.seconds_at(points, None) is None
    assert bt.seconds_at(points, 9) is None


def test_goal_is_the_slowest_cold_seed() -> None:
    assert bt.goal_of([200.0, 180.0, 210.0]) == 180.0
