"""`tvmtune.yaml`'s line-numbered errors: each error and warning names `file:LINE` of
the YAML node it is about, what is wrong and what to write instead.

The YAML is composed into nodes (not loaded) so that each value keeps the line it
came from. The checks every key shares (a mapping, its allowed keys with a "did you
mean" from difflib, a typed value) raise at the node's line.
"""

from __future__ import annotations

import difflib
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from .errors import ConfigError


class ConfigWarning(UserWarning):
    """tvmtune.yaml works but should change (e.g. a legacy string target).

    Also kept in `Config.warnings`, so that `check` can report it in every format.
    """


class ParseContext:
    """One tvmtune.yaml being parsed: its name in messages, and the warnings so far."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.display = path.name
        self.warnings: list[str] = []

    def warn(self, node: yaml.Node, what: str, fix: str) -> None:
        message = f"{self.display}:{node.start_mark.line + 1}: {what}; {fix}"
        self.warnings.append(message)
        # 5 frames up (the value's parser, one target, the targets): parse_config's line.
        warnings.warn(message, ConfigWarning, stacklevel=5)

    def error(self, node: yaml.Node | None, what: str, fix: str) -> ConfigError:
        line = node.start_mark.line + 1 if node is not None else 1
        return ConfigError(f"{self.display}:{line}: {what}; {fix}")


def construct(node: yaml.Node) -> Any:
    """A node's value, as yaml.safe_load would give it."""
    loader = yaml.SafeLoader("")
    try:
        return loader.construct_object(node, deep=True)
    finally:
        loader.dispose()


def mapping(ctx: ParseContext, node: yaml.Node, where: str) -> dict[str, tuple[yaml.Node, yaml.Node]]:
    """A mapping node's entries, key -> (key node, value node); string keys, no duplicates."""
    if not isinstance(node, yaml.MappingNode):
        raise ctx.error(node, f"{where} must be a mapping", f"write `{where}:` followed by indented `key: value` lines")
    out: dict[str, tuple[yaml.Node, yaml.Node]] = {}
    for k, v in node.value:
        key = construct(k)
        if not isinstance(key, str):
            raise ctx.error(k, f"key {key!r} in {where} is not a string", "quote it or rename it")
        if key in out:
            raise ctx.error(k, f"duplicate key {key!r} in {where}", "keep only one of them")
        out[key] = (k, v)
    return out


def check_keys(
    ctx: ParseContext, items: dict[str, tuple[yaml.Node, yaml.Node]], allowed: list[str], where: str
) -> None:
    """An unknown key is an error at its line, with "did you mean" (difflib) or the list."""
    for key, (knode, _) in items.items():
        if key not in allowed:
            close = difflib.get_close_matches(key, allowed, n=1)
            fix = f"did you mean {close[0]!r}?" if close else f"allowed keys: {', '.join(allowed)}"
            raise ctx.error(knode, f"unknown key {key!r} in {where}", fix)


def typed(
    ctx: ParseContext,
    node: yaml.Node,
    key: str,
    kind: type | tuple[type, ...],
    example: str,
    check: Callable[[Any], bool] | None = None,
    rule: str = "",
) -> Any:
    """A node's value of type `kind` (an int where a float is asked), passing `check` if
    given (else the error says `rule`); the fix shows `example`."""
    value = construct(node)
    kinds = kind if isinstance(kind, tuple) else (kind,)
    ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
    # YAML reads `timeout_s: 30` as an int; a float field takes it.
    if not ok and float in kinds and isinstance(value, int) and not isinstance(value, bool):
        value, ok = float(value), True
    if not ok:
        raise ctx.error(
            node,
            f"{key} is {value!r} ({type(value).__name__}), expected {' or '.join(k.__name__ for k in kinds)}",
            f"write for example `{example}`",
        )
    if check is not None and not check(value):
        raise ctx.error(node, f"{key} is {value!r}, {rule}", f"write for example `{example}`")
    return value


# (check, rule) pairs for `typed`.
POSITIVE = (lambda v: v > 0, "it must be positive")
NON_NEGATIVE = (lambda v: v >= 0, "it must not be negative")
