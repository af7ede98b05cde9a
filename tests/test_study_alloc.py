"""benchmarks/study_alloc.py's verdict: placement (a set always slower) against the
runner's modes (a round where every set is slower)."""

from __future__ import annotations

import pytest

from benchmarks.study_alloc import spreads


def test_a_slow_mode_of_the_whole_runner_is_within_sets_not_between_them() -> None:
    # Three sets, equal in every round; the third round 2x slow for all of them.
    table = [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0], [2.0, 2.0, 2.0], [1.0, 1.0, 1.0]]
    per_set, between, within = spreads(table)
    assert per_set == [1.0, 1.0, 1.0]
    assert between == 1.0
    assert within == 1.0  # each round divided by its own median: the mode is taken out


def test_a_set_that_is_always_slower_is_between_sets() -> None:
    # The second set (its placement) 1.2x the others in every round, the rounds moving.
    table = [[1.0, 1.2, 1.0], [1.5, 1.8, 1.5], [1.0, 1.2, 1.0]]
    per_set, between, within = spreads(table)
    assert per_set == pytest.approx([1.0, 1.2, 1.0])
    assert between == pytest.approx(1.2)
    assert within == pytest.approx(1.0)


def test_slow_turns_of_single_sets_are_within_sets() -> None:
    # A slow stretch over one set's turn, a different set in each round: their rounds,
    # not their placements.
    table = [[1.0, 1.0, 1.0], [1.0, 1.5, 1.0], [1.5, 1.0, 1.0]]
    per_set, between, within = spreads(table)
    assert per_set == pytest.approx([1.0, 1.0, 1.0])
    assert between == pytest.approx(1.0)
    assert within == pytest.approx(1.5)  # the median of 1.5, 1.5 and 1.0
