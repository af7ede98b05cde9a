"""One batch of the search, built and run (`run_batch`), and its measurements turned into
the journal's trials (`trial_entries`): plain work the search loop calls per batch."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..core import stats
from ..core.configschema import MeasureOptions
from ..core.tunetypes import Trial
from .builder import Builder, remove_artifact
from .runners import Runner
from .sampling import device_type

# (candidate, design space, knobs): one configuration the search picked to measure.
Picked = tuple[Any, int, dict[str, Any]]


def run_batch(
    cands: Sequence[Any], target: Any, builder: Builder, runner: Runner, ms: Any, prebuilt: Sequence[Any] | None = None
) -> list[tuple[Any, str | None, bool]]:
    """Build every candidate in-process (unless `prebuilt` holds their BuilderResults),
    then give all that built to the runner at once (an RPC runner measures them on its
    devices in parallel). Per candidate, in order: (RunnerResult, the device that
    measured it or None, whether it reached the runner). Every library is removed."""
    built = (
        list(prebuilt)
        if prebuilt is not None
        else builder.build([ms.builder.BuilderInput(c.sch.mod, target) for c in cands])
    )
    out: list[tuple[Any, str | None, bool]] = [
        (ms.runner.RunnerResult(None, str(b.error_msg)), None, False) for b in built
    ]
    todo = [i for i, b in enumerate(built) if not b.error_msg]
    try:
        inputs = [ms.runner.RunnerInput(built[i].artifact_path, device_type(target), cands[i].args_info) for i in todo]
        futures = runner.run(inputs) if inputs else []
        for i, inp, fut in zip(todo, inputs, futures, strict=True):
            result = fut.result()
            out[i] = (result, runner.device_of(str(inp.artifact_path)), True)
    finally:
        for b in built:
            remove_artifact(b.artifact_path)
    return out


def ok(result: Any) -> bool:
    """A RunnerResult that measured."""
    return result.error_msg is None and bool(result.run_secs)


def trial_entries(
    picked: Sequence[Picked],
    measured: Sequence[tuple[Any, str | None, bool]],
    ests: Sequence[stats.Estimate | None],
    records: Sequence[list[Any]],
    *,
    done: int,
    batch: int,
    incumbent: float | None,
    measure: MeasureOptions,
    source: str,
) -> list[Trial]:
    """The journal's trials of one measured batch, numbered on from `done`: each with its
    estimate (None: failed, `error` says why), whether a probe was raced out (slower
    than `measure.race` x the `incumbent` after at most `measure.probe` samples), who
    measured it, its record JSON and, unless the search's own, where it came from."""
    entries: list[Trial] = []
    for (_, sidx, kv), (r, device, _), est, record in zip(picked, measured, ests, records, strict=True):
        err = None if est is not None else str(r.error_msg or "no measurement")
        raced = bool(est is not None and incumbent and est.n <= measure.probe and est.value > measure.race * incumbent)
        entry: Trial = {
            "trial": done + len(entries) + 1,
            "batch": batch,
            "space": sidx,
            "knobs": kv,
            "latency_s": est.value if est is not None else None,
            "ci": [est.lo, est.hi] if est is not None and est.n >= stats.MIN_SAMPLES else None,
            "n": est.n if est is not None else 0,
            "stage": ("probe" if raced else "search") if est is not None else None,
            "error": err,
            "device": device,
            "record": record,
        }
        if source != "search":
            entry["source"] = source
        entries.append(entry)
    return entries
