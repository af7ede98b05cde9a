"""The old log's records as a prior for the cost model after a template edit.

The history replay (`history.py`, `Search.replay`) re-measures the old log's best
configurations on the edited template. Its other records are not measured again but
are still evidence: each is a configuration with a latency measured on this target.
Mapped into the new knob space (`history.map_config`) and lowered by the *new*
template, they train the cost model before the first batch: the features are the
new programs', the labels the old latencies. Only the same operator and target.

A record names its configuration only as a MetaSchedule trace of the *old* template,
so reading its knobs takes the old template's design spaces. The old template, with
the in-repo helpers its fingerprint lists, is checked out from git at the commit
that holds the old log into a temporary folder and decoded in a child process
(`python -m tvmtune_ci.tune.priors`), so that its modules never mix with the new
template's in this process. Whatever goes wrong here (no git, a template that no
longer imports, a timeout) costs the prior, never the re-tune: `PriorError` says why.

The child also keys each record by the program the old template made of it
(`builder.program_key`, the scheduled module's structural hash), and the configurations
the old manifest publishes (its best, default and top table), which the log may not
hold, as records with no latency. When the new template makes the same program of
every one, and opens no knob values, the edit changed nothing the old search measured,
and a re-tune may stop after its replay (`old_programs`, `search.old_search_stands`),
or carry the old set forward unmeasured (`pipeline.carry_step`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..core.errors import TvmtuneError
from ..core.git import run
from ..core.git.read import last_commit
from ..core.history import map_config
from ..core.manifest import Manifest
from ..core.records import read_log, record_is_valid
from ..core.template import import_template
from ..core.templateapi import TEMPLATE_API
from .builder import program_key, schedule_config
from .measure import full_knobs
from .space import decode_knobs, design_space_infos, knobs_key
from .workload import Workload, resolve

# One record of the old log: its configuration (the old template's knobs), its latency,
# and the key of the program the old template made of it ("" when it no longer
# schedules).
OldRecord = tuple[dict[str, Any], float, str]

# A decode that takes longer than this is given up (the prior is optional).
DECODE_TIMEOUT_S = 300.0


class PriorError(TvmtuneError):
    """The old log's records could not be read as configurations (the re-tune goes on)."""


def old_commit(root: Path, manifest_path: Path, manifest: Manifest) -> str | None:
    """The commit whose tree holds the templates the old log was tuned with: the one
    that committed its manifest (a retune commits templates first, then the log),
    else the template's own commit recorded in the manifest."""
    try:
        sha = last_commit(root, manifest_path.resolve().relative_to(root.resolve()))
    except (ValueError, TvmtuneError):  # outside the repository, or no git at all
        sha = None
    return sha or manifest.template_commit


def checkout_old(root: Path, commit: str, manifest: Manifest, dest: Path) -> Path:
    """Extract the old template's folder and the helper files its fingerprint lists,
    as of `commit`, into `dest` (the repository layout kept); returns `dest`."""
    top = Path(manifest.template_file).parts[0]
    wanted = {top, *(k.split(":", 1)[0] for k in manifest.dependencies)}
    try:
        listed = run(root, "ls-tree", "-r", "--name-only", commit, "--", *sorted(wanted))
        if listed.returncode != 0 or not listed.stdout.strip():
            why = (listed.stderr.strip().splitlines() or [f"it holds none of {sorted(wanted)}"])[-1]
            raise PriorError(f"git cannot read the templates of commit {commit[:12]} in {root}: {why}")
        present = wanted & {p for name in listed.stdout.splitlines() for p in (name, name.split("/", 1)[0])}
        tar_path = dest / ".old-tree.tar"
        dest.mkdir(parents=True, exist_ok=True)
        archive = run(root, "archive", "--format=tar", "-o", str(tar_path), commit, "--", *sorted(present))
    except TvmtuneError as e:  # GitError: no git
        raise PriorError(f"git could not read commit {commit[:12]}: {e}") from e
    if archive.returncode != 0:
        raise PriorError(f"git archive {commit[:12]}: {archive.stderr.strip()}")
    with tarfile.open(tar_path) as tar:
        if hasattr(tarfile, "data_filter"):  # Python >= 3.10.12: refuse odd members
            tar.extractall(dest, filter="data")
        else:  # pragma: no cover - our own commit's tree, written by git archive
            tar.extractall(dest)
    tar_path.unlink()
    return dest


def decode_records(
    old_root: Path,
    template_file: str,
    log_path: Path,
    target: Mapping[str, Any],
    workloads: Sequence[str],
    *,
    timeout_s: float = DECODE_TIMEOUT_S,
    published: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
) -> dict[str, list[OldRecord]]:
    """{workload: [(knobs, latency_s, program key), ...]} of the log's valid records,
    decoded with the template at `old_root/template_file` in a child process; then the
    configurations of `published` (per workload, knob values of the old template) as
    records with latency 0 (not measured in the log: no label for the prior)."""
    arg = json.dumps(
        {
            "root": str(old_root),
            "template": template_file,
            "log": str(log_path),
            "target": dict(target),
            "workloads": list(workloads),
            "published": {w: [dict(k) for k in ks] for w, ks in (published or {}).items()},
        }
    )
    # This package importable in the child even when it is not installed; after the old
    # tree (the child's cwd, first on its path), so its `operators` are the old ones.
    here = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (os.environ.get("PYTHONPATH", ""), here) if p)}
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "tvmtune_ci.tune.priors", arg],
            cwd=old_root,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            env=env,
        )
    except subprocess.TimeoutExpired as e:
        raise PriorError(f"decoding {log_path.name} took longer than {timeout_s:.0f} s") from e
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        raise PriorError(f"decoding {log_path.name} with the old template failed: {last}")
    try:
        out = json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError) as e:
        raise PriorError(f"decoding {log_path.name}: no result from the child process") from e
    return {w: [(dict(k), float(s), str(p)) for k, s, p in rows] for w, rows in out.items()}


def old_records(
    root: Path, manifest_path: Path, manifest: Manifest, workloads: Sequence[str], scratch: Path
) -> dict[str, list[OldRecord]]:
    """The old log's valid records as (knobs, latency, program key) per workload, read with the
    template as it was committed with that log (checked out under `scratch`).

    Only a log decoded with this tvmtune-ci's template API: its traces name knobs by
    the rules they were written with (templateapi.py), and these are the only rules
    here; any other is refused (PriorError), never decoded with the wrong ones."""
    _same_api(manifest_path, manifest)
    commit = old_commit(root, manifest_path, manifest)
    if not commit:
        raise PriorError(f"{manifest_path}: no commit holds it or its template")
    old_root = checkout_old(root, commit, manifest, scratch)
    return decode_records(
        old_root,
        manifest.template_file,
        manifest_path.parent / manifest.log,
        manifest.target,
        workloads,
        published=published_configs(manifest, workloads),
    )


def _same_api(manifest_path: Path, manifest: Manifest) -> None:
    """PriorError unless the log was decoded with this tvmtune-ci's template API: its
    traces name knobs by the rules they were written with (templateapi.py), and these
    are the only rules here."""
    if manifest.template_api != TEMPLATE_API:
        raise PriorError(
            f"{manifest_path.parent / manifest.log} was decoded with template API "
            f"{manifest.template_api} and this tvmtune-ci decodes template API {TEMPLATE_API}: "
            "its records are not read with other rules than they were written with"
        )


def published_configs(manifest: Manifest, workloads: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """The configurations a manifest publishes per workload (best, default, previous best,
    top table), distinct: what a set carried forward would still claim about them."""
    out: dict[str, list[dict[str, Any]]] = {}
    for w in workloads:
        r = manifest.results.get(w)
        if r is None:
            continue
        seen: list[dict[str, Any]] = []
        for m in (r.best, r.baseline, r.previous_best, *r.top):
            if m is not None and m.knobs not in seen:
                seen.append(dict(m.knobs))
        out[w] = seen
    return out


def prior_for(
    records: Sequence[OldRecord],
    knobs: Sequence[Any],
    workload: Mapping[str, Any],
    target: Mapping[str, Any],
    exclude: Sequence[Mapping[str, Any]],
) -> tuple[tuple[dict[str, Any], float], ...]:
    """The records mapped into the new knob space (`history.map_config`), distinct
    there (the fastest latency kept), without those in `exclude` (the replayed ones,
    measured again) and without those that keep no knob at all."""
    skip = {knobs_key(kv) for kv in exclude}
    best: dict[str, tuple[dict[str, Any], float]] = {}
    for kv, secs, _ in records:
        m = map_config(kv, knobs, workload, target)
        k = knobs_key(m.knobs)
        if not m.kept or k in skip or not secs > 0:
            continue
        if k not in best or secs < best[k][1]:
            best[k] = (m.knobs, float(secs))
    return tuple(sorted(best.values(), key=lambda x: x[1]))


def old_programs(
    records: Sequence[OldRecord], knobs: Sequence[Any], workload: Mapping[str, Any], target: Mapping[str, Any]
) -> tuple[tuple[dict[str, Any], str], ...]:
    """Every old record as (its configuration in the new knob space, the key of the
    program the old template made of it), distinct. One the edit had to repair (a knob
    reset, new or no longer valid) has the key "": the edit changed that configuration,
    so the old search's measurement of it does not stand."""
    out: dict[str, tuple[dict[str, Any], str]] = {}
    for kv, _, program in records:
        m = map_config(kv, knobs, workload, target)
        if m.reset:  # whatever else maps here, the edit moved this one
            out[knobs_key(m.knobs)] = (m.knobs, "")
        else:
            out.setdefault(knobs_key(m.knobs), (m.knobs, program))
    return tuple(out.values())


def decode(
    template: Any,
    log_path: Path,
    target: Mapping[str, Any],
    workloads: Sequence[str],
    published: Mapping[str, Sequence[Mapping[str, Any]]],
    resolved: dict[str, Any] | None = None,
) -> dict[str, list[OldRecord]]:
    """{workload: [(knobs, latency_s, program key), ...]} of the log's valid records,
    decoded with `template` (the module), then `published`'s configurations as records
    with latency 0; as JSON would carry them (lists, not tuples). `resolved`: workloads
    already resolved for `target` (one compute() per workload, here too)."""
    log = read_log(log_path)
    out: dict[str, list[OldRecord]] = {}
    known: dict[str, Workload] = dict(resolved or {})

    def wl_of(name: str) -> Workload:
        if name not in known:
            known[name] = resolve(template, name, dict(target))
        return known[name]

    for w in workloads:
        entry = log["workloads"].get(w)
        if entry is None or w not in getattr(template, "WORKLOADS", {}):
            continue
        wl = wl_of(w)
        spaces = design_space_infos(template, wl, dict(target))
        rows = out.setdefault(w, [])
        for rec in entry["records"]:
            if not record_is_valid(rec):
                continue
            try:
                _, kv = decode_knobs(rec[0], spaces, template.KNOBS)
            except TvmtuneError:  # a record of another design space: skipped
                continue
            knobs = full_knobs(template, wl, kv, dict(target))
            try:
                program = program_key(schedule_config(template, wl, knobs, dict(target)))
            except Exception:  # noqa: BLE001 - no program to compare; the prior still has the record
                program = ""
            rows.append((knobs, float(rec[1][0]), program))
    for w, configs in published.items():
        if w not in getattr(template, "WORKLOADS", {}):
            continue
        rows = out.setdefault(w, [])
        pwl = wl_of(w)
        for published_kv in configs:
            knobs = dict(published_kv)
            try:
                knobs = full_knobs(template, pwl, published_kv, dict(target))
                program = program_key(schedule_config(template, pwl, knobs, dict(target)))
            except Exception:  # noqa: BLE001 - no program: the set cannot be carried forward
                program = ""
            rows.append((knobs, 0.0, program))
    # One shape whichever process decoded it (the child's result comes as JSON).
    back: dict[str, list[list[Any]]] = json.loads(json.dumps(out))
    return {w: [(dict(k), float(secs), str(prog)) for k, secs, prog in rows] for w, rows in back.items()}


def records_here(
    template: Any,
    manifest_path: Path,
    manifest: Manifest,
    workloads: Sequence[str],
    resolved: dict[str, Any] | None = None,
) -> dict[str, list[OldRecord]]:
    """`old_records` when the template is the one the log was tuned with (every
    dependency of its fingerprint the same: `pipeline.history.tuned_with`; only its
    workloads, or nothing of it, changed): decoded in this process with the template as
    imported, with no checkout and no child process (a TVM import and each workload
    computed again: 2-3 s before a new shape's first trial, bench_prior_read). PriorError
    when the records cannot be read (the prior is optional here too)."""
    _same_api(manifest_path, manifest)
    try:
        return decode(
            template,
            manifest_path.parent / manifest.log,
            manifest.target,
            workloads,
            published_configs(manifest, workloads),
            resolved,
        )
    except TvmtuneError as e:
        raise PriorError(f"decoding {manifest.log}: {e}") from e
    except Exception as e:  # noqa: BLE001 - as the child's failure: the prior, never the re-tune
        raise PriorError(f"decoding {manifest.log} failed: {type(e).__name__}: {e}") from e


def _main(argv: Sequence[str]) -> int:
    """Child process: decode a log's records with the template under `root`."""
    args = json.loads(argv[0])
    root = Path(args["root"])
    template = import_template(root / args["template"], root)
    out = decode(template, Path(args["log"]), args["target"], args["workloads"], args.get("published", {}))
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
