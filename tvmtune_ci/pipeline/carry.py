"""Carrying a log set forward unmeasured (`carry_step`): when only the template's edit
made it stale and the edit changed no program the set measured or publishes, nor the
default configuration, nor opened knob values (`carry_refusal` says why not)."""

from __future__ import annotations

import datetime as _dt
import time
from dataclasses import replace
from typing import TYPE_CHECKING

from ..check.staleness import Entry
from ..core import history
from ..core.fsutil import sha256_bytes
from ..core.git.read import blob_id
from ..core.manifest import encode
from ..core.manifestformat import MANIFEST_FORMAT
from ..core.reasons import Code
from ..tune import priors
from ..tune.measure import full_knobs
from ..tune.programs import programs_unchanged
from ..tune.runners.threads import tvm_threads
from .history import git_commit_of
from .job import Job

if TYPE_CHECKING:  # pragma: no cover
    from ..core.manifest import Manifest


def may_carry(entry: Entry, carry: bool = True) -> bool:
    """Whether a run would try to carry the set forward, from what is known before the
    lock and without TVM: carrying is on, a template edit is the only reason the set is
    stale, and its manifest records the programs (format 2). `carry_refusal` decides the
    rest, from the programs."""
    return (
        carry
        and {r.code for r in entry.reasons} == {Code.TEMPLATE_CHANGED}
        and entry.manifest is not None
        and entry.manifest.format >= 2
    )


def carry_refusal(job: Job) -> str | None:
    """Why the previous set cannot be carried forward onto the edited template without
    TVM (None: the programs decide, `carry_step`)."""
    entry, hist = job.entry, job.history
    codes = {r.code for r in entry.reasons}
    if not job.carry:
        return "--no-carry"
    if codes != {Code.TEMPLATE_CHANGED}:
        return None if not codes else "not only the template changed (" + ", ".join(sorted(codes)) + ")"
    if entry.manifest is None or hist is None or hist.from_target is not None:
        return "the previous log is not replayed"
    if entry.manifest.format < 2:  # fixed-repeat means, not this measurement layer's figures
        return f"the previous log is of manifest format {entry.manifest.format}"
    if hist.old_knobs is None:
        return "the previous template's knobs are unknown"
    assert job.template is not None
    if dict(job.template.decl.workloads) != dict(entry.manifest.workloads):
        return "the workloads differ"
    missing = [w for w in job.template.decl.workloads if not hist.records.get(w)]
    if missing:
        return f"the previous log's records of {', '.join(missing)} could not be read"
    return None


def carry_step(job: Job) -> Job:
    """A template edit that changed no kernel: the previous set is carried forward.

    When the only reason the set is stale is the template's edit, and for every workload
    the edited template opens no knob values and makes the same program of every
    configuration the old log measured or its manifest publishes (the records, best,
    default, top table; `programs.programs_unchanged`), with the same default
    configuration, then everything the set states still describes these kernels: the
    log's records, the finals, the run history. Measuring them again would re-measure
    the same programs (after a no-op edit the tuner's replay and finals took 16-26 s on a
    Zen 4, the history run `measure.history_s` more). The manifest is re-stamped with the new
    fingerprint and says so (`carried`); the log, results and run history stay as they
    are, and their date stays the date they were measured, so the age rule still counts
    from it. `retune --no-carry` measures anyway."""
    refusal = carry_refusal(job)
    if job.partial is not None:  # only workloads changed: partial_step planned the run
        return job
    if refusal is not None or not job.entry.reasons:
        if refusal is not None and refusal != "--no-carry" and job.history is not None:
            job.say(f"not carried forward: {refusal}")
        return job
    entry, target, tpl = job.entry, job.target, job.template
    old = entry.manifest
    assert tpl is not None and old is not None
    t0 = time.monotonic()
    counts = unchanged_programs(job)
    if counts is None:
        return job
    n = sum(counts.values())
    sentence = (
        f"the template edit changed none of the {n} programs the log measured or publishes "
        f"({', '.join(f'{w}: {c}' for w, c in counts.items())}; each configuration makes the "
        "same module as before), nor the default configuration, and opened no knob values: "
        f"the set measured on {old.tuned_on} still describes these kernels"
    )
    log = (entry.logset.folder / old.log).read_bytes()
    if sha256_bytes(log) != old.log_sha256:
        job.say(f"not carried forward: {old.log} changed since it was read")
        return job
    manifest, encoded = encode(carried_manifest(job, log, sentence))
    job.say(f"carried forward: {sentence}")
    if job.budget is not None:
        took = time.monotonic() - t0
        for w in tpl.decl.workloads:
            # No floor: nothing was measured, so it says nothing of an item that searches.
            job.budget.finish((entry.operator, target.name, w), took / len(counts))
    return replace(job, carried=sentence, manifest=manifest, files=encoded)


def unchanged_programs(job: Job) -> dict[str, int] | None:
    """Per workload, how many programs of the old log the edited template still makes
    alike (`programs.programs_unchanged`); None, said, when an edit changed a published
    configuration's knobs, the default configuration, or a program (or opened knob values)."""
    target, tpl, hist, old = job.target, job.template, job.history, job.entry.manifest
    assert tpl is not None and hist is not None and old is not None and hist.old_knobs is not None
    counts = {}
    for w in tpl.decl.workloads:
        params, wl = tpl.decl.workloads[w], job.workloads[w]
        result = old.results[w]
        if any(
            history.map_config(k, tpl.decl.knobs, params, target.target).knobs != k
            for k in priors.published_configs(old, [w])[w]
        ):
            job.say(f"{w}: not carried forward: the edit changed the knobs of a configuration the set publishes")
            return None
        if full_knobs(tpl.module, wl, None, target.target) != result.baseline.knobs:
            job.say(f"{w}: not carried forward: the edit changed the default configuration")
            return None
        programs = priors.old_programs(hist.records[w], tpl.decl.knobs, params, target.target)
        with tvm_threads(job.threads):
            same = programs_unchanged(tpl.module, wl, target.target, result.best.knobs, hist.old_knobs, programs)
        if not same:
            job.say(f"{w}: not carried forward: the edit changed a program the old log measured, or opened knob values")
            return None
        counts[w] = len(programs)
    return counts


def carried_manifest(job: Job, log: bytes, sentence: str) -> Manifest:
    """The old manifest re-stamped for the edited template, saying it was carried (`sentence`)."""
    tpl, old = job.template, job.entry.manifest
    assert tpl is not None and old is not None
    return replace(
        old,
        log_git_blob=blob_id(log),  # a set from before format 3 had none
        fingerprint=tpl.fingerprint.digest,
        dependencies=dict(tpl.fingerprint.dependencies),
        template_commit=git_commit_of(job.config.root, tpl.path),
        sources=tpl.sources.to_json(),
        results=dict(old.results),
        format=MANIFEST_FORMAT,
        carried={"on": _dt.date.today().isoformat(), "from_fingerprint": old.fingerprint, "sentence": sentence},
    )
