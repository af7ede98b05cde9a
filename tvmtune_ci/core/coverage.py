"""A model's coverage file (`models/<name>.coverage.json`): what `tvmtune-ci models`
found in the model and which template covers each call. TVM-free: written by the
`models` command, read by `check`.

    {
      "format": 1,
      "generated": "by tvmtune-ci models; do not edit, regenerate with: tvmtune-ci models NAME",
      "model": "bert_layer",
      "source": {"path": "models/bert_layer.py", "kind": "python", "sha256": "..."},
      "kinds": ["llvm"],                       # target kinds the model is built for
      "templates": {"operators/dense.py": "<git blob id>", ...},   # every template read
      "contracts": {"dense": {"file": ..., "digest": ..., "implements": [...],
                              "workloads": {...}, "kinds": [...]}, ...},  # IMPLEMENTS
      "calls": [{"op": ..., "args": [...], "attrs": {...}, "shape": [...], "dtype": ...,
                 "count": 4, "coverage": {"status": "covered", "template": "dense",
                 "workload": "bert_ffn1", "params": {...}}}, ...],
      "sites": [[CALL, [PRODUCER, ...]], ...],  # each call site in program order
      "escapes": [SITE, ...],                  # sites whose output is used beyond calls
      "summary": {"covered": 2, ...}           # call sites per status
    }

`calls` groups equal signatures with the same coverage (`count` sites each); `sites`
keeps the program order and which call site produced each tensor argument (-1: an
input or weight), and `escapes` the sites whose output is also returned or put in a
tuple (no epilogue is fused past those): what `chains.coverage_of` needs to judge a
permute_dims and an epilogue chain:
`check` recomputes the coverage from them with the templates' contracts of today.
The source's hash is of its bytes: a model module's in-repo imports are not followed
(docs/models.md).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .chains import coverage_of
from .contract import STATUSES, CallSig, Contract, Coverage, parse_implements
from .errors import CorruptFileError, TemplateError
from .fsutil import atomic_write_json

FORMAT = 1


def header(model: str) -> str:
    return f"by tvmtune-ci models; do not edit, regenerate with: tvmtune-ci models {model}"


@dataclass(frozen=True)
class CoverageFile:
    """A coverage file as read (`read_coverage`) or about to be written (`build`)."""

    model: str
    source: Mapping[str, Any]  # path, kind, sha256
    kinds: tuple[str, ...]
    templates: Mapping[str, str]  # repo-relative template file -> git blob id when read
    contracts: Mapping[str, Contract]  # operator -> contract (templates with IMPLEMENTS)
    calls: tuple[tuple[CallSig, Coverage, int], ...]  # signature, coverage, count
    sites: tuple[tuple[int, tuple[int, ...]], ...]  # call index, producer sites
    escapes: tuple[int, ...] = ()  # sites whose output is used other than by a call

    def to_json(self) -> dict[str, Any]:
        summary = {s: 0 for s in STATUSES}
        for i, _ in self.sites:
            summary[self.calls[i][1].status] += 1
        return {
            "format": FORMAT,
            "generated": header(self.model),
            "model": self.model,
            "source": dict(self.source),
            "kinds": list(self.kinds),
            "templates": dict(sorted(self.templates.items())),
            "contracts": {
                name: {
                    "file": c.file,
                    "digest": c.digest(),
                    "implements": c.raw,
                    "workloads": c.workloads,
                    "kinds": list(c.kinds),
                }
                for name, c in sorted(self.contracts.items())
            },
            "calls": [{**sig.to_json(), "count": n, "coverage": cov.to_json()} for sig, cov, n in self.calls],
            "sites": [[i, list(p)] for i, p in self.sites],
            **({"escapes": list(self.escapes)} if self.escapes else {}),
            "summary": summary,
        }

    def site_calls(self) -> list[tuple[CallSig, tuple[int, ...]]]:
        return [(self.calls[i][0], p) for i, p in self.sites]

    def uses(self) -> set[tuple[str, str]]:
        """(template, workload) pairs its covered calls use."""
        return {
            (cov.template, cov.workload)
            for _, cov, _ in self.calls
            if cov.template is not None and cov.workload is not None
        }


def group(
    sigs: Sequence[tuple[CallSig, tuple[int, ...]]], covs: Sequence[Coverage]
) -> tuple[tuple[tuple[CallSig, Coverage, int], ...], tuple[tuple[int, tuple[int, ...]], ...]]:
    """Call sites -> (grouped calls with counts, sites pointing into them), first
    occurrence order."""
    index: dict[str, int] = {}
    calls: list[list[Any]] = []
    sites = []
    for (sig, producers), cov in zip(sigs, covs, strict=True):
        key = sig.key() + json.dumps(cov.to_json(), sort_keys=True)
        i = index.get(key)
        if i is None:
            i = index[key] = len(calls)
            calls.append([sig, cov, 0])
        calls[i][2] += 1
        sites.append((i, tuple(producers)))
    return tuple((s, c, n) for s, c, n in calls), tuple(sites)


def build(
    model: str,
    source: Mapping[str, Any],
    kinds: Sequence[str],
    templates: Mapping[str, str],
    contracts: Sequence[Contract],
    sites: Sequence[tuple[CallSig, tuple[int, ...]]],
    escapes: Sequence[int] = (),
) -> CoverageFile:
    """The coverage file of a model's call sites matched against `contracts`."""
    usable = [c for c in contracts if set(c.kinds) & set(kinds)]
    calls, grouped = group(sites, coverage_of(sites, usable, escapes))
    return CoverageFile(
        model,
        dict(source),
        tuple(kinds),
        dict(templates),
        {c.template: c for c in contracts},
        calls,
        grouped,
        tuple(sorted(escapes)),
    )


def recompute(f: CoverageFile, contracts: Mapping[str, Contract]) -> CoverageFile:
    """The same call sites matched against `contracts` (today's)."""
    return build(f.model, f.source, f.kinds, f.templates, list(contracts.values()), f.site_calls(), f.escapes)


def write_coverage(path: Path, f: CoverageFile) -> None:
    atomic_write_json(path, f.to_json())


def read_coverage(path: Path) -> CoverageFile:
    """CorruptFileError naming `path` for a file this version cannot read; OSError
    (FileNotFoundError) passes through."""
    text = path.read_text(encoding="utf-8")

    def bad(why: str) -> CorruptFileError:
        return CorruptFileError(f"{path}: {why}; regenerate it with `tvmtune-ci models` (or delete it and regenerate)")

    try:
        d = json.loads(text)
    except json.JSONDecodeError as e:
        raise bad(f"not JSON ({e.msg}, line {e.lineno})") from None
    if not isinstance(d, dict) or "format" not in d:
        raise bad("not a coverage file (no format)")
    if d["format"] != FORMAT:
        raise bad(f"format {d['format']!r} is not understood by this tvmtune-ci (it writes {FORMAT})")
    try:
        contracts = {}
        for name, c in d["contracts"].items():
            impl = parse_implements(c["implements"], c["workloads"], c["file"], 0)
            contracts[name] = Contract(name, c["file"], impl, c["workloads"], tuple(c["kinds"]), c["implements"])
        calls = tuple((CallSig.from_json(c), Coverage.from_json(c["coverage"]), int(c["count"])) for c in d["calls"])
        sites = tuple((int(i), tuple(int(x) for x in p)) for i, p in d["sites"])
        if any(not 0 <= i < len(calls) for i, _ in sites):
            raise ValueError("a site names no call")
        escapes = tuple(int(x) for x in d.get("escapes", ()))
        return CoverageFile(
            d["model"], dict(d["source"]), tuple(d["kinds"]), dict(d["templates"]), contracts, calls, sites, escapes
        )
    except (KeyError, TypeError, ValueError, AttributeError, TemplateError) as e:
        raise bad(f"malformed ({type(e).__name__}: {e})") from None
