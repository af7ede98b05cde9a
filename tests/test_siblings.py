"""A new shape's seeds from its siblings (core/siblings.py): every mapped configuration
is a legal point of the new workload's knob space, whatever the extents (prime, padded,
smaller than the old factors); the nearest shapes come first; the prior's labels are
scaled by the FLOPs ratio. Pure Python: no TVM."""

from __future__ import annotations

import itertools
import math
import random

from tvmtune_ci.core.extents import eval_extent, perfect_tilings
from tvmtune_ci.core.history import _valid
from tvmtune_ci.core.siblings import map_split, map_to_shape, nearest, scaled_prior
from tvmtune_ci.core.targetinfo import scope
from tvmtune_ci.core.template import Categorical, Split, Structural

TARGET = {"kind": "llvm", "mcpu": "znver4", "num-cores": 2}
# The matmul template's knobs (operators/matmul.py): padded extents, a bound that reads
# the target (VREGS), a structural choice.
KNOBS = (
    Split("tile_i", "(M + 15)//16*16", parts=3, max_factor=8),
    Split("tile_j", "(N + 15)//16*16//LANES", parts=3, max_factor="VREGS//8"),
    Split("tile_k", "(K + 15)//16", parts=2, max_factor=32),
    Split("plain", "M", parts=3, max_factor=16),
    Categorical("unroll", (0, 16, 64)),
    Structural("accumulate", ("register", "memory")),
)


def _shape(m: int, n: int, k: int) -> dict[str, object]:
    return {"M": m, "N": n, "K": k, "dtype": "float32"}


def _tilings(knob: Split, wl: dict[str, object]) -> list[list[int]]:
    names = scope(wl, TARGET)
    ext, top = eval_extent(knob.extent, names), eval_extent(knob.max_factor, names)
    return [list(t) for t in perfect_tilings(ext, knob.parts, top)]


def test_every_sibling_configuration_maps_to_a_legal_point_of_any_new_shape() -> None:
    """Each tiling of each sibling shape, mapped onto shapes that include primes (1021,
    97, 13), padded ones and extents smaller than the old factors, is a valid tiling
    there; categorical and structural values carry over."""
    rng = random.Random(7)
    siblings = [_shape(1024, 1024, 1024), _shape(128, 3072, 768), _shape(96, 96, 96)]
    news = [_shape(1021, 1021, 1021), _shape(97, 13, 7), _shape(768, 768, 768), _shape(1, 1, 1), _shape(5, 4096, 3)]
    checked = 0
    for old, new in itertools.product(siblings, news):
        names = scope(new, TARGET)
        for _ in range(30):
            cfg = {k.name: rng.choice(_tilings(k, old)) for k in KNOBS if isinstance(k, Split)}
            cfg |= {"unroll": rng.choice((0, 16, 64)), "accumulate": "memory"}
            m = map_to_shape(cfg, KNOBS, new, TARGET)
            for k in KNOBS:
                assert _valid(k, m.knobs[k.name], names), (k.name, cfg[k.name], new, m.knobs[k.name])
            assert m.knobs["unroll"] == cfg["unroll"] and m.knobs["accumulate"] == "memory"
            assert set(m.kept) | set(m.reset) == {k.name for k in KNOBS}
            checked += 1
    assert checked == 450


def test_a_factor_that_no_longer_divides_moves_to_the_nearest_by_ratio() -> None:
    """On an extent of 36 an inner 8 becomes 9 (|log 9/8| < |log 6/8|); a prime extent
    leaves only 1 inside; a factor that still divides stays; the innermost stays within
    its bound."""
    knob = Split("t", "M", parts=3, max_factor=16)
    assert map_split(knob, [4, 8, 8], {"M": 36}) == [1, 4, 9]  # 8 -> 9, then 4 divides 4
    assert map_split(knob, [16, 4, 16], {"M": 1021}) == [1021, 1, 1]
    assert map_split(knob, [16, 4, 16], {"M": 768}) == [12, 4, 16]
    assert map_split(knob, [1, 2, 64], {"M": 4096}) == [128, 2, 16]  # 64 is beyond max_factor
    assert map_split(knob, "bad", {"M": 36}) is None and map_split(knob, [1, 0, 3], {"M": 36}) is None


def test_the_nearest_shape_comes_first() -> None:
    new = _shape(768, 768, 768)
    siblings = {
        "m1024": _shape(1024, 1024, 1024),
        "m64": _shape(64, 64, 64),
        "ffn1": _shape(128, 3072, 768),
        "f16": {**_shape(768, 768, 768), "dtype": "float16"},
    }
    assert nearest(new, siblings) == ["m1024", "ffn1", "m64", "f16"]


def test_the_prior_is_labelled_at_the_sibling_s_rate_on_the_new_shape() -> None:
    """A record that ran 2 ms on a sibling of 8x the FLOPs is expected to run 0.25 ms
    here; the seeds (measured here) and the default are not in the prior; the fastest
    label of a point reached twice is kept; a sibling without a FLOP count is skipped;
    a broken record is skipped, never raised."""
    knobs = (Split("t", "M", parts=2, max_factor=64), Categorical("u", (0, 16)))
    new = {"M": 64}
    records = {
        "big": [
            ({"t": [16, 8], "u": 16}, 2e-3, ""),
            ({"t": [32, 4], "u": 0}, 4e-3, ""),
            ({"t": [4, 32], "u": 16}, 1e-3, ""),
            ({"t": [128, 1], "u": 0}, 9e-3, ""),
            ({"t": "junk", "u": "x"}, 1e-3, ""),
            ({"t": [8, 16], "u": 0}, float("nan"), ""),
        ],
        "same_point": [({"t": [2, 32], "u": 16}, 0.1e-3, "")],
        "no_flops": [({"t": [64, 1], "u": 16}, 1e-3, "")],
    }
    flops = {"big": 8.0, "same_point": 1.0}
    prior = scaled_prior(records, flops, 1.0, knobs, new, TARGET, exclude=[{"t": [8, 8], "u": 16}])
    got = {repr(k): v for k, v in prior}
    # [16, 8] on 64 stays [8, 8]: excluded (a seed). [32, 4] -> [16, 4]; [4, 32] -> [2, 32]
    # at 1/8 ms (also reached by same_point at 0.1 ms: the fastest kept); [128, 1] and junk map to
    # the default [64, 1] / u 0: not in the prior.
    assert got == {repr({"t": [16, 4], "u": 0}): 4e-3 / 8, repr({"t": [2, 32], "u": 16}): 0.1e-3}
    assert [v for _, v in prior] == sorted(v for _, v in prior)
    assert all(math.isfinite(v) for _, v in prior)
