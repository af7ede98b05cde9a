"""The partial re-tune's comparability rule, setting by setting (pipeline/partial.py
`MEANING` and `NEUTRAL`): a setting that changes what a measured figure means refuses
the carry, one that does not (the length of the history run, the search's settings, the
runner's gates) lets it through and is recorded, and one that is in neither table
refuses. On a real git repository with real files: a set written as a re-tune writes it
(write_fresh, its manifest's `measure` and host as this run's), then a workload added to
its template; `retune --dry-run` asks the same `plan_partial` a re-tune does."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from conftest import commit_all, make_repo, run_cli, write_fresh

from tvmtune_ci.check.staleness import find_stale
from tvmtune_ci.check.tvmversion import installed_tvm_version
from tvmtune_ci.core.config import load_config
from tvmtune_ci.core.configschema import MeasureOptions
from tvmtune_ci.core.layout import LogSet
from tvmtune_ci.core.manifest import read_manifest, write_manifest
from tvmtune_ci.core.template import read_template
from tvmtune_ci.pipeline.job import Partial
from tvmtune_ci.pipeline.partial import MEANING, NEUTRAL, _recorded, plan_partial, settings_unlike
from tvmtune_ci.tune.hostcheck import host_description

# Recorded in the manifest's `measure` beside MeasureOptions (pipeline.manifest_step).
RECORDED_BESIDE = {"estimator", "threads"}
# Every MeasureOptions field, each to a value its default is not (a valid config's).
OTHER: dict[str, Any] = {
    "sample_ms": 5.0,
    "precision": 0.02,
    "search_precision": 0.05,
    "search_cap_s": 0.6,
    "time_cap_s": 3.0,
    "usable_precision": 0.5,
    "race": 1.5,
    "probe": 4,
    "finalists": 3,
    "enable_cpu_cache_flush": True,
    "timeout_s": 45.0,
    "history_s": 60.0,
    "estimator": "median",
    "threads": 1,
}


def test_every_measurement_setting_is_classified() -> None:
    """A MeasureOptions field added without saying whether it changes what a figure
    means goes red here (unclassified, it would refuse every partial re-tune)."""
    recorded = {f.name for f in dataclasses.fields(MeasureOptions)} | RECORDED_BESIDE
    assert recorded == set(_recorded(cast(Any, SimpleNamespace(measure=MeasureOptions())), 2))
    assert not set(MEANING) & set(NEUTRAL)
    assert recorded - set(MEANING) - set(NEUTRAL) == set(), "classify it in pipeline.partial.MEANING or NEUTRAL"
    assert set(MEANING) | set(NEUTRAL) == recorded, "a table names a setting that is no longer recorded"
    assert all(isinstance(why, str) and len(why) > 20 for why in {**MEANING, **NEUTRAL}.values())
    assert set(OTHER) == recorded  # the per-setting tests below cover every one
    # Pinned, not read from the tables: what issue 67 decided (the tables may grow).
    assert {"estimator", "precision", "sample_ms", "enable_cpu_cache_flush", "threads"} <= set(MEANING)
    assert {"history_s", "search_precision", "search_cap_s", "race", "probe"} <= set(NEUTRAL)


def test_a_setting_in_neither_table_refuses() -> None:
    """Fail closed: a key the tables do not know (a future setting, or one a newer
    tvmtune-ci recorded) refuses when it differs; a known neutral one does not."""
    assert settings_unlike({"history_s": 60.0, "warp": 1}, {"history_s": 120.0}) == (["warp"], ["history_s"])
    assert settings_unlike({"precision": 0.01}, {"precision": 0.02, "warp": 1}) == (["precision", "warp"], [])
    assert settings_unlike({"warp": 1}, {"warp": 1}) == ([], [])  # the same value: measured alike in it


# ------------------------------------------------------------------ a real repository

TARGET_ROW = "host"
WORKLOADS = {
    "m64": {"M": 64, "N": 64, "K": 64, "dtype": "float32"},
    "m48": {"M": 48, "N": 48, "K": 48, "dtype": "float32"},
}
ADDED = {"m96": {"M": 96, "N": 96, "K": 96, "dtype": "float32"}}


def _config() -> str:
    from tvmtune_ci.tune.hostcheck import host_target

    return (
        "format: 1\ntrials: 8\n"
        "targets:\n"
        f"  {TARGET_ROW}:\n"
        f"    target: {json.dumps(host_target(2))}\n"
        "    runs-on: [linux, x64]\n"
    )


def _set_workloads(root: Path, workloads: dict[str, Any]) -> None:
    path = root / "operators/matmul.py"
    text, n = re.subn(
        r"^WORKLOADS = (?:\{\n[\s\S]*?^\}|\{.*\})$",
        f"WORKLOADS = {json.dumps(workloads)}",
        path.read_text(),
        flags=re.M,
    )
    assert n == 1
    path.write_text(text)


@pytest.fixture(scope="module")
def tuned_set(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """matmul on this machine's CPU, tuned (as its manifest says) with every setting as
    this run's but `history_s` not recorded (this repository's own matmul/zen4-2c set is
    such a manifest: history_s came later); committed, then a workload added."""
    pytest.importorskip("tvm")
    root = make_repo(tmp_path_factory.mktemp("settings"), config=_config(), commit=False)
    _set_workloads(root, WORKLOADS)
    log = {"format": 1, "workloads": {w: {"records": []} for w in WORKLOADS}, "records": []}
    m = write_fresh(
        root,
        "matmul",
        TARGET_ROW,
        tvm_version=installed_tvm_version() or "unknown",
        log=(json.dumps(log, indent=2) + "\n").encode(),
    )
    config = load_config(root / "tvmtune.yaml")
    measure = _recorded(config, 2)  # num-cores 2: the threads a re-tune measures with
    del measure["history_s"]
    host = {**host_description(), "runner": "local"}
    write_manifest(
        LogSet.of(config.logs_path, "matmul", TARGET_ROW).manifest, dataclasses.replace(m, measure=measure, host=host)
    )
    commit_all(root, "tuned")
    _set_workloads(root, {**WORKLOADS, **ADDED})
    commit_all(root, "a workload added")
    return root


def _with_old_measure(root: Path, change: dict[str, Any]) -> Any:
    """plan_partial on `root` with the manifest's `measure` changed (a value None: the
    key removed); the manifest is written back afterwards."""
    config = load_config(root / "tvmtune.yaml")
    logset = LogSet.of(config.logs_path, "matmul", TARGET_ROW)
    old = read_manifest(logset.manifest)
    measure = {k: v for k, v in {**old.measure, **change}.items() if v is not None}
    write_manifest(logset.manifest, dataclasses.replace(old, measure=measure))
    try:
        (entry,) = find_stale(config, operators=["matmul"]).stale
        workloads = read_template(root / entry.template_file).workloads
        return plan_partial(config, entry, config.target(TARGET_ROW), workloads, threads=2)
    finally:
        write_manifest(logset.manifest, old)


def test_dry_run_tunes_only_the_added_workload_of_a_set_tuned_without_history_s(tuned_set: Path) -> None:
    """This repository's case (issue 67): a set whose manifest predates `history_s`, a
    workload added. Only it would be tuned; the carried ones' history_s is said."""
    dry = run_cli(tuned_set, "retune", "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert "every workload would be re-tuned" not in dry.stdout, dry.stdout
    assert "partial re-tune: only workloads changed (added m96): tuned m96; carried unmeasured from " in dry.stdout
    assert ": m64, m48, whose template" in dry.stdout
    assert (
        "the carried ones were tuned with other settings that do not change what a figure means "
        "(history_s not recorded)" in dry.stdout
    ), dry.stdout
    assert "history m96: a new shape" in dry.stdout and "history m64" not in dry.stdout


def test_dry_run_re_tunes_whole_a_set_measured_at_another_precision(tuned_set: Path) -> None:
    """A setting of a figure's meaning still refuses the carry, through the CLI."""
    path = tuned_set / "tvmtune.yaml"
    text = path.read_text()
    path.write_text(text.replace("trials: 8\n", "trials: 8\nmeasure: {precision: 0.02}\n"))
    try:
        dry = run_cli(tuned_set, "retune", "--dry-run")
    finally:
        path.write_text(text)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert (
        "every workload would be re-tuned: the measurement settings changed since it was tuned (precision)"
        in dry.stdout
    ), dry.stdout


@pytest.mark.parametrize("key", sorted(OTHER))
def test_each_setting_refuses_the_carry_only_when_it_changes_what_a_figure_means(tuned_set: Path, key: str) -> None:
    """The set tuned with `key` at another value (history_s recorded as this run's): a
    setting of MEANING re-tunes the whole set and names itself; a NEUTRAL one carries
    m64 and m48, tunes only m96, and records the value the carried ones had."""
    now = MeasureOptions()
    plan = _with_old_measure(tuned_set, {"history_s": now.history_s, key: OTHER[key]})
    if key in MEANING:
        want = "it was measured with another thread count" if key == "threads" else f"since it was tuned ({key})"
        assert isinstance(plan, str) and want in plan, plan
    else:
        assert isinstance(plan, Partial), plan
        assert plan.tuned == ("m96",) and plan.carried == ("m64", "m48")
        assert plan.settings == {key: OTHER[key]}
        assert plan.to_json("2026-12-07")["carried_settings"] == {key: OTHER[key]}


def test_an_unknown_recorded_setting_refuses_the_carry(tuned_set: Path) -> None:
    """A key a newer tvmtune-ci recorded and this one does not know: not known to leave
    a figure's meaning alone, so the whole set is re-tuned."""
    plan = _with_old_measure(tuned_set, {"warmup_runs": 5})
    assert isinstance(plan, str), plan
    assert "(warmup_runs: not known to leave a figure's meaning alone)" in plan, plan
