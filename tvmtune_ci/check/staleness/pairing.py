"""Which configured targets `check` pairs each template with, reading a template's
TARGET_KINDS only when no manifest vouches for the pair.

`Config.targets_for` decides: an operator's `targets:` list, else the targets of a kind
its template declares. Reading every template's kinds would cost `check` a file read
per operator, and most are never read otherwise (git vouches for their recorded
sources). A manifest git vouches for (`Checker.recorded`) was tuned for its target
with this very template, which `retune` refuses for a target of another kind: that
pair needs no read. A fresh repository's check reads no template for its pairing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from ...core.config import Config, TargetConfig
from ...core.template import declared_kinds


class Pairing:
    """`Config.targets_for` for one check, each template's TARGET_KINDS read once and
    only when asked (template.declared_kinds)."""

    def __init__(self, config: Config, templates: Mapping[str, Path]) -> None:
        self.config = config
        self._paths = templates
        self._kinds: dict[str, tuple[str, ...] | None] = {}
        self._vouched: set[tuple[str, str]] = set()

    def candidates(self, op: str) -> tuple[TargetConfig, ...]:
        """Its listed targets, or every configured one: those its kinds may rule out."""
        return self.config.targets_for(op, None)

    def kinds(self, op: str) -> tuple[str, ...] | None:
        if op not in self._kinds:
            self._kinds[op] = declared_kinds(self._paths[op])
        return self._kinds[op]

    def vouch(self, op: str, targets: Iterable[str]) -> None:
        """These targets' manifests of `op` were trusted: paired without a read."""
        self._vouched.update((op, t) for t in targets)

    def paired(self, op: str, target: TargetConfig) -> bool:
        """Whether `target` (one of its candidates) is one `op` is tuned for."""
        if (op, target.name) in self._vouched:
            return True
        listed = self.config.operator(op).targets is not None
        kinds = None if listed else self.kinds(op)  # a list does not depend on kinds
        return any(t.name == target.name for t in self.config.targets_for(op, kinds))
