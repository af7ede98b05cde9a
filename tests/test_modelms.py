"""MetaSchedule on a whole model for a number of runner seconds: the anchor beside
the build with the committed logs (model/metaschedule.py). The search ends at its deadline,
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
from tvmtune_ci.model.build import metaschedule_model  # noqa: E402
from tvmtune_ci.model.metaschedule import BATCH  # noqa: E402
from tvmtune_ci.tune.hostcheck import host_target  # noqa: E402

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
        "--metaschedule-searches",
        "2",
    )
    assert r.returncode == 0, r.stdout + r.stderr
    run = read_profile(root / "models/two_mm.profile.json", "two_mm").latest("host")
    assert run is not None and run.threads == 2  # host_target(2): the target's num-cores
    assert [a.name for a in run.anchors] == ["metaschedule", "metaschedule", "onnxruntime"]
    *searches, ort = run.anchors
    assert [a.search["seed"] for a in searches if a.search] == [42, 43]  # independent searches
    for a in searches:
        assert a.detail.startswith("MetaSchedule over the whole model, 1 s of this runner asked")
        s = a.search or {}
        assert "load" in s and s["trials"] >= 0
        # withheld exactly when a function is untuned or the runner was disturbed
        disturbed = s["load"]["foreign"] + s["load"]["steal"] > 0.10
        assert (a.withheld is not None) == (bool(s["untuned"]) or disturbed), a
    assert ort.detail.startswith("ONNX Runtime ") and "2 intra-op thread(s)" in ort.detail
    for a in run.anchors:
        assert a.ratio > 0 and a.ratio_range[0] <= a.ratio_range[1] and a.latency_s > 0
    readme = (root / "models/two_mm.host.md").read_text()
    assert f"| {ort.detail} |" in readme and f"{ort.ratio_range[0]:.2f}-{ort.ratio_range[1]:.2f}x" in readme
    assert "### The MetaSchedule searches" in readme and "Every TVM build timed on 2 thread(s)" in readme
    mm = next(c for c in run.calls if c.template == "mm")
    assert mm.default_seconds is not None and mm.default_seconds > 0
    assert "its tuning, end to end" in readme


def _ms_anchor(ratio: float, seconds: float = 600, seed: int = 42, **search: object) -> object:
    from tvmtune_ci.core.profiles import Anchor
    from tvmtune_ci.model.metaschedule import Load, SearchSpent

    spent = SearchSpent(
        seconds,
        seconds + 5,
        400,
        14,
        tuple(search.get("untuned", ())),  # type: ignore[arg-type]
        False,
        seed,
        search.get("load", Load(0.02, 0.0, 0.05, 10)),  # type: ignore[arg-type]
        ("fused_conv2d_add_relu", "fused_reshape_add", "matmul"),
    )
    return Anchor(
        "metaschedule",
        ratio * 1e-3,
        ratio,
        (ratio - 0.1, ratio + 0.1),
        spent.words(),
        search=spent.conditions(),
        withheld=spent.withheld(),
    )


def _profile_run(*anchors: object, threads: int | None = 2) -> object:
    from tvmtune_ci.core.profiles import CallTime, ProfileRun

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
        anchors=tuple(anchors),  # type: ignore[arg-type]
        threads=threads,
    )


def test_the_readme_s_metaschedule_ratio_is_the_median_over_independent_searches_with_their_spread() -> None:
    from tvmtune_ci.core.profiles import Profile
    from tvmtune_ci.publish.modelreadme import render

    run = _profile_run(_ms_anchor(1.5, seed=42), _ms_anchor(1.2, seed=43), _ms_anchor(1.3, seed=44))
    text = render(Profile("m", {"t": (run,)}), "t", "m.png")
    assert (
        "| MetaSchedule alone, 3 independent search(es) of 600 s of this runner each | 1.3 ms | "
        "**1.30x faster** (median of 3 search(es)) | 1.20-1.50x over the searches | one run so far |"
    ) in text
    # each search's conditions, and what MetaSchedule fused that the templates did not
    assert text.count("| 400 | 600 / 605 s | 0 of 14 | 2% of the cores busy outside it, 0% stolen |") == 3
    assert "`fused_conv2d_add_relu`" in text and "`fused_reshape_add`" not in text
    assert "Every TVM build timed on 2 thread(s)" in text
    # the band across runs: the runs whose searches had the same seconds
    other = _profile_run(_ms_anchor(4.0, seconds=60))
    again = _profile_run(_ms_anchor(1.6), _ms_anchor(1.7, seed=43), _ms_anchor(1.8, seed=44))
    one_thread = _profile_run(_ms_anchor(9.0), threads=None)  # TVM's default pool: another figure
    text = render(Profile("m", {"t": (one_thread, run, other, again)}), "t", "m.png")
    assert "| 1.30-1.70x over 2 runs |" in text
    assert "Across the 3 profile runs of this build on this target and these threads" in text
    assert "(1 earlier run(s) on another thread pool are in the profile file" in text
    assert "another build" not in text


def test_the_band_across_runs_is_the_newest_build_s() -> None:
    """A run of other kernels (a call moved to another template, the direct 3x3 before
    the Winograd one) is another figure: outside the band, counted apart."""
    from dataclasses import replace

    from tvmtune_ci.core.profiles import CallTime, Profile
    from tvmtune_ci.publish.modelreadme import render

    old = replace(_profile_run(), latency_s=5e-3)  # 5x the others: it would widen any band it joined
    new = _profile_run()
    new = replace(new, calls=(CallTime("wino_s64", 2, 6e-4, "wino", "s64", default_seconds=2.6e-3),))
    again = replace(new, latency_s=1.1e-3)
    text = render(Profile("m", {"t": (old, new, again)}), "t", "m.png")
    assert "Across the 2 profile runs of this build on this target and these threads: 0.95-1.05x" in text
    assert "(1 earlier run(s) of another build (other kernels, templates or workloads)" in text
    assert "another thread pool" not in text
    # a re-tuned log (the same kernels, another latency) is the same build
    text = render(Profile("m", {"t": (new, replace(new, latency_s=2e-3))}), "t", "m.png")
    assert "Across the 2 profile runs of this build" in text and "another build" not in text
    # the same template and workload computing otherwise (other FLOPs) is another
    (call,) = new.calls
    f2, f4 = (replace(new, calls=(replace(call, flops=f),)) for f in (1.1e8, 6.2e7))
    text = render(Profile("m", {"t": (f2, replace(f4, latency_s=0.8e-3), f4)}), "t", "m.png")
    assert "Across the 2 profile runs of this build on this target and these threads: 0.89-1.11x" in text
    assert "(1 earlier run(s) of another build" in text
    slower = render(Profile("m", {"t": (_profile_run(_ms_anchor(0.5)),)}), "t", "m.png")
    assert "**2.00x slower** (median of 1 search(es))" in slower


def test_a_disturbed_or_incomplete_search_is_not_published_as_a_ratio() -> None:
    from tvmtune_ci.core.profiles import Anchor, Profile
    from tvmtune_ci.model.metaschedule import Load
    from tvmtune_ci.publish.modelreadme import render

    loaded = _ms_anchor(21.7, load=Load(0.45, 0.05, 0.9, 30))
    untuned = _ms_anchor(18.0, seed=43, untuned=("fused_matmul_add", "conv2d"))
    quiet = _ms_anchor(1.2, seed=44)
    assert "disturbed" in (loaded.withheld or "")  # type: ignore[attr-defined]
    assert "2 of its 14 functions got no valid record" in (untuned.withheld or "")  # type: ignore[attr-defined]
    text = render(Profile("m", {"t": (_profile_run(loaded, untuned, quiet),)}), "t", "m.png")
    assert "21.70x" not in text.split("### The MetaSchedule searches")[0]
    assert "**1.20x faster** (median of 1 search(es))" in text
    assert "| no: the runner was disturbed during the search (runner DISTURBED: 45%" in text
    none = render(Profile("m", {"t": (_profile_run(loaded, untuned),)}), "t", "m.png")
    head = none.split("### The MetaSchedule searches")[0]
    row = next(line for line in head.splitlines() if line.startswith("| MetaSchedule alone"))
    assert "not published: no search ran undisturbed" in row and "faster" not in row and "x" not in row.split("|")[3]
    # A search recorded before its conditions were (one search, re-timed run after run).
    old = Anchor.from_json({"name": "metaschedule", "latency_s": 0.36, "ratio": 21.7, "ratio_range": [20, 22]})
    assert old.withheld == "the search's conditions were not recorded"


class _Watch:
    """The load watch's boundary: what a loaded runner would have shown."""

    def __init__(self, load: object) -> None:
        self._load = load

    def __enter__(self) -> _Watch:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def load(self) -> object:
        return self._load


@pytest.mark.slow
def test_a_disturbed_search_is_recorded_so_and_searched_again_by_the_next_call(tmp_path: Path) -> None:
    import json

    from tvmtune_ci.model.metaschedule import Load

    root = _repo(tmp_path)
    busy = Load(0.5, 0.0, 0.8, 3)
    kw = dict(target=TARGET, seconds=10, work_dir=tmp_path / "c", root=root)
    b = metaschedule_model("two_mm", **kw, clock=Clock(visits=2), watch=lambda: _Watch(busy))  # type: ignore[arg-type]
    assert b.search.load == busy and "disturbed" in (b.search.withheld() or "")
    done = json.loads(next((tmp_path / "c").glob("metaschedule-*-seed42/done.json")).read_text())
    assert done["publishable"] is False and done["load"]["foreign"] == 0.5
    quiet = Load(0.01, 0.0, 0.02, 3)
    again = metaschedule_model("two_mm", **kw, clock=Clock(visits=2), watch=lambda: _Watch(quiet))  # type: ignore[arg-type]
    assert not again.search.reused and again.search.load == quiet and again.search.withheld() is None
    third = metaschedule_model("two_mm", **kw)  # type: ignore[arg-type]
    assert third.search.reused and third.search.load == quiet


def test_the_load_watch_sees_a_process_outside_the_search_s_tree() -> None:
    """A busy loop that is not this process's descendant (orphaned through a shell) is
    the runner's load; the watch reports about one core of it."""
    import subprocess
    import sys

    from tvmtune_ci.model.metaschedule import LoadWatch

    loop = "import time; t = time.monotonic()\nwhile time.monotonic() - t < 4: pass"
    subprocess.run(["sh", "-c", f"{sys.executable} -c '{loop}' >/dev/null 2>&1 &"], check=True)
    time.sleep(0.3)
    with LoadWatch(interval=0.5) as w:
        time.sleep(2.5)
    import psutil

    load = w.load()
    assert load.windows >= 3
    # one busy core of the machine's, whatever their number (other load only adds)
    assert (load.foreign + load.steal) * (psutil.cpu_count() or 1) >= 0.6, load
