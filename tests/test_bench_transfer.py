"""benchmarks/bench_transfer.py's pure helpers: the WORKLOADS edit, the models' new
shapes, and the curve and progress readings its figures come from."""

from __future__ import annotations

import math

import pytest

from benchmarks import bench_transfer as bt

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
    # The search stopped after its last progress line: the retune's end bounds it.
    assert bt.seconds_at(points, 9) is None and bt.seconds_at(points, 9, end=14.0) == 14.0
    assert bt.seconds_at(points, None, end=14.0) is None
    assert bt.trials_to(curve, 14.0) == 5
    assert bt.seconds_at(points, 5) == 10.0
    assert bt.trials_to(curve, 16.0) is None
    assert bt.seconds_at(points, None) is None
    assert bt.seconds_at(points, 9) is None


def test_goal_is_the_slowest_cold_seed() -> None:
    assert bt.goal_of([200.0, 180.0, 210.0]) == 180.0


def test_the_side_by_side_reading_takes_the_first_trial_that_found_cold_s_quality() -> None:
    """A run's best and top rows within 10% of it, by the trial that found them; the first
    whose side-by-side figure is at cold's quality or faster gives the trial. A row with no
    trial (the default won, or an older results.json) counts at the run's end."""
    from types import SimpleNamespace

    def row(a: int, lat: float, trial: int | None = None) -> dict:
        return {"knobs": {"a": a}, "latency_s": lat, **({"trial": trial} if trial else {})}

    result = {"best": row(1, 1.0, 20), "top": [row(1, 1.0, 20), row(2, 1.05, 7), row(3, 1.08), row(4, 1.2, 2)]}
    found = bt.found_by_trial(result, run=32)
    assert found == [(7, {"a": 2}), (20, {"a": 1}), (32, {"a": 3})]  # 4 is 20% slower: left out

    def est(**v: float) -> dict:
        return {f'{{"a": {k[1:]}}}': SimpleNamespace(value=x) for k, x in v.items()}

    assert bt.side_trials_to(found, est(a1=0.9, a2=0.95, a3=0.8), quality_s=1.0) == 7
    assert bt.side_trials_to(found, est(a1=0.9, a2=1.1, a3=0.8), quality_s=1.0) == 20
    assert bt.side_trials_to(found, est(a1=1.2, a2=1.1, a3=0.99), quality_s=1.0) == 32
    assert bt.side_trials_to(found, est(a1=1.2, a2=1.1), quality_s=1.0) is None


def test_within_the_noise_a_configuration_as_fast_as_cold_s_quality_reaches_it() -> None:
    """Strictly, a configuration 0.5% slower than cold's slowest best has not reached it;
    judged as the finals judge, equal within the noise, it has. One slower beyond the
    noise has not either way."""
    from tvmtune_ci.core.stats import Estimate

    found = [(2, {"a": 1}), (9, {"a": 2})]
    q = Estimate(1.0, 0.98, 1.02, 40)
    est = {
        '{"a": 1}': Estimate(1.005, 0.985, 1.025, 40),  # equal within the noise
        '{"a": 2}': Estimate(0.97, 0.96, 0.98, 40),  # faster
    }
    assert bt.side_trials_to(found, est, quality_s=1.0) == 9
    assert bt.side_trials_to(found, est, quality_s=1.0, noise=q) == 2
    est['{"a": 1}'] = Estimate(1.1, 1.08, 1.12, 40)  # slower beyond the noise
    assert bt.side_trials_to(found, est, quality_s=1.0, noise=q) == 9


def test_the_summary_gives_each_reading_its_own_median(capsys: pytest.CaptureFixture[str]) -> None:
    def arm(
        s: float,
        t_goal: int | None,
        s_goal: float,
        t_side: int | None,
        s_side: float,
        t_noise: int | None,
        s_noise: float,
    ) -> dict:
        return {
            "s": s,
            "run": 32,
            "t_goal": t_goal,
            "s_goal": s_goal,
            "t_side": t_side,
            "s_side": s_side,
            "t_noise": t_noise,
            "s_noise": s_noise,
            "best": 1.0,
        }

    rows = [
        {
            "case": bt.Case("matmul", w, ("x",), "left out"),
            "arms": {"cold@0": arm(40.0, 3, 5.0, None, math.inf, None, math.inf), "transfer@0": tr},
            "ratio": 1.0,
            "spread": 1.1,
            "slower": False,
        }
        for w, tr in (("a", arm(44.0, 1, 8.0, 8, 12.0, 1, 8.0)), ("b", arm(38.0, None, math.inf, 16, 20.0, 4, 10.0)))
    ]
    rows[1].update(verdict="point", ratio=1.2, ratio_lo=0.95, ratio_hi=1.4)  # beyond 1.1, not its noise
    bt.summary(rows, 1)
    out = capsys.readouterr().out
    assert "cold's seconds: median inf over 2 case(s) (range 0.20-inf)" in out  # the curves: b never
    assert "median 0.40 (range 0.30-0.50), trials 0.38; target <= 0.25" in out  # side by side
    assert "counted as reaching it: median 0.23 (range 0.20-0.25), trials 0.08" in out  # within the noise
    assert "median 1.02 (+1 s; range -2 to +4 s)" in out  # adding a workload
    assert "cold's own spread, and beyond the noise: none" in out
    assert "the interval reaches within it): matmul/b (1.200, 0.950-1.400 > 1.100)" in out
    # The stricter denominator, cold's own 5 s to its quality: 8/5 and never; 12/5 and
    # 20/5; 8/5 and 10/5.
    assert (
        "its quality (on its curves; not the target's denominator, cold's whole retune): curves median inf, side by side 3.20, within the noise 1.80"
        in out
    )
