"""The operator template API: what a module in `operators/` declares.

An operator module declares, at module level:

    WORKLOADS = {"m512": {"M": 512, "N": 512, "K": 512, "dtype": "float32"}}
    KNOBS = [
        define_split("tile_i", "M", parts=4, max_factor=64),   # -> sample_perfect_tile
        define_knob("unroll", [0, 16, 64, 512]),               # -> sample_categorical
        define_structure("pack_b", [False, True]),             # -> one design space each
    ]

    def compute(M, N, K, dtype):          # -> tvm PrimFunc (te.create_prim_func / TVMScript)
    def reference(A, B):                  # numpy; inputs in PrimFunc parameter order
    def schedule(sch, cfg):               # tvm.s_tir.Schedule, Knobs

`WORKLOADS` and `KNOBS` must be literals (plus the three `define_*` calls) because
`check` reads them from the AST without running the module: that is how the
config-space size is computed without TVM, and why a fork's template is never
executed by the PR check. A split's extent is a workload key or an arithmetic
expression over workload keys (`"(H + 2*pad - R)//stride + 1"`).

Inside `schedule`, `cfg.split(sch, loop, "tile_i")` samples and applies the split,
`cfg.knob(sch, "unroll")` samples a categorical knob (an ExprRV, e.g. for an
annotation) and `cfg["pack_b"]` is the structural choice of this design space.

Over 400 lines: the template author's whole API (declarations, the source reader
`check` uses, and the `Knobs` object `schedule` calls) in one place to read. The
knob -> trace rules among them (`Knobs.split`, `Knobs.knob`, `default_value`,
`design_spaces`) are pinned by module and name (`templateapi.RULES`), so moving one
re-pins the template API; the extent and tiling arithmetic, which no rule pins, is
`extents.py`.
"""

from __future__ import annotations

import ast
import inspect
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .constraints import (
    Constraint,
    ConstraintError,
    check_names,
    count_legal,
    define_constraint,
    describe_violation,
    violated,
)
from .contract import Implements, parse_implements
from .errors import TemplateError
from .extents import count_perfect_tiles, eval_extent
from .targetinfo import TargetFacts, scope, target_facts

__all__ = ["Constraint", "define_constraint", "define_knob", "define_split", "define_structure"]

# The target `read_template` checks KNOBS with when no target is at hand: every
# extent and max_factor must evaluate for it (each entry's own target is checked
# per entry by `check`). A GPU template (TARGET_KINDS = ["cuda"]) is checked with an
# H100's limits (TVM's nvidia/nvidia-h100 tag).
VALIDATION_TARGET: dict[str, Any] = {"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "x86-64-v3"}
VALIDATION_TARGETS: dict[str, dict[str, Any]] = {
    "llvm": VALIDATION_TARGET,
    "cuda": {
        "kind": "cuda",
        "arch": "sm_90a",
        "max_shared_memory_per_block": 49152,
        "max_threads_per_block": 1024,
        "thread_warp_size": 32,
        "registers_per_block": 65536,
    },
}
# The target kinds a template schedules for when it declares no TARGET_KINDS.
CPU_KINDS = ("llvm", "c")

# --------------------------------------------------------------------------- knobs


@dataclass(frozen=True)
class Split:
    """AutoTVM's define_split: tile one loop into `parts` perfect factors."""

    name: str
    extent: int | str  # workload key, expression over workload keys / target facts, or int
    parts: int = 2
    max_factor: int | str = 64  # bound on the innermost factor; int or expression like extent
    # The default configuration's factors: None is [extent, 1, ..., 1]; one None entry
    # takes what the others leave (`[None, 2, 16, 4]`).
    default: tuple[int | None, ...] | None = None

    kind = "split"


@dataclass(frozen=True)
class Categorical:
    """AutoTVM's define_knob: one of a few candidates, searched by sample_categorical."""

    name: str
    candidates: tuple[Any, ...]

    kind = "categorical"


@dataclass(frozen=True)
class Structural:
    """A choice that drives Python control flow: one design space per candidate."""

    name: str
    candidates: tuple[Any, ...]

    kind = "structural"


Knob = Split | Categorical | Structural


def define_split(
    name: str,
    extent: int | str,
    parts: int = 2,
    max_factor: int | str = 64,
    default: Sequence[int | None] | None = None,
) -> Split:
    """AutoTVM's `cfg.define_split`: tile a loop of `extent` into `parts` factors whose
    innermost is at most `max_factor`. Both may be expressions over the workload's
    keys and the target facts LANES, VREGS, VBITS (`tvmtune_ci.core.targetinfo`), e.g.
    `define_split("tile_j", "(N + LANES - 1)//LANES", parts=3, max_factor="VREGS//8")`.
    `default`: the default configuration's factors, one of them None (what the others
    leave of the extent), e.g. `[None, 1, 16, 4]`; without it the default is
    [extent, 1, ..., 1] (a GPU template's default must fit its thread blocks)."""
    if default is not None:
        if (
            not isinstance(default, (list, tuple))
            or len(default) != parts
            or sum(d is None for d in default) != 1
            or any(d is not None and (isinstance(d, bool) or not isinstance(d, int) or d < 1) for d in default)
        ):
            raise TemplateError(
                f"define_split({name!r}): default must list {parts} factors, one of "
                f"them None (what the others leave), e.g. [None{', 1' * (parts - 1)}]; "
                f"got {default!r}"
            )
        default = tuple(default)
    if parts < 2:
        raise TemplateError(f"define_split({name!r}): parts must be >= 2, got {parts}")
    if isinstance(max_factor, bool) or not isinstance(max_factor, (int, str)):
        raise TemplateError(
            f"define_split({name!r}): max_factor must be an integer or an expression, got {max_factor!r}"
        )
    if isinstance(max_factor, int) and max_factor < 1:
        raise TemplateError(f"define_split({name!r}): max_factor must be >= 1, got {max_factor}")
    return Split(name, extent, parts, max_factor, default)


def define_knob(name: str, candidates: Sequence[Any]) -> Categorical:
    """AutoTVM's `cfg.define_knob`: one of a few integers, searched by sample_categorical."""
    if not candidates:
        raise TemplateError(f"define_knob({name!r}): needs at least one candidate")
    # sample_categorical yields an integer; a non-integer choice is structural.
    if not all(isinstance(c, int) and not isinstance(c, bool) for c in candidates):
        raise TemplateError(
            f"define_knob({name!r}): candidates must be integers; use define_structure for other choices"
        )
    return Categorical(name, tuple(candidates))


def define_structure(name: str, candidates: Sequence[Any]) -> Structural:
    """A choice that drives Python control flow in `schedule`: one design space each."""
    if not candidates:
        raise TemplateError(f"define_structure({name!r}): needs at least one candidate")
    return Structural(name, tuple(candidates))


_DEFINERS: dict[str, Callable[..., Any]] = {
    "define_split": define_split,
    "define_knob": define_knob,
    "define_structure": define_structure,
}

# --------------------------------------------------------------------------- space size


def default_value(knob: Knob, workload: Mapping[str, Any]) -> Any:
    """A knob's default: a split leaves the whole extent outermost (factors
    [extent, 1, ..., 1], no tiling), a categorical or structural knob takes its first
    candidate. The default configuration is every knob at its default."""
    if isinstance(knob, Split):
        extent = eval_extent(knob.extent, workload)
        if knob.default is None:
            return [extent] + [1] * (knob.parts - 1)
        given = math.prod(d for d in knob.default if d is not None)
        if extent % given:
            raise TemplateError(
                f"split {knob.name!r}: default {list(knob.default)} needs the "
                f"extent {knob.extent!r} = {extent} to be a multiple of {given}"
            )
        out = [extent // given if d is None else d for d in knob.default]
        if out[-1] > eval_extent(knob.max_factor, workload):
            raise TemplateError(
                f"split {knob.name!r}: default {out} has an innermost factor above max_factor {knob.max_factor!r}"
            )
        return out
    return knob.candidates[0]


def default_values(
    knobs: Sequence[Knob],
    workload: Mapping[str, Any],
    structure: Mapping[str, Any] | None = None,
    values: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Every knob's value for a configuration: `values`, the design space's
    `structure`, defaults for the rest; with `workload`'s names (what a constraint reads)."""
    out: dict[str, Any] = dict(workload)
    for k in knobs:
        out[k.name] = default_value(k, workload)
    out.update(structure or {})
    out.update(values or {})
    return out


def check_configuration(
    knobs: Sequence[Knob],
    constraints: Sequence[Constraint],
    workload: Mapping[str, Any],
    structure: Mapping[str, Any],
    values: Mapping[str, Any],
) -> None:
    """TemplateError when the configuration breaks a constraint (it is never built)."""
    if not constraints:
        return
    broken = violated(constraints, default_values(knobs, workload, structure, values))
    if broken:
        raise TemplateError(
            f"configuration {dict(structure, **values)} breaks constraint(s) "
            f"{describe_violation(broken)}; it is not built"
        )


def design_spaces(knobs: Sequence[Knob]) -> list[dict[str, Any]]:
    """Every combination of structural choices; one MetaSchedule design space each."""
    structural = [k for k in knobs if isinstance(k, Structural)]
    return [
        dict(zip([k.name for k in structural], combo, strict=True))
        for combo in itertools.product(*(k.candidates for k in structural))
    ]


# Points per design space the README advises: fewer and the search exhausts the space
# (and the cost model has little to learn); more and 200-300 trials see a sliver of it.
ADVISED_POINTS = (100, 10_000)


def knob_counts(knobs: Sequence[Knob], workload: Mapping[str, Any]) -> list[tuple[str, int]]:
    """(knob, its number of choices) for the knobs that multiply a design space's size."""
    out = []
    for k in knobs:
        if isinstance(k, Split):
            out.append(
                (
                    k.name,
                    count_perfect_tiles(eval_extent(k.extent, workload), k.parts, eval_extent(k.max_factor, workload)),
                )
            )
        elif isinstance(k, Categorical):
            out.append((k.name, len(k.candidates)))
    return out


def space_advice(
    knobs: Sequence[Knob], workload: Mapping[str, Any], constraints: Sequence[Constraint] = ()
) -> str | None:
    """Why a design space is outside ADVISED_POINTS, naming the knob to change; None
    when it is inside. With `constraints`, on the legal points per design space."""
    if constraints:
        total, _ = space_size(knobs, workload, constraints)
        n = len(design_spaces(knobs))
        low, high = ADVISED_POINTS
        if low <= total / n <= high:
            return None
        side = (
            f"above the advised {high:,}: lower a split's max_factor or tighten a constraint"
            if total / n > high
            else f"below the advised {low:,}: the search will exhaust it; raise a split's max_factor or add candidates"
        )
        return f"{total:,} legal points in {n} design space(s), {total // n:,} per space, {side}"
    counts = knob_counts(knobs, workload)
    points = math.prod(c for _, c in counts)
    low, high = ADVISED_POINTS
    if low <= points <= high:
        return None
    product = " x ".join(f"{n} {c}" for n, c in counts) or "no knobs"
    if points > high:
        name, c = max(counts, key=lambda x: x[1])
        return (
            f"{points:,} points per design space ({product}), above the advised {high:,}: "
            f"{name} dominates with {c:,} choices; lower its max_factor or split it in fewer parts"
        )
    return (
        f"{points:,} points per design space ({product}), below the advised {low:,}: "
        "the search will exhaust it; raise a split's max_factor or add candidates"
    )


def space_size(
    knobs: Sequence[Knob], workload: Mapping[str, Any], constraints: Sequence[Constraint] = ()
) -> tuple[int, int]:
    """(points per design space, number of design spaces) for one workload; `workload`
    is the extent scope (`targetinfo.scope`: its keys and the target's facts).

    With `constraints`, which cut each design space differently: (the legal points of
    all design spaces together, 1), so that the product is still the space's size; the
    default configuration of every design space must be legal (ConstraintError)."""
    if constraints:
        check_names(constraints, knobs, workload)
        total = 0
        for structure in design_spaces(knobs):
            broken = violated(constraints, default_values(knobs, workload, structure))
            if broken:
                raise ConstraintError(
                    f"the default configuration of design space {structure} breaks "
                    f"{describe_violation(broken)}; give the splits a default= that meets it",
                    broken[0].name,
                )
            total += count_legal(knobs, constraints, workload, structure)
        return total, 1
    per_space = 1
    for k in knobs:
        if isinstance(k, Split) and k.default is not None:
            default_value(k, workload)  # a default that does not fit: TemplateError
        if isinstance(k, Split):
            per_space *= count_perfect_tiles(
                eval_extent(k.extent, workload), k.parts, eval_extent(k.max_factor, workload)
            )
        elif isinstance(k, Categorical):
            per_space *= len(k.candidates)
    return per_space, len(design_spaces(knobs))


# --------------------------------------------------------------------------- static reading


@dataclass(frozen=True)
class TemplateDecl:
    """What `check` learns from a template without running it."""

    name: str
    path: Path
    workloads: dict[str, dict[str, Any]]
    knobs: tuple[Knob, ...]
    line: int  # of `def schedule`
    functions: dict[str, int]  # compute/reference/schedule -> line
    knob_lines: dict[str, int] = field(default_factory=dict, compare=False)  # knob -> its line
    constraints: tuple[Constraint, ...] = ()
    constraint_lines: dict[str, int] = field(default_factory=dict, compare=False)
    kinds: tuple[str, ...] = CPU_KINDS  # TARGET_KINDS: the target kinds it schedules for
    # IMPLEMENTS: the Relax calls it implements (contract.py; not part of the fingerprint).
    implements: tuple[Implements, ...] = ()

    def space_sizes(self, target: Mapping[str, Any] | None = None) -> dict[str, tuple[int, int]]:
        """workload -> (points per design space, design spaces) for `target` (the
        default: VALIDATION_TARGET, or VALIDATION_TARGETS of the template's kind, for
        knobs that name target facts); with CONSTRAINTS, only the legal points
        (`space_size`)."""
        # Computed once per declaration and target (read_template validates with it,
        # check and status report it); kept outside the dataclass fields, so equality
        # ignores it.
        if target is None:
            target = VALIDATION_TARGETS.get(self.kinds[0], VALIDATION_TARGET)
        kind = str(target.get("kind", "llvm"))
        if kind not in self.kinds:
            raise TemplateError(
                f"this template schedules for {' or '.join(self.kinds)} targets (TARGET_KINDS), "
                f"not {kind}: name only such targets in tvmtune.yaml's operators.{self.name}.targets",
                file=self.path,
                line=self.line,
            )
        cache = self.__dict__.setdefault("_space_sizes", {})
        key = repr(sorted(target.items()))
        sizes = cache.get(key)
        if sizes is None:
            sizes = {}
            for w, wl in self.workloads.items():
                names = scope(wl, target)
                try:
                    sizes[w] = space_size(self.knobs, names, self.constraints)
                except ConstraintError as e:
                    raise TemplateError(
                        f"constraint {e.constraint!r}, workload {w!r}: {e.message}",
                        file=self.path,
                        line=self.constraint_lines.get(e.constraint),
                    ) from None
                except TemplateError:
                    self._raise_at_knob(w, names)
                    raise
            cache[key] = sizes
        return dict(sizes)

    def _raise_at_knob(self, workload: str, names: Mapping[str, Any]) -> None:
        """Re-raise a space-size error at the line of the knob it comes from."""
        for k in self.knobs:
            try:
                space_size((k,), names)
            except TemplateError as e:
                raise TemplateError(
                    f"knob {k.name!r}, workload {workload!r}: {e.message}",
                    file=self.path,
                    line=self.knob_lines.get(k.name),
                ) from None


REQUIRED_FUNCTIONS = ("compute", "reference", "schedule")


def _literal(node: ast.expr, path: Path, what: str) -> Any:
    # Most knob arguments are plain constants; ast.literal_eval builds a few
    # self-referencing closures per call (garbage for the cyclic GC), so skip it.
    if isinstance(node, ast.Constant):
        return node.value
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, RecursionError):
        # TypeError: an unhashable dict key such as `{[1]: 2}`.
        raise TemplateError(
            f"{what} must be a literal (numbers, strings, lists, dicts) so `check` can read it without running the module",
            file=path,
            line=node.lineno,
        ) from None


def knob_from_ast(node: ast.AST, path: Path) -> Any:
    """A KNOBS entry read from the source (no import): a define_* call with literal
    arguments; TemplateError naming the line otherwise."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute))):
        raise TemplateError(
            "each KNOBS entry must be a define_split/define_knob/define_structure call",
            file=path,
            line=getattr(node, "lineno", 0),
        )
    fname = node.func.id if isinstance(node.func, ast.Name) else node.func.attr
    if fname == "define_constraint":
        args = [_literal(a, path, "argument of define_constraint()") for a in node.args]
        kwargs = {
            kw.arg: _literal(kw.value, path, f"argument {kw.arg} of define_constraint()")
            for kw in node.keywords
            if kw.arg
        }
        try:
            return define_constraint(*args, **kwargs)
        except TypeError as e:
            raise TemplateError(f"define_constraint(): {e}", file=path, line=node.lineno) from None
        except TemplateError as e:
            raise TemplateError(f"{e.message}", file=path, line=node.lineno) from None
    if fname not in _DEFINERS:
        raise TemplateError(
            f"{fname}() is not a knob; use define_split, define_knob or define_structure", file=path, line=node.lineno
        )
    args = [_literal(a, path, f"argument of {fname}()") for a in node.args]
    kwargs = {kw.arg: _literal(kw.value, path, f"argument {kw.arg} of {fname}()") for kw in node.keywords if kw.arg}
    try:
        return _DEFINERS[fname](*args, **kwargs)
    except TypeError as e:
        raise TemplateError(f"{fname}(): {e}", file=path, line=node.lineno) from None
    except TemplateError as e:
        raise TemplateError(f"{e}", file=path, line=node.lineno) from None


def _target_kinds(stmt: ast.Assign | ast.AnnAssign, path: Path) -> tuple[str, ...]:
    assert stmt.value is not None
    kinds = _literal(stmt.value, path, "TARGET_KINDS")
    if not isinstance(kinds, (list, tuple)) or not kinds or not all(isinstance(x, str) for x in kinds):
        raise TemplateError('TARGET_KINDS must list target kinds, e.g. ["cuda"]', file=path, line=stmt.lineno)
    return tuple(kinds)


def declared_kinds(path: Path) -> tuple[str, ...] | None:
    """The template's TARGET_KINDS as `read_template` reads them, without reading the
    rest: which configured targets it pairs with (`Config.targets_for`). None when the
    file cannot be read or its TARGET_KINDS is not a list of kinds: then it pairs with
    every target, so that its template_invalid reaches each of them.

    Cheap: a file that does not mention TARGET_KINDS is read, not parsed. `check`
    reads it only for an operator whose pairing no manifest vouches for
    (check/staleness/pairing.py).
    """
    try:
        source = path.read_bytes()
    except OSError:
        return None
    if b"TARGET_KINDS" not in source:
        return CPU_KINDS
    try:
        tree = ast.parse(source, filename=str(path))
    except (SyntaxError, ValueError):
        return None
    kinds: tuple[str, ...] = CPU_KINDS
    for stmt in tree.body:  # the last top-level assignment wins, as in read_template
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None:
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            if any(isinstance(t, ast.Name) and t.id == "TARGET_KINDS" for t in targets):
                try:
                    kinds = _target_kinds(stmt, path)
                except TemplateError:
                    return None
    return kinds


@dataclass
class _TopLevel:
    """What `read_template` finds among a template's top-level statements, before it
    checks that the declarations are complete."""

    workloads: dict[str, dict[str, Any]] | None = None
    knobs: list[Knob] | None = None
    knobs_line: int = 1
    knob_lines: dict[str, int] = field(default_factory=dict)
    constraints: list[Constraint] = field(default_factory=list)
    constraint_lines: dict[str, int] = field(default_factory=dict)
    kinds: tuple[str, ...] = CPU_KINDS
    functions: dict[str, int] = field(default_factory=dict)
    implements_node: ast.expr | None = None

    def read_knobs(self, stmt: ast.Assign | ast.AnnAssign, value: ast.expr, path: Path) -> None:
        if not isinstance(value, (ast.List, ast.Tuple)):
            raise TemplateError("KNOBS must be a list of define_* calls", file=path, line=stmt.lineno)
        knobs = [knob_from_ast(el, path) for el in value.elts]
        self.knobs = knobs
        self.knob_lines = {k.name: el.lineno for k, el in zip(knobs, value.elts, strict=True)}
        self.knobs_line = stmt.lineno
        if any(isinstance(k, Constraint) for k in knobs):
            raise TemplateError("define_constraint() belongs in CONSTRAINTS, not KNOBS", file=path, line=stmt.lineno)

    def read_constraints(self, stmt: ast.Assign | ast.AnnAssign, value: ast.expr, path: Path) -> None:
        if not isinstance(value, (ast.List, ast.Tuple)):
            raise TemplateError("CONSTRAINTS must be a list of define_constraint() calls", file=path, line=stmt.lineno)
        for el in value.elts:
            c = knob_from_ast(el, path)
            if not isinstance(c, Constraint):
                raise TemplateError("CONSTRAINTS holds define_constraint() calls only", file=path, line=el.lineno)
            self.constraints.append(c)
            self.constraint_lines[c.name] = el.lineno


def _parse_template(path: Path) -> ast.Module:
    try:
        return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except SyntaxError as e:
        raise TemplateError(f"syntax error: {e.msg}", file=path, line=e.lineno) from None


def _top_level(tree: ast.Module, path: Path) -> _TopLevel:
    """The declarations and required functions among `tree`'s top-level statements
    (the last assignment of a name wins), each read and checked on its own."""
    found = _TopLevel()
    for stmt in tree.body:
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
            if "WORKLOADS" in names and stmt.value is not None:
                found.workloads = _literal(stmt.value, path, "WORKLOADS")
            if "KNOBS" in names and stmt.value is not None:
                found.read_knobs(stmt, stmt.value, path)
            if "CONSTRAINTS" in names and stmt.value is not None:
                found.read_constraints(stmt, stmt.value, path)
            if "TARGET_KINDS" in names and stmt.value is not None:
                found.kinds = _target_kinds(stmt, path)
            if "IMPLEMENTS" in names and stmt.value is not None:
                found.implements_node = stmt.value
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name in REQUIRED_FUNCTIONS:
            found.functions[stmt.name] = stmt.lineno
    return found


def _check_complete(found: _TopLevel, path: Path) -> tuple[dict[str, dict[str, Any]], list[Knob]]:
    """(WORKLOADS, KNOBS) once every declaration and required function is there, the
    workloads are a dict of dicts, and knob and constraint names are unique."""
    workloads, knobs = found.workloads, found.knobs
    missing = [f for f in REQUIRED_FUNCTIONS if f not in found.functions]
    if workloads is None:
        missing.insert(0, "WORKLOADS")
    if knobs is None:
        missing.insert(0, "KNOBS")
    if missing:
        raise TemplateError(
            f"not an operator template: missing {', '.join(missing)}; see `tvmtune_ci.template` for the API (or move helpers out of {path.parent.name}/ or prefix the file with '_')",
            file=path,
        )
    assert knobs is not None  # else `missing` named KNOBS
    if not isinstance(workloads, dict) or not workloads or not all(isinstance(v, dict) for v in workloads.values()):
        raise TemplateError("WORKLOADS must be a non-empty dict of name -> {param: value}", file=path)
    names = [k.name for k in knobs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise TemplateError(f"knob names must be unique; repeated: {', '.join(dup)}", file=path)
    cnames = [c.name for c in found.constraints]
    cdup = sorted({n for n in cnames if cnames.count(n) > 1})
    if cdup:
        raise TemplateError(f"constraint names must be unique; repeated: {', '.join(cdup)}", file=path)
    return workloads, knobs


def _implements(found: _TopLevel, workloads: dict[str, dict[str, Any]], path: Path) -> tuple[Implements, ...]:
    """IMPLEMENTS read and matched against WORKLOADS (contract.py); () when not declared."""
    node = found.implements_node
    if node is None:
        return ()
    elts = node.elts if isinstance(node, (ast.List, ast.Tuple)) else []
    return parse_implements(_literal(node, path, "IMPLEMENTS"), workloads, path, node.lineno, [e.lineno for e in elts])


def read_template(path: Path, tree: ast.Module | None = None) -> TemplateDecl:
    """Read WORKLOADS, KNOBS and the required functions from a template's AST."""
    if tree is None:
        tree = _parse_template(path)
    found = _top_level(tree, path)
    workloads, knobs = _check_complete(found, path)
    implements = _implements(found, workloads, path)
    decl = TemplateDecl(
        path.stem,
        path,
        workloads,
        tuple(knobs),
        found.functions["schedule"],
        found.functions,
        found.knob_lines,
        tuple(found.constraints),
        found.constraint_lines,
        found.kinds,
        implements,
    )
    try:
        decl.space_sizes()  # validates every extent against every workload (one target)
    except TemplateError as e:
        if e.file is not None:  # at the offending knob's line
            raise
        raise TemplateError(f"{e}", file=path, line=found.knobs_line) from None
    return decl


def discover_templates(operators_dir: Path) -> list[Path]:
    """Operator modules: `operators/*.py`, except private helpers (`_*.py`)."""
    if not operators_dir.is_dir():
        return []
    return sorted(p for p in operators_dir.glob("*.py") if not p.name.startswith("_"))


# --------------------------------------------------------------------------- runtime (TVM)


class Knobs:
    """The `cfg` a template's `schedule(sch, cfg)` receives.

    mode "search": every knob is a MetaSchedule sampling instruction (the search
    fills the decisions). mode "fixed": decisions come from `values` (a knob name ->
    value map; missing ones get the default: all-ones inner split factors, first
    candidate). The order in which knobs are sampled is recorded so a trace's
    decisions map back to knob names.

    What it says about the target (`cfg.target`, `cfg.isa`, `cfg.vector_lanes(dtype)`,
    `cfg.vector_registers`, `cfg["LANES"]`) comes from the target dict alone
    (`tvmtune_ci.core.targetinfo`), never from the machine that runs the search.
    """

    def __init__(
        self,
        knobs: Sequence[Knob],
        workload: Mapping[str, Any],
        structure: Mapping[str, Any],
        mode: str = "search",
        values: Mapping[str, Any] | None = None,
        target: Mapping[str, Any] | None = None,
    ) -> None:
        self._knobs = {k.name: k for k in knobs}
        self._target = dict(target) if target is not None else None
        self._workload = scope(workload, self._target)
        self._structure = dict(structure)
        self._mode = mode
        self._values = dict(values or {})
        self.order: list[str] = []
        self._factors: dict[str, list[Any]] = {}

    @property
    def target(self) -> dict[str, Any]:
        """The canonical target dict this schedule is for."""
        if self._target is None:
            raise TemplateError("cfg.target: this schedule was built without a target")
        return dict(self._target)

    @property
    def facts(self) -> TargetFacts:
        """The target's vector facts (`isa`, `vector_bits`, `vector_registers`)."""
        return target_facts(self.target)

    @property
    def isa(self) -> str:
        """ "avx512", "avx2", "avx", "sse", "neon", "neon32", or the non-CPU kind."""
        return self.facts.isa

    @property
    def arch(self) -> str:
        """The CPU architecture ("x86_64", "aarch64") or the GPU's ("sm_90a")."""
        return self.facts.arch

    @property
    def vector_registers(self) -> int:
        return self.facts.vector_registers

    def vector_lanes(self, dtype: str = "float32") -> int:
        """Elements of `dtype` in one vector register of the target (1 without vectors)."""
        return self.facts.lanes(dtype)

    def __getitem__(self, name: str) -> Any:
        if name in self._structure:
            return self._structure[name]
        if name in self._workload:
            return self._workload[name]
        knob = self._knobs.get(name)
        if knob is not None:
            raise TemplateError(
                f"cfg[{name!r}]: {knob.kind} knobs are sampled by cfg.split/cfg.knob; only structural knobs and workload keys can drive Python control flow"
            )
        raise TemplateError(f"cfg[{name!r}]: no such structural knob or workload key")

    def _get(self, name: str, kind: type) -> Any:
        knob = self._knobs.get(name)
        if not isinstance(knob, kind):
            raise TemplateError(f"knob {name!r} is not declared as a {kind.__name__} in KNOBS")
        if name in self.order:
            raise TemplateError(f"knob {name!r} is sampled twice in one design space; declare a knob per use")
        self.order.append(name)
        return knob

    def split(self, sch: Any, loop: Any, name: str) -> list[Any]:
        knob: Split = self._get(name, Split)
        extent = eval_extent(knob.extent, self._workload)
        actual = sch.get(loop).extent
        if int(actual) != extent:
            raise TemplateError(
                f"split {name!r}: the loop has extent {int(actual)} but KNOBS declares {knob.extent!r} = {extent}; fix the declaration so the reported space size is true"
            )
        decision = None
        if self._mode == "fixed":
            decision = self._values.get(name) or default_value(knob, self._workload)
            decision = [int(x) for x in decision]
        max_factor = eval_extent(knob.max_factor, self._workload)
        factors = sch.sample_perfect_tile(loop, n=knob.parts, max_innermost_factor=max_factor, decision=decision)
        self._factors[name] = list(factors)
        return list(sch.split(loop, factors=factors, preserve_unit_iters=True))

    def factors(self, name: str) -> list[Any]:
        """The sampled factors of split `name` (ExprRVs, after `cfg.split`): to split
        another loop the same way, e.g. a shared-memory copy over the block's threads
        (`sch.split(copy, [None, *cfg.factors("tile_i")[1:2], vec])`)."""
        if name not in self._factors:
            raise TemplateError(f"cfg.factors({name!r}): call cfg.split(sch, loop, {name!r}) first")
        return list(self._factors[name])

    def knob(self, sch: Any, name: str) -> Any:
        knob: Categorical = self._get(name, Categorical)
        decision = None
        if self._mode == "fixed":
            value = self._values.get(name, knob.candidates[0])
            decision = list(knob.candidates).index(value)
        cands = [int(c) for c in knob.candidates]
        return sch.sample_categorical(candidates=cands, probs=[1.0 / len(cands)] * len(cands), decision=decision)


def call_with_workload(fn: Callable[..., Any], workload: Mapping[str, Any], *args: Any) -> Any:
    """Call `fn(*args, **those workload keys its signature names)`."""
    params = inspect.signature(fn).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return fn(*args, **workload)
    return fn(*args, **{k: v for k, v in workload.items() if k in params})


def template_name(module: Any) -> str:
    """How messages name a template: its file as the user knows it (operators/x.py),
    never the module name it is imported under (`_tvmtune_template_x`)."""
    return str(getattr(module, "__tvmtune_file__", None) or module.__name__)


def import_template(path: Path, root: Path, tree: ast.Module | None = None) -> Any:
    """Import an operator module from its file (this runs its code: retune only).

    The repository root goes on sys.path first so that templates import their
    in-repo helpers (`from operators._tiling import ...`) the way the fingerprint
    resolves them. Given the `tree` the declarations and fingerprint were read from,
    that tree is what runs: the file is not read again, so the code tuned is the
    code fingerprinted even if the file changes meanwhile.
    """
    import importlib.util
    import sys

    root_s = str(root.resolve())
    if root_s not in sys.path:
        sys.path.insert(0, root_s)
    name = f"_tvmtune_template_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise TemplateError("cannot be imported as a Python module", file=path)
    module = importlib.util.module_from_spec(spec)
    try:
        module.__tvmtune_file__ = path.resolve().relative_to(root.resolve()).as_posix()  # type: ignore[attr-defined]
    except ValueError:
        module.__tvmtune_file__ = str(path)  # type: ignore[attr-defined]
    sys.modules[name] = module
    try:
        if tree is None:
            spec.loader.exec_module(module)
        else:
            exec(compile(tree, str(path), "exec"), module.__dict__)
    except Exception as e:
        del sys.modules[name]
        raise TemplateError(f"importing the template failed: {type(e).__name__}: {e}", file=path) from e
    for attr in ("WORKLOADS", "KNOBS", *REQUIRED_FUNCTIONS):
        if not hasattr(module, attr):
            raise TemplateError(f"not an operator template: missing {attr}; see `tvmtune_ci.template`", file=path)
    return module


def check_imported_agrees(module: Any, decl: TemplateDecl) -> None:
    """TemplateError unless the imported WORKLOADS, KNOBS and CONSTRAINTS are the
    literals `check` read from the source. The tuner reads the module (the search and
    the builder keep to its CONSTRAINTS), while the fingerprint, the manifest, the
    history and `check`'s space sizes read the source: code that changes them at import
    (a loop adding workloads, an `update`, an `append`) would tune something the log
    does not say."""
    for attr, parsed in (("WORKLOADS", decl.workloads), ("KNOBS", decl.knobs), ("CONSTRAINTS", decl.constraints)):
        imported = getattr(module, attr, ()) if attr == "CONSTRAINTS" else getattr(module, attr)
        same = imported == parsed if attr == "WORKLOADS" else tuple(imported) == parsed
        if not same:
            raise TemplateError(
                f"{attr} after import differs from the literal in the source ({attr} as read: "
                f"{_short_repr(parsed)}; after import: {_short_repr(imported)}): code that runs at "
                f"import changes it. Keep {attr} a plain literal that nothing modifies; compute "
                "variants in compute() or schedule()",
                file=decl.path,
            )


def _short_repr(x: Any, limit: int = 160) -> str:
    r = repr(x)
    return r if len(r) <= limit else r[: limit - 3] + "..."
