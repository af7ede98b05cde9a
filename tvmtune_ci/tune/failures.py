"""What a failed trial failed at, from its error message (`failure_kind`): its build,
its resources (a GPU kernel over its limits), its run, a timeout or a wrong result; and
the count of each kind over a search's trials (`failure_kinds`, the outcome's
`trials.failures`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def failure_kind(error: str) -> str:
    """ "build", "resources" (a GPU kernel over its limits, as the compiler reports),
    "run", "timeout" or "wrong_result" for a trial's error message."""
    if error.startswith("wrong result"):
        return "wrong_result"
    if error.startswith("InProcessBuilder: resources"):
        return "resources"
    if "timeout" in error.lower():
        return "timeout"
    if error.startswith("InProcessBuilder"):
        return "build"
    return "run"


def failure_kinds(entries: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for e in entries:
        if e.get("error"):
            kind = failure_kind(e["error"])
            out[kind] = out.get(kind, 0) + 1
    return dict(sorted(out.items()))
