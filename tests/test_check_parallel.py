"""`check` parses many templates over the runner's cores: the same report as in one process.

A pull request that edits a helper every template imports, or `check --rehash`, parses
and fingerprints every template (`check/staleness/templates.py`,
`read_checked_templates`); from PARALLEL_MIN templates on, forked workers share them.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
from conftest import commit_all, make_repo, write_fresh

from tvmtune_ci.check.fingerprint import SourceCache
from tvmtune_ci.check.staleness import Report, find_stale
from tvmtune_ci.check.staleness import templates as T
from tvmtune_ci.core.config import load_config


@pytest.fixture
def many(tmp_path: Path) -> Path:
    """Every CPU template, fresh on both targets but one entry, then edits of each kind:
    a template changed, one that no longer reads, one without a log on a target."""
    root = make_repo(tmp_path, operators=True)
    ops = sorted(p.stem for p in (root / "operators").glob("[!_]*.py"))
    assert len(ops) >= 4, ops
    for op in ops:
        for target in ("avx512", "avx2"):
            if (op, target) != (ops[0], "avx2"):
                write_fresh(root, op, target)
    commit_all(root, "logs")
    dense = root / "operators" / f"{ops[1]}.py"
    dense.write_text(
        dense.read_text()
        .replace("def schedule(", "def schedule(  # edited\n    ", 1)
        .replace("sch.get_sblock(", "sch.get_sblock(  \n", 1)
        + "\n\nX = 1\n"
    )
    broken = root / "operators" / f"{ops[2]}.py"
    broken.write_text(broken.read_text() + "\ndef schedule(:\n")
    return root


def _report(root: Path, monkeypatch: pytest.MonkeyPatch, parallel_min: int, **kw: object) -> Report:
    monkeypatch.setattr(T, "PARALLEL_MIN", parallel_min)
    return find_stale(load_config(root / "tvmtune.yaml"), **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("kw", [{"rehash": True}, {}, {"changed_since": "HEAD"}])
def test_the_report_is_the_same_parsed_in_one_process_or_over_the_cores(
    many: Path, monkeypatch: pytest.MonkeyPatch, kw: dict
) -> None:
    if T.parse_workers(10**6) < 2:
        pytest.skip("one core (or no fork): check parses in one process")
    serial = _report(many, monkeypatch, 10**6, **kw)
    forked = _report(many, monkeypatch, 2, **kw)
    assert forked == serial
    codes = {f"{e.operator}/{e.target_name}": [r.code for r in e.reasons] for e in serial.entries}
    kinds = {c for cs in codes.values() for c in cs}
    # Each kind of entry went through both: stale for each reason, and fresh ones (the
    # PR check reports only the edited templates' entries).
    if "changed_since" in kw:
        assert kinds == {"template_changed", "template_invalid"}, codes
    else:
        assert {"template_changed", "template_invalid", "missing"} <= kinds, codes
        assert any(not cs for cs in codes.values()), codes


def test_workers_parse_their_share_and_the_results_come_back_in_order(
    many: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = sorted((many / "operators").glob("[!_]*.py"))
    real = T.read_checked_template

    def tagged(path: Path, cache: SourceCache) -> T.CheckedTemplate:
        return dataclasses.replace(real(path, cache), line=os.getpid())  # who parsed it

    serial = T.read_checked_templates(paths, SourceCache(many))
    monkeypatch.setattr(T, "read_checked_template", tagged)
    forked = T.read_checked_templates(paths, SourceCache(many), workers=2)
    assert list(forked) == paths
    pids = {t.line for t in forked.values()}
    assert len(pids) == 2 and os.getpid() not in pids, pids
    assert {p: dataclasses.replace(t, line=serial[p].line) for p, t in forked.items()} == serial
    assert forked[paths[2]].invalid is not None  # a template's error travels back as its reason


def test_how_many_processes_parse() -> None:
    assert T.parse_workers(T.PARALLEL_MIN - 1) == 1
    cores = len(os.sched_getaffinity(0))
    assert T.parse_workers(1000) == min(cores, 4)
    assert T.parse_workers(10**6) <= 4
