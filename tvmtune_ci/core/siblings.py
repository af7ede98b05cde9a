"""A new workload seeded from its siblings (TVM-free part).

A template's workloads share its knobs; what differs is the extents the splits tile.
A configuration tuned for one shape says which tile sizes the target's registers,
caches and vector lanes favour, and that carries to a nearby shape even though the
exact factors may not divide it. So a workload the set has not tuned yet (one added
to WORKLOADS, or whose parameters changed) is seeded from the set's tuned siblings:

- their best configurations (and their top tables) are mapped onto the new
  workload's legal knob values (`map_to_shape`): a split keeps each inner factor the
  new extent still allows and otherwise takes the legal factor nearest to it by ratio
  (8 -> 6 or 12 on an extent of 36; every factor of a prime extent is 1 or the
  extent), its outermost factor taking the rest; categorical and structural knobs are
  kept when still candidates;
- the nearest siblings come first (`nearest`: by the log-ratio distance of their
  shared numeric parameters), one best of each before anyone's second;
- their other records teach the cost model, their latencies scaled by the FLOPs
  ratio of the two shapes so that labels compare across shapes (`scaled_prior`).

MetaSchedule's database looks records up by the workload's exact structural hash, so
a new shape finds nothing there; this is where a re-tune can start ahead.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from .errors import TemplateError
from .extents import eval_extent
from .history import REPLAY_K, Mapped, _valid, nearest_factor, old_configs
from .manifest import Manifest
from .targetinfo import scope
from .template import Categorical, Knob, Split, default_value


def same_params(a: Any, b: Any) -> bool:
    """Whether two workloads' parameters are the same, as JSON holds them (a manifest's
    lists and a template's tuples alike)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def is_new_shape(manifest: Manifest, name: str, params: Mapping[str, Any]) -> bool:
    """Whether `manifest`'s set has no history of workload `name` at `params`: added
    since, or its parameters changed (its siblings then seed it)."""
    return name not in manifest.results or not same_params(manifest.workloads.get(name), params)


def map_split(knob: Split, value: Any, names: Mapping[str, Any]) -> list[int] | None:
    """A sibling's tiling of the same knob on this workload's extent: each inner factor
    (innermost first) the legal factor nearest to it by ratio, the innermost also within
    `max_factor`, the outermost taking what is left. None when `value` is no tiling."""
    if not isinstance(value, (list, tuple)) or len(value) != knob.parts:
        return None
    try:
        old = [int(x) for x in value]
    except (TypeError, ValueError):
        return None
    if min(old) < 1:
        return None
    extent, top = eval_extent(knob.extent, names), eval_extent(knob.max_factor, names)
    rest, inner = extent, list[int]()
    for i, f in enumerate(reversed(old[1:])):
        f = nearest_factor(f, rest, top if i == 0 else rest)
        inner.insert(0, f)
        rest //= f
    return [rest, *inner]


def map_to_shape(
    config: Mapping[str, Any], knobs: Sequence[Knob], workload: Mapping[str, Any], target: Mapping[str, Any]
) -> Mapped:
    """A sibling's configuration on `workload`: a full, legal point of its knob space.
    `kept` names the knobs whose value carried over (a split: its inner factors, the
    outermost taking the new extent), `reset` those that were moved to the nearest legal
    value or, with nothing to go by, the default."""
    names = scope(workload, target)
    out: dict[str, Any] = {}
    kept: list[str] = []
    reset: list[str] = []
    for k in knobs:
        value = config.get(k.name)
        if k.name in config and _valid(k, value, names):
            out[k.name] = [int(x) for x in value or ()] if isinstance(k, Split) else value
            kept.append(k.name)
            continue
        fixed: Any = None
        if k.name in config:
            if isinstance(k, Split):
                fixed = map_split(k, value, names)
                # Its inner factors as they were, the outermost taking the new extent:
                # the sibling's tile, kept.
                if fixed is not None and _valid(k, fixed, names) and list(value or ())[1:] == fixed[1:]:
                    out[k.name] = fixed
                    kept.append(k.name)
                    continue
            elif isinstance(k, Categorical) and isinstance(value, int) and not isinstance(value, bool):
                fixed = min(k.candidates, key=lambda c: (abs(int(c) - value), c))
        out[k.name] = fixed if fixed is not None and _valid(k, fixed, names) else default_value(k, names)
        reset.append(k.name)
    return Mapped(out, tuple(kept), tuple(reset))


def _distance(a: Mapping[str, Any], b: Mapping[str, Any]) -> float:
    """How far two workloads' shapes are: the summed |log ratio| of their shared
    positive numeric parameters; a parameter of another value and kind (a dtype) counts
    as far as a factor of a million (another dtype is another kernel)."""
    d = 0.0
    for key in sorted(set(a) | set(b)):
        x, y = a.get(key), b.get(key)
        if (
            isinstance(x, (int, float))
            and isinstance(y, (int, float))
            and not isinstance(x, bool)
            and not isinstance(y, bool)
            and x > 0
            and y > 0
        ):
            d += abs(math.log(x / y))
        elif x != y:
            d += math.log(1e6)
    return d


def nearest(workload: Mapping[str, Any], siblings: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The siblings' names, nearest shape first (by name on a tie)."""
    return sorted(siblings, key=lambda s: (_distance(workload, siblings[s]), s))


# Sibling configurations replayed on a new shape: half a batch. They are guesses from
# another shape, not an edit's old points: each sibling's best first, and the rest of
# their records teach the cost model (`scaled_prior`) instead of being measured.
SIBLING_K = 8


def sibling_configs(manifest: Manifest, order: Sequence[str], k: int = SIBLING_K) -> list[tuple[str, dict[str, Any]]]:
    """(sibling, configuration) to map, best first per sibling and round-robin over the
    siblings in `order`: each one's best before anyone's second. At most `k`."""
    queues = [[(s, c) for c in old_configs(manifest, s, REPLAY_K)] for s in order]
    out: list[tuple[str, dict[str, Any]]] = []
    while any(queues) and len(out) < k:
        for q in queues:
            if q and len(out) < k:
                out.append(q.pop(0))
    return out


def map_siblings(
    configs: Sequence[tuple[str, Mapping[str, Any]]],
    knobs: Sequence[Knob],
    workload: Mapping[str, Any],
    target: Mapping[str, Any],
) -> list[tuple[str, Mapped]]:
    """Each sibling configuration mapped onto `workload`, distinct there (the first
    sibling to reach a point names it). One that maps onto the default configuration
    (measured anyway) or cannot be evaluated on this workload is left out."""
    names = scope(workload, target)
    try:
        default = {k.name: default_value(k, names) for k in knobs}
    except TemplateError:
        return []
    out: list[tuple[str, Mapped]] = []
    seen: set[str] = set()
    for s, c in configs:
        try:
            m = map_to_shape(c, knobs, workload, target)
        except TemplateError:
            continue
        key = repr(sorted(m.knobs.items()))
        if m.knobs == default or key in seen:
            continue
        seen.add(key)
        out.append((s, m))
    return out


def scaled_prior(
    records: Mapping[str, Sequence[tuple[Mapping[str, Any], float, str]]],
    flops: Mapping[str, float],
    new_flops: float,
    knobs: Sequence[Knob],
    workload: Mapping[str, Any],
    target: Mapping[str, Any],
    exclude: Sequence[Mapping[str, Any]],
) -> tuple[tuple[dict[str, Any], float], ...]:
    """The siblings' records as the cost model's prior on the new workload: each mapped
    onto its knob space (`map_to_shape`), labelled with the sibling's latency scaled by
    the FLOPs ratio (new / sibling), so a configuration that ran at some GFLOP/s on a
    sibling is expected to run at that rate here. Distinct points (the fastest label
    kept), without those in `exclude` (the seeds, measured here) and the default. A
    sibling without its FLOP count is skipped: its latencies cannot be compared."""
    names = scope(workload, target)
    try:
        default = {k.name: default_value(k, names) for k in knobs}
    except TemplateError:
        return ()
    skip = {repr(sorted(dict(kv).items())) for kv in exclude}
    best: dict[str, tuple[dict[str, Any], float]] = {}
    for s, rows in records.items():
        f = flops.get(s)
        if not f or not new_flops or not math.isfinite(f):
            continue
        scale = new_flops / f
        for kv, secs, _ in rows:
            if not secs > 0:
                continue
            try:
                m = map_to_shape(kv, knobs, workload, target)
            except TemplateError:
                continue
            key = repr(sorted(m.knobs.items()))
            if key in skip or m.knobs == default:
                continue
            label = float(secs) * scale
            if key not in best or label < best[key][1]:
                best[key] = (m.knobs, label)
    return tuple(sorted(best.values(), key=lambda x: x[1]))
