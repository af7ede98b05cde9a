"""The manifest's format: its versions, the names of its two files, and what every
field they hold must be.

`validate_manifest_shape` checks a manifest.json before any field is read: a
hand-edited or truncated one reads as corrupt, naming the field. The types and the
reading and writing of both files are `manifest.py`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, TypeGuard

from .errors import CorruptFileError
from .templateapi import UNRECORDED

# 2: latencies are stats.estimate values with their intervals (ci_lo_s, ci_hi_s, n,
# stage), previous_verdict, best_source. Format 1 (fixed-repeat means) still reads.
# 3: log_git_blob (the log's git blob id), so `check` can trust git's index for a
# committed, unmodified log instead of re-hashing it. Formats 1-2 read (hashed).
# 4: the per-workload results (curves, top tables: most of the bytes) move to
# results.json, named and hashed in `files` like any file of the set, with git blob
# ids (files_git_blob); `sources` records what the template's fingerprint was
# computed from (sources.py). `check` reads a ~5 KB manifest and parses no template
# when git vouches for them. Formats 1-3 read (results inline).
# 5: `carried`: the set was carried forward unmeasured onto an edited template that
# makes the same programs (pipeline.carry_step); {} when it was tuned. Format 4 reads.
# 6: `partial`: only the set's workloads changed, and the re-tune tuned the added and
# changed ones and carried the rest as they were measured (pipeline/partial.py); {}
# when every workload was tuned (then not written). Format 5 reads.
MANIFEST_FORMAT = 6
READ_FORMATS = (1, 2, 3, 4, 5, 6)
MANIFEST_NAME = "manifest.json"
RESULTS_NAME = "results.json"
RESULTS_FORMAT = 1


# --------------------------------------------------------------------------- shape


class _Shape(Exception):
    """One field that is not what the manifest format says; `where` is a dotted path."""

    def __init__(self, where: str, value: Any, expected: str) -> None:
        shown = repr(value)
        super().__init__(f"{where} is {shown if len(shown) <= 60 else shown[:57] + '...'}, expected {expected}")


def _is_int(v: Any) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> TypeGuard[float]:
    # JSON may carry NaN/Infinity; neither is a measurement.
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _need(ok: bool, where: str, value: Any, expected: str) -> None:
    if not ok:
        raise _Shape(where, value, expected)


def _obj(data: Any, where: str) -> dict[str, Any]:
    _need(isinstance(data, dict), where, data, "an object")
    return data


def _str_map(data: Any, where: str) -> None:
    # The check's hot path (thousands of manifests): the dotted path is built only
    # for the field that fails.
    for k, v in _obj(data, where).items():
        if not isinstance(v, str):
            raise _Shape(f"{where}.{k}", v, "a string")


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
    t = m.get("trial")
    _need(t is None or (_is_int(t) and t >= 1), f"{where}.trial", t, "a trial number >= 1, or absent")


def _result(data: Any, where: str) -> None:
    r = _obj(data, where)
    _measured(r.get("best"), f"{where}.best")
    _measured(r.get("baseline"), f"{where}.baseline")
    top = r.get("top", [])
    _need(isinstance(top, list), f"{where}.top", top, "a list")
    for i, m in enumerate(top):
        _measured(m, f"{where}.top[{i}]")
    for key, low in (("space_size", 0), ("design_spaces", 1), ("bytes_moved", 0)):
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
        v = t.get(key)
        if not (_is_int(v) and v >= 0):
            raise _Shape(f"{where}.{key}", v, "an integer >= 0")
    if not isinstance(t.get("stop_reason"), str):
        raise _Shape(f"{where}.stop_reason", t.get("stop_reason"), "a string")
    failures = t.get("failures", {})
    if not isinstance(failures, dict):
        raise _Shape(f"{where}.failures", failures, "an object")
    for k, v in failures.items():
        if not (_is_int(v) and v >= 0):
            raise _Shape(f"{where}.failures.{k}", v, "an integer >= 0")


def _sources(data: Any) -> None:
    src = _obj(data, "sources")
    for key in ("algorithm", "fingerprint", "workloads_hash"):
        _need(isinstance(src.get(key), str), f"sources.{key}", src.get(key), "a string")
    line = src.get("template_line")
    _need(_is_int(line) and line >= 1, "sources.template_line", line, "a line number")
    _str_map(src.get("blobs"), "sources.blobs")
    _str_map(src.get("probes"), "sources.probes")
    version = src.get("version", 1)
    _need(_is_int(version) and version >= 1, "sources.version", version, "an integer >= 1")
    for g, files in _obj(src.get("globs", {}), "sources.globs").items():
        ok = isinstance(files, list) and all(isinstance(f, str) for f in files)
        _need(ok, f"sources.globs.{g}", files, "a list of files")
    notes = src.get("notes", [])
    _need(isinstance(notes, list), "sources.notes", notes, "a list")
    for i, n in enumerate(notes):
        ok = (
            isinstance(n, dict)
            and all(isinstance(n.get(k), str) for k in ("file", "kind", "what"))
            and _is_int(n.get("line"))
        )
        _need(ok, f"sources.notes[{i}]", n, "{file, line, kind, what}")
    for w, s in _obj(src.get("space_sizes"), "sources.space_sizes").items():
        ok = isinstance(s, list) and len(s) == 2 and all(_is_int(v) and v >= 0 for v in s)
        _need(ok, f"sources.space_sizes.{w}", s, "[points, design spaces]")


def validate_manifest_shape(data: dict[str, Any], path: Path) -> None:
    """CorruptFileError naming the first field of `data` that is not what its format says.

    A hand-edited or truncated manifest must read as corrupt, not crash a reader
    later (a curve point [1]) nor pass as fresh (latency "abc", dependencies a list).
    Unknown optional keys inside results and measurements are accepted.
    """
    try:
        fmt = data.get("format")
        _provenance(data)
        _results_or_their_file(data, fmt)
        _settings_and_hashes(data)
        _carried_and_partial(data, fmt)
    except _Shape as e:
        raise CorruptFileError(
            f"{path}: manifest field {e}; the manifest was edited by hand or truncated: "
            "restore it from git or re-tune (tvmtune-ci retune)"
        ) from None


def _provenance(data: dict[str, Any]) -> None:
    """What was tuned, for which target, from which sources, with which trials."""
    for key in (
        "operator",
        "target_name",
        "log",
        "log_sha256",
        "fingerprint",
        "tvm_version",
        "tuned_on",
        "template_file",
    ):
        _need(isinstance(data.get(key), str), key, data.get(key), "a string")
    target = _obj(data.get("target"), "target")
    _need(isinstance(target.get("kind"), str), "target.kind", target.get("kind"), "a string")
    _no_floats(target, "target")
    _str_map(data.get("dependencies"), "dependencies")
    for w, params in _obj(data.get("workloads"), "workloads").items():
        if not isinstance(params, dict):
            raise _Shape(f"workloads.{w}", params, "an object")
    _need(_is_int(data.get("seed")), "seed", data.get("seed"), "an integer")
    for w, t in _obj(data.get("trials"), "trials").items():
        _trials(t, "trials." + w)


def _results_or_their_file(data: dict[str, Any], fmt: Any) -> None:
    """From format 4, results.json's hash, the git blob ids and the recorded sources;
    before it, the results inline."""
    if fmt is not None and fmt >= 4:
        _need(
            RESULTS_NAME in _obj(data.get("files"), "files"),
            f"files.{RESULTS_NAME}",
            None,
            "the sha256 of results.json",
        )
        _str_map(data.get("files_git_blob", {}), "files_git_blob")
        if data.get("sources", {}) != {}:  # {}: nothing recorded, the template is parsed
            _sources(data.get("sources"))
    else:
        for w, r in _obj(data.get("results"), "results").items():
            _result(r, f"results.{w}")


def _settings_and_hashes(data: dict[str, Any]) -> None:
    """The measurement settings, host and target facts, the set's files, the log's blob
    id, the template's commit and API."""
    _obj(data.get("measure"), "measure")
    _obj(data.get("host", {}), "host")
    _obj(data.get("target_facts", {}), "target_facts")
    _str_map(data.get("files", {}), "files")
    blob = data.get("log_git_blob", "")
    _need(isinstance(blob, str), "log_git_blob", blob, "a string")
    commit = data.get("template_commit")
    _need(commit is None or isinstance(commit, str), "template_commit", commit, "a string or null")
    api = data.get("template_api", UNRECORDED)
    _need(_is_int(api) and api >= 1, "template_api", api, "an integer >= 1")


def _carried_and_partial(data: dict[str, Any], fmt: Any) -> None:
    """`carried` (format 5) and `partial` (format 6): absent before, complete when set."""
    carried = data.get("carried", {})
    _need(fmt is not None and fmt >= 5 or carried == {}, "carried", carried, "absent before format 5")
    if carried != {}:
        for key in ("on", "from_fingerprint", "sentence"):
            _need(isinstance(_obj(carried, "carried").get(key), str), f"carried.{key}", carried.get(key), "a string")
    partial = data.get("partial", {})
    _need(fmt is not None and fmt >= 6 or partial == {}, "partial", partial, "absent before format 6")
    if partial != {}:
        for key in ("on", "from_log", "from_date", "sentence"):
            _need(isinstance(_obj(partial, "partial").get(key), str), f"partial.{key}", partial.get(key), "a string")
        for key in ("tuned", "changed", "carried", "removed"):
            v = partial.get(key)
            _need(
                isinstance(v, list) and all(isinstance(x, str) for x in v),
                f"partial.{key}",
                v,
                "a list of workload names",
            )


def validate_results_shape(obj: Any, path: Path) -> None:
    """CorruptFileError naming the first field of a parsed results.json that is not what
    its format says."""
    try:
        _obj(obj, "results file")
        fmt = obj.get("format")
        _need(fmt == RESULTS_FORMAT, "format", fmt, f"{RESULTS_FORMAT} (this tvmtune-ci's results format)")
        for w, r in _obj(obj.get("results"), "results").items():
            _result(r, f"results.{w}")
    except _Shape as e:
        raise CorruptFileError(
            f"{path}: results field {e}; the file was edited by hand or truncated: "
            "restore it from git or re-tune (tvmtune-ci retune)"
        ) from None
