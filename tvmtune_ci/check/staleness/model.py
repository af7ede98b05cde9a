"""What `check` reports: a reason an entry is stale, an entry, the report."""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from ...core.layout import LogSet
from ...core.manifest import Manifest
from ...core.reasons import RETUNE, Code
from ..models import ModelProblem

# Reason codes (reasons.Code: their order, what each blocks downstream, their fix).
MISSING = Code.MISSING
TEMPLATE_INVALID = Code.TEMPLATE_INVALID
TEMPLATE_CHANGED = Code.TEMPLATE_CHANGED
WORKLOAD_CHANGED = Code.WORKLOAD_CHANGED
TARGET_CHANGED = Code.TARGET_CHANGED
TVM_CHANGED = Code.TVM_CHANGED
TEMPLATE_API_CHANGED = Code.TEMPLATE_API_CHANGED
EXPIRED = Code.EXPIRED
LOG_MODIFIED = Code.LOG_MODIFIED
ORPHANED = Code.ORPHANED  # a warning (Report.orphans), never a reason

FIX_HINT = RETUNE


@dataclass(frozen=True)
class Reason:
    """Why an entry is stale: a reason code, the detail in words, and the file:line
    to look at (None when there is no such place)."""

    code: Code
    detail: str
    file: str | None = None  # repo-relative posix path
    line: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "code", Code(self.code))  # type: ignore[call-arg]  # a lookup by value: a plain "missing" too


@dataclass(frozen=True)
class Entry:
    """One (operator, target) pair: its template, its log set and manifest (if any),
    and every reason its log is stale (none: fresh)."""

    operator: str
    target_name: str  # the configured target's name (its config: Config.target(name))
    template_file: str  # repo-relative posix path
    template_line: int
    reasons: tuple[Reason, ...]
    manifest: Manifest | None
    logset: LogSet
    space_sizes: dict[str, tuple[int, int]]  # workload -> (points per design space, design spaces)
    as_of: datetime.date | None = None  # the day ages are counted to; None: today
    # The operator whose orphaned log folder fits this entry's template (renames.py):
    # `tvmtune-ci adopt OLD OPERATOR` keeps that log; None when there is none.
    renamed_from: str | None = None
    # Its target's `retired:` (when and why the runner went); None: a live target.
    retired: str | None = None

    @property
    def fresh(self) -> bool:
        return not self.reasons

    @property
    def unrunnable(self) -> bool:
        """Stale, on a target no runner can re-tune: reported, never a failure."""
        return bool(self.reasons) and self.retired is not None

    @property
    def age_days(self) -> int | None:
        tuned = tuned_on(self.manifest) if self.manifest is not None else None
        if tuned is None:
            return None
        return ((self.as_of or datetime.date.today()) - tuned).days


@dataclass(frozen=True)
class Report:
    """Every entry a check looked at, and the warnings it has (orphaned log folders,
    config warnings)."""

    entries: tuple[Entry, ...]
    orphans: tuple[Reason, ...]
    warnings: tuple[str, ...]
    # Logs whose bytes git's index vouched for (not read); the rest were hashed.
    logs_trusted: int = 0
    # Entries whose template was not parsed: git vouched for its recorded sources.
    templates_trusted: int = 0
    # Log folders of unconfigured targets or operators that tvmtune.yaml's `keep:` declares.
    kept: tuple[str, ...] = ()
    # Models whose coverage file is missing, unreadable or stale (check/models.py):
    # they fail `check` like a stale log.
    models: tuple[ModelProblem, ...] = ()

    @property
    def stale(self) -> tuple[Entry, ...]:
        """The entries a re-tune can and must fix (what fails `check`)."""
        return tuple(e for e in self.entries if not e.fresh and e.retired is None)

    @property
    def unrunnable(self) -> tuple[Entry, ...]:
        """Entries that would be stale, of retired targets: said, not failed."""
        return tuple(e for e in self.entries if e.unrunnable)


# --------------------------------------------------------------------------- helpers


def tuned_on(manifest: Manifest) -> datetime.date | None:
    try:
        return datetime.date.fromisoformat(manifest.tuned_on)
    except (TypeError, ValueError):
        return None
