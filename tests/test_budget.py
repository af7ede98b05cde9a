"""One time budget across many workloads (budget.py, `retune --budget`): its shares,
its durations and the weights tvmtune.yaml gives (no TVM)."""

from __future__ import annotations

import pytest
from test_config import parse

from tvmtune_ci.core.errors import UsageError
from tvmtune_ci.pipeline import budget


@pytest.mark.parametrize(
    ("text", "seconds"), [("90m", 5400), ("2h", 7200), ("1h30m", 5400), ("3600s", 3600), ("45", 45), ("1.5h", 5400)]
)
def test_durations(text: str, seconds: float) -> None:
    assert budget.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "2 hours", "h", "-5m", "0", "5x"])
def test_a_bad_duration_says_how_to_write_one(text: str) -> None:
    with pytest.raises(UsageError, match="90m, 2h|must be positive"):
        budget.parse_duration(text)


def test_each_item_gets_its_weights_share_of_what_is_left() -> None:
    items = {("mm", "t", "a"): 0.6, ("mm", "t", "b"): 0.25, ("sm", "t", "c"): 0.1, ("sm", "t", "d"): 0.05}
    b = budget.Budget(1000.0, dict(items))
    # The heaviest last: it takes what the others' measured floors and shares left.
    assert b.order() == [("sm", "t", "d"), ("sm", "t", "c"), ("mm", "t", "b"), ("mm", "t", "a")]
    share, words = b.share(("mm", "t", "a"))
    assert share == pytest.approx(600, rel=1e-3) and "weight 0.60 of the 1.00 still to tune" in words
    # The first item needed less: the rest is shared by the others, by their weights.
    b.start -= 300.0
    b.finish(("mm", "t", "a"), 300.0)
    share, _ = b.share(("mm", "t", "b"))
    assert share == pytest.approx(700 * 0.25 / 0.4, rel=1e-3)


ITEMS = {("mm", "t", "a"): 0.6, ("mm", "t", "b"): 0.25, ("sm", "t", "c"): 0.1, ("sm", "t", "d"): 0.05}


def _spend(b: budget.Budget, cost: dict[budget.Item, float], *, floors: bool = True) -> dict[budget.Item, float]:
    """Run the items in order, each taking its share but never less than its true cost
    `cost` (its checks, finals and warm-up happen whatever the share), telling the
    budget each one's floor (unless `floors` is off): the seconds each took. The clock
    is moved by hand: no sleeping."""
    took = {}
    for item in b.order():
        share, _ = b.share(item)
        took[item] = max(share, cost[item])
        b.start -= took[item]
        b.finish(item, took[item], cost[item] if floors else None)
    return took


def test_the_floors_of_the_items_to_come_are_reserved_so_the_budget_holds() -> None:
    """Each item costs at least 120 s. Shared by weight alone (no floor known), the
    light items' shares fall below that (50 s of the lightest's 120 here; bench_budget
    measured such a best 1.6-2.1x slower, and the run 1.17-1.26x over the budget when
    the heaviest ran first); with the floor reserved it spends the budget, no more, and
    the weights share what lies beyond the floors."""
    cost = dict.fromkeys(ITEMS, 120.0)
    assert budget.Budget(1000.0, dict(ITEMS)).share(("sm", "t", "d"))[0] == pytest.approx(50.0)
    took = _spend(budget.Budget(1000.0, dict(ITEMS), floor_s=120.0), cost)
    assert sum(took.values()) == pytest.approx(1000.0)
    assert took[("sm", "t", "d")] == pytest.approx(120 + (1000 - 4 * 120) * 0.05)
    assert took[("mm", "t", "a")] > took[("mm", "t", "b")] > took[("sm", "t", "c")] > took[("sm", "t", "d")]
    assert all(t >= 120.0 for t in took.values())


def test_an_item_is_given_its_floor_and_its_weights_share_beyond_the_floors() -> None:
    b = budget.Budget(1000.0, dict(ITEMS), floor_s=100.0)
    share, words = b.share(("mm", "t", "a"))
    assert share == pytest.approx(100 + 600 * 0.6)
    assert "its floor (1.67 min: checks, finals and the search's warm-up)" in words
    assert "weight 0.60 of the 1.00 still to tune of the 10 min beyond the floors of the 4 left" in words
    # Measured floors replace the estimate once items are done (their median).
    b.start -= 300.0
    b.finish(("mm", "t", "a"), 300.0, 80.0)
    assert b.floor() == 80.0
    share, _ = b.share(("mm", "t", "b"))
    assert share == pytest.approx(80 + (700 - 3 * 80) * 0.25 / 0.4)


def test_a_budget_below_the_floors_gives_each_item_its_floor() -> None:
    b = budget.Budget(100.0, dict(ITEMS), floor_s=50.0)
    assert b.share(("mm", "t", "a"))[0] == pytest.approx(50.0)
    assert b.share(("sm", "t", "d"))[0] == pytest.approx(50.0)


def test_a_finished_items_floor_is_all_but_its_search_plus_its_warm_up() -> None:
    # 100 s in all, 60 s of it a 96-trial search: 40 s of checks and finals, and the
    # first 32 trials at 0.625 s each; and its part of the set's history run.
    assert budget.floor_of(100.0, {"search_s": 60.0, "search_trials": 96.0}, 32, 5.0) == pytest.approx(65.0)
    assert budget.floor_of(30.0, {"search_s": 10.0, "search_trials": 16.0}, 32) == pytest.approx(30.0)
    assert budget.floor_estimate(2.0, 0.4, 5, 32, 10.0) == pytest.approx(2 * 9 + 12.8 + 10)


def test_an_item_that_did_not_search_leaves_the_floors_to_those_that_did() -> None:
    """An item whose old search stood (no trial of its own) took its replay and finals
    only: 12 s here, where a searching item's floor is 30 s. Counted, it would cut the
    floors kept for the two items after the next from 60 s to 24, and the next item,
    past its share with 75 s left, would go on into seconds their warm-ups (never cut)
    take anyway: the run would end over its budget. Left out, the settings' estimate
    stands, then the first searching item's own floor (reshare)."""
    assert budget.floor_of(12.0, {"prior_s": 0.4}, 32, 1.0) is None
    assert budget.floor_of(12.0, {"search_s": 0.0, "search_trials": 0.0}, 32) is None
    items = {("sm", "t", "d"): 0.05, ("mm", "t", "c"): 0.10, ("mm", "t", "b"): 0.25, ("cv", "t", "a"): 0.60}
    b = budget.Budget(300.0, dict(items), floor_s=30.0)
    d, c = ("sm", "t", "d"), ("mm", "t", "c")
    b.finish(d, 12.0, budget.floor_of(12.0, {}, 32))
    b.start -= 12.0
    assert b.floor() == 30.0
    share, why = b.share(c)
    assert share == pytest.approx(30 + (288 - 3 * 30) * 0.10 / 0.95), why
    assert b.reshare(c, 30.0, 288.0) is not None  # the first searching item's warm-up
    b.start -= 213.0  # 75 s left; c gains fast, but the 60 s are b's and a's floors
    more, why = b.go_on(c, 100.0, 0.5, 20.0)
    assert not more and "were the floors of the 2 item(s) after it" in why, why
    # What c took (a search of 40 trials) is a floor: now the median of the searches.
    b.finish(c, 50.0, budget.floor_of(50.0, {"search_s": 40.0, "search_trials": 40.0}, 32))
    assert b.floor() == pytest.approx(42.0)
    assert b.reshare(("mm", "t", "b"), 20.0, 200.0) is None


def test_past_its_share_an_item_goes_on_while_its_gradient_beats_the_items_after_it() -> None:
    """1000 s, floors of 100 s: the 0.60 item's share is 460 s. Past it, the next batch
    (20 s) is worth it only if the item's weighted gain per second beats the best guess
    for an item after it at the end of its share: mm/b, 0.25 / (100 + 220 x 0.25/0.40) =
    0.105% of the end-to-end time per s. The same gain goes further on a heavier item;
    a flat search stops; the floors of the items after it are never spent."""
    b = budget.Budget(1000.0, dict(ITEMS), floor_s=100.0)
    a = ("mm", "t", "a")
    assert b.share(a)[0] == pytest.approx(460.0)
    b.start -= 460.0
    more, why = b.go_on(a, 460.0, 0.005, 20.0)  # 0.6 x 0.5%/s = 0.3%/s
    assert more and "beat mm/b's 6.3% of the end-to-end time per min" in why, why
    more, why = b.go_on(a, 460.0, 0.0015, 20.0)  # 0.6 x 0.15%/s = 0.09%/s
    assert not more and "fell below mm/b's" in why, why
    assert not b.go_on(a, 460.0, 0.0, 20.0)[0]
    # The same gain per second on the 0.10 item (after a and b): beaten by d's guess?
    # d: 0.05 / (100 + pool): no; c's 0.1 x 0.0015 = 0.015%/s is below it.
    b.finish(a, 460.0, 100.0)
    b.finish(("mm", "t", "b"), 200.0, 100.0)
    b.start -= 200.0 + 150.0
    c = ("sm", "t", "c")
    assert not b.go_on(c, 150.0, 0.0015, 20.0)[0]
    assert b.go_on(c, 150.0, 0.01, 20.0)[0]
    # Only d's floor is left beyond the next batch: c stops whatever it gains.
    b.start -= 80.0  # 110 s left
    more, why = b.go_on(c, 230.0, 0.5, 20.0)
    assert not more and "were the floors of the 1 item(s) after it" in why, why
    # The last item: no other use for the seconds, but a flat search is not worth them.
    b.finish(c, 230.0, 100.0)
    d = ("sm", "t", "d")
    b.start += 200.0
    assert b.go_on(d, 100.0, 0.001, 20.0)[0]
    assert not b.go_on(d, 100.0, 0.0, 20.0)[0]


def test_a_budget_split_between_runner_jobs_follows_their_weights() -> None:
    assert budget.split(3600, {"a": [0.5, 0.25], "b": [0.25]}) == {"a": 2700, "b": 900}


def test_weights_in_tvmtune_yaml() -> None:
    c = parse(
        "targets:\n  cpu:\n    target: {kind: llvm}\noperators:\n"
        "  matmul: {weight: 0.6, workloads: {m1024: 3, m1021: 1}}\n  dense: {weight: 0.2}\n"
    )
    assert c.weight_of("matmul", "m1024", ["m1024", "m1021"]) == pytest.approx(0.45)
    assert c.weight_of("matmul", "m1021", ["m1024", "m1021"]) == pytest.approx(0.15)
    assert c.weight_of("dense", "a", ["a", "b"]) == pytest.approx(0.1)
    assert c.weight_of("softmax", "x", ["x"]) == 1.0  # not listed: weight 1


def test_beside_a_model_s_shares_an_operator_without_a_weight_is_marginal() -> None:
    """A profile's shares are fractions of a model's time; an operator no model calls
    and no weight was typed for must not outweigh them (1.0 would give it most of the
    budget): it weighs as the lightest share, split among its workloads. A typed
    weight stays the user's."""
    c = parse("targets:\n  cpu:\n    target: {kind: llvm}\noperators:\n  dense: {weight: 0.2}\n")
    shares = {("conv2d", "r3x3"): 0.4, ("conv2d", "r1x1"): 0.1}
    assert c.weight_of("conv2d", "r3x3", ["r3x3", "r1x1"], shares) == pytest.approx(0.4)
    assert c.weight_of("matmul", "m1", ["m1", "m2"], shares) == pytest.approx(0.05)
    assert c.weight_of("dense", "a", ["a", "b"], shares) == pytest.approx(0.1)
    assert c.weight_of("matmul", "m1", ["m1", "m2"]) == pytest.approx(0.5)  # no profile


def test_the_first_items_share_is_recomputed_from_the_floor_its_warm_up_measured() -> None:
    """Before any item is done, the floor is the measurement settings' estimate, every
    contender and finalist at its time cap: 300 s here where an item's floor is 100 s.
    The 1000-s budget then reserves it 4 times over and the first item gets its floor
    and nothing beyond (as the heaviest did in bench_budget run 4, when it ran first). Its warm-up measures its own
    floor; its share is recomputed as it would have been at its start, and the items
    after it are reserved that floor, not the estimate."""
    b = budget.Budget(1000.0, dict(ITEMS), floor_s=300.0)
    a = ("mm", "t", "a")  # run first here, whatever the order says
    assert b.share(a)[0] == pytest.approx(300.0)
    b.start -= 120.0  # its checks and warm-up took 120 s so far
    share, words = b.reshare(a, 100.0, left_s=1000.0)
    assert share == pytest.approx(100 + (1000 - 4 * 100) * 0.6)
    assert "its floor (1.67 min: checks, finals and the search's warm-up, measured in its own warm-up)" in words
    # Past that share, the next items' floors reserved are the measured ones: 3 x 100 s.
    b.start -= 340.0  # 540 s left
    assert b.go_on(a, 460.0, 0.05, 20.0)[0]
    b.start -= 200.0  # 340 s left: one 20-s batch and 3 floors of 100 s fit, two do not
    assert b.go_on(a, 660.0, 0.05, 20.0)[0]
    assert not b.go_on(a, 660.0, 0.05, 60.0)[0]
    # Once an item is done, the measured floors decide: no reshare.
    b.finish(a, 660.0, 100.0)
    assert b.reshare(("mm", "t", "b"), 50.0, left_s=340.0) is None
    assert b.floor() == 100.0


def test_trials_by_share_follow_the_tiers_unless_the_operator_sets_its_own() -> None:
    """The background write-up's 4.1: a workload's trials by its share of a profiled
    model's time; the operator's `trials:` wins; no profile: the top-level trials."""
    c = parse("targets:\n  cpu:\n    target: {kind: llvm}\ntrials: 300\noperators:\n  dense: {trials: 64}\n")
    shares = {("conv2d", "r3x3"): 0.44, ("conv2d", "r1x1"): 0.12, ("matmul", "m"): 0.01}
    assert c.trials_of("conv2d", "r3x3", shares)[0] == 1500
    assert c.trials_of("conv2d", "r1x1", shares)[0] == 500
    assert c.trials_of("matmul", "m", shares)[0] == 150
    assert c.trials_of("softmax", "s", shares)[0] == 150  # no model calls it: marginal
    assert c.trials_of("dense", "a", shares) == (64, "operators.dense.trials")
    assert c.trials_of("conv2d", "r3x3") == (300, "trials")
    off = parse("targets:\n  cpu:\n    target: {kind: llvm}\ntrial_tiers: off\n")
    assert off.trials_of("conv2d", "r3x3", shares)[0] == 300


@pytest.mark.parametrize("tiers", ["{0.3: 100}", "{2: 100, 0: 10}", "{0.3: 0, 0: 10}", "[1, 2]"])
def test_bad_trial_tiers_name_the_fix(tiers: str) -> None:
    from tvmtune_ci.core.errors import ConfigError

    with pytest.raises(ConfigError, match="trial_tiers"):
        parse(f"targets:\n  cpu:\n    target: {{kind: llvm}}\ntrial_tiers: {tiers}\n")
