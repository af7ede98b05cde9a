"""Split extents and tilings: a workload's extent expression evaluated without running
template code, and the tilings `sample_perfect_tile` can choose from (listed and
counted). The template API (`template.py`) and the CONSTRAINTS counter
(`constraints.py`) both read them; nothing here imports either."""

from __future__ import annotations

import ast
import math
import operator as _op
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

from .errors import TemplateError
from .targetinfo import FACT_NAMES

# --------------------------------------------------------------------------- extents

_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: _op.add,
    ast.Sub: _op.sub,
    ast.Mult: _op.mul,
    ast.FloorDiv: _op.floordiv,
    ast.Mod: _op.mod,
}


@lru_cache(maxsize=4096)
def _parse_extent(extent: str) -> ast.Expression:
    # Parsed once per run: `check` evaluates each extent for every workload of
    # every template, and most templates share the same few ("M", "N", "K").
    try:
        return ast.parse(extent, mode="eval")
    except SyntaxError:
        raise TemplateError(f"extent {extent!r} is not an expression over workload keys") from None


def _eval_node(node: ast.AST, extent: str, workload: Mapping[str, Any]) -> int:
    # Module level, not a closure: a recursive closure is a reference cycle per
    # call, and `check` evaluates extents tens of thousands of times.
    if isinstance(node, ast.Expression):
        return _eval_node(node.body, extent, workload)
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.Name):
        v = workload.get(node.id)
        if not isinstance(v, int) or isinstance(v, bool):
            hint = "" if node.id not in FACT_NAMES else " (a target fact: only known with a target)"
            # Only what an extent can name: the integers (a dtype is no extent).
            names = [k for k, x in workload.items() if isinstance(x, int) and not isinstance(x, bool)]
            raise TemplateError(
                f"extent {extent!r}: workload has no integer {node.id!r} (the integers it has: {', '.join(names) or 'none'}){hint}"
            )
        return v
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        return int(
            _BINOPS[type(node.op)](_eval_node(node.left, extent, workload), _eval_node(node.right, extent, workload))
        )
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_eval_node(node.operand, extent, workload)
    raise TemplateError(
        f"extent {extent!r}: only workload keys, target facts ({', '.join(FACT_NAMES)}), integers and + - * // % are allowed"
    )


def eval_extent(extent: int | str, workload: Mapping[str, Any]) -> int:
    """Evaluate a split extent against a workload without running template code."""
    if isinstance(extent, int):
        return extent
    value = _eval_node(_parse_extent(extent), extent, workload)
    if value < 1:
        raise TemplateError(f"extent {extent!r} evaluates to {value} for workload {dict(workload)}")
    return value


# --------------------------------------------------------------------------- tilings


def _factorize(n: int) -> dict[int, int]:
    out: dict[int, int] = {}
    p = 2
    while p * p <= n:
        while n % p == 0:
            out[p] = out.get(p, 0) + 1
            n //= p
        p += 1
    if n > 1:
        out[n] = out.get(n, 0) + 1
    return out


def _ordered_factorizations(n: int, k: int) -> int:
    """Ways to write n as an ordered product of k positive integers (1 allowed)."""
    return math.prod(math.comb(e + k - 1, k - 1) for e in _factorize(n).values())


@lru_cache(maxsize=1024)
def perfect_tilings(extent: int, parts: int, max_innermost: int) -> tuple[tuple[int, ...], ...]:
    """Every decision `sample_perfect_tile(n=parts, max_innermost_factor=...)` can make
    (what `count_perfect_tiles` counts), in a fixed order."""

    def rest(n: int, k: int) -> list[tuple[int, ...]]:
        if k == 1:
            return [(n,)]
        return [(d, *r) for d in range(1, n + 1) if n % d == 0 for r in rest(n // d, k - 1)]

    return tuple(
        (*r, d)
        for d in range(1, min(extent, max_innermost) + 1)
        if extent % d == 0
        for r in rest(extent // d, parts - 1)
    )


@lru_cache(maxsize=4096)
def count_perfect_tiles(extent: int, parts: int, max_innermost: int) -> int:
    """What `sample_perfect_tile(n=parts, max_innermost_factor=...)` can choose from."""
    return sum(
        _ordered_factorizations(extent // d, parts - 1)
        for d in range(1, min(extent, max_innermost) + 1)
        if extent % d == 0
    )
