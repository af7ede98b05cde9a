"""`check`'s part of the models (docs/models.md): each model's coverage file read once,
without TVM.

Fails (`ModelProblem`, like a stale log): a coverage file that is missing, unreadable
or of another format; a model's committed MetaSchedule records for a target
(`models/<name>.<target>.records.json`) searched for another model source, TVM or
target dict; one whose model source changed since it was written (the hash of
its bytes); one whose coverage no longer holds because a template's IMPLEMENTS,
WORKLOADS or TARGET_KINDS changed (the recorded calls are matched again with today's
contracts: the matching is TVM-free). Warns: each call whose shape a template
implements but no workload declares (naming the model, the call, the template and the
params to add), each covered call whose epilogue ops (a bias, residual, scale, ReLU,
GELU after it: core/epilogue.py) still run alone, with the fix, and per model the ops
no template implements, unless fresh committed records schedule them on every target
the model is built for. Those warnings are
`CoverageWarning`s: `check` and `status` print them as one summary line
(`coverage_summary`), each only with `--verbose`.

Cost: nothing without `models:`. With models, one read of each coverage file and one
index lookup per template: a template git vouches for (tracked, unmodified, the blob
the file recorded) is not parsed; only an edited, new or removed one is.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..core.configschema import Config, ModelConfig
from ..core.contract import COVERED, UNCOVERED_OP, UNCOVERED_SHAPE, Contract, read_contract
from ..core.coverage import CoverageFile, read_coverage, recompute
from ..core.errors import CorruptFileError, TemplateError
from ..core.fsutil import sha256_file
from ..core.modelrecords import read_records, records_path, stale_reasons
from .tvmversion import installed_tvm_version

MODEL_MISSING = "model_missing"
MODEL_UNREADABLE = "model_unreadable"
MODEL_CHANGED = "model_changed"
COVERAGE_CHANGED = "coverage_changed"
RECORDS_STALE = "records_stale"  # the committed MetaSchedule records (core/modelrecords.py)
RECORDS_FIX = (
    "re-run `tvmtune-ci profile {name} --target {target} --untemplated metaschedule` on its runner "
    "and commit {file} (or delete it: the build then searches)"
)
EPILOGUE_ALONE = "epilogue_alone"  # a warning: a covered call's epilogue ops run unfused
REGENERATE = "run `tvmtune-ci models {name}` (TVM, the [tune] extra) and commit {file}"


@dataclass(frozen=True)
class ModelProblem:
    """Why a model's coverage file is stale: a code above, the detail, the file."""

    model: str
    code: str
    detail: str
    file: str  # repo-relative posix path
    line: int | None = None
    fix: str | None = None  # the hint, where it is not `tvmtune-ci models`

    @property
    def hint(self) -> str:
        return self.fix or REGENERATE.format(name=self.model, file=self.file)


class CoverageWarning(str):
    """One warning about a model's calls: its text, and what the one-line summary needs.
    A str, so that `Report.warnings` stays text for JSON and every other reader."""

    model: str
    kind: str  # UNCOVERED_SHAPE or EPILOGUE_ALONE (one call), UNCOVERED_OP (all of a model's)
    ops: tuple[str, ...]
    coverage_file: str

    def __new__(
        cls, text: str, model: str, kind: str, coverage_file: str, ops: tuple[str, ...] = ()
    ) -> CoverageWarning:
        self = super().__new__(cls, text)
        self.model, self.kind, self.coverage_file, self.ops = model, kind, coverage_file, ops
        return self


def split_warnings(warnings: Iterable[str]) -> tuple[list[str], list[CoverageWarning]]:
    """(the other warnings, the models' coverage warnings), each in order."""
    other: list[str] = []
    coverage: list[CoverageWarning] = []
    for w in warnings:
        if isinstance(w, CoverageWarning):
            coverage.append(w)
        else:
            other.append(w)
    return other, coverage


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def coverage_summary(warnings: Sequence[CoverageWarning]) -> str:
    """The models' coverage warnings in one line: on this repository's main they are
    facts about its models, not broken files, and seven of them buried the verdict."""
    models = list(dict.fromkeys(w.model for w in warnings))
    shapes = sum(1 for w in warnings if w.kind == UNCOVERED_SHAPE)
    alone = sum(1 for w in warnings if w.kind == EPILOGUE_ALONE)
    ops = dict.fromkeys(op for w in warnings if w.kind == UNCOVERED_OP for op in w.ops)
    parts = []
    if shapes:
        parts.append(f"{_plural(shapes, 'call shape')} that a template implements but no workload declares")
    if alone:
        parts.append(f"{_plural(alone, 'covered call')} whose epilogue ops run alone, unfused")
    if ops:
        parts.append(f"{_plural(len(ops), 'op')} that no template implements (TVM's own kernels run them)")
    return (
        f"model coverage of {_plural(len(models), 'model')} ({', '.join(models)}): {'; '.join(parts)}. "
        # The same line from `check` and `status`: `make demo` prints it once.
        "Run with `--verbose` to list each" + (", with the workload to add" if shapes or alone else "")
    )


def warning_lines(warnings: Iterable[str], verbose: bool) -> list[str]:
    """The warnings to print, the models' coverage ones as one summary line (after the
    others) unless `verbose`."""
    other, coverage = split_warnings(warnings)
    if verbose or not coverage:
        return list(warnings)
    return [*other, coverage_summary(coverage)]


def coverage_by_model(warnings: Iterable[str]) -> dict[str, list[CoverageWarning]]:
    """The models' coverage warnings by model, in order (one GitHub annotation each)."""
    out: dict[str, list[CoverageWarning]] = {}
    for w in split_warnings(warnings)[1]:
        out.setdefault(w.model, []).append(w)
    return out


def check_models(
    config: Config, index: Mapping[str, str], templates: Mapping[str, Path]
) -> tuple[list[ModelProblem], list[str]]:
    """(problems that fail check, warnings) for every model of `config`. `index`: git's
    clean blobs (absolute posix path -> blob id, `Checker.index`); `templates`:
    operator -> its template's absolute path (as `find_stale` discovered them)."""
    problems: list[ModelProblem] = []
    warnings: list[str] = []
    if not config.models:
        return problems, warnings
    root = config.root.resolve()
    top = root.as_posix()
    current = {p.relative_to(root).as_posix(): p for p in templates.values() if p.is_relative_to(root)}
    contracts_now: dict[str, Contract | None] = {}  # rel -> contract, parsed once per run
    for m in config.models:
        f, problem = _read(config, m)
        if problem is not None:
            problems.append(problem)
            continue
        assert f is not None
        src = root / m.source
        try:
            digest = sha256_file(src)
        except OSError:
            problems.append(
                ModelProblem(
                    m.name,
                    MODEL_MISSING,
                    f"model {m.name}: its source {m.source} cannot be read; fix `source:` in tvmtune.yaml",
                    m.source,
                )
            )
            continue
        found, fresh = _records(config, m, digest)
        problems += found
        if digest != f.source.get("sha256") or f.source.get("path") != m.source:
            problems.append(
                ModelProblem(
                    m.name,
                    MODEL_CHANGED,
                    f"model {m.name}: {m.source} changed since {m.coverage_file} was generated",
                    m.coverage_file,
                )
            )
            continue
        changed = _contracts_today(f, current, index, top, contracts_now, warnings)
        if changed is not None:
            now = recompute(f, changed)
            diff = _differences(f, now)
            if diff:
                problems.append(
                    ModelProblem(
                        m.name,
                        COVERAGE_CHANGED,
                        f"model {m.name}: a template's IMPLEMENTS or WORKLOADS changed and the coverage "
                        f"in {m.coverage_file} no longer holds: {'; '.join(diff[:3])}"
                        + (f" and {len(diff) - 3} more" if len(diff) > 3 else ""),
                        m.coverage_file,
                    )
                )
                continue
        built_for = m.targets or tuple(t.name for t in config.targets if not t.retired)
        warnings += _uncovered(f, m, [t for t in built_for if t not in fresh])
    return problems, warnings


def _records(config: Config, m: ModelConfig, digest: str) -> tuple[list[ModelProblem], set[str]]:
    """The model's committed MetaSchedule records, per target, judged as a log is: the
    model, TVM and the target they were searched for (core/modelrecords.py). Returns
    the problems and the targets whose records are fresh."""
    out = []
    fresh: set[str] = set()
    for t in config.targets:
        path = records_path(config.root, m.source, m.name, t.name)
        if not path.is_file():
            continue
        rel = path.relative_to(config.root).as_posix()
        fix = RECORDS_FIX.format(name=m.name, target=t.name, file=rel)
        try:
            r = read_records(path)
        except (CorruptFileError, OSError, UnicodeDecodeError) as e:
            out.append(ModelProblem(m.name, RECORDS_STALE, f"{e}", rel, fix=fix))
            continue
        tvm = config.tvm_version or installed_tvm_version() or r.tvm_version  # none installed: not judged
        why = stale_reasons(r, model_sha256=digest, tvm_version=tvm, target_dict=t.target)
        if why:
            out.append(
                ModelProblem(m.name, RECORDS_STALE, f"model {m.name} on {t.name}: {'; '.join(why)}", rel, fix=fix)
            )
        else:
            fresh.add(t.name)
    return out, fresh


def _read(config: Config, m: ModelConfig) -> tuple[CoverageFile | None, ModelProblem | None]:
    path = config.root / m.coverage_file
    try:
        return read_coverage(path), None
    except FileNotFoundError:
        return None, ModelProblem(
            m.name, MODEL_MISSING, f"model {m.name} has no coverage file {m.coverage_file}", m.coverage_file
        )
    except (OSError, UnicodeDecodeError) as e:
        return None, ModelProblem(m.name, MODEL_UNREADABLE, f"{m.coverage_file}: cannot read: {e}", m.coverage_file)
    except CorruptFileError as e:
        return None, ModelProblem(m.name, MODEL_UNREADABLE, str(e).replace(str(path), m.coverage_file), m.coverage_file)


def _contracts_today(
    f: CoverageFile,
    current: Mapping[str, Path],
    index: Mapping[str, str],
    top: str,
    cache: dict[str, Contract | None],
    warnings: list[str],
) -> dict[str, Contract] | None:
    """Today's contracts when one differs from the recorded ones; None when none does
    (every recorded template vouched for by git, or parsed and found the same)."""
    recorded = {c.file: c for c in f.contracts.values()}
    out: dict[str, Contract] = {}
    differs = False
    for rel in sorted(set(f.templates) | set(current)):
        path = current.get(rel)
        if path is not None and rel in f.templates and index.get(f"{top}/{rel}") == f.templates[rel]:
            if rel in recorded:
                out[recorded[rel].template] = recorded[rel]
            continue
        if path is None:
            c = None
        elif rel in cache:
            c = cache[rel]
        else:
            try:
                c = cache[rel] = read_contract(path, rel)
            except TemplateError as e:
                # Its entries report it (template_invalid); here its old contract stands.
                warnings.append(
                    f"{e}: its IMPLEMENTS cannot be read, so the models' coverage is checked with the one recorded"
                )
                c = cache[rel] = recorded.get(rel)
        old = recorded.get(rel)
        if (c is None) != (old is None) or (c is not None and old is not None and c.digest() != old.digest()):
            differs = True
        if c is not None:
            out[c.template] = c
    return out if differs else None


def _differences(old: CoverageFile, new: CoverageFile) -> list[str]:
    out = []
    for (i, _), (j, _) in zip(old.sites, new.sites, strict=True):
        sig, a, _n = old.calls[i]
        b = new.calls[j][1]
        if a != b:
            before, after = _status(a), _status(b)
            if before == after:  # the same kernel; what differs is the note (the fix it names)
                before, after = f"{before} ({a.note})", f"{after} ({b.note})"
            out.append(f"{sig.describe()} was {before}, now {after}")
    return list(dict.fromkeys(out))


def _status(c: object) -> str:
    status = getattr(c, "status", "")
    template, workload = getattr(c, "template", None), getattr(c, "workload", None)
    fused, alone = getattr(c, "epilogue", ()), getattr(c, "alone", ())
    if template and workload:
        return (
            f"{status} by {template}/{workload}"
            + (f" with {', '.join(fused)} fused" if fused else "")
            + (f", {', '.join(alone)} alone" if alone else "")
        )
    return f"{status} ({template})" if template else status


def _uncovered(f: CoverageFile, m: ModelConfig, unrecorded: Sequence[str]) -> list[str]:
    """The warnings of one model. `unrecorded`: the targets it is built for that have no
    fresh committed records: there, the ops no template implements are searched at
    every build (or get the built-in schedule). Where every one has them, those ops are
    scheduled by committed, checked records, and nothing is left to say about them."""
    out: list[str] = []
    ops: dict[str, int] = {}
    for sig, cov, n in f.calls:
        if cov.status == UNCOVERED_SHAPE:
            c = f.contracts.get(cov.template or "")
            where = c.file if c is not None else cov.template
            out.append(
                CoverageWarning(
                    f"{m.coverage_file}: model {m.name} calls {sig.describe()} ({n}x), which "
                    f"{where} implements but no workload of it declares: add "
                    f"{dict(cov.params)} to its WORKLOADS and tune it, or leave the call to TVM",
                    m.name,
                    UNCOVERED_SHAPE,
                    m.coverage_file,
                )
            )
        elif cov.status == COVERED and cov.alone:
            fused = f" with {', '.join(cov.epilogue)} fused in its kernel" if cov.epilogue else ""
            out.append(
                CoverageWarning(
                    f"{m.coverage_file}: model {m.name} calls {sig.describe()} ({n}x), run by "
                    f"{cov.template}/{cov.workload}{fused}; {cov.note}",
                    m.name,
                    EPILOGUE_ALONE,
                    m.coverage_file,
                )
            )
        elif cov.status == UNCOVERED_OP:
            ops[sig.op] = ops.get(sig.op, 0) + n
    if ops and unrecorded:
        listed = ", ".join(f"{op} ({n}x)" for op, n in sorted(ops.items(), key=lambda x: -x[1]))
        where = ", ".join(unrecorded)
        out.append(
            CoverageWarning(
                f"{m.coverage_file}: model {m.name}: no template implements {listed}; they run "
                f"TVM's own kernels, with no committed records on {where}: run `tvmtune-ci profile "
                f"{m.name} --target TARGET` on its runner and commit models/{m.name}.TARGET.records.json "
                "(docs/models.md)",
                m.name,
                UNCOVERED_OP,
                m.coverage_file,
                tuple(ops),
            )
        )
    return out
