"""The old log's records as the cost model's prior (mostly TVM-free parts; the training
runs in tests/test_tuner.py and tests/commands/test_retune*.py), and which process
decodes them: this one when the template is the one the log was tuned with."""

from __future__ import annotations

from pathlib import Path

import pytest

from tvmtune_ci.core.manifest import read_manifest
from tvmtune_ci.core.template import define_knob, define_split
from tvmtune_ci.tune import priors
from tvmtune_ci.tune.space import knobs_key

WORKLOAD = {"M": 64, "N": 64}
KNOBS = [define_split("tile_i", "M", parts=2, max_factor=16), define_knob("unroll", [0, 16, 64])]
TARGET = {"kind": "llvm", "num-cores": 2}


def test_records_map_into_the_new_space_distinct_fastest_first_without_the_replayed() -> None:
    records = [
        ({"tile_i": [8, 8], "unroll": 16}, 3e-3, "p1"),
        ({"tile_i": [8, 8], "unroll": 16, "gone": 1}, 2e-3, "p2"),  # the same point now: faster kept
        ({"tile_i": [32, 2], "unroll": 64}, 1e-3, "p3"),  # the replayed one: measured again
        ({"tile_i": [2, 32], "unroll": 0}, 5e-3, "p4"),  # 32 > max_factor: repaired, still kept
        ({"other": 1}, 1e-4, "p5"),  # keeps no knob: only the default, not evidence
        ({"tile_i": [4, 16], "unroll": 0}, 0.0, "p6"),  # no latency
    ]
    out = priors.prior_for(records, KNOBS, WORKLOAD, TARGET, exclude=[{"tile_i": [32, 2], "unroll": 64}])
    assert [secs for _, secs in out] == [2e-3, 5e-3]
    assert out[0][0] == {"tile_i": [8, 8], "unroll": 16}
    assert out[1][0]["unroll"] == 0 and out[1][0]["tile_i"][1] <= 16


def test_old_programs_key_each_old_configuration_and_blank_the_ones_the_edit_repaired() -> None:
    records = [
        ({"tile_i": [8, 8], "unroll": 16}, 3e-3, "p1"),
        ({"tile_i": [8, 8], "unroll": 16}, 2e-3, "p1"),  # measured twice: one program
        ({"tile_i": [2, 32], "unroll": 0}, 5e-3, "p4"),  # 32 > max_factor: repaired
        ({"tile_i": [4, 16], "unroll": 0, "gone": 1}, 4e-3, "p5"),  # a knob removed: kept whole
        ({"tile_i": [16, 4]}, 4e-3, "p6"),  # unroll new to it: the default, a new program
    ]
    out = dict((knobs_key(kv), key) for kv, key in priors.old_programs(records, KNOBS, WORKLOAD, TARGET))
    assert out.pop(knobs_key({"tile_i": [8, 8], "unroll": 16})) == "p1"
    assert out.pop(knobs_key({"tile_i": [4, 16], "unroll": 0})) in ("p5", "")  # "" if [2, 32] repaired to it
    assert out.pop(knobs_key({"tile_i": [16, 4], "unroll": 0})) == ""
    assert set(out.values()) <= {""}  # [2, 32], wherever it was repaired to


def test_a_log_git_cannot_read_costs_the_prior_with_a_reason(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[1]
    mpath = next((root / "tuning_logs").glob("*/*/manifest.json"))
    manifest = read_manifest(mpath)
    assert manifest.template_commit  # what old_commit falls back to outside a repository
    with pytest.raises(priors.PriorError, match="git cannot read the templates of commit"):
        priors.old_records(
            tmp_path, tmp_path / "manifest.json", manifest, list(manifest.workloads), tmp_path / "scratch"
        )


def test_a_log_is_decoded_here_only_when_tuned_with_the_template_as_it_is() -> None:
    """`tuned_with`: the same template file and fingerprint dependencies, and every workload both
    declare at the same parameters. A changed shape's records decode against its old
    shape, which only the old template's WORKLOADS (the child's checkout) resolves."""
    from tvmtune_ci.pipeline.history import tuned_with

    root = Path(__file__).resolve().parents[1]
    manifest = read_manifest(root / "tuning_logs/softmax/zen4-2c/manifest.json")
    shapes = {w: dict(p) for w, p in manifest.workloads.items()}
    fp, file = dict(manifest.dependencies), manifest.template_file
    assert tuned_with(manifest, file, fp, shapes)
    assert tuned_with(manifest, file, fp, {**shapes, "new": {"rows": 7, "cols": 9}})  # an added one
    assert tuned_with(manifest, file, fp, {w: p for w, p in shapes.items() if w != "vocab_32k"})  # removed
    first = next(iter(shapes))
    changed = {**shapes, first: {**shapes[first], next(iter(shapes[first])): 12345}}
    assert not tuned_with(manifest, file, fp, changed)
    helper = next(iter(fp))
    assert not tuned_with(manifest, file, {**fp, helper: "0" * 64}, shapes)  # a definition changed
    assert not tuned_with(manifest, file, {**fp, "operators/_new.py:f": "0" * 64}, shapes)  # a helper added
    assert not tuned_with(manifest, "operators/other.py", fp, shapes)


def test_the_decode_here_reads_what_the_child_process_reads() -> None:
    """The committed softmax log decoded with the template as imported, in this process,
    and in the child process from the same tree: the same records, latencies and program
    keys, in the same order and types."""
    pytest.importorskip("tvm")
    from tvmtune_ci.core.template import import_template

    root = Path(__file__).resolve().parents[1]
    mpath = root / "tuning_logs/softmax/zen4-2c/manifest.json"
    manifest = read_manifest(mpath)
    wanted = ["attn_512"]
    here = priors.records_here(import_template(root / manifest.template_file, root), mpath, manifest, wanted)
    child = priors.decode_records(
        root,
        manifest.template_file,
        mpath.parent / manifest.log,
        manifest.target,
        wanted,
        published=priors.published_configs(manifest, wanted),
    )
    assert here == child
    rows = here["attn_512"]
    assert len(rows) > 10 and all(p for _, secs, p in rows if secs > 0)  # every record keyed by its program


def test_a_decode_here_that_fails_costs_the_prior_with_a_reason() -> None:
    """In this process, whatever goes wrong decoding (here a template module that no
    longer resolves its workload) is a PriorError naming the log, as the child's
    failure is: the re-tune goes on without the prior."""
    from types import SimpleNamespace

    pytest.importorskip("tvm")
    root = Path(__file__).resolve().parents[1]
    mpath = root / "tuning_logs/softmax/zen4-2c/manifest.json"
    manifest = read_manifest(mpath)
    broken = SimpleNamespace(WORKLOADS={"attn_512": {}}, KNOBS=[])  # no compute()
    with pytest.raises(priors.PriorError, match=f"decoding {manifest.log}"):
        priors.records_here(broken, mpath, manifest, ["attn_512"])
    # A log of other decoding rules is refused here as in the child's path, never decoded.
    from dataclasses import replace

    from tvmtune_ci.core.template import import_template

    template = import_template(root / manifest.template_file, root)
    with pytest.raises(priors.PriorError, match="this tvmtune-ci decodes template API"):
        priors.records_here(template, mpath, replace(manifest, template_api=manifest.template_api + 1), ["attn_512"])
