"""Logs know the template API they were decoded with (templateapi.py).

The knob -> trace rules are tvmtune-ci's, not the template's: a release that changes
them decodes every committed log differently. Their code is pinned per version, a
bump makes every entry stale with the fix, and records of another API are refused.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import inspect
import json
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import change_function, commit_all, run_cli

from tvmtune_ci.check.fingerprint import canonical_dump
from tvmtune_ci.check.staleness import TEMPLATE_API_CHANGED, Report, find_stale
from tvmtune_ci.core import template, templateapi
from tvmtune_ci.core.config import load_config
from tvmtune_ci.core.extents import eval_extent
from tvmtune_ci.core.manifest import read_manifest
from tvmtune_ci.core.template import Split
from tvmtune_ci.pipeline import history as pipeline_history
from tvmtune_ci.tune import priors


def report_of(root: Path) -> Report:
    return find_stale(load_config(root / "tvmtune.yaml"))


def set_api(root: Path, api: int | None) -> None:
    """Record `api` in every manifest (None: drop the field, as before it existed)."""
    for path in (root / "tuning_logs").glob("*/*/manifest.json"):
        data = json.loads(path.read_text())
        if api is None:
            data.pop("template_api", None)
        else:
            data["template_api"] = api
        path.write_text(json.dumps(data))


def rules_hash() -> str:
    """The sha256 of the rules' code as it is now (canonical AST, as a template's
    fingerprint: comments, docstrings and formatting do not count)."""
    h = hashlib.sha256()
    for module, qualname in templateapi.RULES:
        obj: object = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
        tree = ast.parse(textwrap.dedent(inspect.getsource(obj)))  # type: ignore[arg-type]
        h.update(f"{module}:{qualname}\n{canonical_dump(tree.body[0])}\n".encode())
    return h.hexdigest()


def test_the_rules_are_pinned_for_this_template_api() -> None:
    assert rules_hash() == templateapi.RULES_PINNED[templateapi.TEMPLATE_API], (
        "the knob -> trace rules changed: if the meaning changed, bump "
        "templateapi.TEMPLATE_API (with its VERSIONS entry); if not, re-pin RULES_PINNED"
    )
    assert set(templateapi.VERSIONS) == set(templateapi.RULES_PINNED)


def test_manifests_record_the_template_api_and_older_ones_read_as_the_first(repo: Path) -> None:
    path = next((repo / "tuning_logs").glob("matmul/*/manifest.json"))
    assert json.loads(path.read_text())["template_api"] == templateapi.TEMPLATE_API
    set_api(repo, None)
    assert read_manifest(path).template_api == templateapi.UNRECORDED == 1
    assert report_of(repo).stale == ()


def test_changing_a_mapping_rule_makes_every_entry_stale(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def default_value(knob, workload):  # noqa: ANN001, ANN202
        # The default configuration tiles innermost instead of outermost.
        if isinstance(knob, Split):
            return [1] * (knob.parts - 1) + [eval_extent(knob.extent, workload)]
        return knob.candidates[0]

    monkeypatch.setattr(template, "default_value", default_value)
    # The suite's guard fires: the rules' code is not the pinned one any more ...
    assert rules_hash() != templateapi.RULES_PINNED[templateapi.TEMPLATE_API]
    # ... so the change ships as template API 2, and every committed log is stale.
    monkeypatch.setattr(templateapi, "TEMPLATE_API", 2)
    monkeypatch.setitem(templateapi.VERSIONS, 1, replace(templateapi.VERSIONS[1], last_release="0.1.0"))
    monkeypatch.setitem(templateapi.VERSIONS, 2, templateapi.Version("the default tiles innermost"))
    report = report_of(repo)
    assert report.entries and len(report.stale) == len(report.entries)
    for e in report.entries:
        (r,) = e.reasons
        assert r.code == TEMPLATE_API_CHANGED
        assert r.file == f"tuning_logs/{e.operator}/{e.target_name}/manifest.json"
        assert "this tvmtune-ci (0.1.0) cannot read logs of template API 1" in r.detail
        assert "template API 2 (the default tiles innermost)" in r.detail
        assert r.detail.endswith("re-tune it (`tvmtune-ci retune`), or use tvmtune-ci <= 0.1.0 to read it as it is")
    # A log re-tuned under template API 2 is fresh again.
    set_api(repo, 2)
    assert report_of(repo).stale == ()


def test_a_log_of_a_newer_template_api_asks_for_an_upgrade(repo: Path) -> None:
    set_api(repo, templateapi.TEMPLATE_API + 1)
    commit_all(repo, "written by a newer tvmtune-ci")
    r = run_cli(repo, "check", "matmul", "--target", "avx2")
    assert r.returncode == 1, r.stderr
    assert (
        f"STALE matmul/avx2: template_api_changed (written with template API "
        f"{templateapi.TEMPLATE_API + 1} by a newer tvmtune-ci"
    ) in r.stdout
    gh = run_cli(repo, "check", "matmul", "--target", "avx2", "--format", "github", env={"GITHUB_ACTIONS": "true"})
    assert "Fix: upgrade tvmtune-ci to the version that wrote the log" in gh.stdout


def test_records_of_another_template_api_are_refused_clearly(repo: Path, tmp_path: Path) -> None:
    path = next((repo / "tuning_logs").glob("matmul/*/manifest.json"))
    m = replace(read_manifest(path), template_api=templateapi.TEMPLATE_API + 1)
    with pytest.raises(
        priors.PriorError,
        match=r"was decoded with template API 2 and this "
        r"tvmtune-ci decodes template API 1: its records are not read",
    ):
        priors.old_records(repo, path, m, ["m512"], tmp_path / "scratch")


def test_a_retune_neither_replays_nor_keeps_a_log_of_another_template_api(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    change_function(repo / "operators/matmul.py")
    monkeypatch.setattr(templateapi, "TEMPLATE_API", 2)
    e = next(x for x in report_of(repo).entries if x.operator == "matmul")
    assert {r.code for r in e.reasons} == {"template_changed", TEMPLATE_API_CHANGED}
    assert not pipeline_history.can_replay(e) and not pipeline_history.can_reuse_previous(e)
    assert pipeline_history.replay_skipped(e) == (
        "the previous log was decoded with template API 1, not this tvmtune-ci's"
    )
