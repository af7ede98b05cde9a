"""One profile run of a model on this machine (`tvmtune-ci profile`): the build with the
committed logs, instrumented per call and timed in turns with the same model at the
templates' defaults, MetaSchedule at given runner seconds, and ONNX Runtime. Top level
(not tune/): it builds through `loader`, the public build API.
"""

from __future__ import annotations

import datetime as _dt
import importlib.util
import statistics
import warnings
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from .core.profiles import Anchor, ProfileRun
from .loader import build_model, metaschedule_model
from .tune.hostcheck import host_description
from .tune.modelcalls import onnx_form
from .tune.modelprofile import interleaved, ort_sampler, profile_calls, random_inputs


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
    onnxruntime: bool = True,
) -> ProfileRun:
    """One profile run of `model` (a ModelConfig) on `target` (a TargetConfig), here:
    the build with the committed logs, instrumented per call and timed end to end in
    turns with the same model at the templates' default configurations, MetaSchedule
    given `metaschedule_s` seconds (None: left out), and ONNX Runtime where it is
    installed and the model has an ONNX form (modelcalls.onnx_form)."""
    common = dict(
        target=target.target,
        root=config.root,
        untemplated=untemplated,
        trials=trials,
        work_dir=work_dir,
        uncovered_shapes=uncovered_shapes,
    )
    with warnings.catch_warnings():  # the mapped shapes: the README lists them per kernel
        warnings.simplefilter("ignore")
        tuned = build_model(model.name, **common)
        default = build_model(model.name, configs="default", **common)
    arrays = random_inputs(tuned.module)
    at_default = {c.symbol: c.seconds for c in profile_calls(default, arrays, runs=runs)}
    calls = tuple(
        replace(c, default_seconds=at_default.get(c.symbol)) if c.template else c
        for c in profile_calls(tuned, arrays, runs=runs)
    )
    builds = {"tuned": tuned, "default": default}
    details: dict[str, str] = {}
    if metaschedule_s is not None:
        ms = metaschedule_model(
            model.name, target=target.target, seconds=metaschedule_s, work_dir=work_dir, root=config.root
        )
        builds["metaschedule"], details["metaschedule"] = ms, ms.untemplated
    others: dict[str, Callable[[], float]] = {}
    if onnxruntime and all(importlib.util.find_spec(m) for m in ("onnx", "onnxruntime")):
        names = [p.name for p in tuned.module["forward"].params]
        weights = dict(zip(names, arrays, strict=True))
        work_dir.mkdir(parents=True, exist_ok=True)
        path = onnx_form(config.root, model, weights, work_dir / f"{model.name}.onnx")
        if path is not None:
            threads = int(target.target.get("num-cores", 1))
            others["onnxruntime"], details["onnxruntime"] = ort_sampler(path, weights, threads)
    samples = interleaved(builds, arrays, rounds=runs, others=others)
    tuned_s = samples["tuned"]
    med = statistics.median(tuned_s)

    def ratio(name: str) -> tuple[float, tuple[float, float]]:
        rs = sorted(x / t for x, t in zip(samples[name], tuned_s, strict=True))
        return statistics.median(rs), (rs[0], rs[-1])

    speedup, speedup_range = ratio("default")
    anchors = tuple(
        Anchor(name, statistics.median(samples[name]), *ratio(name), details[name])
        for name in ("metaschedule", "onnxruntime")
        if name in samples
    )
    return ProfileRun(
        date=_dt.date.today().isoformat(),
        host=host_description(),
        untemplated=tuned.untemplated,
        latency_s=med,
        latency_spread=(max(tuned_s) - min(tuned_s)) / med,
        samples=len(tuned_s),
        calls=calls,
        default_latency_s=statistics.median(samples["default"]),
        speedup=speedup,
        speedup_range=speedup_range,
        anchors=anchors,
    )
