"""Models as exporters write them (tests/fixtures/make_exported.py, run by hand): how
many of an exported BERT layer's calls this repository's templates cover, by form.

torch.onnx.export writes nn.Linear as MatMul over the weight stored [K, N] and an Add,
with no permute_dims: dense's `transposed` form covers it (docs/models.md). The two
attention matmuls (Q.K^T with the transpose before it, P.V) are batch_matmul's by form
(the transpose runs as its own copy): all 8 matmuls are a template's."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("tvm")
pytest.importorskip("onnx")

from tvmtune_ci.core.chains import coverage_of  # noqa: E402
from tvmtune_ci.core.configschema import ModelConfig  # noqa: E402
from tvmtune_ci.core.contract import COVERED, UNCOVERED_OP, UNCOVERED_SHAPE  # noqa: E402
from tvmtune_ci.model.calls import load_model, model_calls, read_contracts  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ["bert_layer_exported.onnx", "bert_layer_exported_legacy.onnx"]


@pytest.mark.parametrize("fixture", FIXTURES)
def test_an_exported_bert_layer_s_weight_matmuls_are_dense_s(fixture: str) -> None:
    mod = load_model(ROOT, ModelConfig(fixture, f"tests/fixtures/{fixture}"))
    calls = model_calls(mod)
    _, contracts = read_contracts(ROOT, ROOT / "operators")
    cov = coverage_of([(c.sig, c.producers) for c in calls], contracts)
    matmuls = [(c, v) for c, v in zip(calls, cov, strict=True) if c.sig.op == "relax.matmul"]
    assert len(matmuls) == 8  # 6 with a weight (Q, K, V, the output, FFN in and out), 2 in attention
    by = Counter((v.status, v.template) for _, v in matmuls)
    # The reduced sizes (hidden 64) are no declared workload: matched by form, their
    # params ready to declare; at BERT-base's sizes the FFN pair is bert_ffn1/2.
    assert by[(UNCOVERED_SHAPE, "dense")] + by[(COVERED, "dense")] == 6, by
    assert by[(UNCOVERED_SHAPE, "batch_matmul")] == 2, by  # at the fixture's sizes (4 heads of 16)
    assert by[(UNCOVERED_OP, None)] == 0, by
    ffn = {tuple(sorted(v.params.items())) for _, v in matmuls if v.template == "dense"}
    assert (("K", 64), ("M", 16), ("N", 128), ("dtype", "float32")) in ffn, ffn


def test_the_exported_layer_built_with_dense_matches_onnx_runtime(tmp_path: Path) -> None:
    """The build swaps the exported FFN matmuls for dense's kernel on W's transpose
    (declared here at the fixture's sizes, default configuration) and schedules the rest;
    its output is ONNX Runtime's within 1e-4."""
    import numpy as np
    import onnxruntime as ort
    import tvm
    from conftest import dense_model_repo

    from tvmtune_ci.model import build as model_build
    from tvmtune_ci.model.build import build_model
    from tvmtune_ci.model.timing import call_seconds, entry_args
    from tvmtune_ci.tune.hostcheck import host_target

    target = host_target(2)
    ffn = {
        "ffn1": {"M": 16, "N": 128, "K": 64, "dtype": "float32"},
        "ffn2": {"M": 16, "N": 64, "K": 128, "dtype": "float32"},
    }
    root = dense_model_repo(tmp_path, target, ffn, "bert", str(ROOT / "tests/fixtures" / FIXTURES[0]))
    b = build_model("bert", target=target, root=root, untemplated="fallback", configs="default", lift=True)
    assert sorted(s.workload for s in b.swaps) == ["ffn1", "ffn2"]
    assert b.lifted == ("main_transform_params", 1)  # the weights' transposes: once, at load
    x = np.random.default_rng(5).standard_normal((1, 16, 64)).astype("float32")
    sess = ort.InferenceSession(str(root / "models/bert.onnx"), providers=["CPUExecutionProvider"])
    want = sess.run(None, {"x": x})[0]
    import onnx

    weights = {
        i.name: onnx.numpy_helper.to_array(i) for i in onnx.load(str(root / "models/bert.onnx")).graph.initializer
    }
    arrays = [x if p.name == "x" else weights[p.name] for p in b.module["main"].params]
    vm = tvm.relax.VirtualMachine(b.executable, tvm.cpu())
    args = entry_args(vm, b.lifted, [tvm.runtime.tensor(np.array(a)) for a in arrays])  # 0-d stays 0-d
    got = vm["main"](*args)
    got = got[0] if isinstance(got, tvm.ir.Array | list | tuple) else got
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-4)
    # Per inference, the two swapped weights are not transposed again: counted against
    # the same build with nothing lifted.
    on = _transposes(call_seconds(b.executable, arrays, function="main", runs=1, lifted=b.lifted))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(model_build, "lift_weights", lambda mod: (mod, None))
        off_build = build_model("bert", target=target, root=root, untemplated="fallback", configs="default", lift=True)
    assert off_build.lifted is None
    off = _transposes(call_seconds(off_build.executable, arrays, function="main", runs=1))
    assert off - on == 2, (off, on)


def _transposes(calls: list[tuple[str, int, float]]) -> int:
    return sum(n for sym, n, _ in calls if "transpose" in sym)
