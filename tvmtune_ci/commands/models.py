"""`tvmtune-ci models [NAME ...]`: build each model of `models:` (TVM, the [tune] extra),
list its Relax calls, match them against the templates' IMPLEMENTS and write its
coverage file (`models/<name>.coverage.json`, docs/models.md); then print what no
template covers and every declared workload that no model uses.

Exit codes: 0 written (uncovered calls are reported, not an error), 2 config, a
template's IMPLEMENTS or a model that cannot be loaded.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..core.config import load_config
from ..core.configschema import Config
from ..core.contract import COVERED, FUSED, UNCOVERED_OP, UNCOVERED_SHAPE, Contract
from ..core.coverage import CoverageFile, read_coverage, write_coverage
from ..core.errors import CorruptFileError, UsageError
from ..model.calls import coverage_for, read_contracts


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "models", nargs="*", metavar="NAME", help="models to regenerate (default: every model of tvmtune.yaml)"
    )


def unused_workloads(contracts: list[Contract], files: list[CoverageFile]) -> list[tuple[str, str]]:
    """(template, workload) pairs of templates with IMPLEMENTS that no model's covered
    call uses."""
    used = set().union(*(f.uses() for f in files)) if files else set()
    return [
        (c.template, w)
        for c in sorted(contracts, key=lambda c: c.template)
        for w in sorted(c.workloads)
        if (c.template, w) not in used
    ]


def describe(f: CoverageFile) -> list[str]:
    """The lines `models` prints for one model."""
    counts: dict[str, int] = {}
    for i, _ in f.sites:
        s = f.calls[i][1].status
        counts[s] = counts.get(s, 0) + 1
    lines = [f"model {f.model}: {len(f.sites)} calls: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))]
    for sig, cov, n in f.calls:
        if cov.status == COVERED:
            fused = f" + {', '.join(cov.epilogue)} fused" if cov.epilogue else ""
            alone = f"; {cov.note}" if cov.alone else ""
            lines.append(f"  covered    x{n} {sig.describe()}: {cov.template}/{cov.workload}{fused}{alone}")
        elif cov.status == FUSED:
            lines.append(f"  fused      x{n} {sig.describe()}: {cov.note}")
        elif cov.status == UNCOVERED_SHAPE:
            lines.append(
                f"  uncovered  x{n} {sig.describe()}: {cov.template} implements it; add "
                f"{dict(cov.params)} to its WORKLOADS"
            )
        elif cov.status == UNCOVERED_OP:
            lines.append(f"  no template x{n} {sig.describe()} ({cov.note})")
    return lines


def generate(config: Config, names: list[str]) -> tuple[list[CoverageFile], list[Contract]]:
    """Write the coverage file of each named model; the files and the contracts."""
    blobs, contracts = read_contracts(config.root, config.operators_path)
    out = []
    for m in config.models:
        if m.name not in names:
            continue
        f = coverage_for(config, m, contracts, blobs)
        write_coverage(config.root / m.coverage_file, f)
        out.append(f)
    return out, contracts


def run(args: argparse.Namespace) -> int:
    config = load_config(Path(args.config) if args.config else None)
    known = [m.name for m in config.models]
    if not known:
        raise UsageError(
            "tvmtune.yaml has no `models:`; add one, e.g. `models: {bert: {source: models/bert.py}}` (docs/models.md)"
        )
    names = list(args.models) or known
    for n in names:
        if n not in known:
            raise UsageError(f"unknown model {n!r}; models in tvmtune.yaml: {', '.join(known)}")
    files, contracts = generate(config, names)
    for f, m in zip(files, [m for m in config.models if m.name in names], strict=True):
        for line in describe(f):
            print(line)
        print(f"wrote {m.coverage_file}")
    # The models not regenerated count with the files they have.
    others = []
    for m in config.models:
        if m.name not in names:
            try:
                others.append(read_coverage(config.root / m.coverage_file))
            except (OSError, CorruptFileError):
                print(f"note: {m.coverage_file} unreadable: its model's uses are not counted below")
    for t, w in unused_workloads(contracts, files + others):
        print(f"workload {t}/{w}: no model uses it")
    return 0
