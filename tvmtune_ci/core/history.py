"""What the previous log is worth after a template edit (TVM-free part).

When an entry is stale because its template or a helper changed, the previous
log's best configurations are not thrown away: they are mapped into the new
template's knob space by knob name (`map_config`), replayed first (built, checked
against `reference`, measured: the tuner's `Search.replay`), and seed the search.
The old best, mapped, is a finalist, so the report says what it is worth on the new
template against the new best. `knob_diff` says what changed in the declaration,
read from the template as it was committed when the old log was tuned.

The log's other records are not measured again; they train the cost model before the
first batch (`priors.py`). Only the same operator and target are replayed, unless
a target's `seed-from` names another (off by default): configurations tuned for
other hardware can pull a search off course.

Over 400 lines: mapping an old configuration, the declaration diff the README reports
and the probes of the region an edit opened all read one model of an edit (the old
and the new KNOBS, scoped by the workload); split, each would rebuild it. What the
replay was worth, in words, is `replayreport.py`.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import GitError, TemplateError
from .extents import eval_extent, perfect_tilings
from .git import run
from .manifest import Manifest
from .targetinfo import scope
from .template import Categorical, Knob, Split, Structural, default_value, knob_from_ast

# Old configurations replayed per workload: the old best, its finals and its top.
REPLAY_K = 16


@dataclass(frozen=True)
class Mapped:
    """One old configuration in the new knob space."""

    knobs: dict[str, Any]  # a full point of the new space
    kept: tuple[str, ...]  # knobs taken from the old configuration as they were
    reset: tuple[str, ...]  # knobs new (the default) or no longer valid (repaired)
    # Of `reset`, the splits another target's facts rescaled to the same elements
    # (`rescale_split`): moved, but taken from the old configuration, not the default.
    scaled: tuple[str, ...] = ()


def _valid(knob: Knob, value: Any, names: Mapping[str, Any]) -> bool:
    if isinstance(knob, Split):
        if not isinstance(value, (list, tuple)) or len(value) != knob.parts:
            return False
        try:
            factors = [int(x) for x in value]
        except (TypeError, ValueError):
            return False
        prod = 1
        for f in factors:
            prod *= f
        return (
            min(factors) >= 1
            and prod == eval_extent(knob.extent, names)
            and factors[-1] <= eval_extent(knob.max_factor, names)
        )
    if isinstance(knob, (Categorical, Structural)):
        return value in knob.candidates
    return False


def divisors(n: int) -> list[int]:
    """n's divisors, ascending."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted({*small, *(n // d for d in small)})


def nearest_factor(want: float, rest: int, bound: int) -> int:
    """The divisor of `rest` no larger than `bound` nearest to `want` by ratio (the
    smaller on a tie: a smaller inner tile is the safer guess for registers)."""
    legal = [d for d in divisors(rest) if d <= bound] or [1]
    return min(legal, key=lambda d: (abs(math.log(d / max(1.0, want))), d))


def _repair_split(knob: Split, value: Any, names: Mapping[str, Any]) -> list[int] | None:
    """The valid tiling nearest to an old one: its inner factors kept from the
    innermost out as far as they still divide the extent (the innermost also within
    max_factor, else the largest divisor below it), the outermost taking the rest."""
    if not isinstance(value, (list, tuple)) or not value:
        return None
    try:
        old = [int(x) for x in value]
    except (TypeError, ValueError):
        return None
    extent, top = eval_extent(knob.extent, names), eval_extent(knob.max_factor, names)
    inner = old[1:][-(knob.parts - 1) :] if knob.parts > 1 else []
    inner = [1] * (knob.parts - 1 - len(inner)) + inner
    rest = extent
    out_inner: list[int] = []
    for i, f in enumerate(reversed(inner)):
        bound = top if i == 0 else rest
        f = max(1, min(f, bound))
        f = max(d for d in divisors(rest) if d <= f)
        out_inner.insert(0, f)
        rest //= f
    return [rest, *out_inner]


def _repair(knob: Knob, value: Any, names: Mapping[str, Any]) -> Any:
    """The valid value nearest to an old one, or None when there is nothing to go by."""
    if isinstance(knob, Split):
        return _repair_split(knob, value, names)
    if isinstance(knob, Categorical) and isinstance(value, int) and not isinstance(value, bool):
        return min(knob.candidates, key=lambda c: (abs(int(c) - value), c))
    return None


def rescale_split(knob: Split, value: Any, source: Mapping[str, Any], names: Mapping[str, Any]) -> list[int] | None:
    """Another target's tiling of a knob whose extent counts in the target's facts
    (`(N + 15)//16*16//LANES`: columns in vectors), mapped so that every level of the
    tile keeps its size in elements: with half the lanes, each inner level counts
    twice the vectors, the innermost within this target's `max_factor` (its registers)
    and each level out taking what the levels inside it gave up, the outermost (the
    parallel tiles) left as it was. Keeping the factors instead halves every level's
    columns and doubles the tiles: zen4-2c's matmul m1024 configurations (1 vector of
    16) then give AVX2 register tiles of 1 vector of 8, where its own log's best has 2;
    rescaled, zen4-2c's second m1021 configuration is the AVX2 log's best exactly.

    None when `value` is no tiling of the knob's extent under `source` (the scope the
    configuration was tuned in), or when the extent is the same there as here."""
    if not isinstance(value, (list, tuple)) or len(value) != knob.parts or knob.parts < 2:
        return None
    try:
        old = [int(x) for x in value]
        was, now = eval_extent(knob.extent, source), eval_extent(knob.extent, names)
    except (TypeError, ValueError, TemplateError):
        return None
    if was == now or min(old) < 1 or math.prod(old) != was:
        return None
    scale, top = now / was, eval_extent(knob.max_factor, names)
    rest, inner, old_size, new_size = now, list[int](), 1, 1
    for i, f in enumerate(reversed(old[1:])):
        old_size *= f  # this level's size, in the source's units
        f = nearest_factor(old_size * scale / new_size, rest, top if i == 0 else rest)
        inner.insert(0, f)
        rest //= f
        new_size *= f
    return [rest, *inner]


def map_config(
    old: Mapping[str, Any],
    knobs: Sequence[Knob],
    workload: Mapping[str, Any],
    target: Mapping[str, Any],
    source: Mapping[str, Any] | None = None,
) -> Mapped:
    """`old` in the space of `knobs`: each knob that still exists with a valid value
    keeps it; one no longer valid is repaired to the nearest valid value (a split
    keeps the inner factors that still fit, an integer knob the closest candidate);
    a new knob, or one with nothing to go by, takes the default. The search then
    samples from these points on.

    `source`: the target `old` was tuned for, when another (seed-from, the nearest
    target). A split whose extent counts in the targets' facts is then rescaled to
    keep its tile sizes in elements (`rescale_split`), not its factors."""
    names = scope(workload, target)
    src = scope(workload, source) if source is not None else None
    out: dict[str, Any] = {}
    kept: list[str] = []
    reset: list[str] = []
    scaled: list[str] = []
    for k in knobs:
        if src is not None and isinstance(k, Split) and k.name in old:
            value = rescale_split(k, old[k.name], src, names)
            if value is not None and _valid(k, value, names):
                out[k.name] = value
                if value == [int(x) for x in old[k.name]]:
                    kept.append(k.name)
                else:
                    reset.append(k.name)
                    scaled.append(k.name)
                continue
        if k.name in old and _valid(k, old[k.name], names):
            value = old[k.name]
            out[k.name] = [int(x) for x in value] if isinstance(k, Split) else value
            kept.append(k.name)
            continue
        fixed = _repair(k, old[k.name], names) if k.name in old else None
        out[k.name] = fixed if fixed is not None and _valid(k, fixed, names) else default_value(k, names)
        reset.append(k.name)
    return Mapped(out, tuple(kept), tuple(reset), tuple(scaled))


def old_configs(manifest: Manifest, workload: str, k: int = REPLAY_K) -> list[dict[str, Any]]:
    """The previous log's configurations of `workload`, best first, distinct: its best,
    the previous best it kept, then its top table."""
    result = manifest.results.get(workload)
    if result is None:
        return []
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    candidates = [result.best, result.previous_best, *result.top]
    for m in candidates:
        if m is None or not m.knobs:
            continue
        key = repr(sorted(m.knobs.items()))
        if key not in seen:
            seen.add(key)
            out.append(dict(m.knobs))
    return out[:k]


def map_all(
    configs: Sequence[Mapping[str, Any]],
    knobs: Sequence[Knob],
    workload: Mapping[str, Any],
    target: Mapping[str, Any],
    source: Mapping[str, Any] | None = None,
) -> list[Mapped]:
    """Every old configuration mapped, distinct in the new space (two old ones that
    differ only in a removed knob are one new point), best first. One that keeps no
    knob at all (none rescaled either) is only the default configuration (measured
    anyway): left out.

    `source`: the target the configurations were tuned for, when another. A knob that
    counts in the targets' facts reads two ways (a register tile in vectors: the same
    elements, or the same vectors and so the same registers), and only the target can
    say which holds, so each configuration is mapped both ways, the element-preserving
    one first (`rescale_split`), and as many points are kept as configurations given:
    the best ones in both readings rather than more of them in one."""
    readings = [source, None] if source is not None else [None]
    out: list[Mapped] = []
    seen: set[str] = set()
    for c in configs:
        for src in readings:
            m = map_config(c, knobs, workload, target, src)
            if not m.kept and not m.scaled:
                continue
            key = repr(sorted(m.knobs.items()))
            if key not in seen:
                seen.add(key)
                out.append(m)
    return out[: len(configs)]


# --------------------------------------------------------------------------- probes


def _values(k: Knob, names: Mapping[str, Any]) -> list[Any]:
    """Every value `k` can take for this workload and target (a split: its tilings)."""
    if isinstance(k, Split):
        try:
            ext, top = eval_extent(k.extent, names), eval_extent(k.max_factor, names)
        except TemplateError:
            return []
        return [list(t) for t in perfect_tilings(ext, k.parts, top)]
    return list(k.candidates)


def probes(
    old_best: Mapping[str, Any],
    old_knobs: Sequence[Knob] | None,
    knobs: Sequence[Knob],
    workload: Mapping[str, Any],
    target: Mapping[str, Any],
    limit: int,
) -> list[dict[str, Any]]:
    """Points of the region an edit opened, next to the old best: the old best (mapped
    into the new space) with one knob set to a value the old template could not take,
    for each such value of each knob (a new knob: each of its values). At most `limit`,
    spread evenly over the knobs and their values.

    The history (replay and the cost model's prior) knows only the old space, so a
    search seeded from it samples the new region late, and a stop rule that trusts the
    model can end first (measured: a tile made vectorisable by the edit was never
    tried in 78 trials). Without the old declaration (`old_knobs` None), none."""
    if old_knobs is None or limit <= 0:
        return []
    names = scope(workload, target)
    old_by = {k.name: k for k in old_knobs}
    per_knob: list[list[dict[str, Any]]] = []
    for k in knobs:
        before = old_by.get(k.name)
        if before is not None and type(before) is not type(k):
            before = None
        seen = [] if before is None else _values(before, names)
        new = [v for v in _values(k, names) if v not in seen and v != old_best.get(k.name)]
        if new:
            per_knob.append([{**old_best, k.name: v} for v in new])
    # Round-robin over the knobs; each knob's values in an order that spreads over its
    # whole range (both ends, then the middles), so a few probes span it.
    queues = [[vs[i] for i in _spread(len(vs))] for vs in per_knob]
    out: list[dict[str, Any]] = []
    while any(queues) and len(out) < limit:
        for q in queues:
            if q and len(out) < limit:
                out.append(q.pop(0))
    return out


def _spread(n: int) -> list[int]:
    """0..n-1 ordered to cover the range early: the ends, then halving the gaps."""
    if n <= 2:
        return list(range(n))
    order, seen = [0, n - 1], {0, n - 1}
    parts = 2
    while len(order) < n:
        for j in range(1, parts, 2):
            i = round(j * (n - 1) / parts)
            if i not in seen:
                seen.add(i)
                order.append(i)
        parts *= 2
        if parts > 2 * n:
            order.extend(i for i in range(n) if i not in seen)
            break
    return order


# --------------------------------------------------------------------------- knob diff


@dataclass(frozen=True)
class KnobDiff:
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()  # "tile_j: extent 64 -> 128", "unroll: candidates ..."
    known: bool = True  # False: the old declaration could not be read (names only)

    def to_json(self) -> dict[str, Any]:
        return {
            "added": list(self.added),
            "removed": list(self.removed),
            "changed": list(self.changed),
            "known": self.known,
        }

    def sentence(self) -> str:
        parts = []
        if self.added:
            parts.append(f"added {', '.join(self.added)}")
        if self.removed:
            parts.append(f"removed {', '.join(self.removed)}")
        if self.changed:
            parts.append("changed " + "; ".join(self.changed))
        text = ", ".join(parts) if parts else "no knob declaration changed"
        return text if self.known else text + " (old declaration unreadable: by knob names)"


def _describe(k: Knob, names: Mapping[str, Any]) -> str:
    if isinstance(k, Split):
        try:
            ext, top = eval_extent(k.extent, names), eval_extent(k.max_factor, names)
        except TemplateError:
            ext, top = k.extent, k.max_factor  # type: ignore[assignment]
        return f"split of {ext} in {k.parts}, innermost <= {top}"
    kind = "structure" if isinstance(k, Structural) else "knob"
    return f"{kind} {list(k.candidates)}"


def knob_diff(
    old: Sequence[Knob] | None,
    new: Sequence[Knob],
    workload: Mapping[str, Any],
    target: Mapping[str, Any],
    old_names: Sequence[str] = (),
) -> KnobDiff:
    """What changed between two KNOBS declarations, evaluated for this workload and
    target. Without the old declaration, only names (from old configurations)."""
    names = scope(workload, target)
    new_by = {k.name: k for k in new}
    if old is None:
        before = set(old_names)
        return KnobDiff(tuple(sorted(set(new_by) - before)), tuple(sorted(before - set(new_by))), (), known=False)
    old_by = {k.name: k for k in old}
    changed = []
    for name in sorted(set(old_by) & set(new_by)):
        a, b = _describe(old_by[name], names), _describe(new_by[name], names)
        if a != b:
            changed.append(f"{name}: {a} -> {b}")
    return KnobDiff(tuple(sorted(set(new_by) - set(old_by))), tuple(sorted(set(old_by) - set(new_by))), tuple(changed))


def old_declaration(root: Path, manifest: Manifest) -> tuple[Knob, ...] | None:
    """KNOBS of the template as committed when the old log was tuned (git), or None
    when that commit or file cannot be read."""
    commit = manifest.template_commit
    if not commit:
        return None

    try:
        proc = run(root, "show", f"{commit}:{manifest.template_file}")
    except GitError:  # no git
        return None
    if proc.returncode != 0:
        return None
    try:
        tree = ast.parse(proc.stdout)
    except SyntaxError:
        return None
    path = Path(manifest.template_file)
    for stmt in tree.body:
        if (
            isinstance(stmt, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "KNOBS" for t in stmt.targets)
            and isinstance(stmt.value, (ast.List, ast.Tuple))
        ):
            try:
                return tuple(knob_from_ast(e, path) for e in stmt.value.elts)
            except TemplateError:
                return None
    return None
