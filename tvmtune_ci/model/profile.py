"""One profile run of a model on this machine (`tvmtune-ci profile`): the build with the
committed logs, instrumented per call and timed in turns with the same model at the
templates' defaults, MetaSchedule at given runner seconds, and ONNX Runtime, every arm
on the target's num-cores (`timing.time_builds`).
"""

from __future__ import annotations

import datetime as _dt
import importlib.util
import warnings
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..core.errors import ConfigError
from ..core.profiles import Anchor, ProfileRun
from ..core.stats import quantile
from ..core.targetinfo import target_facts
from ..tune.hostcheck import host_description
from ..tune.runners.threads import tvm_threads
from .build import build_model, metaschedule_model
from .calls import onnx_form
from .metaschedule import SEED
from .timing import entry_function, ort_description, random_inputs, time_builds


def timing_threads(target: Any) -> int:
    """The threads every build of a profile is timed on: the target's num-cores (TVM
    defaults to half the cores it sees on x86, ONNX Runtime to all of them)."""
    cores = target.target.get("num-cores")
    if not isinstance(cores, int) or cores < 1:
        raise ConfigError(
            f"target {target.name}: a model is profiled on the target's num-cores, and it has none; "
            'add "num-cores": N (the runner\'s cores) to its target in tvmtune.yaml'
        )
    return cores


def profile_model(
    config: Any,
    model: Any,
    target: Any,
    *,
    untemplated: str,
    trials: int,
    uncovered_shapes: str,
    runs: int,
    work_dir: Path,
    metaschedule_s: float | None = None,
    metaschedule_searches: int = 3,
    onnxruntime: bool = True,
    watch: Any = None,
) -> ProfileRun:
    """One profile run of `model` (a ModelConfig) on `target` (a TargetConfig), here:
    the build with the committed logs, instrumented per call and timed end to end in
    turns with the same model at the templates' default configurations, MetaSchedule
    given `metaschedule_s` seconds in `metaschedule_searches` independent searches
    (None: left out), and ONNX Runtime where it is installed and the model has an ONNX
    form (calls.onnx_form). Every arm is timed on the target's num-cores, in fresh
    processes (timing.time_builds). `watch`: the searches' load watch (a
    test's hook)."""
    threads = timing_threads(target)
    tuned, default, searches = _builds(
        config,
        model,
        target,
        threads,
        dict(untemplated=untemplated, trials=trials, uncovered_shapes=uncovered_shapes),
        work_dir=work_dir,
        metaschedule_s=metaschedule_s,
        searches=metaschedule_searches,
        watch=watch,
    )
    function = entry_function(tuned.module)
    arrays = random_inputs(tuned.module, function)
    builds = {"tuned": tuned, "default": default}
    builds.update({f"metaschedule-{ms.search.seed}": ms for ms in searches})
    onnx = _onnx_arm(config, model, tuned, function, arrays, work_dir) if onnxruntime else None
    timing = time_builds(
        builds,
        arrays,
        threads=threads,
        work_dir=work_dir,
        function=function,
        runs=runs,
        instrument=("tuned", "default"),
        onnx=onnx,
        peak=(target.target, target_facts(target.target).lanes("float32")),
    )
    return _run(tuned, searches, timing, threads)


def _builds(
    config: Any,
    model: Any,
    target: Any,
    threads: int,
    how: dict[str, Any],
    *,
    work_dir: Path,
    metaschedule_s: float | None,
    searches: int,
    watch: Any,
) -> tuple[Any, Any, list[Any]]:
    """The build with the committed logs, the one at the templates' defaults, and the
    MetaSchedule searches (none without `metaschedule_s`)."""
    common = dict(target=target.target, root=config.root, work_dir=work_dir, **how)
    # The searches' measuring workers start with this environment.
    with tvm_threads(threads), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the mapped shapes: the README lists them per kernel
        # The weights' transforms run once, at load, as ONNX Runtime packs its weights.
        tuned = build_model(model.name, lift=True, **common)
        default = build_model(model.name, configs="default", lift=True, **common)
        n_searches = max(1, searches) if metaschedule_s is not None else 0
        done = [
            metaschedule_model(
                model.name,
                target=target.target,
                seconds=float(metaschedule_s or 0),
                work_dir=work_dir,
                root=config.root,
                seed=SEED + i,
                watch=watch,
            )
            for i in range(n_searches)
        ]
    return tuned, default, done


def _onnx_arm(
    config: Any, model: Any, tuned: Any, function: str, arrays: list[Any], work_dir: Path
) -> tuple[Path, dict[str, Any]] | None:
    """The model's ONNX form with the build's weights, for ONNX Runtime (None: the
    [onnx] extra is not installed, or the model has no ONNX form)."""
    if not all(importlib.util.find_spec(m) for m in ("onnx", "onnxruntime")):
        return None
    names = [p.name for p in tuned.module[function].params]
    weights = dict(zip(names, arrays, strict=True))
    work_dir.mkdir(parents=True, exist_ok=True)
    path = onnx_form(config.root, model, weights, work_dir / f"{model.name}.onnx")
    return (path, weights) if path is not None else None


def _run(tuned: Any, searches: list[Any], timing: Any, threads: int) -> ProfileRun:
    """The profile run the timing makes: the figures, the per-call table, the anchors."""
    samples = timing.samples
    by_kernel = {s.kernel: (s.template, s.workload, s.mapped_from) for s in tuned.swaps}
    chains = {s.kernel: (s.epilogue, s.alone) for s in tuned.swaps}
    at_default = {c.symbol: c.seconds for c in timing.calls["default"]}
    calls = [
        replace(
            c,
            template=t,
            workload=w,
            mapped_from=m,
            # a prepacked kernel's default build packs in the kernel, under the plain name
            default_seconds=(at_default.get(c.symbol) or at_default.get(c.symbol.removesuffix("_prepacked")))
            if t
            else None,
            schedule=None if t else tuned.schedules.get(c.symbol),
            flops=tuned.flops.get(c.symbol),
            epilogue=chains.get(c.symbol, ((), ()))[0],
            alone=chains.get(c.symbol, ((), ()))[1],
        )
        for c in timing.calls["tuned"]
        for t, w, m in [by_kernel.get(c.symbol, (None, None, None))]
    ]
    tuned_s = samples["tuned"]
    # The product's estimator, the fastest quartile: a 2-core VM runs whole stretches of
    # seconds in slow modes, and TVM's statically split parallel loops wait for the slow
    # core (measured 9.4 and 18 ms for the same build, one timing after the other), where
    # ONNX Runtime's work-stealing pool loses far less. A median lands in whichever mode
    # the run happened to take.
    med = quantile(tuned_s)

    def ratio(name: str) -> tuple[float, tuple[float, float]]:
        rs = sorted(x / t for x, t in zip(samples[name], tuned_s, strict=True))
        return quantile(samples[name]) / med, (rs[0], rs[-1])

    speedup, speedup_range = ratio("default")
    anchors = _anchors(searches, timing, threads, ratio)
    return ProfileRun(
        date=_dt.date.today().isoformat(),
        host=host_description(),
        untemplated=tuned.untemplated,
        latency_s=med,
        latency_spread=(max(tuned_s) - min(tuned_s)) / med,
        samples=len(tuned_s),
        calls=tuple(sorted(calls, key=lambda c: -c.seconds)),
        default_latency_s=quantile(samples["default"]),
        speedup=speedup,
        speedup_range=speedup_range,
        anchors=tuple(anchors),
        threads=timing.threads,
        peak=timing.peak,
    )


def _anchors(
    searches: list[Any], timing: Any, threads: int, ratio: Callable[[str], tuple[float, tuple[float, float]]]
) -> list[Anchor]:
    """MetaSchedule's searches and ONNX Runtime, each beside the build (`ratio(name)`:
    its p25 over the build's, with the min-max over the rounds)."""
    samples = timing.samples
    anchors = [
        Anchor(
            "metaschedule",
            quantile(samples[f"metaschedule-{ms.search.seed}"]),
            *ratio(f"metaschedule-{ms.search.seed}"),
            f"{ms.untemplated}, {threads} thread(s)",
            search=ms.search.conditions(),
            withheld=ms.search.withheld(),
        )
        for ms in searches
    ]
    if "onnxruntime" in samples:
        anchors.append(
            Anchor(
                "onnxruntime",
                quantile(samples["onnxruntime"]),
                *ratio("onnxruntime"),
                ort_description(int(timing.ort_threads or threads)),
                fused=timing.ort_fusions,
            )
        )
    return anchors
