"""No call of a model build left on TVM's naive loops: the built-in schedule
(model/fallback.py) for what no template made and MetaSchedule did not schedule."""

from __future__ import annotations

import json
from math import erf
from pathlib import Path

import numpy as np
import pytest
from conftest import make_repo

tvm = pytest.importorskip("tvm")

from tvmtune_ci.model import build as model_build  # noqa: E402
from tvmtune_ci.model.build import NAIVE, build_model  # noqa: E402
from tvmtune_ci.model.fallback import BY_REDUCTION, BY_SPATIAL, Spatial, schedule_rest  # noqa: E402
from tvmtune_ci.tune.hostcheck import host_target  # noqa: E402

TARGET = host_target(2)
# No template at all: attention-like work (a batched matmul with its transpose and
# scale, softmax), layer norm, a linear layer with GELU, and a 3x3 convolution with
# ReLU; 13 is prime, so no loop of the sequence axis divides into vectors.
MODEL = """\
from tvm.relax.frontend import nn


class Block(nn.Module):
    def __init__(self):
        self.w = nn.Parameter((32, 48), "float32")
        self.b = nn.Parameter((48,), "float32")
        self.ln = nn.LayerNorm(48)
        self.conv = nn.Conv2D(4, 8, 3, padding=1)

    def forward(self, x, q, k, img):
        h = nn.op.gelu(nn.op.matmul(x, self.w) + self.b)
        scores = nn.op.matmul(q, nn.op.permute_dims(k, [0, 1, 3, 2])) * 0.125
        p = nn.op.softmax(scores, axis=-1)
        return self.ln(h), nn.op.matmul(p, q), nn.op.relu(self.conv(img))


MODEL = Block
SPEC = {
    "forward": {
        "x": nn.spec.Tensor((13, 32), "float32"),
        "q": nn.spec.Tensor((1, 3, 13, 16), "float32"),
        "k": nn.spec.Tensor((1, 3, 13, 16), "float32"),
        "img": nn.spec.Tensor((1, 4, 10, 10), "float32"),
    }
}
"""


def _repo(tmp_path: Path) -> Path:
    config = (
        f'format: 1\ntvm_version: "0.27"\ntargets:\n  host:\n    target: {json.dumps(TARGET)}\n'
        "models:\n  block: {source: models/block.py}\n"
    )
    return make_repo(tmp_path, config=config, operators=False, files={"models/block.py": MODEL})


def _inputs(module, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [
        rng.standard_normal([int(d) for d in p.ty.shape.values]).astype("float32") * 0.5
        for p in module["forward"].params
    ]


def _reference(names: list[str], arrays: list[np.ndarray]) -> list[np.ndarray]:
    a = dict(zip(names, arrays, strict=True))
    h = a["x"] @ a["w"] + a["b"]
    h = np.vectorize(lambda v: 0.5 * v * (1.0 + erf(v / np.sqrt(2.0))))(h.astype("float64"))
    mu, var = h.mean(-1, keepdims=True), h.var(-1, keepdims=True)
    ln = (h - mu) / np.sqrt(var + 1e-5) * a["ln.weight"] + a["ln.bias"]
    s = a["q"].astype("float64") @ np.swapaxes(a["k"], -1, -2) * 0.125
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    img = np.pad(a["img"], ((0, 0), (0, 0), (1, 1), (1, 1))).astype("float64")
    w = a["conv.weight"]
    conv = np.zeros((1, 8, 10, 10))
    for dy in range(3):
        for dx in range(3):
            conv += np.einsum("oc,nchw->nohw", w[:, :, dy, dx], img[:, :, dy : dy + 10, dx : dx + 10])
    conv += a["conv.bias"][None, :, None, None]
    return [ln, p @ a["q"], np.maximum(conv, 0)]


def _run(build, arrays: list[np.ndarray]) -> list[np.ndarray]:
    vm = tvm.relax.VirtualMachine(build.executable, tvm.cpu())
    out = vm["forward"](*[tvm.runtime.tensor(x) for x in arrays])
    return [out[i].numpy() for i in range(len(out))]


def _check(build, seed: int) -> None:
    names = [p.name for p in build.module["forward"].params]
    arrays = _inputs(build.module, seed)
    for got, want in zip(_run(build, arrays), _reference(names, arrays), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_every_function_no_template_made_gets_a_schedule_and_the_numerics_hold(tmp_path: Path) -> None:
    b = build_model("block", target=TARGET, root=_repo(tmp_path), untemplated="fallback")
    assert b.schedules and NAIVE not in b.schedules.values(), b.schedules
    # the row reductions go to dlight's rule; the matmuls and the convolution, with the
    # epilogues fused into them, to the parallel, vectorized loops
    by = {name: how for name, how in b.schedules.items()}
    assert [by[n] for n in by if "softmax" in n] == [BY_REDUCTION], by
    # softmax and GELU rewritten to their vectorizable forms before fusion
    assert "fast_softmax" in by and any("fast_gelu" in n for n in by), by
    assert by["layer_norm"] == BY_REDUCTION, by
    heavy = [n for n in by if "matmul" in n or "conv2d" in n]
    assert len(heavy) >= 3 and all(by[n] == BY_SPATIAL for n in heavy), by
    assert "built-in schedule" in b.untemplated and "naive" not in b.untemplated
    _check(b, 0)  # fast exp/erf inside: within the build's 1e-4


def test_naive_loops_only_when_asked_and_then_said(tmp_path: Path) -> None:
    b = build_model("block", target=TARGET, root=_repo(tmp_path), untemplated="none")
    assert set(b.schedules.values()) == {NAIVE}
    assert "naive" in b.untemplated
    _check(b, 1)


def _matmul_with_bias(n: int = 48):
    """A matmul with a bias, as TVM legalizes and fuses one: (module, its PrimFunc)."""
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((12, 64), "float32"))
    w = relax.Var("w", relax.TensorType((64, n), "float32"))
    bias = relax.Var("bias", relax.TensorType((n,), "float32"))
    with bb.function("main", [x, w, bias]):
        with bb.dataflow():
            y = bb.emit(relax.op.add(relax.op.matmul(x, w), bias))
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    mod = model_build.fuse(bb.get(), tvm.target.Target({"kind": "llvm"}))
    name = next(gv.name_hint for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc))
    return mod, name


def test_a_matmul_with_its_bias_is_parallel_and_vectorized_across_its_output() -> None:
    mod, name = _matmul_with_bias()
    target = tvm.target.Target({"kind": "llvm"})
    out, fb = schedule_rest(mod, target, [name], lanes=8)
    assert fb.by_rule == ((name, BY_SPATIAL),) and fb.left == ()
    text = out[name].script()
    # the output's 48 columns: 6 vectors of 8, the reduction between them and the rows
    assert "T.parallel(" in text and "T.vectorized(T.int64(8))" in text, text
    assert "tirx.is_scheduled" in text
    assert not mod[name].attrs.get("tirx.is_scheduled", False)  # the caller's module untouched
    # 36 output columns: 8 lanes do not divide them, 4 do: vectors of 4, not scalar loops
    mod36, name36 = _matmul_with_bias(n=36)
    text36 = Spatial(8).apply(mod36[name36], target, False).mod["main"].script()
    assert "T.vectorized(T.int64(4))" in text36, text36
