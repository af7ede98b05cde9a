"""Whether the old log's search still stands on an edited template: the edit opened no
knob values and makes the same program of every old configuration as the old template
did (`old_search_stands`). The tuner asks it before a search (then none is run); the
re-tune's carry step (`pipeline.carry_step`) asks `programs_unchanged` before it carries
a set forward unmeasured."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any

from ..core.errors import TemplateError, TuningError
from ..core.history import probes
from .builder import program_key, schedule_config
from .request import TuneRequest
from .workload import Workload


def old_search_stands(req: TuneRequest, wl: Workload) -> str | None:
    """Why the old log's search still stands on the edited template, in words; None when
    it does not. It stands when the edit opened no knob values (the old declaration is
    known: `history.probes` finds none) and this template makes the same program of every
    old record as the old template did (`req.old_programs`, `priors.old_programs`),
    compared up to the first that differs. Then a search would measure the same programs
    in the same space again. What the edit changed (a dead statement, a renamed
    variable, a helper's other function) changed no kernel; an edit of a loop order, an
    annotation or the computation changes the programs, and the search runs.

    The check sees the programs the old search measured, not the points it never
    sampled: an edit that changes only those (a branch on a knob combination no record
    holds) is not seen. Measured (bench_warmstart): after a no-op edit the warm stop rule
    still searched 24-192 trials, because its own search had to match the replayed old
    best; on a fast CPU the search is most of a re-tune's seconds."""
    if not (req.replay and req.old_programs and req.old_knobs is not None):
        return None
    if not programs_unchanged(req.template, wl, req.target, req.replay[0], req.old_knobs, req.old_programs):
        return None
    return (
        f"the edit changed none of the {len(req.old_programs)} programs the old log measured "
        "(each old configuration makes the same module as before) and opened no knob "
        "values: the old search stands; the replay and the finals re-measured its best"
    )


def programs_unchanged(
    template: ModuleType,
    wl: Workload,
    target: Mapping[str, Any],
    old_best: Mapping[str, Any],
    old_knobs: Sequence[Any],
    old_programs: Sequence[tuple[dict[str, Any], str]],
) -> bool:
    """Whether the edited `template` opens no knob values next to the old best (mapped
    into its space; `history.probes`) and makes the same program of every old
    configuration as the old template did (`priors.old_programs`: "" for one the edit
    repaired), compared up to the first that differs."""
    if not old_programs:
        return False
    if probes(old_best, old_knobs, template.KNOBS, dict(wl.params), target, limit=1):
        return False  # values the old search never saw
    return all(same_program(template, wl, target, kv, key) for kv, key in old_programs)


def same_program(
    template: ModuleType, wl: Workload, target: Mapping[str, Any], knobs: Mapping[str, Any], old_key: str
) -> bool:
    """Whether the edited `template` makes of `knobs` the program the old template made
    (`old_key`, `builder.program_key`; "" for a configuration the edit repaired: never)."""
    if not old_key:
        return False
    try:
        return program_key(schedule_config(template, wl, knobs, target)) == old_key
    except (TuningError, TemplateError):
        return False
