"""The timing of a model profile (model/timing.py): every arm on the target's
num-cores, read back in the timing process, and an ONNX model profiled end to end."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import edit_results, make_repo, run_cli, write_fresh
from test_modelbuild import BEST, MM

tvm = pytest.importorskip("tvm")

from tvmtune_ci.core.errors import HostError  # noqa: E402
from tvmtune_ci.model.timing import ThreadPoolError, check_pool, entry_function, time_builds  # noqa: E402
from tvmtune_ci.tune.hostcheck import host_target  # noqa: E402


def _tiny_build() -> SimpleNamespace:
    """A Relax model with a parallel kernel, built for this machine, as a ModelBuild has it."""
    from tvm.relax.frontend import nn

    class Add(nn.Module):
        def forward(self, x: nn.Tensor, y: nn.Tensor) -> nn.Tensor:
            return nn.op.add(x, y)

    mod, _ = Add().export_tvm(
        {"forward": {"x": nn.spec.Tensor((64, 64), "float32"), "y": nn.spec.Tensor((64, 64), "float32")}}
    )
    target = tvm.target.Target({"kind": "llvm"})
    return SimpleNamespace(executable=tvm.compile(mod, target=target), module=mod)


@pytest.mark.parametrize("which", ["one", "every core"])
def test_every_arm_is_timed_on_the_pool_it_asks_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, which: str
) -> None:
    """One thread and every core (TVM caps a pool at the cores it sees): on a machine of
    two or more cores, TVM's default pool (half of them on x86) differs from at least
    one of the two, so a timing that ran on the default goes red."""
    monkeypatch.delenv("TVM_NUM_THREADS", raising=False)
    threads = 1 if which == "one" else os.cpu_count() or 1
    b = _tiny_build()
    arrays = [np.ones((64, 64), "float32"), np.ones((64, 64), "float32")]
    t = time_builds(
        {"a": b, "b": b},
        arrays,
        threads=threads,
        work_dir=tmp_path,
        function="forward",
        runs=2,
        instrument=("a",),
        min_sample_ms=5,
    )
    assert t.threads == threads
    assert sorted(t.samples) == ["a", "b"] and all(len(v) == 2 and min(v) > 0 for v in t.samples.values())
    assert t.calls["a"] and t.calls["a"][0].calls == 1 and "b" not in t.calls


def test_a_pool_of_another_size_is_refused_naming_both() -> None:
    check_pool(2, 2, "TVM's thread pool")
    with pytest.raises(
        ThreadPoolError, match="TVM's thread pool had 1 thread\\(s\\) where the target's num-cores is 2"
    ):
        check_pool(1, 2, "TVM's thread pool")
    assert issubclass(ThreadPoolError, HostError)  # exit 5, as a runner that cannot time it


def test_the_entry_function_is_the_model_s_own() -> None:
    from tvm import relax
    from tvm.script import relax as R

    @tvm.script.ir_module
    class Onnxish:
        @R.function
        def main(x: R.Tensor((2,), "float32")) -> R.Tensor((2,), "float32"):
            return x

    assert entry_function(Onnxish) == "main"
    b = _tiny_build()
    assert entry_function(b.module) == "forward"
    two = tvm.IRModule({**dict(Onnxish.functions.items()), relax.GlobalVar("other"): Onnxish["main"]})
    assert entry_function(two) == "main"


def _onnx_two_mm(path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((64, 64)) * 0.1).astype("float32"), n) for n in ("w1", "w2")]
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Relu", ["h"], ["g"]),
        helper.make_node("MatMul", ["g", "w2"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "two_mm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 64])],
        inits,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


@pytest.mark.extra("onnx")
def test_onnx_runtime_starts_only_once_tvm_s_instrumented_calls_are_timed(tmp_path: Path) -> None:
    """The TVM child times the per-call instrument and the peak as it starts; ONNX
    Runtime's child optimizing its graph beside it took the cores (a ResNet profile's
    per-kernel times summed to 1.3-2x its latency). Its start follows TVM's ready line."""
    b = _tiny_build()
    _onnx_two_mm(tmp_path / "two_mm.onnx")
    x = np.ones((1, 64, 64), "float32")
    t = time_builds(
        {"a": b},
        [np.ones((64, 64), "float32"), np.ones((64, 64), "float32")],
        threads=1,
        work_dir=tmp_path,
        function="forward",
        runs=2,
        instrument=("a",),
        onnx=(tmp_path / "two_mm.onnx", {"x": x}),
        min_sample_ms=5,
    )
    assert t.startup is not None and sorted(t.startup) == ["onnxruntime", "tvm"]
    tvm_started, tvm_ready = t.startup["tvm"]
    ort_started, ort_ready = t.startup["onnxruntime"]
    assert tvm_started <= tvm_ready <= ort_started <= ort_ready, t.startup
    assert len(t.samples["onnxruntime"]) == 2 and t.ort_threads == 1


@pytest.mark.extra("onnx")
@pytest.mark.slow
def test_an_onnx_model_is_profiled_end_to_end_beside_onnx_runtime(tmp_path: Path) -> None:
    """TVM's ONNX frontend names the entry `main`: `profile` times it, its template
    kernel included, beside ONNX Runtime on the same threads, and writes the README."""
    from tvmtune_ci.core.profiles import read_profile

    target = host_target(2)
    config = (
        f'format: 1\ntvm_version: "0.27"\ntargets:\n  host:\n    target: {json.dumps(target)}\n'
        "models:\n  two_mm: {source: models/two_mm.onnx}\n"
    )
    root = make_repo(tmp_path, config=config, operators=False, files={"operators/mm.py": MM})
    (root / "models").mkdir(exist_ok=True)
    _onnx_two_mm(root / "models/two_mm.onnx")
    write_fresh(root, "mm", "host")
    edit_results(root / "tuning_logs/mm/host", lambda res: res["s64"]["best"].update(knobs=BEST))
    r = run_cli(root, "profile", "two_mm", "--target", "host", "--untemplated", "none", "--runs", "3")
    assert r.returncode == 0, r.stdout + r.stderr
    run = read_profile(root / "models/two_mm.profile.json", "two_mm").latest("host")
    assert run is not None and run.threads == 2
    assert [c.template for c in run.calls if c.template] == ["mm"] and run.calls[0].calls >= 1
    (ort,) = run.anchors
    assert ort.name == "onnxruntime" and "2 intra-op thread(s)" in ort.detail and ort.latency_s > 0
    readme = (root / "models/two_mm.host.md").read_text()
    assert f"| {ort.detail} |" in readme and "Every TVM build timed on 2 thread(s)" in readme
