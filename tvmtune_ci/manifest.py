"""The manifest beside each log: where the log came from, versioned (`format`).

`manifest.json` is also the commit point of a re-tune: a log set is the files the
manifest names, with the hashes it records. See `layout.py` for the file names.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .errors import CorruptFileError
from .fsutil import atomic_write_json

# 2: latencies are stats.estimate values with their intervals (ci_lo_s, ci_hi_s, n,
# stage), previous_verdict, best_source. Format 1 (fixed-repeat means) still reads.
# 3: log_git_blob (the log's git blob id), so `check` can trust git's index for a
# committed, unmodified log instead of re-hashing it. Formats 1-2 read (hashed).
MANIFEST_FORMAT = 3
READ_FORMATS = (1, 2, 3)
MANIFEST_NAME = "manifest.json"


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
    # measured slow after the first samples), "single" (measured alone).
    stage: str = ""
    # A search/probe entry beside finals is shown on the finals' scale (as the log
    # ranks it): latency_s = search_s x the scale; search_s is the search's own number.
    search_s: float | None = None

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
    # History replay after a template edit (history.ReplayReport.to_json()), or None.
    history: dict[str, Any] | None = None
    # The default configuration measured before the search (the noise check), minutes
    # before `baseline` (the same configuration in the finals): how far this runner's
    # speed moved during the run. None in manifests written before it was recorded.
    noise_check: Measured | None = None

    @property
    def speedup(self) -> float:
        return self.baseline.latency_s / self.best.latency_s


@dataclass(frozen=True)
class Trials:
    """How a workload's trial budget was spent, and why the search stopped."""

    requested: int
    run: int
    valid: int
    failed: int
    stop_reason: str  # "budget", "early_stop", "space_exhausted"
    failures: dict[str, int] = field(default_factory=dict)  # error kind -> count


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
    results: dict[str, WorkloadResult]  # per workload
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
    format: int = MANIFEST_FORMAT

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any], path: Path) -> Manifest:
        if not isinstance(data, dict):
            raise CorruptFileError(f"{path}: not a JSON object; inspect it or delete it and re-tune")
        fmt = data.get("format")
        if fmt not in READ_FORMATS:
            raise CorruptFileError(f"{path}: manifest format {fmt!r} is not understood (this tvmtune-ci reads formats {', '.join(map(str, READ_FORMATS))}); upgrade tvmtune-ci or re-tune")
        validate_manifest_shape(data, path)
        try:
            d = dict(data)
            d["trials"] = {w: Trials(**t) for w, t in d["trials"].items()}
            d["results"] = {
                w: WorkloadResult(
                    best=Measured(**r["best"]),
                    baseline=Measured(**r["baseline"]),
                    top=tuple(Measured(**m) for m in r.get("top", ())),
                    space_size=r.get("space_size", 0),
                    design_spaces=r.get("design_spaces", 1),
                    curve=tuple((int(a), float(b)) for a, b in r.get("curve", ())),
                    previous_best=Measured(**r["previous_best"]) if r.get("previous_best") else None,
                    previous_verdict=r.get("previous_verdict"),
                    best_source=r.get("best_source", "search"),
                    history=r.get("history"),
                    noise_check=Measured(**r["noise_check"]) if r.get("noise_check") else None,
                )
                for w, r in d["results"].items()
            }
            return cls(**d)
        except (KeyError, TypeError, AttributeError) as e:
            raise CorruptFileError(f"{path}: manifest is missing or has wrong fields ({e}); inspect it or delete it and re-tune") from None


def read_manifest(path: Path) -> Manifest:
    """Read and check a manifest.json; CorruptFileError naming the file and the field
    that is wrong."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CorruptFileError(f"{path}: cannot parse manifest ({e}); inspect it or delete it and re-tune") from None
    return Manifest.from_json(data, path)


def write_manifest(path: Path, manifest: Manifest) -> None:
    """Write `manifest` to `path` atomically (temp file + rename)."""
    atomic_write_json(path, manifest.to_json())


# --------------------------------------------------------------------------- shape

class _Shape(Exception):
    """One field that is not what the manifest format says; `where` is a dotted path."""

    def __init__(self, where: str, value: Any, expected: str) -> None:
        shown = repr(value)
        super().__init__(f"{where} is {shown if len(shown) <= 60 else shown[:57] + '...'}, expected {expected}")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    # JSON may carry NaN/Infinity; neither is a measurement.
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _need(ok: bool, where: str, value: Any, expected: str) -> None:
    if not ok:
        raise _Shape(where, value, expected)


def _obj(data: Any, where: str) -> dict[str, Any]:
    _need(isinstance(data, dict), where, data, "an object")
    return data


def _str_map(data: Any, where: str) -> None:
    for k, v in _obj(data, where).items():
        _need(isinstance(v, str), f"{where}.{k}", v, "a string")


def _no_floats(value: Any, where: str) -> None:
    # TVM target attributes are ints, strings, booleans, lists and dicts; a float
    # such as num-cores 2.0 compares equal to 2 here but TVM rejects it.
    if isinstance(value, float):
        raise _Shape(where, value, "an integer, string or boolean (TVM targets have no floats)")
    if isinstance(value, dict):
        for k, v in value.items():
            _no_floats(v, f"{where}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _no_floats(v, f"{where}[{i}]")


def _measured(data: Any, where: str) -> None:
    # Only the fields every version writes; optional extras (ci_rel, samples, ...) pass.
    m = _obj(data, where)
    _need(isinstance(m.get("knobs"), dict), f"{where}.knobs", m.get("knobs"), "an object")
    lat = m.get("latency_s")
    _need(_is_number(lat) and lat > 0, f"{where}.latency_s", lat, "a positive number of seconds")
    g = m.get("gflops")
    _need(g is None or _is_number(g), f"{where}.gflops", g, "a number or null")


def _result(data: Any, where: str) -> None:
    r = _obj(data, where)
    _measured(r.get("best"), f"{where}.best")
    _measured(r.get("baseline"), f"{where}.baseline")
    top = r.get("top", [])
    _need(isinstance(top, list), f"{where}.top", top, "a list")
    for i, m in enumerate(top):
        _measured(m, f"{where}.top[{i}]")
    for key, low in (("space_size", 0), ("design_spaces", 1)):
        if key in r:
            _need(_is_int(r[key]) and r[key] >= low, f"{where}.{key}", r[key], f"an integer >= {low}")
    curve = r.get("curve", [])
    _need(isinstance(curve, list), f"{where}.curve", curve, "a list of [trial, gflops]")
    for i, point in enumerate(curve):
        ok = isinstance(point, list) and len(point) == 2 and _is_int(point[0]) and _is_number(point[1])
        _need(ok, f"{where}.curve[{i}]", point, "[trial, gflops]")
    if r.get("previous_best") is not None:
        _measured(r["previous_best"], f"{where}.previous_best")
    if r.get("history") is not None:
        _obj(r["history"], f"{where}.history")
    if r.get("noise_check") is not None:
        _measured(r["noise_check"], f"{where}.noise_check")


def _trials(data: Any, where: str) -> None:
    t = _obj(data, where)
    for key in ("requested", "run", "valid", "failed"):
        _need(_is_int(t.get(key)) and t[key] >= 0, f"{where}.{key}", t.get(key), "an integer >= 0")
    _need(isinstance(t.get("stop_reason"), str), f"{where}.stop_reason", t.get("stop_reason"), "a string")
    for k, v in _obj(t.get("failures", {}), f"{where}.failures").items():
        _need(_is_int(v) and v >= 0, f"{where}.failures.{k}", v, "an integer >= 0")


def validate_manifest_shape(data: dict[str, Any], path: Path) -> None:
    """CorruptFileError naming the first field of `data` that is not what format 1 says.

    A hand-edited or truncated manifest must read as corrupt, not crash a reader
    later (a curve point [1]) nor pass as fresh (latency "abc", dependencies a list).
    Unknown optional keys inside results and measurements are accepted.
    """
    try:
        for key in ("operator", "target_name", "log", "log_sha256", "fingerprint", "tvm_version",
                    "tuned_on", "template_file"):
            _need(isinstance(data.get(key), str), key, data.get(key), "a string")
        target = _obj(data.get("target"), "target")
        _need(isinstance(target.get("kind"), str), "target.kind", target.get("kind"), "a string")
        _no_floats(target, "target")
        _str_map(data.get("dependencies"), "dependencies")
        for w, params in _obj(data.get("workloads"), "workloads").items():
            _obj(params, f"workloads.{w}")
        _need(_is_int(data.get("seed")), "seed", data.get("seed"), "an integer")
        for w, t in _obj(data.get("trials"), "trials").items():
            _trials(t, f"trials.{w}")
        for w, r in _obj(data.get("results"), "results").items():
            _result(r, f"results.{w}")
        _obj(data.get("measure"), "measure")
        _obj(data.get("host", {}), "host")
        _obj(data.get("target_facts", {}), "target_facts")
        _str_map(data.get("files", {}), "files")
        blob = data.get("log_git_blob", "")
        _need(isinstance(blob, str), "log_git_blob", blob, "a string")
        commit = data.get("template_commit")
        _need(commit is None or isinstance(commit, str), "template_commit", commit, "a string or null")
    except _Shape as e:
        raise CorruptFileError(
            f"{path}: manifest field {e}; the manifest was edited by hand or truncated: "
            "restore it from git or re-tune (tvmtune-ci retune)"
        ) from None
