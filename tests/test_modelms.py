"""MetaSchedule on a whole model for a number of runner seconds: the anchor beside
the build with the committed logs (tune/modelms.py). The search ends at its deadline,
its numerics match a reference, and a second call reuses its database."""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import pytest
from test_modelbuild import _inputs, _repo

tvm = pytest.importorskip("tvm")

from tvmtune_ci.core.errors import UsageError  # noqa: E402
from tvmtune_ci.loader import metaschedule_model  # noqa: E402
from tvmtune_ci.tune.hostcheck import host_target  # noqa: E402
from tvmtune_ci.tune.modelms import BATCH  # noqa: E402

TARGET = host_target(2)


class Clock:
    """Seconds that stand still for `visits` reads after the deadline is set, then
    jump past it: the search visits exactly that many tasks, however fast this machine."""

    def __init__(self, visits: int) -> None:
        self.reads = 0
        self.visits = visits

    def __call__(self) -> float:
        self.reads += 1
        return 0.0 if self.reads <= 1 + self.visits else 1e9


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object, float]:
    root = _repo(tmp_path_factory.mktemp("ms"))
    t0 = time.monotonic()
    b = metaschedule_model(
        "two_mm", target=TARGET, seconds=10, work_dir=root / ".cache", root=root, clock=Clock(visits=2)
    )
    return root, b, time.monotonic() - t0


@pytest.mark.slow
def test_the_search_ends_at_its_deadline_and_the_model_computes_right(searched) -> None:
    from tvm import relax

    root, b, _took = searched
    s = b.search
    assert not s.reused and s.seconds == 10 and s.tasks == 2
    # Two visits before the deadline: each of the two functions one batch, no more
    # (the scheduler is asked for a million trials: only the deadline ends it).
    assert 1 <= s.trials <= 2 * BATCH, s
    assert s.untuned == (), s
    assert "MetaSchedule over the whole model, 10 s of this runner asked" in b.untemplated
    x, w1, w2 = _inputs()
    vm = relax.VirtualMachine(b.executable, tvm.cpu())
    got = vm["forward"](*[tvm.runtime.tensor(a) for a in (x, w1, w2)]).numpy()
    h = x @ w1
    gelu = 0.5 * h * (1 + np.vectorize(math.erf)(h / math.sqrt(2)))
    np.testing.assert_allclose(got, gelu @ w2, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_a_second_call_reuses_the_search(searched) -> None:
    root, b, took = searched
    t0 = time.monotonic()
    again = metaschedule_model("two_mm", target=TARGET, seconds=10, work_dir=root / ".cache", root=root)
    assert again.search.reused and again.search.spent_s == b.search.spent_s
    assert again.search.trials == b.search.trials
    assert time.monotonic() - t0 < took  # no search, only the build


def test_a_deadline_already_past_searches_nothing(tmp_path: Path) -> None:
    """The clock is read before any task is visited: zero visits, every function left
    at TVM's loops and said so. A handler someone else left on MetaSchedule's logger
    (its own logging setup fails on one: the slow suite met it) is out of the way
    during the search and back after it."""
    import logging

    root = _repo(tmp_path)
    ms_logger = logging.getLogger("tvm.s_tir.meta_schedule")
    stray = logging.NullHandler()
    ms_logger.addHandler(stray)
    try:
        b = metaschedule_model(
            "two_mm", target=TARGET, seconds=10, work_dir=tmp_path / "c", root=root, clock=Clock(visits=0)
        )
        assert stray in ms_logger.handlers
    finally:
        ms_logger.removeHandler(stray)
    assert b.search.trials == 0 and len(b.search.untuned) == 2
    assert "2 got no valid record" in b.untemplated


def test_no_seconds_is_a_usage_error(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    with pytest.raises(UsageError, match="positive number of seconds"):
        metaschedule_model("two_mm", target=TARGET, seconds=0, work_dir=tmp_path / "c", root=root)


TO_ONNX = """

def to_onnx(weights, path):
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(np.asarray(weights[n]), n) for n in ("w1", "w2")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Gelu", ["h"], ["g"]),
             helper.make_node("MatMul", ["g", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "two_mm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 64])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]), str(path))
"""


@pytest.mark.extra("onnx")
@pytest.mark.slow
def test_profile_times_metaschedule_and_onnxruntime_in_turns_with_the_build(tmp_path: Path) -> None:
    """`profile --metaschedule-seconds`: MetaSchedule's build and ONNX Runtime (the
    model's to_onnx) in the same rounds as the build with the logs; the README's table
    says what each was and its ratio, and each template kernel what its tuning took off
    the model end to end."""
    from conftest import run_cli

    from tvmtune_ci.core.profiles import read_profile

    root = _repo(tmp_path)
    with (root / "models/two_mm.py").open("a") as f:
        f.write(TO_ONNX)
    r = run_cli(
        root,
        "profile",
        "two_mm",
        "--target",
        "host",
        "--untemplated",
        "none",
        "--runs",
        "3",
        "--metaschedule-seconds",
        "1",
    )
    assert r.returncode == 0, r.stdout + r.stderr
    run = read_profile(root / "models/two_mm.profile.json", "two_mm").latest("host")
    assert run is not None
    assert [a.name for a in run.anchors] == ["metaschedule", "onnxruntime"]
    ms, ort = run.anchors
    assert ms.detail.startswith("MetaSchedule over the whole model, 1 s of this runner asked")
    assert ort.detail.startswith("ONNX Runtime ") and "2 intra-op thread(s)" in ort.detail
    for a in run.anchors:
        assert a.ratio_range[0] <= a.ratio <= a.ratio_range[1] and a.latency_s > 0
    readme = (root / "models/two_mm.host.md").read_text()
    for a in run.anchors:
        assert f"| {a.detail} |" in readme and f"{a.ratio_range[0]:.2f}-{a.ratio_range[1]:.2f}x" in readme
    mm = next(c for c in run.calls if c.template == "mm")
    assert mm.default_seconds is not None and mm.default_seconds > 0
    assert "its tuning, end to end" in readme


def test_the_readme_band_of_an_anchor_is_over_the_runs_that_timed_the_same_thing() -> None:
    from tvmtune_ci.core.profiles import Anchor, CallTime, Profile, ProfileRun
    from tvmtune_ci.publish.modelreadme import render

    def run(ratio: float, detail: str) -> ProfileRun:
        return ProfileRun(
            "2026-12-06",
            {},
            "none",
            1e-3,
            0.1,
            3,
            (CallTime("mm_s64", 2, 6e-4, "mm", "s64", default_seconds=2.6e-3),),
            default_latency_s=3e-3,
            speedup=3.0,
            speedup_range=(2.9, 3.1),
            anchors=(Anchor("metaschedule", ratio * 1e-3, ratio, (ratio - 0.1, ratio + 0.1), detail),),
        )

    same, other = "MetaSchedule, 600 s asked", "MetaSchedule, 60 s asked"
    text = render(Profile("m", {"t": (run(1.5, same), run(4.0, other), run(1.3, same))}), "t", "m.png")
    assert f"| {same} | 1.3 ms | **1.30x faster** | 1.20-1.40x | 1.30-1.50x over 2 runs |" in text
    # mm_s64 at its default took 2.6 ms of the defaults' 3 ms; tuned, 0.6 ms: 2 ms saved
    assert "| 2.6 ms | -66.7% of the model's time at the defaults |" in text
    slower = render(Profile("m", {"t": (run(0.5, same),)}), "t", "m.png")
    assert "**2.00x slower** |" in slower and "one run so far" in slower
