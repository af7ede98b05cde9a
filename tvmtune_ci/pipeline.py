"""Re-tuning one (operator, target) entry as explicit steps.

    host check -> lock -> import template -> fingerprint -> tune each workload
    (correctness, noise/baseline, search, verify: inside the tuner) -> keep the
    previous best if it is still faster -> write log, manifest, README, plot ->
    archive the old set as .bak and publish the new one atomically

Each step is a function; `retune_entry` runs them in order. Printing is the
command's business: steps report through the `say` callback.
"""

from __future__ import annotations

import datetime as _dt
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from . import lock as _lock
from .config import Config, TargetConfig
from .fsutil import canonical_json, sha256_bytes
from .layout import LogSet
from .manifest import Manifest, Measured, Trials, WorkloadResult
from .publish import Published, publish
from .readme import render_curve, render_readme
from .staleness import Entry, installed_tvm_version

Say = Callable[[str], None]

# Reasons under which the previous log still describes the same template,
# workload and target: its best is a fair candidate to re-measure and keep.
_SAME_TEMPLATE_BLOCKERS = {"missing", "template_changed", "workload_changed", "target_changed", "log_modified", "template_invalid"}


@dataclass(frozen=True)
class RetuneResult:
    entry: Entry
    manifest: Manifest
    published: Published

    def speedups(self) -> dict[str, float]:
        return {w: r.speedup for w, r in self.manifest.results.items()}


def measure_threads(target: TargetConfig) -> int | None:
    """Threads a local measurement uses: the target's num-cores (None: TVM's default)."""
    cores = target.target.get("num-cores")
    if target.rpc is not None or not isinstance(cores, int) or cores < 1:
        return None
    return cores


def can_reuse_previous(entry: Entry) -> bool:
    return entry.manifest is not None and not ({r.code for r in entry.reasons} & _SAME_TEMPLATE_BLOCKERS)


def _git_commit_of(root: Path, path: Path) -> str | None:
    from .git import last_commit

    try:
        return last_commit(root, path)
    except Exception:  # not a git repo, or the template is not committed yet
        return None


def keep_faster(outcome: Any, previous: Measured | None) -> tuple[Measured, Measured | None]:
    """(best to record, previous re-measured) - a re-tune never makes the result slower."""
    if previous is None or previous.latency_s >= outcome.best.latency_s:
        return outcome.best, previous
    return previous, previous


def tune_entry(config: Config, entry: Entry, target: TargetConfig, *, trials: int, seed: int,
               say: Say, progress: Callable[[str], Callable[[Any], None]] | None = None) -> tuple[Manifest, bytes]:
    """Tune every workload of the entry; returns the new set's manifest and log bytes (not yet written)."""
    from .fingerprint import fingerprint_template
    from .measure import make_runner, measure_config
    from .template import import_template, read_template
    from .tuner import TuneRequest, tune_workload

    root = config.root
    path = root / entry.template_file
    threads = measure_threads(target)
    if threads is not None:
        # TVM sizes its thread pool from TVM_NUM_THREADS, else half the cores it
        # sees (it assumes hyper-threading): a 2-core runner would tune on one
        # thread. The measuring worker inherits this when it starts.
        os.environ["TVM_NUM_THREADS"] = str(threads)
    decl = read_template(path)
    module = import_template(path, root)
    fp = fingerprint_template(path, root)
    logset = entry.logset
    reuse = can_reuse_previous(entry)
    outcomes = {}
    results: dict[str, WorkloadResult] = {}
    trials_by_wl: dict[str, Trials] = {}
    for wname in decl.workloads:
        req = TuneRequest(
            template=module,
            workload_name=wname,
            target=target.target,
            trials=trials,
            batch_size=config.batch_size,
            seed=seed,
            early_stop=config.early_stop,
            measure=config.measure,
            work_dir=logset.work_dir / wname,
            rpc=target.rpc,
            on_batch=progress(f"{entry.operator}/{entry.target}/{wname}") if progress else None,
        )
        outcome = tune_workload(req)
        previous = None
        if reuse and entry.manifest is not None and wname in entry.manifest.results:
            old = entry.manifest.results[wname].best
            where = f"on {target.rpc.key}@{target.rpc.tracker}" if target.rpc else "on this machine"
            say(f"{wname}: re-measuring the previous log's best {where} ({old.latency_s * 1e3:.4g} ms when it was tuned)")
            # Back to back, so machine load changes between runs do not pick the
            # winner; on the target's runner (its RPC devices), where the search measured.
            runner = make_runner(config.measure, target.rpc)
            try:
                previous = measure_config(module, wname, target.target, old.knobs, config.measure, runner=runner)
                again = measure_config(module, wname, target.target, outcome.best.knobs, config.measure, runner=runner)
                outcome = replace(outcome, best=again)
            except Exception as e:  # noqa: BLE001 - e.g. a new TVM cannot build the old configuration
                say(f"{wname}: the previous best could not be re-measured ({type(e).__name__}: {e}); keeping this run's best")
                previous = None
            finally:
                runner.close()
        best, prev = keep_faster(outcome, previous)
        if prev is not None and best is prev:
            say(f"{wname}: the previous best ({prev.latency_s * 1e3:.4g} ms) is still faster than this run's ({outcome.best.latency_s * 1e3:.4g} ms); keeping it")
        outcomes[wname] = (outcome, best)
        results[wname] = WorkloadResult(
            best=best, baseline=outcome.baseline, top=tuple(outcome.top[:10]),
            space_size=outcome.space_size, design_spaces=outcome.design_spaces,
            curve=tuple(outcome.curve), previous_best=prev,
        )
        trials_by_wl[wname] = outcome.trials
    from .hostcheck import host_description

    date = _dt.date.today().isoformat()
    log_name = logset.log_name(date)
    data = render_log_with(entry, target, {w: o for w, (o, b) in outcomes.items()}, {w: b for w, (o, b) in outcomes.items()})
    host = host_description()
    host["runner"] = f"rpc {target.rpc.key}@{target.rpc.tracker} x{target.rpc.devices}" if target.rpc else "local"
    # Who measured the trials: "local", or each RPC server's "host:port".
    host["devices"] = sorted({d for o, _ in outcomes.values() for d in o.devices})
    return Manifest(
        operator=entry.operator, target_name=target.name, target=target.target,
        log=log_name, log_sha256=sha256_bytes(data), fingerprint=fp.digest,
        dependencies=dict(fp.dependencies), workloads=decl.workloads,
        tvm_version=installed_tvm_version() or "unknown", tuned_on=date, seed=seed,
        trials=trials_by_wl, results=results,
        measure={**vars(config.measure), "threads": threads or "TVM default"},
        template_file=entry.template_file, template_commit=_git_commit_of(root, path),
        host=host,
    ), data


def render_log_with(entry: Entry, target: TargetConfig, outcomes: dict[str, Any], bests: dict[str, Measured]) -> bytes:
    """The new log; where the previous best was kept, its record (re-measured) leads."""
    from .records import best_record, make_log, read_log, render_log

    log = make_log(entry.operator, target.target, list(outcomes.values()))
    for wname, best in bests.items():
        if best is outcomes[wname].best or entry.manifest is None:
            continue
        old = best_record(read_log(entry.logset.folder / entry.manifest.log), wname)
        if old is None:
            continue
        trace, secs, *rest = old
        log["workloads"][wname]["records"].insert(0, [trace, [best.latency_s] * max(len(secs or []), 1), *rest])
    return render_log(log).encode()


def write_set(logset: LogSet, manifest: Manifest, log_data: bytes) -> Published:
    """Archive the old set as .bak and publish log, manifest, README and plot atomically."""
    files = {
        manifest.log: log_data,
        "manifest.json": canonical_json(manifest.to_json()).encode(),
        "README.md": render_readme(manifest).encode(),
    }
    curve = render_curve(manifest)
    if curve is not None:
        files["curve.png"] = curve
    return publish(logset.folder, files)


def retune_entry(config: Config, entry: Entry, *, trials: int | None = None, seed: int | None = None,
                 say: Say = print, progress: Callable[[str], Callable[[Any], None]] | None = None) -> RetuneResult:
    from .hostcheck import check_host

    target = config.target(entry.target)
    check_host(target.target, remote=target.rpc is not None)
    if target.rpc is not None:
        from .devices import preflight

        preflight(target.rpc, config.measure)
    n_trials = trials if trials is not None else config.trials_for(entry.operator)
    n_seed = seed if seed is not None else config.seed
    logset = entry.logset
    with _lock.hold(logset.lock, f"{entry.operator}/{entry.target}"):
        manifest, data = tune_entry(config, entry, target, trials=n_trials, seed=n_seed, say=say, progress=progress)
        published = write_set(logset, manifest, data)
        shutil.rmtree(logset.work_dir, ignore_errors=True)
    return RetuneResult(entry, manifest, published)


def commit_message(results: Sequence[RetuneResult]) -> str:
    parts = []
    body = []
    for r in results:
        m = r.manifest
        parts.append(f"{m.operator} on {m.target_name}")
        for w, res in sorted(m.results.items()):
            prev = f", {res.previous_best.latency_s / res.best.latency_s:.2f}x vs previous best" if res.previous_best else ""
            body.append(f"- {m.operator}/{m.target_name}/{w}: {m.trials[w].run} trials ({m.trials[w].stop_reason}), "
                        f"best {res.best.latency_s * 1e3:.4g} ms, {res.speedup:.1f}x vs default{prev}")
    total = sum(sum(t.run for t in r.manifest.trials.values()) for r in results)
    speed = min((s for r in results for s in r.speedups().values()), default=1.0)
    head = f"tvmtune: re-tune {', '.join(parts)} ({total} trials, {speed:.1f}x vs default)"
    return head + "\n\n" + "\n".join(body) + "\n\nWritten by tvmtune-ci retune; logs only, this commit does not trigger a re-tune.\n"

