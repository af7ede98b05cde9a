"""The model build with the committed logs (the product's apply_history_best): every
covered call runs its template's best kernel, the rest goes through TVM; a stale log is
refused like build_best's, or falls back loudly once for each call."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from conftest import edit_results, make_repo, write_fresh
from small_mm import SMALL_MM

tvm = pytest.importorskip("tvm")

from tvmtune_ci.core.errors import StaleLogError  # noqa: E402
from tvmtune_ci.loader import FallbackWarning, build_model  # noqa: E402
from tvmtune_ci.tune.hostcheck import host_target  # noqa: E402

TARGET = host_target(2)  # the model runs here: this machine's own CPU
# The 64^3 test template, declaring that it implements a plain 2-D matmul.
MM = SMALL_MM.replace(
    'KNOBS = [',
    'IMPLEMENTS = [{"op": "relax.matmul", "args": [["*M", "K"], ["K", "N"]], "dtype": "dtype"}]\n\nKNOBS = [', 1)
# Two matmuls of the template's shape (one GELU between them, which no template has).
MODEL = """\
from tvm.relax.frontend import nn


class TwoMM(nn.Module):
    def __init__(self):
        self.w1 = nn.Parameter((64, 64), "float32")
        self.w2 = nn.Parameter((64, 64), "float32")

    def forward(self, x):
        return nn.op.matmul(nn.op.gelu(nn.op.matmul(x, self.w1)), self.w2)


MODEL = TwoMM
SPEC = {"forward": {"x": nn.spec.Tensor((1, 64, 64), "float32")}}
"""
# Tuned-looking: a config that differs from the default in every knob.
BEST = {"tile_i": [8, 8], "tile_j": [2, 32], "unroll": 16, "cache": True}


def _repo(tmp_path: Path) -> Path:
    config = (f'format: 1\ntvm_version: "0.27"\ntargets:\n  host:\n    target: {json.dumps(TARGET)}\n'
              "models:\n  two_mm: {source: models/two_mm.py}\n")
    root = make_repo(tmp_path, config=config, operators=False,
                     files={"operators/mm.py": MM, "models/two_mm.py": MODEL})
    write_fresh(root, "mm", "host")
    edit_results(root / "tuning_logs/mm/host", lambda res: res["s64"]["best"].update(knobs=BEST))
    return root


def _inputs(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype("float32") * 0.2 for s in ((1, 64, 64), (64, 64), (64, 64))]


def _reference(x: np.ndarray, w1: np.ndarray, w2: np.ndarray) -> np.ndarray:
    from math import erf

    h = x @ w1
    gelu = np.vectorize(lambda v: 0.5 * v * (1.0 + erf(v / np.sqrt(2.0))))
    return gelu(h.astype("float64")).astype("float32") @ w2


def _run(executable, arrays: list[np.ndarray]) -> np.ndarray:
    vm = tvm.relax.VirtualMachine(executable, tvm.cpu())
    return vm["forward"](*[tvm.runtime.tensor(a) for a in arrays]).numpy()


def test_a_model_builds_with_the_committed_best_and_matches_the_reference(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    b = build_model("two_mm", target=TARGET, root=root, untemplated="none")
    assert [(s.template, s.workload, dict(s.knobs)) for s in b.swaps] == [("mm", "s64", BEST)] * 2
    assert [s.binding for s in b.swaps] == ["matmul", "matmul1"]
    assert b.uncovered == ("relax.nn.gelu(1x64x64) -> 1x64x64 float32",)
    assert "default loops" in b.untemplated
    arrays = _inputs()
    np.testing.assert_allclose(_run(b.executable, arrays), _reference(*arrays), rtol=1e-4, atol=1e-5)
    # the kernels in the executable are the template's, scheduled at BEST (parallel, cached)
    lib = b.executable.mod.imports[0]
    assert lib.implements_function("mm_s64")


def test_a_stale_log_is_refused_and_the_fallback_warns_once_for_each_call(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    mm = root / "operators/mm.py"
    mm.write_text(mm.read_text().replace("sch.vectorize(j1)", "sch.vectorize(j1)\n    sch.unroll(i1)"))
    with pytest.raises(StaleLogError, match="template_changed") as e:
        build_model("two_mm", target=TARGET, root=root, untemplated="none")
    assert "no usable tuned configuration for mm" in str(e.value)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        b = build_model("two_mm", target=TARGET, root=root, untemplated="none", allow_fallback=True)
    fallbacks = [str(w.message) for w in caught if issubclass(w.category, FallbackWarning)]
    assert len(fallbacks) == 2 and "two_mm: matmul = " in fallbacks[0] and "two_mm: matmul1 = " in fallbacks[1]
    assert all(s.fallback and s.knobs == {} for s in b.swaps)
    arrays = _inputs(1)
    np.testing.assert_allclose(_run(b.executable, arrays), _reference(*arrays), rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_the_calls_no_template_covers_get_metaschedule(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    b = build_model("two_mm", target=TARGET, root=root, untemplated="metaschedule", trials=8,
                    work_dir=tmp_path / "ms")
    # gelu (fused with the views around it) and the output's copy: each got a record
    assert b.untemplated.startswith("MetaSchedule tune_relax, 4 trials for each of 2 function(s)"), b.untemplated
    assert "default loops" not in b.untemplated
    arrays = _inputs(2)
    np.testing.assert_allclose(_run(b.executable, arrays), _reference(*arrays), rtol=1e-4, atol=1e-5)
