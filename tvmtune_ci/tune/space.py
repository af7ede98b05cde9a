"""Design spaces of a template and the knobs behind a trace (TVM-free to import).

A template's `schedule(sch, cfg)` run once per structural choice is one MetaSchedule
design space (`TemplateSpace`, the `ScheduleFn` the search uses). Each knob is one
sampling instruction in the trace: a split a `SamplePerfectTile`, a categorical knob
a `SampleCategorical`. `decode_knobs` names the decisions of a trace (a log record's,
a candidate's) by knob; `make_mutators` weighs MetaSchedule's `MutateTileSize` and our
`MutateCategorical` by the knobs each can change.

MetaSchedule's only categorical mutator, `MutateUnroll`, touches only decisions that
feed `meta_schedule.unroll_*` annotations, so `MutateCategorical` (a `PyMutator`)
re-draws any other categorical decision.
"""

from __future__ import annotations

import functools
import json
import random
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from types import ModuleType
from typing import Any

from ..core.constraints import violated
from ..core.errors import TemplateError, TuningError
from ..core.template import Categorical, Knob, Knobs, Split, default_values, design_spaces
from . import tvmsetup
from .epilogue import after_schedule
from .workload import Workload, resolve

SAMPLE_KINDS = ("SamplePerfectTile", "SampleCategorical")


@dataclass(frozen=True)
class SpaceInfo:
    """What a record's trace is compared with to name its decisions."""

    index: int
    structure: dict[str, Any]
    signature: str  # canonical JSON of the simplified design-space instructions
    sample_knobs: tuple[str, ...]  # the knob each sampling instruction belongs to, in order
    # The same for the unsimplified trace (what a fixed configuration's schedule records).
    full_signature: str = ""
    full_sample_knobs: tuple[str, ...] = ()


def plain(obj: Any) -> Any:
    """A trace's JSON in one canonical form, whichever way it was produced.

    `Trace.as_json()` in Python and the JSONDatabase file differ in small ways: FloatImm
    objects vs numbers, bools vs 0/1, an IndexMap's JSON graph compact vs indented.
    """
    if isinstance(obj, bool):
        return int(obj)
    if isinstance(obj, str) and obj[:1] == "{":
        try:  # an embedded JSON document (IndexMap): canonical whitespace
            return json.dumps(json.loads(obj), sort_keys=True, separators=(",", ":"))
        except ValueError:
            return obj
    if isinstance(obj, (int, float, str)) or obj is None:
        return obj
    if isinstance(obj, (list, tuple)):
        return [plain(x) for x in obj]
    if isinstance(obj, dict):
        return {str(k): plain(v) for k, v in obj.items()}
    value = getattr(obj, "value", None)  # IntImm / FloatImm
    if isinstance(value, (int, float)):
        return value
    return str(obj)


def signature(insts: Sequence[Any]) -> str:
    return json.dumps(plain(list(insts)), sort_keys=True, separators=(",", ":"))


def cut_postproc(insts: Sequence[Any]) -> list[Any]:
    for i, inst in enumerate(insts):
        if inst[0] == "EnterPostproc":
            return list(insts[:i])
    return list(insts)


def space_info(index: int, structure: Mapping[str, Any], sch: Any, order: Sequence[str]) -> SpaceInfo:
    """Describe a design space from its schedule and the knob order `Knobs` recorded.

    MetaSchedule searches `trace.simplified(remove_postproc=True)` of each design
    space, which drops sampling instructions whose result is unused; instructions keep
    their identity through simplification, so the kept ones keep their knob name.
    """
    full = [inst for inst in sch.trace.insts if inst.kind.name in SAMPLE_KINDS]
    if len(full) != len(order):
        raise TemplateError(
            f"design space {dict(structure)}: schedule() made {len(full)} sampling "
            f"instructions but sampled {len(order)} knobs through cfg; sample only through "
            "cfg.split/cfg.knob"
        )
    simplified = sch.trace.simplified(remove_postproc=True)
    kept = [inst for inst in simplified.insts if inst.kind.name in SAMPLE_KINDS]
    names: list[str] = []
    for inst in kept:
        for orig, name in zip(full, order, strict=True):
            if inst.same_as(orig):
                names.append(name)
                break
        else:  # pragma: no cover - simplification copies instructions by reference
            raise TemplateError(f"design space {dict(structure)}: cannot name a sampling instruction")
    return SpaceInfo(
        index,
        dict(structure),
        signature(simplified.as_json()[0]),
        tuple(names),
        signature(cut_postproc(sch.trace.as_json()[0])),
        tuple(order),
    )


def decode_knobs(
    trace_json: Sequence[Any], spaces: Sequence[SpaceInfo], knobs: Sequence[Knob]
) -> tuple[int, dict[str, Any]]:
    """(design space index, knob values by name) of a trace's JSON (`[insts, decisions]`).

    The instructions before `EnterPostproc` identify the design space: a searched trace
    replays the design space's simplified trace, a fixed configuration's schedule
    (`schedule_config`) records the unsimplified one. Two structural choices that
    schedule identically are one program and decode as the first. The decisions of the
    sampling instructions, in order, are the knobs the design space sampled: split -> the
    factors; categorical -> the candidate its index picks; structural -> the design
    space's choice. Knobs the trace does not decide (sampled but unused) are absent;
    `full_knobs` fills in their defaults.
    """
    insts, decisions = trace_json[0], trace_json[1]
    pre = cut_postproc(insts)
    sig = signature(pre)
    found = [(s, s.sample_knobs) for s in spaces if s.signature == sig]
    found += [(s, s.full_sample_knobs) for s in spaces if s.full_signature == sig]
    if not found:
        raise TuningError("a trace matches no design space of the template (was the template changed since?)")
    space, sample_knobs = found[0]
    decided = {int(i): d for i, d in decisions}
    positions = [i for i, inst in enumerate(pre) if inst[0] in SAMPLE_KINDS]
    decls = {k.name: k for k in knobs}
    out: dict[str, Any] = dict(space.structure)
    for pos, name in zip(positions, sample_knobs, strict=False):
        decl, d = decls[name], plain(decided.get(pos))
        if d is None:
            continue
        if isinstance(decl, Split):
            out[name] = [int(x) for x in d]
        elif isinstance(decl, Categorical):
            out[name] = decl.candidates[int(d)]
    return space.index, out


def design_space_infos(template: ModuleType, wl: Workload, target: Mapping[str, Any]) -> list[SpaceInfo]:
    """The design spaces of a template's workload on `target`, for `decode_knobs` (e.g.
    on another tool's records of the same template)."""
    tvm = tvmsetup.load()
    wl = resolve(template, wl, target)
    space = TemplateSpace(template, wl.params, target)
    sch = tvm.s_tir.Schedule(wl.mod)
    return [space_info(i, space.structures[i], s, space.orders[i]) for i, s in enumerate(space(sch))]


def knobs_key(knobs: Mapping[str, Any]) -> str:
    return json.dumps(knobs, sort_keys=True, separators=(",", ":"))


# --------------------------------------------------------------------------- MetaSchedule pieces


@functools.cache  # one class per process: TVM registers it by name
def _mutate_categorical_class() -> Any:
    tvmsetup.load()
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.mutator import PyMutator

    @derived_object
    class MutateCategorical(PyMutator):
        """Re-draw one SampleCategorical decision (any of them) to a different candidate."""

        def __init__(self, seed: int = 0) -> None:
            self._seed = seed
            self._rng = random.Random(seed)
            self._lock = threading.Lock()  # EvolutionarySearch mutates from several threads

        def _initialize_with_tune_context(self, context: Any) -> None:
            pass

        def apply(self, trace: Any, _rand_state: Any = None) -> Any:
            cands = [inst for inst in trace.insts if inst.kind.name == "SampleCategorical" and len(inst.attrs[0]) > 1]
            if not cands:
                return None
            with self._lock:
                inst = cands[self._rng.randrange(len(cands))]
                n = len(inst.attrs[0])
                new = self._rng.randrange(n - 1)
            current = int(plain(trace.get_decision(inst)))
            if new >= current:
                new += 1
            return trace.with_decision(inst, new, True)

        def clone(self) -> Any:
            return MutateCategorical(self._seed + 1)

    return MutateCategorical


@functools.cache  # one class per process: TVM registers it by name
def _constraint_check_class() -> Any:
    tvmsetup.load()
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.postproc import PyPostproc

    @derived_object
    class ConstraintCheck(PyPostproc):
        """Rejects a candidate whose knobs break the template's CONSTRAINTS, so the
        evolutionary search draws another instead: such a point is never built."""

        def __init__(
            self, knobs: Sequence[Knob], constraints: Sequence[Any], names: Mapping[str, Any], spaces: list[SpaceInfo]
        ) -> None:
            self._knobs, self._constraints = list(knobs), list(constraints)
            self._names, self._spaces = dict(names), spaces  # filled once the spaces exist
            self.rejected = 0

        def _initialize_with_tune_context(self, context: Any) -> None:
            pass

        def apply(self, sch: Any) -> bool:
            if not self._spaces:
                return True  # the design spaces themselves, before they are known
            _, kv = decode_knobs(plain(sch.trace.as_json()), self._spaces, self._knobs)
            if violated(self._constraints, default_values(self._knobs, self._names, None, kv)):
                self.rejected += 1
                return False
            return True

        def clone(self) -> Any:
            return ConstraintCheck(self._knobs, self._constraints, self._names, self._spaces)

    return ConstraintCheck


def constraint_postprocs(template: ModuleType, names: Mapping[str, Any], spaces: list[SpaceInfo]) -> list[Any]:
    """The postprocessor that keeps the search inside the template's CONSTRAINTS (none
    without them); `names` is the extent scope, `spaces` the list `space_info`s go in."""
    constraints = list(getattr(template, "CONSTRAINTS", ()))
    if not constraints:
        return []
    return [_constraint_check_class()(list(getattr(template, "KNOBS", [])), constraints, names, spaces)]


def make_mutators(knobs: Sequence[Knob], seed: int) -> dict[Any, float]:
    """Mutator -> probability, in proportion to the knobs each one can change."""
    ms = tvmsetup.ms()
    n_split = sum(isinstance(k, Split) for k in knobs)
    n_cat = sum(isinstance(k, Categorical) and len(k.candidates) > 1 for k in knobs)
    total = n_split + n_cat
    out: dict[Any, float] = {}
    if n_split:
        out[ms.mutator.MutateTileSize()] = n_split / total
    if n_cat:
        out[_mutate_categorical_class()(seed)] = n_cat / total
    return out


class TemplateSpace:
    """The ScheduleFn space generator of a template; remembers each space's knob order."""

    def __init__(self, template: ModuleType, workload: Mapping[str, Any], target: Mapping[str, Any]) -> None:
        self.template = template
        self.workload = dict(workload)
        self.target = dict(target)
        self.knobs: list[Knob] = list(getattr(template, "KNOBS", []))
        self.structures = design_spaces(self.knobs)
        self.orders: dict[int, list[str]] = {}

    def __call__(self, sch: Any) -> list[Any]:
        out = []
        for i, structure in enumerate(self.structures):
            s = sch.copy()
            cfg = Knobs(self.knobs, self.workload, structure, mode="search", target=self.target)
            self.template.schedule(s, cfg)
            # a fused workload's epilogue into the tile's store; a prepacked one's pack marked
            dtype = str(self.workload.get("dtype", "float32"))
            after_schedule(
                s, self.workload, getattr(self.template, "IMPLEMENTS", None), partial(cfg.vector_lanes, dtype)
            )
            self.orders[i] = list(cfg.order)
            out.append(s)
        return out


class Designs:
    """The design spaces one search draws from (`infos`, filled once the context has
    made its `schedules`; the constraint postprocessors read the same list), how many
    legal points they hold, and the configurations measured so far (`seen`)."""

    def __init__(self, knobs: Sequence[Knob], size: int) -> None:
        self.knobs = list(knobs)
        self.size = size  # legal points of all design spaces together
        self.count = len(design_spaces(self.knobs))
        self.infos: list[Any] = []
        self.schedules: list[Any] = []
        self.seen: set[str] = set()
        # MeasureCandidates of configurations the search asked the cost model about.
        self.candidates: dict[str, Any] = {}

    def fill(self, schedules: Sequence[Any], space: TemplateSpace) -> None:
        self.schedules = list(schedules)
        self.infos.extend(
            space_info(i, space.structures[i], sch, space.orders[i]) for i, sch in enumerate(self.schedules)
        )

    def decode(self, sch: Any) -> tuple[int, dict[str, Any]]:
        """A schedule's (design space, knobs)."""
        return decode_knobs(plain(sch.trace.as_json()), self.infos, self.knobs)

    def unseen(self, cands: Sequence[Any]) -> list[tuple[Any, int, dict[str, Any]]]:
        """The candidates not measured before (a resume, a duplicate draw), now seen, as
        (candidate, design space, knobs)."""
        picked = []
        for c in cands:
            sidx, kv = self.decode(c.sch)
            key = knobs_key(kv)
            if key not in self.seen:
                self.seen.add(key)
                picked.append((c, sidx, kv))
        return picked
