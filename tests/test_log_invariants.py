"""Every committed log set tells one story: README, manifest and log agree (no TVM).

Walks tuning_logs/*/*/manifest.json of this repository. For a set measured by the
current layer (manifest format 2 or later; from format 4 the results are read from
results.json) it checks, per workload:

- the log's best record (lowest run_secs, what TVM's `get_top_k` returns) is the
  manifest's best, with the same latency;
- every latency has its precision: an interval that holds the estimate, from at least
  `stats.MIN_SAMPLES` samples (a raced probe excepted), and the README prints it
  as `x ms ± y%`;
- the top tables start with the best; the finals' rows, then the search's, each
  sorted by latency (a configuration equal within noise to a kept previous best may
  sit below it);
- every GFLOPS figure of a workload uses one FLOP count;
- the log's records are sorted, with one measurement entry each;
- README.md is exactly what `render_readme` makes of the manifest and the run history
  (runs.jsonl, when the manifest names one); its headline is the median of the runs'
  figure, every workload of the set is measured by some run, and this run's finals best is
  shown too.

A format-1 set (fixed-repeat means) may stay only as history of a target that is no
longer configured.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import edit_results, manifest_at

from tvmtune_ci.core import stats
from tvmtune_ci.core.config import load_config
from tvmtune_ci.core.manifest import Measured, read_manifest
from tvmtune_ci.core.profiles import runner_peak
from tvmtune_ci.core.records import read_log, record_mean_secs
from tvmtune_ci.core.runs import read_runs
from tvmtune_ci.publish.readme import render_readme
from tvmtune_ci.publish.runwords import headline

ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / "tuning_logs"


def _configured_targets() -> set[str]:
    data = yaml.safe_load((ROOT / "tvmtune.yaml").read_text(encoding="utf-8"))
    return set(data.get("targets") or {})


def _rel(m: Measured) -> float:
    return m.rel_halfwidth if m.rel_halfwidth is not None else float("inf")


def problems(folder: Path, configured: set[str]) -> list[str]:
    """What is inconsistent in one log set; empty when it tells one story."""
    out: list[str] = []
    m = read_manifest(folder / "manifest.json")
    raw = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    if raw.get("format", 1) < 2:
        if m.target_name in configured:
            out.append(
                f"{folder}: measured by the fixed-repeat layer (manifest format 1) "
                "but its target is configured: re-tune it"
            )
        return out
    log = read_log(folder / m.log)
    readme = (folder / "README.md").read_text(encoding="utf-8")
    history = read_runs(folder, m.files)
    # The README reads each best against the runner's peak measured beside the models
    # (core/profiles.runner_peak) when the repository's profiles have one.
    if readme != render_readme(m, history, runner_peak(load_config(ROOT / "tvmtune.yaml"), m.target_name)):
        out.append(f"{folder}/README.md differs from what its manifest and run history render")
    # A partial re-tune (only some workloads added or changed) appends a run of those
    # alone, and the carried ones' history goes on; a removed workload's runs stay
    # (runs.jsonl is append-only). So a run may measure part of the set, or workloads it
    # no longer has; every workload of the set must be measured by some run.
    measured = {w for run in history for w in run.workloads}
    if history and set(m.results) - measured:
        out.append(f"{folder}/runs.jsonl: no run measured {sorted(set(m.results) - measured)}")
    for w, res in sorted(m.results.items()):
        where = f"{folder.parent.name}/{folder.name}:{w}"
        entry = log["workloads"].get(w)
        if entry is None or not entry["records"]:
            out.append(f"{where}: no records in the log")
            continue
        recs = entry["records"]
        values = [record_mean_secs(r) for r in recs]
        if values != sorted(values):
            out.append(f"{where}: the log's records are not sorted best first")
        if len(entry.get("measurements", [])) != len(recs):
            out.append(f"{where}: the log has no measurement entry per record")
        if values[0] != res.best.latency_s:
            out.append(
                f"{where}: the log's best record says {values[0]!r} s, the manifest's best {res.best.latency_s!r} s"
            )
        everyone: list[tuple[str, Measured]] = [("best", res.best), ("baseline", res.baseline)]
        everyone += [(f"top #{i}", t) for i, t in enumerate(res.top, 1)]
        if res.previous_best is not None:
            everyone.append(("previous best", res.previous_best))
        flops = set()
        for label, x in everyone:
            if x.stage != "probe":
                if x.ci_lo_s is None or x.ci_hi_s is None or x.n < stats.MIN_SAMPLES:
                    out.append(f"{where}: {label} has no interval ({x.n} samples)")
                elif not x.ci_lo_s <= x.latency_s <= x.ci_hi_s:
                    out.append(f"{where}: {label}'s interval does not hold its estimate")
            if x.gflops:
                flops.add(round(x.gflops * 1e9 * x.latency_s, -3))
        if len(flops) > 1:
            out.append(f"{where}: GFLOPS use {len(flops)} different FLOP counts: {sorted(flops)}")
        shown = stats.fmt_latency(res.best.latency_s, _rel(res.best))
        value, _ = headline(history, w)
        head = stats.fmt_latency(value) if value is not None else shown
        if f"| `{w}` | **{head}**" not in readme:
            out.append(f"{where}: the README's headline is not {head}")
        if f"| {shown} |" not in readme:
            out.append(f"{where}: the README does not show this run's finals best as {shown}")
        run = m.trials[w].run if w in m.trials else 0
        for label, x in everyone:
            if x.trial is not None and not 1 <= x.trial <= run:
                out.append(f"{where}: {label} names trial {x.trial}, the run had {run}")
        top = list(res.top)
        if not top or top[0] != res.best:
            out.append(f"{where}: the top table does not start with the best")
        # Two tables: the finals (comparable with each other), then the search's own
        # numbers; each sorted by latency, the finals first.
        stages = ["finals" if t.stage == "finals" else "search" for t in top[1:]]
        if stages != sorted(stages):
            out.append(f"{where}: the top table mixes finals and search measurements")
        for group in ("finals", "search"):
            vals = [t.latency_s for t, g in zip(top[1:], stages, strict=True) if g == group]
            if vals != sorted(vals):
                out.append(f"{where}: the top table's {group} rows are not sorted by latency")
        kept_tie = res.best_source == "previous" and res.previous_verdict == "equal"
        for i, t in enumerate(top[1:], 2):
            if t.latency_s < res.best.latency_s and not (
                kept_tie
                and t.ci_lo_s is not None
                and res.best.ci_lo_s is not None
                and stats.compare(_est(t), _est(res.best)) == "equal"
            ):
                out.append(f"{where}: top #{i} ({t.latency_s!r} s) is faster than #1 ({res.best.latency_s!r} s)")
    return out


def _est(m: Measured) -> stats.Estimate:
    return stats.Estimate(m.latency_s, m.ci_lo_s or 0.0, m.ci_hi_s or float("inf"), m.n)


SETS = sorted(p.parent for p in LOGS.glob("*/*/manifest.json"))


@pytest.mark.parametrize("folder", SETS, ids=[str(p.relative_to(LOGS)) for p in SETS])
def test_committed_log_set_tells_one_story(folder: Path) -> None:
    assert problems(folder, _configured_targets()) == []


def test_every_configured_entry_has_a_current_log_set() -> None:
    configured = _configured_targets()
    current = {
        p.parent.name
        for p in LOGS.glob("*/*/manifest.json")
        if json.loads(p.read_text(encoding="utf-8")).get("format", 1) >= 2
    }
    assert configured <= current


def _current_set() -> Path:
    """A set of a configured target measured by the current layer (format 2 or later;
    history folders of retired targets are exempt from some invariants)."""
    configured = _configured_targets()
    for folder in SETS:
        data = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
        if data.get("format", 1) >= 2 and data.get("target_name") in configured:
            return folder
    pytest.skip("no current log set of a configured target committed")


def edit_set(folder: Path, edit: Any) -> None:
    """Apply `edit` to the manifest with its results inline, and write both back as the
    manifest's format keeps them (from format 4, results.json with its hashes
    re-recorded, as a re-tune would have written them)."""
    data = manifest_at(folder)
    edit(data)
    results = data.pop("results")
    if data["format"] >= 4:
        edit_results(folder, lambda r: (r.clear(), r.update(results)))
        on_disk = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
        data["files"], data["files_git_blob"] = on_disk["files"], on_disk["files_git_blob"]
    else:
        data["results"] = results
    (folder / "manifest.json").write_text(json.dumps(data), encoding="utf-8")


# What the issue found in the fixed-repeat logs, one at a time: (edit, what is reported).
INCONSISTENT = [
    (lambda d: _first(d)["best"].update(latency_s=_first(d)["best"]["latency_s"] * 0.9), "the log's best record says"),
    (lambda d: _first(d)["top"].reverse(), "the top table"),
    (lambda d: _first(d)["baseline"].update(gflops=_first(d)["baseline"]["gflops"] * 1.5), "different FLOP counts"),
    (lambda d: _first(d)["best"].update(ci_lo_s=None), "has no interval"),
    (lambda d: d.update(format=1), "fixed-repeat layer"),
    (lambda d: _first(d)["top"][-1].update(trial=10_000), "names trial 10000, the run had"),
]


@pytest.mark.parametrize(("edit", "expected"), INCONSISTENT)
def test_the_invariants_catch_an_inconsistent_set(tmp_path: Path, edit: Any, expected: str) -> None:
    src = _current_set()
    folder = tmp_path / src.relative_to(ROOT)
    shutil.copytree(src, folder)
    assert problems(folder, _configured_targets()) == []
    edit_set(folder, edit)
    found = problems(folder, _configured_targets())
    assert any(expected in p for p in found), found


def _first(d: dict[str, Any]) -> dict[str, Any]:
    return d["results"][sorted(d["results"])[0]]
