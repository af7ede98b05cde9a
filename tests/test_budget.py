"""One time budget across many workloads (budget.py, `retune --budget`): its shares,
its durations and the weights tvmtune.yaml gives (no TVM)."""

from __future__ import annotations

import pytest
from test_config import parse

from tvmtune_ci import budget
from tvmtune_ci.errors import UsageError


@pytest.mark.parametrize(("text", "seconds"), [("90m", 5400), ("2h", 7200), ("1h30m", 5400),
                                               ("3600s", 3600), ("45", 45), ("1.5h", 5400)])
def test_durations(text: str, seconds: float) -> None:
    assert budget.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "2 hours", "h", "-5m", "0", "5x"])
def test_a_bad_duration_says_how_to_write_one(text: str) -> None:
    with pytest.raises(UsageError, match="90m, 2h|must be positive"):
        budget.parse_duration(text)


def test_each_item_gets_its_weights_share_of_what_is_left() -> None:
    items = {("mm", "t", "a"): 0.6, ("mm", "t", "b"): 0.25, ("sm", "t", "c"): 0.1, ("sm", "t", "d"): 0.05}
    b = budget.Budget(1000.0, dict(items))
    assert b.order() == [("mm", "t", "a"), ("mm", "t", "b"), ("sm", "t", "c"), ("sm", "t", "d")]
    share, words = b.share(("mm", "t", "a"))
    assert share == pytest.approx(600, rel=1e-3) and "weight 0.60 of the 1.00 still to tune" in words
    # The first item needed less: the rest is shared by the others, by their weights.
    b.start -= 300.0
    b.finish(("mm", "t", "a"), 300.0)
    share, _ = b.share(("mm", "t", "b"))
    assert share == pytest.approx(700 * 0.25 / 0.4, rel=1e-3)


def test_a_budget_split_between_runner_jobs_follows_their_weights() -> None:
    assert budget.split(3600, {"a": [0.5, 0.25], "b": [0.25]}) == {"a": 2700, "b": 900}


def test_weights_in_tvmtune_yaml() -> None:
    c = parse("targets:\n  cpu:\n    target: {kind: llvm}\noperators:\n"
              "  matmul: {weight: 0.6, workloads: {m1024: 3, m1021: 1}}\n  dense: {weight: 0.2}\n")
    assert c.weight_of("matmul", "m1024", ["m1024", "m1021"]) == pytest.approx(0.45)
    assert c.weight_of("matmul", "m1021", ["m1024", "m1021"]) == pytest.approx(0.15)
    assert c.weight_of("dense", "a", ["a", "b"]) == pytest.approx(0.1)
    assert c.weight_of("softmax", "x", ["x"]) == 1.0  # not listed: weight 1
