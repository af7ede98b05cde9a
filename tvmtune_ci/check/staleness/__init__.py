"""Is each committed log set still true? Every reason it is not, with where to look.

For every (operator, target) the config asks for, `find_stale` compares the log
set's manifest with what the repository says now: the template's fingerprint
(fingerprint.py), its WORKLOADS, the configured target, the TVM version, the age
of the log and the bytes of the files the manifest names. Nothing is imported or
run: templates are read as text, TVM's version is read from package metadata.

One module per job:

- `model`: what is reported (`Reason`, `Entry`, `Report`; the codes are
  `reasons.Code`);
- `select`: the CLI's choice of entries and dates;
- `templates`: a template parsed and fingerprinted, or as its manifest recorded it;
- `rules`: each reason, decided in one order, and the integrity of the files;
- `prscope`: which entries a pull request concerns (`--changed-since`);
- `orphans`: folders of unconfigured operators or targets, renamed templates;
- `run`: `find_stale`, all of it together.

Fast on real repositories (benchmarks/bench_check.py): a committed, unmodified log
or results file is vouched for by git's index instead of being re-read
(`rules.Checker`); a template whose recorded inputs git vouches for is not parsed
and fingerprinted again (`rules.Checker.recorded`, sources.py); and
`--changed-since` parses only the templates an edit can concern (`prscope`).
"""

from __future__ import annotations

from ..tvmversion import installed_tvm_version, major_minor
from .model import (
    EXPIRED,
    FIX_HINT,
    LOG_MODIFIED,
    MISSING,
    ORPHANED,
    TARGET_CHANGED,
    TEMPLATE_API_CHANGED,
    TEMPLATE_CHANGED,
    TEMPLATE_INVALID,
    TVM_CHANGED,
    WORKLOAD_CHANGED,
    Entry,
    Reason,
    Report,
)
from .run import find_stale
from .select import parse_date, select_entries

__all__ = [
    "EXPIRED",
    "FIX_HINT",
    "LOG_MODIFIED",
    "MISSING",
    "ORPHANED",
    "TARGET_CHANGED",
    "TEMPLATE_API_CHANGED",
    "TEMPLATE_CHANGED",
    "TEMPLATE_INVALID",
    "TVM_CHANGED",
    "WORKLOAD_CHANGED",
    "Entry",
    "Reason",
    "Report",
    "find_stale",
    "installed_tvm_version",
    "major_minor",
    "parse_date",
    "select_entries",
]
