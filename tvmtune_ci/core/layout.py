"""Where an (operator, target) log set lives, and what its files are called.

    tuning_logs/<operator>/<target-slug>/         (.<target-slug>.tvmtune-lock/-work beside it)
        manifest.json                              provenance, commit point
        <operator>_<target-slug>_<YYYY-MM-DD>.json the log (MetaSchedule records)
        README.md, curve.png                       generated
        *.bak                                      archived earlier sets (dated)
        anything else                              not ours: kept as it is by every publish

While a set is published, `.<target-slug>.tvmtune-new/` (and, without
RENAME_EXCHANGE, `.<target-slug>.tvmtune-old/`) exist beside the folder and a
`.tvmtune-publish.json` marker inside one of them; `publish.recover` removes them.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from .manifestformat import MANIFEST_NAME
from .targets import slug


@dataclass(frozen=True)
class LogSet:
    """The folder of one (operator, target) log set, and the names of its files."""

    folder: Path
    operator: str
    target_slug: str

    @classmethod
    def of(cls, logs_dir: Path, operator: str, target_name: str) -> LogSet:
        s = slug(target_name)
        return cls(logs_dir / slug(operator) / s, operator, s)

    @functools.cached_property
    def manifest(self) -> Path:  # asked several times per entry by check: built once
        return self.folder / MANIFEST_NAME

    @property
    def readme(self) -> Path:
        return self.folder / "README.md"

    @property
    def curve(self) -> Path:
        return self.folder / "curve.png"

    @property
    def lock(self) -> Path:
        return self.folder.with_name(f".{self.folder.name}.tvmtune-lock")

    def log_name(self, date: str) -> str:
        return f"{slug(self.operator)}_{self.target_slug}_{date}.json"

    @property
    def work_dir(self) -> Path:
        """Resumable tuning state (measured records), outside the published folder."""
        return self.folder.with_name(f".{self.folder.name}.tvmtune-work")
