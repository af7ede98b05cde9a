"""The canonical form of code: an AST dumped without docstrings, positions or
formatting, so that only a change of meaning changes a hash."""

from __future__ import annotations

import ast
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import datafiles
from .model import ABSENT, DIR, FILE

# --------------------------------------------------------------------------- canonical AST


def path_state(path: Path | str) -> str:
    """FILE, DIR or ABSENT: what `import` finds at `path` (symlinks followed)."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return ABSENT
    return FILE if stat.S_ISREG(mode) else DIR if stat.S_ISDIR(mode) else ABSENT


def is_docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


_BODY_OWNERS = frozenset({ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef})
IMPORT_NODES = (ast.Import, ast.ImportFrom)


def canonical_dump(node: ast.AST) -> str:
    """A position-free, docstring-free text form of `node`.

    Like `ast.dump(node, include_attributes=False)` on a tree without docstrings,
    but written out here because ast.dump's format changed in Python 3.13 (empty
    fields omitted): a hash recorded by a tuning runner must match on a PR runner
    with another Python. None and empty lists are omitted, so fields added by new
    Pythons with empty defaults (e.g. `type_params`) do not change the text.
    """
    return Canon(node).text


class Canon:
    """One pass over a definition: its canonical text, the names it reads, its imports.

    One pass, not three (dump, name visitor, import walk): `check` is dominated
    by this loop. Names are collected as attribute chains, `z.f.g` -> ("z", "f",
    "g"), so that `import mylib.tiling as z` + `z.f` resolves to the function f.
    """

    __slots__ = ("_out", "refs", "imports", "sites", "_strip")

    def __init__(self, node: ast.AST, *, import_time: bool = False) -> None:
        self._out: list[str] = []
        self.refs: dict[tuple[str, ...], None] = {}  # ordered set
        self.imports: list[ast.Import | ast.ImportFrom] = []
        # Calls and subscripts of the code that runs that may read a file or an
        # environment variable (datafiles.scan).
        self.sites: list[ast.AST] = []
        # import_time: only what runs when the module is imported; the bodies of
        # undecorated functions are left out until something else reaches them.
        self._strip = import_time
        self._node(node, False)

    @property
    def text(self) -> str:
        return "".join(self._out)

    def _node(self, node: ast.AST, in_chain: bool) -> None:
        # in_chain: `node` is the value of an Attribute whose chain is already recorded.
        cls = node.__class__
        if self._strip and (cls is ast.ClassDef or (cls in _FUNCS and node.decorator_list)):  # type: ignore[attr-defined]
            # A class body runs at import, and a decorator may call the function:
            # all of it counts, nested functions included.
            self._strip = False
            self._node(node, in_chain)
            self._strip = True
            return
        note = _NOTES.get(cls)
        if note is not None:  # a name, an import, a call or subscript that may read
            note(self, node, in_chain)
        out = self._out
        out.append(cls.__name__ + "(")
        for name in cls._fields:
            value = getattr(node, name, None)
            if value is None:
                continue
            vcls = value.__class__
            if vcls is list:
                if not value:
                    continue
                if name == "body" and self._strip and cls in _FUNCS:
                    value = _ELIDED  # runs only when called
                elif name == "body" and cls in _BODY_OWNERS and is_docstring(value[0]):
                    # A docstring-only body means the same as `pass`.
                    value = value[1:] or [ast.Pass()]
                out.append(name + "=[")
                for item in value:
                    if isinstance(item, ast.AST):
                        self._node(item, False)
                        out.append(",")
                    else:
                        out.append(repr(item) + ",")
                out.append("],")
            elif vcls in _LEAVES:
                # Load, Store, Add, ...: no fields, so no call (they are a third of all nodes).
                out.append(f"{name}={vcls.__name__}(),")
            elif isinstance(value, ast.AST):
                out.append(name + "=")
                # The value of a recorded chain (`z` in `z.f`) is not a reference of its own.
                self._node(value, in_chain or (cls is ast.Attribute and vcls in _CHAIN))
                out.append(",")
            elif name != "type_comment":
                out.append(f"{name}={value!r},")
        out.append(")")

    # What `_node` notes of a node besides its text, by the node's class (`_NOTES`).

    def _name(self, node: Any, in_chain: bool) -> None:
        if not in_chain and node.ctx.__class__ is ast.Load:
            self.refs[(node.id,)] = None

    def _attribute(self, node: Any, in_chain: bool) -> None:
        if not in_chain:
            parts = [node.attr]
            base = node.value
            while base.__class__ is ast.Attribute:
                parts.append(base.attr)
                base = base.value
            if base.__class__ is ast.Name:
                parts.append(base.id)
                self.refs[tuple(reversed(parts))] = None

    def _import(self, node: Any, in_chain: bool) -> None:
        self.imports.append(node)

    def _call(self, node: Any, in_chain: bool) -> None:
        # Only calls that may read (open, np.load, P.read_text, os.getenv, ...):
        # most code has none, and then nothing more is looked at.
        f = node.func
        fcls = f.__class__
        name = f.id if fcls is ast.Name else f.attr if fcls is ast.Attribute else None
        if name in datafiles.CALL_NAMES and (name not in datafiles.MAPPING_METHODS or datafiles.on_mapping(f)):
            self.sites.append(node)

    def _subscript(self, node: Any, in_chain: bool) -> None:
        v = node.value
        vcls = v.__class__
        name = v.id if vcls is ast.Name else v.attr if vcls is ast.Attribute else None
        if name in datafiles.MAPPING_NAMES:
            self.sites.append(node)


_NOTES: dict[type, Callable[[Canon, Any, bool], None]] = {
    ast.Name: Canon._name,
    ast.Attribute: Canon._attribute,
    ast.Import: Canon._import,
    ast.ImportFrom: Canon._import,
    ast.Call: Canon._call,
    ast.Subscript: Canon._subscript,
}

_LEAVES = frozenset(c for c in vars(ast).values() if isinstance(c, type) and issubclass(c, ast.AST) and not c._fields)
_CHAIN = frozenset({ast.Name, ast.Attribute})
_FUNCS = frozenset({ast.FunctionDef, ast.AsyncFunctionDef})
_ELIDED: list[ast.stmt] = [ast.Pass()]
