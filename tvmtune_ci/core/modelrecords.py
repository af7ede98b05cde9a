"""A model's committed MetaSchedule records for the functions no template covers
(`models/<name>.<target>.records.json`): what the search of a model build found on
the target's runner, kept beside the model so that a team's build applies them
instead of searching again. TVM-free: `check` reads it.

    {
      "format": 1,
      "generated": "by tvmtune-ci profile; do not edit, regenerate with: tvmtune-ci profile NAME --target T",
      "model": "bert_layer", "target": "zen4-2c",
      "target_dict": {"kind": "llvm", "mcpu": "znver4", "num-cores": 2},
      "tvm_version": "0.27.0",
      "model_sha256": "...",               # the model source's bytes, as the coverage file
      "workloads": ["<a line of MetaSchedule's database_workload.json>", ...],
      "records": ["<a line of database_tuning_record.json>", ...]
    }

Stale, as a template's log is (`stale_reasons`): the model's source changed, TVM's
major.minor is not the configuration's, or the target's dict is not the configured
one. A stale file is not applied: the build searches again (and `check` fails until
`profile` on the runner rewrites it). The records of a search that left a function
without a valid record hold none for it: that function gets the built-in schedule.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import CorruptFileError
from .fsutil import atomic_write_json

FORMAT = 1
SUFFIX = ".records.json"


def header(model: str, target: str) -> str:
    return f"by tvmtune-ci profile; do not edit, regenerate with: tvmtune-ci profile {model} --target {target}"


@dataclass(frozen=True)
class ModelRecords:
    """One model's MetaSchedule records on one target, with what they were made for."""

    model: str
    target: str
    target_dict: Mapping[str, Any]
    tvm_version: str
    model_sha256: str
    workloads: tuple[str, ...]  # MetaSchedule's database_workload.json, line by line
    records: tuple[str, ...]  # database_tuning_record.json, line by line

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "generated": header(self.model, self.target),
            "model": self.model,
            "target": self.target,
            "target_dict": dict(self.target_dict),
            "tvm_version": self.tvm_version,
            "model_sha256": self.model_sha256,
            "workloads": list(self.workloads),
            "records": list(self.records),
        }


def records_path(root: Path, source: str, model: str, target: str) -> Path:
    """Beside the model's source: `models/<name>.<target>.records.json`."""
    return root / Path(source).parent / f"{model}.{target}{SUFFIX}"


def write_records(path: Path, r: ModelRecords) -> None:
    atomic_write_json(path, r.to_json())


def read_records(path: Path) -> ModelRecords:
    """CorruptFileError naming `path` and the fix for a file this version cannot read."""

    def bad(why: str) -> CorruptFileError:
        return CorruptFileError(
            f"{path}: {why}; regenerate it on the target's runner with `tvmtune-ci profile "
            "NAME --target T --untemplated metaschedule` (or delete it: the build then searches)"
        )

    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise bad(f"not JSON ({e.msg}, line {e.lineno})") from None
    if not isinstance(d, dict) or d.get("format") != FORMAT:
        raise bad(f"format {d.get('format') if isinstance(d, dict) else None!r} is not {FORMAT}")
    try:
        return ModelRecords(
            str(d["model"]),
            str(d["target"]),
            dict(d["target_dict"]),
            str(d["tvm_version"]),
            str(d["model_sha256"]),
            tuple(str(x) for x in d["workloads"]),
            tuple(str(x) for x in d["records"]),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise bad(f"malformed ({type(e).__name__}: {e})") from None


def stale_reasons(r: ModelRecords, *, model_sha256: str, tvm_version: str, target_dict: Mapping[str, Any]) -> list[str]:
    """Why `r` no longer describes the build (empty: fresh). `tvm_version`: the
    configuration's major.minor (or the installed full version)."""
    out = []
    if r.model_sha256 != model_sha256:
        out.append("the model's source changed since the records were searched")
    if _major_minor(r.tvm_version) != _major_minor(tvm_version):
        out.append(f"searched with TVM {r.tvm_version}, the configuration says {tvm_version}")
    if dict(r.target_dict) != dict(target_dict):
        out.append(f"searched for target {dict(r.target_dict)}, configured as {dict(target_dict)}")
    return out


def _major_minor(version: str) -> tuple[str, ...]:
    return tuple(version.split(".")[:2])


def lines_of(path: Path) -> tuple[str, ...]:
    """A MetaSchedule JSON database file's non-empty lines (none if it does not exist)."""
    if not path.is_file():
        return ()
    return tuple(line for line in path.read_text(encoding="utf-8").splitlines() if line.strip())


def write_database(work_dir: Path, workloads: Sequence[str], records: Sequence[str]) -> None:
    """The records as MetaSchedule's JSONDatabase files in `work_dir`."""
    work_dir.mkdir(parents=True, exist_ok=True)
    (work_dir / "database_workload.json").write_text("".join(f"{x}\n" for x in workloads), encoding="utf-8")
    (work_dir / "database_tuning_record.json").write_text("".join(f"{x}\n" for x in records), encoding="utf-8")
