"""A target whose runner is gone (`retired:`): its logs are served while they hold,
`check` reports what no longer fits as unrunnable without failing, and `retune`,
`matrix` and `remeasure` leave it alone, saying so (docs/retune.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import change_function, commit_all, tuned_on

from tvmtune_ci.core.config import load_config
from tvmtune_ci.core.errors import ConfigError

MATMUL = "operators/matmul.py"
WHY = "2026-12-07: the AVX2 runner was decommissioned"


def _retire(root: Path, why: str = WHY) -> None:
    cfg = root / "tvmtune.yaml"
    text = cfg.read_text()
    old = "    target: {kind: llvm, mcpu: haswell}\n"
    assert old in text
    cfg.write_text(text.replace(old, old + f'    retired: "{why}"\n', 1))


def test_the_config_keeps_why_and_refuses_an_empty_reason(repo: Path) -> None:
    original = (repo / "tvmtune.yaml").read_text()
    _retire(repo, "")
    with pytest.raises(ConfigError, match=r"tvmtune.yaml:\d+.*retired of target 'avx2' must say when and why"):
        load_config(repo)
    (repo / "tvmtune.yaml").write_text(original)
    _retire(repo)
    assert load_config(repo).target("avx2").retired == WHY
    assert load_config(repo).target("avx512").retired is None


def test_a_retired_target_s_fresh_log_stays_fresh(cli, repo: Path) -> None:  # noqa: ANN001
    _retire(repo)
    code, out, _ = cli("check", "--as-of", tuned_on(repo).isoformat())
    assert code == 0, out
    assert "fresh matmul/avx2 (tuned 0 days ago)" in out.splitlines()


def test_what_no_longer_fits_a_retired_target_is_unrunnable_not_stale(cli, repo: Path) -> None:  # noqa: ANN001
    change_function(repo / MATMUL, "schedule")
    code, out, _ = cli("check")
    assert code == 1  # live: both stale
    _retire(repo)
    code, out, _ = cli("check")
    lines = out.splitlines()
    assert code == 1  # avx512 is still live and stale
    assert any(x.startswith("STALE matmul/avx512: template_changed") for x in lines), out
    unrunnable = [x for x in lines if x.startswith("UNRUNNABLE matmul/avx2")]
    assert len(unrunnable) == 1 and "template_changed" in unrunnable[0] and WHY in unrunnable[0], out
    assert not any(x.startswith("STALE matmul/avx2") for x in lines)
    assert "1 unrunnable: its target's runner is retired" in lines[-1], lines[-1]
    doc = json.loads(cli("check", "--format", "json")[1])
    avx2 = next(e for e in doc["entries"] if e["target"] == "avx2")
    assert avx2["fresh"] is False and avx2["retired"] == WHY
    # only the retired target left stale: check passes, and still says it
    code, out, _ = cli("check", "--target", "avx2")
    assert code == 0 and "UNRUNNABLE matmul/avx2" in out


def test_retune_and_matrix_leave_a_retired_target_alone(cli, repo: Path) -> None:  # noqa: ANN001
    change_function(repo / MATMUL, "schedule")
    _retire(repo)
    # The target left is this machine's own CPU, so the dry run's host check passes on
    # any runner (an AVX-512 target would be refused on an AVX2-only one).
    from tvmtune_ci.tune.hostcheck import host_target

    cfg = repo / "tvmtune.yaml"
    mcpu = host_target(4)["mcpu"]
    cfg.write_text(cfg.read_text().replace("mcpu: skylake-avx512,", f"mcpu: {mcpu},", 1))
    commit_all(repo, "retire avx2, edit the template")
    code, out, err = cli("matrix")
    assert code == 0
    jobs = json.loads(out.splitlines()[0])["include"]
    assert [(j["operator"], j["target"]) for j in jobs] == [("matmul", "avx512")]
    assert f"skipped matmul on avx2: its runner is retired ({WHY})" in err
    code, out, _ = cli("matrix", "--all")
    assert all(j["target"] != "avx2" for j in json.loads(out.splitlines()[0])["include"])
    code, out, err = cli("retune", "--dry-run")
    assert code == 0
    assert f"retired, skipped: matmul/avx2 ({WHY})" in out
    assert "matmul/avx2" not in out.replace(f"retired, skipped: matmul/avx2 ({WHY})", "")
    code, out, _ = cli("retune", "--dry-run", "--all")  # every live entry, still not this one
    assert code == 0 and f"retired, skipped: matmul/avx2 ({WHY})" in out
    assert "matmul/avx2" not in out.replace(f"retired, skipped: matmul/avx2 ({WHY})", "")
    assert "matmul/avx512" in out
    code, out, err = cli("retune", "--dry-run", "--target", "avx2")
    assert code == 2
    assert f"avx2's runner is retired ({WHY})" in err and "remove `retired:`" in err
