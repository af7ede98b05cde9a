"""Constraints over a template's knobs and its target's facts, decided before a build.

A template may declare, at module level, beside KNOBS:

    CONSTRAINTS = [
        define_constraint("threads", "tile_i[2] * tile_j[2] <= THREADS"),
        define_constraint("warps", "tile_i[2] * tile_j[2] % WARP == 0"),
        define_constraint("smem", "(tile_i[1] * tile_i[2] + tile_j[1] * tile_j[2]) * tile_k[1] * 4 * stages <= SMEM"),
    ]

An expression names split factors by position (`tile_i[2]`), categorical and
structural knobs by value (`stages`), the workload's keys and the target's facts
(`LANES`, `SMEM`, `THREADS`, `WARP`, `REGS`, ...), with integers, `+ - * // %`,
comparisons, `and`, `or`, `not`. A point of the space is legal when every
constraint holds. `check` and `status` count only legal points (`count_legal`,
without TVM: the expressions are parsed and checked node by node, then evaluated
with no builtins), the search never proposes an illegal one (`space.py`'s
postprocessor) and a fixed configuration that breaks one is refused before it is
built (`builder.split_knobs`).

Counting enumerates only the knobs the constraints name, each reduced to the factors
they read (4-part tilings of 1024 that agree on `tile_i[1]` and `tile_i[2]` count
once, with their multiplicity), binding them one after another and testing each
constraint as soon as its knobs are bound; the other knobs multiply the count.
"""

from __future__ import annotations

import ast
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from .errors import TemplateError
from .extents import eval_extent, perfect_tilings

# Enumerating more combinations than this to count one design space is refused:
# `check` must stay fast. The message says how to cut it.
MAX_COMBINATIONS = 2_000_000


@dataclass(frozen=True)
class Constraint:
    """A condition every point of the space must meet (see the module docstring)."""

    name: str
    expr: str

    kind = "constraint"


class ConstraintError(TemplateError):
    """A constraint that cannot be read or evaluated, or that the default breaks;
    `constraint` names it (the template reports it at its line)."""

    def __init__(self, message: str, constraint: str) -> None:
        super().__init__(message)
        self.constraint = constraint


_BINOPS = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod)
_CMPOPS = (ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Eq, ast.NotEq)


@lru_cache(maxsize=1024)
def _parsed(expr: str, name: str) -> tuple[ast.Expression, tuple[tuple[str, int | None], ...]]:
    """The checked AST and the (name, index or None) pairs it reads."""
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError:
        raise ConstraintError(f"constraint {name!r}: {expr!r} is not an expression", name) from None
    reads: list[tuple[str, int | None]] = []

    def walk(node: ast.AST) -> None:
        if isinstance(node, ast.Expression):
            walk(node.body)
        elif isinstance(node, ast.BoolOp):
            for v in node.values:
                walk(v)
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.USub)):
            walk(node.operand)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, _BINOPS):
            walk(node.left)
            walk(node.right)
        elif isinstance(node, ast.Compare) and all(isinstance(o, _CMPOPS) for o in node.ops):
            walk(node.left)
            for c in node.comparators:
                walk(c)
        elif isinstance(node, ast.Constant) and isinstance(node.value, (int, str)):
            pass
        elif isinstance(node, ast.Name):
            reads.append((node.id, None))
        elif (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Name)
            and isinstance(node.slice, ast.Constant)
            and isinstance(node.slice.value, int)
            and not isinstance(node.slice.value, bool)
        ):
            reads.append((node.value.id, node.slice.value))
        else:
            raise ConstraintError(
                f"constraint {name!r}: {ast.unparse(node)!r} is not allowed; a constraint uses "
                "knobs (a split's factor as tile_i[2]), workload keys, target facts, integers, "
                "+ - * // %, comparisons, and, or, not",
                name,
            )

    walk(tree)
    return tree, tuple(reads)


@lru_cache(maxsize=1024)
def _code(expr: str, name: str) -> Any:
    tree, _ = _parsed(expr, name)
    return compile(tree, f"<constraint {name}>", "eval")


def define_constraint(name: str, expr: str) -> Constraint:
    """A condition over knobs and target facts that every configuration must meet
    (`"tile_i[2] * tile_j[2] <= THREADS"`): points that break it are not counted,
    searched or built."""
    if not isinstance(name, str) or not isinstance(expr, str):
        raise TemplateError("define_constraint(name, expr): both must be strings")
    _parsed(expr, name)
    return Constraint(name, expr)


def reads(c: Constraint) -> tuple[tuple[str, int | None], ...]:
    """What `c` reads: (name, factor index) for a split factor, (name, None) otherwise."""
    return _parsed(c.expr, c.name)[1]


def check_names(constraints: Sequence[Constraint], knobs: Sequence[Any], names: Mapping[str, Any]) -> None:
    """ConstraintError for a name that is no knob, workload key or target fact, a split
    named without its factor or with one it does not have, or a factor of another knob."""
    decls = {k.name: k for k in knobs}
    for c in constraints:
        for name, index in reads(c):
            knob = decls.get(name)
            if knob is None:
                if name in names and index is None:
                    continue
                known = ", ".join([*decls, *(k for k, v in names.items() if isinstance(v, int))])
                raise ConstraintError(
                    f"constraint {c.name!r}: {name!r} is no knob, workload key or target fact "
                    f"of this target (known: {known})",
                    c.name,
                )
            if knob.kind == "split":
                if index is None or not 0 <= index < knob.parts:
                    raise ConstraintError(
                        f"constraint {c.name!r}: split {name!r} has factors {name}[0] to "
                        f"{name}[{knob.parts - 1}]; name one of them",
                        c.name,
                    )
            elif index is not None:
                raise ConstraintError(
                    f"constraint {c.name!r}: {name!r} is a {knob.kind} knob, one value: write "
                    f"{name}, not {name}[{index}]",
                    c.name,
                )


def holds(c: Constraint, values: Mapping[str, Any]) -> bool:
    """Whether `c` holds for `values` (split factors as sequences, other knobs as values,
    the workload's keys and target facts)."""
    try:
        return bool(eval(_code(c.expr, c.name), {"__builtins__": {}}, values))  # noqa: S307 - a checked arithmetic AST
    except ZeroDivisionError:
        return False
    except (NameError, TypeError, IndexError) as e:
        raise ConstraintError(f"constraint {c.name!r} ({c.expr}): {e}", c.name) from None


def violated(constraints: Sequence[Constraint], values: Mapping[str, Any]) -> list[Constraint]:
    """The constraints `values` breaks."""
    return [c for c in constraints if not holds(c, values)]


def describe_violation(broken: Sequence[Constraint]) -> str:
    return "; ".join(f"{c.name!r} ({c.expr})" for c in broken)


def count_legal(
    knobs: Sequence[Any], constraints: Sequence[Constraint], names: Mapping[str, Any], structure: Mapping[str, Any]
) -> int:
    """Points of one design space (`structure`: its structural choices) that satisfy
    every constraint; `names` is the extent scope (workload keys and target facts)."""
    check_names(constraints, knobs, names)
    used: dict[str, set[int]] = {}
    for c in constraints:
        for name, index in reads(c):
            used.setdefault(name, set())
            if index is not None:
                used[name].add(index)
    base: dict[str, Any] = {**names, **structure}
    free = 1
    groups: list[tuple[str, list[tuple[Any, int]]]] = []  # knob -> [(value, multiplicity)]
    for k in knobs:
        if k.kind == "structural":
            continue
        if k.kind == "split":
            extent = eval_extent(k.extent, names)
            tilings = perfect_tilings(extent, k.parts, eval_extent(k.max_factor, names))
            if k.name not in used:
                free *= len(tilings)
                continue
            keep = used[k.name]
            proj = Counter(tuple(f if i in keep else 0 for i, f in enumerate(t)) for t in tilings)
            groups.append((k.name, list(proj.items())))
        else:
            if k.name not in used:
                free *= len(k.candidates)
                continue
            groups.append((k.name, [(v, 1) for v in k.candidates]))
    groups.sort(key=lambda g: len(g[1]))
    combos = math.prod(len(g[1]) for g in groups)
    if combos > MAX_COMBINATIONS:
        sizes = " x ".join(f"{n} {len(v)}" for n, v in groups)
        first = constraints[0].name if constraints else ""
        raise ConstraintError(
            f"counting the legal points means trying {combos:,} combinations of the knobs the "
            f"constraints read ({sizes}), over the {MAX_COMBINATIONS:,} check allows; lower "
            "those splits' max_factor, give them fewer parts, or read fewer factors",
            first,
        )
    # Each constraint is tested at the first depth where all its knobs are bound.
    order = [g[0] for g in groups]
    at: list[list[Constraint]] = [[] for _ in range(len(groups) + 1)]
    for c in constraints:
        depth = max((order.index(n) + 1 for n, _ in reads(c) if n in order), default=0)
        at[depth].append(c)
    env = dict(base)
    if any(not holds(c, env) for c in at[0]):
        return 0

    def walk(depth: int) -> int:
        if depth == len(groups):
            return 1
        name, values = groups[depth]
        total = 0
        for value, mult in values:
            env[name] = value
            if all(holds(c, env) for c in at[depth + 1]):
                total += mult * walk(depth + 1)
        return total

    return free * walk(0)
