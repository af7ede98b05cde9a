"""TVM targets as canonical JSON dicts, without importing TVM.

TVM 0.27 only accepts dict targets; users still paste the removed string form
(`llvm -mcpu=skylake-avx512`). We convert it once, loudly, and from then on compare
canonical dicts, never strings: a flag that differs is a different target.
"""

from __future__ import annotations

import functools
import json
import re
import shlex
from typing import Any

# Attributes TVM adds on export; they follow from `kind`, so they never make two
# user targets differ.
_DERIVED_KEYS = ("tag", "keys")


def _coerce(value: str) -> Any:
    if re.fullmatch(r"-?\d+", value):
        return int(value)
    if value in ("true", "True"):
        return True
    if value in ("false", "False"):
        return False
    return value


def parse_legacy_string(text: str) -> dict[str, Any]:
    """`llvm -mcpu=skylake-avx512 -num-cores=4` -> {"kind": "llvm", "mcpu": ..., "num-cores": 4}."""
    parts = shlex.split(text)
    if not parts or parts[0].startswith("-"):
        raise ValueError(f"target string {text!r} does not start with a target kind")
    out: dict[str, Any] = {"kind": parts[0]}
    for part in parts[1:]:
        if not part.startswith("-"):
            raise ValueError(f"target string {text!r}: {part!r} is not a -key=value option")
        key, sep, value = part.lstrip("-").partition("=")
        if key == "mattr":
            out[key] = [v for v in value.split(",") if v]
        else:
            out[key] = _coerce(value) if sep else True
    return out


def canonical_target(target: dict[str, Any]) -> dict[str, Any]:
    """Normalise a target dict so equal targets compare equal as JSON."""
    out: dict[str, Any] = {}
    for key, value in target.items():
        if key in _DERIVED_KEYS:
            continue
        if isinstance(value, tuple):
            value = list(value)
        if key == "mattr" and isinstance(value, list):
            value = sorted(str(v) for v in value)
        if isinstance(value, dict):
            value = canonical_target(value)
        out[str(key)] = value
    return dict(sorted(out.items()))


def target_json(target: dict[str, Any]) -> str:
    """The one-line JSON users paste into `tvm.target.Target(...)`."""
    return json.dumps(canonical_target(target), sort_keys=True)


@functools.lru_cache(maxsize=8192)  # check asks it for every entry, several times
def slug(name: str) -> str:
    """A folder/file-safe form of a target or operator name."""
    s = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-")
    if not s:
        raise ValueError(f"name {name!r} has no file-safe characters")
    return s
