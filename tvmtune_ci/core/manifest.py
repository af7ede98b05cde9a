"""The manifest beside each log: where the log came from, versioned (`format`).

`manifest.json` is also the commit point of a re-tune: a log set is the files the
manifest names, with the hashes it records. Its format (versions, the two files'
names, what every field must be) is `manifestformat.py`; where they live, `layout.py`.

Over 400 lines: the manifest's types and the reading and writing of its two files
(manifest.json, results.json read on first use) change together with the format; what
each field must hold is `manifestformat.py`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from .errors import CorruptFileError
from .fsutil import NotRegularFileError, atomic_write_bytes, canonical_json, read_regular_file, sha256_bytes
from .git.read import blob_id
from .manifestformat import (
    MANIFEST_FORMAT,
    MANIFEST_NAME,
    READ_FORMATS,
    RESULTS_FORMAT,
    RESULTS_NAME,
    validate_manifest_shape,
    validate_results_shape,
)
from .templateapi import TEMPLATE_API, UNRECORDED

# Bounded reads: a results file is tens of KB.
MAX_RESULTS_BYTES = 64 << 20


@dataclass(frozen=True)
class Measured:
    """One configuration's knob values and its measured latency: the estimate of
    `stats.py` (the lower quartile of its samples) with its 95% interval."""

    knobs: dict[str, Any]
    latency_s: float
    gflops: float | None = None  # of the workload's FLOP count, never a padded one
    ci_lo_s: float | None = None  # None: no interval (a format-1 log, or too few samples)
    ci_hi_s: float | None = None
    n: int = 0  # samples behind the estimate
    # Where it was measured: "finals" (interleaved rounds), "search", "probe" (raced:
    # measured slow after the first samples), "single" (measured alone), "replay" (a
    # history replay), "first_batch" (a cold search's first batch: a noise check).
    stage: str = ""
    # A search/probe entry beside finals is shown on the finals' scale (as the log
    # ranks it): latency_s = search_s x the scale; search_s is the search's own number.
    search_s: float | None = None
    # Why its sampling stopped (the finals): "converged" within measure.precision,
    # "separated" (out of the race: slower than the leader beyond the noise) or
    # "time_cap" (the finals' time was spent first); None when not recorded.
    stopped: str | None = None
    # The search trial that first measured it (1-based, in measuring order, a replayed
    # or seeded configuration included); None when the search never did (the default,
    # a previous best) or when not recorded (before 2026-12-06). Written only when set.
    trial: int | None = None

    @property
    def rel_halfwidth(self) -> float | None:
        """The precision: the interval's half-width over the estimate; None if unknown."""
        if self.ci_lo_s is None or self.ci_hi_s is None or self.latency_s <= 0:
            return None
        return (self.ci_hi_s - self.ci_lo_s) / 2.0 / self.latency_s


@dataclass(frozen=True)
class WorkloadResult:
    """What one workload's re-tune found: the best and the default configuration from
    the same finals, the top table, the curve, and the history of the run."""

    best: Measured
    baseline: Measured  # the default configuration
    # Top configurations, best first (for the README); at most 10.
    top: tuple[Measured, ...] = ()
    space_size: int = 0  # points in all design spaces together
    design_spaces: int = 1
    # (trial index, best-so-far GFLOPS) per measured trial: the tuning curve.
    curve: tuple[tuple[int, float], ...] = ()
    # A previous log's best re-measured on this machine, when one was compared.
    previous_best: Measured | None = None
    # This run's best against the previous best, from the finals: "faster" or
    # "slower" beyond the noise, or "equal" within it (then the previous is kept).
    previous_verdict: str | None = None
    # "search" | "default" | "previous": where the published best came from.
    best_source: str = "search"
    # History replay after a template edit (replayreport.ReplayReport.to_json()), or None.
    history: dict[str, Any] | None = None
    # The noise check: the default configuration before the search (stage "single"),
    # minutes before `baseline` (the same configuration in the finals); in a re-tune
    # with history the old best as its replay measured it (stage "replay"), minutes
    # before `previous_best`; in a cold run since 2026-12-03 the best of the search's
    # first batch (stage "first_batch"), in the finals only if it is a finalist. Against
    # the finals: how far this runner's speed moved during the run. None in manifests
    # written before it was recorded.
    noise_check: Measured | None = None
    # Bytes one run moves at the least (its buffers: measure.workload_bytes); 0 when not
    # recorded. GB/s = bytes_moved / latency.
    bytes_moved: int = 0
    # A GPU target's best as its build reported it (tune/gpubuild.py's gpu_resources:
    # arch, shared memory and registers per block, ...); None on a CPU, and then not
    # written.
    gpu: dict[str, Any] | None = None

    @property
    def speedup(self) -> float:
        return self.baseline.latency_s / self.best.latency_s

    @property
    def speedup_interval(self) -> tuple[float, float] | None:
        """The speedup's bounds from the two 95% intervals (default / best); None when
        either has none. Both intervals hold together with at least 90% probability."""
        b, d = self.best, self.baseline
        if None in (b.ci_lo_s, b.ci_hi_s, d.ci_lo_s, d.ci_hi_s):
            return None
        assert b.ci_lo_s and b.ci_hi_s and d.ci_lo_s and d.ci_hi_s
        return d.ci_lo_s / b.ci_hi_s, d.ci_hi_s / b.ci_lo_s


@dataclass(frozen=True)
class Trials:
    """How a workload's trial budget was spent, and why the search stopped."""

    requested: int
    run: int
    valid: int
    failed: int
    stop_reason: str  # "budget", "early_stop", "matched_history", "nowhere_near", "history_unchanged", "space_exhausted", "time_budget"
    failures: dict[str, int] = field(default_factory=dict)  # error kind -> count
    stop_detail: str = ""  # why, in words, when the rule has more to say than its name
    budget_note: str = ""  # its share of a time budget, in words (`retune --budget`)


@dataclass(frozen=True)
class Manifest:
    """`manifest.json` of one log set: provenance (template fingerprint and commit,
    target, TVM, host, measurement settings), results per workload, and the hashes
    of the set's files. Written last: it is the commit point of a publish."""

    operator: str
    target_name: str
    target: dict[str, Any]  # canonical dict
    log: str  # file name of the log, in the same folder
    log_sha256: str
    fingerprint: str
    dependencies: dict[str, str]  # "path/to/file.py:qualname" -> hash
    workloads: dict[str, dict[str, Any]]
    tvm_version: str
    tuned_on: str  # YYYY-MM-DD
    seed: int
    trials: dict[str, Trials]  # per workload
    # Per workload. Format 4: read from results.json (on first use when the manifest
    # was read with lazy_results, as `check` does).
    results: Mapping[str, WorkloadResult]
    measure: dict[str, Any]
    template_file: str  # relative to repo root
    template_commit: str | None = None
    host: dict[str, Any] = field(default_factory=dict)  # cpu model, cores, runner kind, devices
    files: dict[str, str] = field(default_factory=dict)  # other files of the set -> sha256
    # What the templates were told about the target (targetinfo.TargetFacts.to_json());
    # empty in manifests written before templates could ask.
    target_facts: dict[str, Any] = field(default_factory=dict)
    # The log's git blob id (`git.read.blob_id`); "" in manifests before format 3.
    log_git_blob: str = ""
    # Format 4: the git blob id of each file in `files` (results.json).
    files_git_blob: dict[str, str] = field(default_factory=dict)
    # Format 4: what the template's declarations and fingerprint were computed from
    # (sources.Sources.to_json()); {} before.
    sources: dict[str, Any] = field(default_factory=dict)
    # The template API (knobs -> traces, templateapi.py) its records were decoded with.
    # Optional in format 4: a manifest written before it was recorded reads as
    # templateapi.UNRECORDED.
    template_api: int = TEMPLATE_API
    # Format 5: when a re-tune carried this set forward onto an edited template instead
    # of measuring it again (pipeline.carry_step): {"on": date, "from_fingerprint": the
    # template's fingerprint it was tuned with, "sentence": why, in words}. {}: tuned.
    carried: dict[str, Any] = field(default_factory=dict)
    # Format 6: a re-tune that tuned only the workloads that changed and carried the
    # others (pipeline.partial.Partial.to_json: on, tuned, changed, carried, removed,
    # from_log, from_date, sentence). {}: every workload was tuned (or carried) at once.
    partial: dict[str, Any] = field(default_factory=dict)
    format: int = MANIFEST_FORMAT

    def to_json(self) -> dict[str, Any]:
        """manifest.json's content; from format 4 without the results (results_json)."""
        if self.format < 4:
            d = asdict(replace(self, results=dict(self.results)))
            for r in d["results"].values():
                _drop_unset_trials(r)
        else:
            d = asdict(replace(self, results={}))
            del d["results"]
        if not self.carried:  # written only when carried: a format-4 set re-sealed stays format 4
            del d["carried"]
        if not self.partial:
            del d["partial"]
        return d

    def measured_on_other_cpu(self) -> str | None:
        """LLVM's name for the CPU that measured this set locally when it is not the
        target's `mcpu` (the host's `llvm_cpu`, recorded since 2026-12-05); else None."""
        cpu, mcpu = self.host.get("llvm_cpu"), self.target.get("mcpu")
        if cpu and mcpu and self.host.get("runner") == "local" and cpu != mcpu:
            return str(cpu)
        return None

    def results_json(self) -> dict[str, Any]:
        """results.json's content (format 4)."""
        return {
            "format": RESULTS_FORMAT,
            "operator": self.operator,
            "target_name": self.target_name,
            "results": {w: _result_json(r) for w, r in self.results.items()},
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], path: Path, *, lazy_results: bool = False) -> Manifest:
        """The manifest `data` read from `path`; CorruptFileError naming the file and
        the field that is wrong. Format 4 reads its results from results.json beside
        `path` (checked against the sha256 the manifest records), at once or, with
        `lazy_results`, on first use."""
        if not isinstance(data, dict):
            raise CorruptFileError(f"{path}: not a JSON object; inspect it or delete it and re-tune")
        fmt = data.get("format")
        if fmt not in READ_FORMATS:
            raise CorruptFileError(
                f"{path}: manifest format {fmt!r} is not understood (this tvmtune-ci reads formats {', '.join(map(str, READ_FORMATS))}); upgrade tvmtune-ci or re-tune"
            )
        validate_manifest_shape(data, path)
        try:
            d = dict(data)
            d.setdefault("template_api", UNRECORDED)
            d.setdefault("carried", {})
            d.setdefault("partial", {})
            d["trials"] = {w: Trials(**t) for w, t in d["trials"].items()}
            if fmt >= 4:
                expected = d["files"][RESULTS_NAME]
                results_path = path.with_name(RESULTS_NAME)
                results: Mapping[str, WorkloadResult] = _LazyResults(results_path, expected)
                d["results"] = results if lazy_results else dict(results)
            else:
                d["results"] = _workload_results(d["results"])
            return cls(**d)
        except (KeyError, TypeError, AttributeError) as e:
            raise CorruptFileError(
                f"{path}: manifest is missing or has wrong fields ({e}); inspect it or delete it and re-tune"
            ) from None


_MEASURED_FIELDS = frozenset(Measured.__dataclass_fields__)


def _result_json(r: WorkloadResult) -> dict[str, Any]:
    d = asdict(r)
    if d.get("gpu") is None:  # a CPU's results keep the keys they always had
        d.pop("gpu", None)
    return _drop_unset_trials(d)


def _drop_unset_trials(d: dict[str, Any]) -> dict[str, Any]:
    """A result's measured entries without a `trial` key where none was recorded: a
    results.json written before it had one re-reads and re-writes byte for byte."""
    for m in [d.get(k) for k in ("best", "baseline", "previous_best", "noise_check")] + list(d.get("top", ())):
        if isinstance(m, dict) and m.get("trial") is None:
            m.pop("trial", None)
    return d


def _m(data: dict[str, Any]) -> Measured:
    # Optional extras a later version writes (ci_rel, samples, ...) are not ours to keep.
    return Measured(**{k: v for k, v in data.items() if k in _MEASURED_FIELDS})


def _workload_results(data: dict[str, Any]) -> dict[str, WorkloadResult]:
    return {
        w: WorkloadResult(
            best=_m(r["best"]),
            baseline=_m(r["baseline"]),
            top=tuple(_m(m) for m in r.get("top", ())),
            space_size=r.get("space_size", 0),
            design_spaces=r.get("design_spaces", 1),
            curve=tuple((int(a), float(b)) for a, b in r.get("curve", ())),
            previous_best=_m(r["previous_best"]) if r.get("previous_best") else None,
            previous_verdict=r.get("previous_verdict"),
            best_source=r.get("best_source", "search"),
            history=r.get("history"),
            noise_check=_m(r["noise_check"]) if r.get("noise_check") else None,
            bytes_moved=int(r.get("bytes_moved", 0)),
            gpu=r.get("gpu") if isinstance(r.get("gpu"), dict) else None,
        )
        for w, r in data.items()
    }


def is_results_file(data: object) -> bool:
    """Whether parsed JSON has the keys `Manifest.results_json` writes (publish uses it
    to know a results.json is ours when its manifest is unreadable)."""
    return isinstance(data, dict) and {"format", "operator", "target_name", "results"} <= set(data)


def parse_results(data: bytes, path: Path) -> dict[str, WorkloadResult]:
    """The results of a results.json's bytes; CorruptFileError naming the file and
    the field that is wrong."""
    try:
        obj = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CorruptFileError(
            f"{path}: cannot parse results ({e}); restore it from git or re-tune (tvmtune-ci retune)"
        ) from None
    validate_results_shape(obj, path)
    try:
        return _workload_results(obj["results"])
    except (KeyError, TypeError, AttributeError) as e:
        raise CorruptFileError(
            f"{path}: results are missing or have wrong fields ({e}); restore it from git or re-tune"
        ) from None


class _LazyResults(Mapping[str, WorkloadResult]):
    """A format-4 manifest's results, read from results.json on first use: `check`
    reads thousands of manifests and needs none of their results."""

    def __init__(self, path: Path, sha256: str) -> None:
        self._path, self._sha256 = path, sha256
        self._data: dict[str, WorkloadResult] | None = None

    def _load(self) -> dict[str, WorkloadResult]:
        if self._data is None:
            try:
                data = read_regular_file(self._path, MAX_RESULTS_BYTES)
            except NotRegularFileError as e:
                raise CorruptFileError(
                    f"{e}; the manifest names it as its results: restore it from git or re-tune (tvmtune-ci retune)"
                ) from None
            except OSError as e:
                raise CorruptFileError(
                    f"{self._path}: cannot read the results the manifest names ({e.strerror}); restore it from git or re-tune (tvmtune-ci retune)"
                ) from None
            actual = sha256_bytes(data)
            if actual != self._sha256:
                raise CorruptFileError(
                    f"{self._path} was modified after tuning (sha256 {actual[:12]}, the manifest "
                    f"records {self._sha256[:12]}); restore it from git or re-tune (tvmtune-ci retune)"
                )
            self._data = parse_results(data, self._path)
        return self._data

    def __getitem__(self, key: str) -> WorkloadResult:
        return self._load()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._load())

    def __len__(self) -> int:
        return len(self._load())

    def __repr__(self) -> str:
        return f"<results of {self._path}{'' if self._data is None else ': ' + repr(self._data)}>"


def encode(manifest: Manifest) -> tuple[Manifest, dict[str, bytes]]:
    """The manifest with its results file's hashes recorded, and the bytes of the files
    it is written as: results.json then manifest.json (the commit point, last);
    manifest.json alone before format 4."""
    if manifest.format < 4:
        return manifest, {MANIFEST_NAME: canonical_json(manifest.to_json()).encode()}
    results = canonical_json(manifest.results_json()).encode()
    sealed = replace(
        manifest,
        files={**manifest.files, RESULTS_NAME: sha256_bytes(results)},
        files_git_blob={**manifest.files_git_blob, RESULTS_NAME: blob_id(results)},
    )
    return sealed, {RESULTS_NAME: results, MANIFEST_NAME: canonical_json(sealed.to_json()).encode()}


def seal_files(manifest: Manifest, files: Mapping[str, bytes]) -> Manifest:
    """The manifest naming `files` (set files beside results.json, e.g. the run history)
    with their sha256 and git blob ids."""
    return replace(
        manifest,
        files={**manifest.files, **{n: sha256_bytes(d) for n, d in files.items()}},
        files_git_blob={**manifest.files_git_blob, **{n: blob_id(d) for n, d in files.items()}},
    )


def read_manifest(path: Path) -> Manifest:
    """Read and check a manifest.json (and, from format 4, its results.json);
    CorruptFileError naming the file and the field that is wrong."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CorruptFileError(f"{path}: cannot parse manifest ({e}); inspect it or delete it and re-tune") from None
    return Manifest.from_json(data, path)


def write_manifest(path: Path, manifest: Manifest) -> Manifest:
    """Write `manifest` to `path` atomically (temp file + rename), its results.json
    first; returns the manifest as written (with the results file's hashes)."""
    sealed, files = encode(manifest)
    for name, data in files.items():
        atomic_write_bytes(path.with_name(name), data)
    return sealed
