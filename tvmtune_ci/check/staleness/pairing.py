"""Which configured targets `check` pairs each template with (`Config.targets_for`: an
operator's `targets:` list, else the targets of a kind its template declares), reading
templates as little as it can.

A check never reads most templates (git vouches for their recorded sources): reading
each one's TARGET_KINDS would cost a file read per operator. Where every target is of
one kind, a manifest git vouches for (`Checker.recorded`) vouches for its pair too: it
was tuned for its target with this very template, which `retune` refuses for a target
of another kind. A template is read only for a pair no manifest vouches for, so a
fresh repository's check reads none. Where the targets are of several kinds (CPUs and
GPUs), each template is read first: one read, instead of a manifest looked for in vain
per target of another kind.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from ...core.configschema import Config, TargetConfig
from ...core.template import declared_kinds


class Pairing:
    """`Config.targets_for` for one check, each template's TARGET_KINDS read once and
    only when asked (template.declared_kinds)."""

    def __init__(self, config: Config, templates: Mapping[str, Path]) -> None:
        self.config = config
        self._paths = templates
        self._kinds: dict[str, tuple[str, ...] | None] = {}
        self._vouched: set[tuple[str, str]] = set()
        self._mixed = len({t.kind for t in config.targets}) > 1

    def candidates(self, op: str) -> tuple[TargetConfig, ...]:
        """Its listed targets, or every configured one that its kinds may yet rule out
        (those of its kinds, where the targets are of several)."""
        listed = self.config.operator(op).targets is not None
        return self.config.targets_for(op, self.kinds(op) if self._mixed and not listed else None)

    def kinds(self, op: str) -> tuple[str, ...] | None:
        if op not in self._kinds:
            self._kinds[op] = declared_kinds(self._paths[op])
        return self._kinds[op]

    def vouch(self, op: str, targets: Iterable[str]) -> None:
        """These targets' manifests of `op` were trusted: paired without a read."""
        self._vouched.update((op, t) for t in targets)

    def paired(self, op: str, target: TargetConfig) -> bool:
        """Whether `target` (one configured for `op`, whatever its kind) is one `op` is
        tuned for."""
        if (op, target.name) in self._vouched:
            return True
        listed = self.config.operator(op).targets is not None
        kinds = None if listed else self.kinds(op)  # a list does not depend on kinds
        return any(t.name == target.name for t in self.config.targets_for(op, kinds))
