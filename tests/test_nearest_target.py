"""A new target's first search starts from the nearest configured target's log
(pipeline.history.nearest_source): the same architecture, nearest by vector ISA, width
and registers, then the same mcpu; a log that cannot seed is passed over for the next;
another architecture never seeds. Real config, real log folders; no TVM."""

from __future__ import annotations

from pathlib import Path

from conftest import make_repo, write_fresh

from tvmtune_ci.check.staleness import find_stale
from tvmtune_ci.core.config import load_config
from tvmtune_ci.pipeline.history import history_source, nearest_source

CONFIG = """\
format: 1
targets:
  avx512: {target: {kind: llvm, mcpu: znver4, num-cores: 2}}
  zen3: {target: {kind: llvm, mcpu: znver3, num-cores: 2}}
  arm: {target: {kind: llvm, mtriple: aarch64-linux-gnu, mcpu: neoverse-n1, num-cores: 2}}
  new: {target: {kind: llvm, mcpu: znver3, num-cores: 8}}
"""


def _setup(tmp_path: Path, config: str = CONFIG) -> tuple[Path, list[str]]:
    root = make_repo(tmp_path, config=config)
    for t in ("avx512", "zen3", "arm"):
        write_fresh(root, "matmul", t)
    return root, []


def _nearest(root: Path, said: list[str]) -> str | None:
    config = load_config(root / "tvmtune.yaml")
    entry = next(e for e in find_stale(config, targets=["new"]).entries if e.operator == "matmul")
    found = nearest_source(config, entry, config.target("new"), said.append)
    return None if found is None else found[2]


def test_the_nearest_target_by_its_facts_seeds_a_new_one(tmp_path: Path) -> None:
    root, said = _setup(tmp_path)
    assert _nearest(root, said) == "zen3"  # AVX2 like it, same mcpu: before avx512, first by name


def test_a_log_that_cannot_seed_is_passed_over_and_another_architecture_never_seeds(tmp_path: Path) -> None:
    root, said = _setup(tmp_path)
    log = next((root / "tuning_logs/matmul/zen3").glob("matmul_zen3_*.json"))
    log.write_bytes(log.read_bytes() + b" ")  # edited since its manifest: not a seed
    assert _nearest(root, said) == "avx512"
    assert any("is missing or was edited since its manifest was written" in s for s in said)
    log = next((root / "tuning_logs/matmul/avx512").glob("matmul_avx512_*.json"))
    log.write_bytes(log.read_bytes() + b" ")
    assert _nearest(root, said) is None  # arm's log is there, and of another architecture


def test_seed_from_false_starts_cold_and_a_named_target_wins(tmp_path: Path) -> None:
    off = CONFIG.replace("num-cores: 8}}", "num-cores: 8}, seed-from: false}")
    named = CONFIG.replace("num-cores: 8}}", "num-cores: 8}, seed-from: avx512}")
    for i, (config, expect) in enumerate(((off, None), (named, "avx512"), (CONFIG, "zen3"))):
        root, said = _setup(tmp_path / str(i), config)
        cfg = load_config(root / "tvmtune.yaml")
        entry = next(e for e in find_stale(cfg, targets=["new"]).entries if e.operator == "matmul")
        _, _, source = history_source(cfg, entry, cfg.target("new"), said.append)
        assert source == expect, (config, said)
