"""Is each committed log set still true? Every reason it is not, with where to look.

For every (operator, target) the config asks for, `find_stale` compares the log
set's manifest with what the repository says now: the template's fingerprint
(fingerprint.py), its WORKLOADS, the configured target, the TVM version, the age
of the log and the bytes of the files the manifest names. Nothing is imported or
run: templates are read as text, TVM's version is read from package metadata.

Fast on real repositories (benchmarks/bench_check.py): a committed, unmodified log
or results file is vouched for by git's index instead of being re-read
(`_Checker._files`); a template whose recorded inputs git vouches for is not
parsed and fingerprinted again (`_Checker.recorded`, sources.py); and
`--changed-since` parses only the templates an edit can concern (`_candidates`).

Over 400 lines: every reason a log set is stale is decided here, in one order, so
that how the reasons interact stays visible.
"""

from __future__ import annotations

import ast
import contextlib
import datetime
import difflib
import fnmatch
import gc
import json
import posixpath
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from . import sources, templateapi
from .config import Config, TargetConfig
from .datafiles import ENV, Note
from .errors import ConfigError, CorruptFileError, TemplateError, UsageError
from .fingerprint import (
    DATA_QUALNAME,
    DependencyChange,
    Fingerprint,
    SourceCache,
    compare_dependencies,
    split_key,
    workloads_json,
)
from .fsutil import NotRegularFileError, read_regular_file, sha256_bytes, what_is
from .git import read as git_read
from .layout import LogSet
from .manifest import MANIFEST_NAME, RESULTS_NAME, Manifest, parse_results
from .reasons import RETUNE, Code
from .records import LOG_FORMAT
from .runs import RUNS_NAME, parse_runs
from .targetinfo import scope, target_facts
from .targets import canonical_target, slug, target_json
from .template import ADVISED_POINTS, TemplateDecl, discover_templates, space_advice

# Reason codes (reasons.Code: their order, what each blocks downstream, their fix).
MISSING = Code.MISSING
TEMPLATE_INVALID = Code.TEMPLATE_INVALID
TEMPLATE_CHANGED = Code.TEMPLATE_CHANGED
WORKLOAD_CHANGED = Code.WORKLOAD_CHANGED
TARGET_CHANGED = Code.TARGET_CHANGED
TVM_CHANGED = Code.TVM_CHANGED
TEMPLATE_API_CHANGED = Code.TEMPLATE_API_CHANGED
EXPIRED = Code.EXPIRED
LOG_MODIFIED = Code.LOG_MODIFIED
ORPHANED = Code.ORPHANED  # a warning (Report.orphans), never a reason

FIX_HINT = RETUNE

# Reads of committed files are bounded: a manifest is a few KB, a log a few MB.
MAX_MANIFEST_BYTES = 16 << 20
MAX_LOG_BYTES = 512 << 20
# A log tuned "tomorrow" is a time zone, not a hand edit.
FUTURE_SLACK = datetime.timedelta(days=1)


@dataclass(frozen=True)
class Reason:
    """Why an entry is stale: a reason code, the detail in words, and the file:line
    to look at (None when there is no such place)."""

    code: Code
    detail: str
    file: str | None = None  # repo-relative posix path
    line: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "code", Code(self.code))  # a plain "missing" too


@dataclass(frozen=True)
class Entry:
    """One (operator, target) pair: its template, its log set and manifest (if any),
    and every reason its log is stale (none: fresh)."""

    operator: str
    target_name: str  # the configured target's name (its config: Config.target(name))
    template_file: str  # repo-relative posix path
    template_line: int
    reasons: tuple[Reason, ...]
    manifest: Manifest | None
    logset: LogSet
    space_sizes: dict[str, tuple[int, int]]  # workload -> (points per design space, design spaces)
    as_of: datetime.date | None = None  # the day ages are counted to; None: today
    # The operator whose orphaned log folder fits this entry's template (renames.py):
    # `tvmtune-ci adopt OLD OPERATOR` keeps that log; None when there is none.
    renamed_from: str | None = None

    @property
    def fresh(self) -> bool:
        return not self.reasons

    @property
    def age_days(self) -> int | None:
        tuned = _tuned_on(self.manifest) if self.manifest is not None else None
        if tuned is None:
            return None
        return ((self.as_of or datetime.date.today()) - tuned).days


@dataclass(frozen=True)
class Report:
    """Every entry a check looked at, and the warnings it has (orphaned log folders,
    config warnings)."""

    entries: tuple[Entry, ...]
    orphans: tuple[Reason, ...]
    warnings: tuple[str, ...]
    # Logs whose bytes git's index vouched for (not read); the rest were hashed.
    logs_trusted: int = 0
    # Entries whose template was not parsed: git vouched for its recorded sources.
    templates_trusted: int = 0
    # Log folders of unconfigured targets or operators that tvmtune.yaml's `keep:` declares.
    kept: tuple[str, ...] = ()

    @property
    def stale(self) -> tuple[Entry, ...]:
        return tuple(e for e in self.entries if not e.fresh)


# --------------------------------------------------------------------------- helpers


def _symlinked_folder(logset: LogSet) -> Path | None:
    """The log folder or its operator folder when it is a symlink (it could lead anywhere)."""
    for d in (logset.folder, logset.folder.parent):
        if d.is_symlink():
            return d
    return None


def _safe_name(name: object) -> bool:
    # A plain file name in the log folder: no "../x.json", no absolute path, no "..".
    return (
        isinstance(name, str)
        and name not in ("", ".", "..")
        and "/" not in name
        and "\\" not in name
        and "\0" not in name
        and Path(name).name == name
    )


def _tuned_on(manifest: Manifest) -> datetime.date | None:
    try:
        return datetime.date.fromisoformat(manifest.tuned_on)
    except (TypeError, ValueError):
        return None


def parse_date(text: str, option: str = "--as-of") -> datetime.date:
    """YYYY-MM-DD, or UsageError (exit 2) saying how to write it."""
    try:
        return datetime.date.fromisoformat(text)
    except ValueError:
        raise UsageError(
            f"{option} {text!r} is not a date; write it as YYYY-MM-DD, "
            f"e.g. {option} {datetime.date.today().isoformat()}"
        ) from None


_VERSION = re.compile(r"^\s*v?(\d+)\.(\d+)")


def major_minor(version: str) -> str | None:
    """ "0.27.0.post1" -> "0.27"; None when `version` does not start with MAJOR.MINOR."""
    m = _VERSION.match(version or "")
    return f"{int(m.group(1))}.{int(m.group(2))}" if m else None


def installed_tvm_version() -> str | None:
    """The installed apache-tvm distribution's version, from metadata: TVM is not imported."""
    import importlib.metadata  # only when tvmtune.yaml does not pin tvm_version

    try:
        return importlib.metadata.version("apache-tvm")
    except importlib.metadata.PackageNotFoundError:
        return None


def select_entries(config: Config, operators: Sequence[str] | None, targets: Sequence[str] | None
                   ) -> tuple[set[str] | None, set[str] | None]:
    """The operators and targets a command asked for (None: all), each checked against
    the templates and the configured targets: UsageError (exit 2) naming an unknown
    one and the closest known name."""
    known_ops = [p.stem for p in discover_templates(config.operators_path.resolve())]
    return (_select(operators, known_ops, "operator"),
            _select(targets, [t.name for t in config.targets], "target"))


def _select(wanted: Sequence[str] | None, known: Iterable[str], what: str) -> set[str] | None:
    if wanted is None:
        return None
    known = list(known)
    for name in wanted:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = (
                f"did you mean {close[0]!r}?" if close else f"known: {', '.join(known) or '(none)'}"
            )
            raise UsageError(f"unknown {what} {name!r}; {hint}")
    return set(wanted)


def _invalid_reason(error: TemplateError, cache: SourceCache, template_rel: str) -> Reason:
    """template_invalid naming the repo-relative file:line the TemplateError names."""
    if error.file is None:
        return Reason(TEMPLATE_INVALID, f"{template_rel}: {error}", template_rel, None)
    rel = cache.rel(Path(error.file))
    where = f"{rel}:{error.line}" if error.line else rel
    return Reason(TEMPLATE_INVALID, f"{where}: {error.message}", rel, error.line)


def _assign_line(tree: ast.Module, name: str) -> int | None:
    for stmt in tree.body:
        targets = (
            stmt.targets
            if isinstance(stmt, ast.Assign)
            else ([stmt.target] if isinstance(stmt, ast.AnnAssign) else [])
        )
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return stmt.lineno
    return None


def _normal(obj: Any) -> Any:
    # Workloads as JSON sees them: a tuple in the template equals the list on disk.
    return json.loads(workloads_json(obj))


def _value_diff(old: Any, new: Any) -> str:
    if not (isinstance(old, dict) and isinstance(new, dict)):
        return f"{old!r} -> {new!r}"
    parts = []
    for k in sorted(set(old) | set(new)):
        if k not in old:
            parts.append(f"{k} added ({new[k]!r})")
        elif k not in new:
            parts.append(f"{k} removed (was {old[k]!r})")
        elif old[k] != new[k]:
            parts.append(f"{k} {old[k]!r} -> {new[k]!r}")
    return ", ".join(parts)


# --------------------------------------------------------------------------- checks


@dataclass(frozen=True)
class _Template:
    """What one template contributes to each of its entries (computed once)."""

    rel: str
    line: int
    decl: TemplateDecl | None
    fingerprint: Fingerprint | None
    invalid: Reason | None
    workloads_line: int | None
    space_sizes: dict[str, tuple[int, int]]
    workloads: Any = None  # WORKLOADS as JSON reads it back: a tuple equals the stored list
    # Repo-relative files its meaning depends on (for --changed-since).
    files: frozenset[str] = frozenset()
    # Reads check reports (environment variables, paths it cannot follow).
    notes: tuple[Note, ...] = ()


def _read_template(path: Path, cache: SourceCache) -> _Template:
    rel = cache.rel(path)
    try:
        decl = cache.template(path)
        fp = cache.fingerprint(path)
        workloads_line = _assign_line(cache.tree(path), "WORKLOADS")
    except TemplateError as e:
        reason = _invalid_reason(e, cache, rel)
        line = reason.line if reason.file == rel and reason.line else 1
        return _Template(rel, line, None, None, reason, None, {})
    finally:
        cache.forget(path)  # its tree is not needed again; keeps memory flat
    return _Template(
        rel, decl.line, decl, fp, None, workloads_line, decl.space_sizes(), _normal(decl.workloads),
        fp.files, fp.notes,
    )


def _recorded_template(rel: str, src: sources.Sources) -> _Template:
    """A template as its manifest recorded it (sources.unchanged said it still is):
    nothing to compare, its line and space sizes to show."""
    return _Template(rel, src.template_line, None, None, None, None, src.space_sizes,
                     files=frozenset(src.blobs), notes=src.notes)


def _target_space(
    tpl: _Template, target: TargetConfig
) -> tuple[dict[str, tuple[int, int]], Reason | None]:
    """The template's space sizes on this target (KNOBS may name its facts: LANES...),
    or template_invalid when an extent does not evaluate for it."""
    if tpl.decl is None:
        return tpl.space_sizes, None
    try:
        return tpl.decl.space_sizes(target.target), None
    except TemplateError as e:
        line = e.line if e.file is not None else _assign_line_of(tpl.decl.path, "KNOBS")
        where = f"{tpl.rel}:{line}" if line else tpl.rel
        return {}, Reason(
            TEMPLATE_INVALID, f"{where}: KNOBS for target {target.name!r}: {e.message}", tpl.rel,
            line,
        )


def _assign_line_of(path: Path, name: str) -> int | None:
    try:
        return _assign_line(ast.parse(path.read_text(encoding="utf-8")), name)
    except (OSError, SyntaxError, ValueError):
        return None


class _Checker:
    """Compares one manifest with the repository; collects Reasons."""

    def __init__(
        self,
        config: Config,
        cache: SourceCache,
        as_of: datetime.date,
        tvm_expected: str | None,
        tvm_source: str,
        trust_root: Path | None,
    ) -> None:
        self.config = config
        self.cache = cache
        self.as_of = as_of
        self.tvm_expected = tvm_expected
        self.tvm_source = tvm_source
        # The folder whose git index may vouch for logs and template sources (the
        # config's root); None: never (--rehash).
        self.trust_root = trust_root
        self._index: dict[str, str] | None = None
        self._facts_now: dict[str, dict[str, Any] | None] = {}
        self._states: dict[str, str] = {}  # path -> its state, for sources.unchanged
        self._matches: dict[str, list[str]] = {}  # declared glob -> its files, likewise
        self.trusted = 0  # logs vouched for by git's index, not read
        self.templates_trusted = 0  # entries whose template was not parsed (sources.py)
        self.config_rel = cache.rel(config.path) if config.path is not None else "tvmtune.yaml"

    def index(self) -> dict[str, str]:
        """git's blob ids of the clean tracked files under the root, asked once, on
        the first manifest that records one (older ones are hashed)."""
        if self._index is None:
            self._index = git_read.clean_blobs(self.trust_root) if self.trust_root is not None else {}
        return self._index

    def facts(self, target: TargetConfig) -> dict[str, Any] | None:
        """What templates are told about `target` now (None: an unknown CPU); once per target."""
        if target.name not in self._facts_now:
            try:
                self._facts_now[target.name] = target_facts(target.target).to_json()
            except TemplateError:
                self._facts_now[target.name] = None
        return self._facts_now[target.name]

    def recorded(self, manifest: Manifest, template_rel: str, target: TargetConfig,
                 operator: str) -> _Template | None:
        """The template as `manifest` recorded it, when git and the file system vouch
        that nothing its declarations and fingerprint were computed from has changed
        and the target is the one it was tuned for; None: parse it (`_read_template`)."""
        if self.trust_root is None or not manifest.sources:
            return None
        try:
            if canonical_target(manifest.target) != target.target:
                return None
        except AttributeError:
            return None
        if manifest.target_facts != self.facts(target):
            return None
        src = sources.Sources.from_json(manifest.sources)
        declared = [g for g, _ in self.config.operator(operator).inputs]
        if not sources.unchanged(src, manifest, template_rel, self.cache.root, self.index(),
                                 self._states, declared, self._matches):
            return None
        self.templates_trusted += 1
        return _recorded_template(template_rel, src)

    def read(self, logset: LogSet) -> tuple[Manifest | None, list[Reason]]:
        """The log set's manifest, or why there is none (missing, unreadable)."""
        reasons: list[Reason] = []
        folder = self.cache.rel(logset.folder)
        manifest_rel = f"{folder}/{logset.manifest.name}"
        linked = _symlinked_folder(logset)
        if linked is not None:
            rel = self.cache.rel(linked)
            reasons.append(
                Reason(
                    LOG_MODIFIED,
                    f"{rel} is {what_is(linked, None)}; log folders must be real folders "
                    f"inside {self.config.logs_dir}/: replace the link with the folder or "
                    f"run `{FIX_HINT}`",
                    rel,
                )
            )
            return None, reasons
        try:
            manifest = Manifest.from_json(
                json.loads(read_regular_file(logset.manifest, MAX_MANIFEST_BYTES)),
                logset.manifest,
                lazy_results=True,
            )
        except FileNotFoundError:
            reasons.append(
                Reason(
                    MISSING,
                    f"no tuned log: {folder}/{logset.manifest.name} does not exist; "
                    f"run `{FIX_HINT}` to tune it",
                    folder,
                    None,
                ),
            )
            return None, reasons
        except NotRegularFileError as e:
            msg = str(e).replace(str(logset.manifest), manifest_rel)
            reasons.append(
                Reason(
                    LOG_MODIFIED,
                    f"manifest unreadable: {msg}; tvmtune-ci reads only regular files inside "
                    f"the log folder: restore the file from git or run `{FIX_HINT}`",
                    manifest_rel,
                )
            )
            return None, reasons
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            # JSON syntax, bad UTF-8, or a field that is not what it claims.
            reasons.append(
                Reason(
                    LOG_MODIFIED,
                    f"manifest unreadable: {manifest_rel}: cannot parse it ({e}); "
                    f"restore it from git or run `{FIX_HINT}`",
                    manifest_rel,
                )
            )
            return None, reasons
        except (CorruptFileError, OSError) as e:
            msg = str(e).replace(str(logset.manifest), manifest_rel)
            reasons.append(Reason(LOG_MODIFIED, f"manifest unreadable: {msg}", manifest_rel))
            return None, reasons
        return manifest, reasons

    def check(
        self, tpl: _Template, target: TargetConfig, logset: LogSet,
        read: tuple[Manifest | None, list[Reason]],
    ) -> tuple[Manifest | None, list[Reason]]:
        """Every reason the set is stale, given the template and what `read` found."""
        manifest, problems = read
        reasons: list[Reason] = [tpl.invalid] if tpl.invalid else []
        if manifest is None:
            if problems and problems[0].code == MISSING:
                return None, problems + reasons
            return None, reasons + problems
        folder = self.cache.rel(logset.folder)
        if tpl.fingerprint is not None and tpl.decl is not None:
            reasons += self._template(tpl, manifest)
        reasons += self._target(target, manifest)
        reasons += self._tvm(manifest)
        reasons += self._template_api(manifest, folder)
        reasons += self._age(manifest, folder)
        reasons += self._files(logset, manifest, folder)
        return manifest, reasons

    def _template(self, tpl: _Template, manifest: Manifest) -> list[Reason]:
        assert tpl.fingerprint is not None and tpl.decl is not None
        out = []
        # The manifest's workloads come from JSON already; the template's are
        # normalised once per template (_Template.workloads).
        old_wl, new_wl = manifest.workloads, tpl.workloads
        if not isinstance(old_wl, dict):
            old_wl = {}  # a hand-edited manifest: every workload reads as added
        if manifest.fingerprint != tpl.fingerprint.digest:
            changes = compare_dependencies(manifest.dependencies, tpl.fingerprint)
            for c in changes:
                if split_key(c.key)[1] == DATA_QUALNAME:
                    out.append(self._data_reason(c, tpl.fingerprint))
                    continue
                where = f" (line {c.line})" if c.line else ""
                out.append(Reason(TEMPLATE_CHANGED, f"{c.key} {c.change}{where}", c.file, c.line))
            if not changes and old_wl == new_wl:
                out.append(
                    Reason(
                        TEMPLATE_CHANGED,
                        "the fingerprint differs from the manifest's although no "
                        "dependency does (recorded by another tvmtune-ci version?)",
                        tpl.rel,
                        tpl.line,
                    )
                )
        if old_wl != new_wl:
            for w in sorted(set(old_wl) | set(new_wl)):
                if w not in old_wl:
                    detail = f"workload {w} added"
                elif w not in new_wl:
                    detail = f"workload {w} removed"
                elif old_wl[w] != new_wl[w]:
                    detail = f"workload {w}: {_value_diff(old_wl[w], new_wl[w])}"
                else:
                    continue
                out.append(Reason(WORKLOAD_CHANGED, detail, tpl.rel, tpl.workloads_line))
        return out

    def _data_reason(self, c: DependencyChange, fp: Fingerprint) -> Reason:
        """template_changed naming a data file the template reads (or declares)."""
        site = fp.inputs.get(c.key, "")
        how = (f"declared at {site} (inputs)" if site.startswith(f"{self.config_rel}:")
               else f"read at {site}")
        detail = {
            "changed": f"{c.file} changed: a data file its template {how}",
            "added": f"{c.file} is read now: a data file its template {how}",
            "removed": f"{c.file} is no longer read or declared by its template",
        }[c.change]
        return Reason(TEMPLATE_CHANGED, detail, c.file, None)

    def _template_api(self, manifest: Manifest, folder: str) -> list[Reason]:
        """The log's records were decoded with other knob -> trace rules (templateapi.py)."""
        why = templateapi.problem(manifest.template_api)
        if why is None:
            return []
        return [Reason(TEMPLATE_API_CHANGED, why, f"{folder}/{MANIFEST_NAME}")]

    def _target(self, target: TargetConfig, manifest: Manifest) -> list[Reason]:
        try:
            tuned_for = canonical_target(manifest.target)
        except AttributeError:  # not a dict
            tuned_for = manifest.target
        if tuned_for == target.target:
            return self._facts(target, manifest)
        old = target_json(tuned_for) if isinstance(tuned_for, dict) else repr(tuned_for)
        return [
            Reason(
                TARGET_CHANGED,
                f"tuned for {old}, configured now as {target_json(target.target)}",
                self.config_rel,
                target.line or None,
            )
        ]

    def _facts(self, target: TargetConfig, manifest: Manifest) -> list[Reason]:
        """The same target, but tvmtune-ci now tells templates other facts about it
        (its table changed): what the log was scheduled for is not what they see."""
        if not manifest.target_facts:
            return []
        now = self.facts(target)
        if now is None:
            return []  # an unknown CPU: the entry's KNOBS report it (template_invalid)
        if now == manifest.target_facts:
            return []
        return [
            Reason(
                TARGET_CHANGED,
                f"the template was told {manifest.target_facts} about this target; "
                f"tvmtune-ci now derives {now} (its target table changed)",
                self.config_rel,
                target.line or None,
            )
        ]

    def _tvm(self, manifest: Manifest) -> list[Reason]:
        if self.tvm_expected is None:
            return []
        recorded = major_minor(str(manifest.tvm_version))
        if recorded == self.tvm_expected:
            return []
        return [
            Reason(
                TVM_CHANGED,
                f"tuned with TVM {manifest.tvm_version}, expected {self.tvm_expected}.x "
                f"({self.tvm_source})",
            )
        ]

    def _age(self, manifest: Manifest, folder: str) -> list[Reason]:
        tuned = _tuned_on(manifest)
        if tuned is None:
            return [
                Reason(
                    LOG_MODIFIED,
                    f"manifest tuned_on {manifest.tuned_on!r} is not a YYYY-MM-DD date",
                    f"{folder}/{MANIFEST_NAME}",
                )
            ]
        if tuned > datetime.date.today() + FUTURE_SLACK:
            # A date in the future would never expire.
            return [
                Reason(
                    LOG_MODIFIED,
                    f"manifest tuned_on {tuned} is in the future (today is "
                    f"{datetime.date.today()}); the manifest was edited by hand: restore it "
                    f"from git or run `{FIX_HINT}`",
                    f"{folder}/{MANIFEST_NAME}",
                )
            ]
        age = (self.as_of - tuned).days
        if age <= self.config.max_age_days:
            return []
        return [
            Reason(
                EXPIRED,
                f"tuned on {tuned} ({age} days before {self.as_of}); "
                f"max_age_days is {self.config.max_age_days}",
            )
        ]

    def _files(self, logset: LogSet, manifest: Manifest, folder: str) -> list[Reason]:
        out = []
        for name, expected, what in [
            (manifest.log, manifest.log_sha256, "log"),
            *((n, h, "file") for n, h in sorted(manifest.files.items())),
        ]:
            rel = f"{folder}/{name}"
            if not _safe_name(name):
                out.append(
                    Reason(
                        LOG_MODIFIED,
                        f"the manifest names {what} {name!r}, not a file in its folder; "
                        f"the manifest was edited by hand: restore it from git or run "
                        f"`{FIX_HINT}`",
                        f"{folder}/{MANIFEST_NAME}",
                    )
                )
                continue
            path = logset.folder / name
            blob = manifest.log_git_blob if what == "log" else manifest.files_git_blob.get(name, "")
            if blob and self.index().get(path.as_posix()) == blob:
                # Committed (or staged), unmodified, and the very blob the manifest
                # recorded: git has hashed these bytes already; reading 0.2-1 MB per log
                # again is most of `check`'s time on a real repository.
                if what == "log":
                    self.trusted += 1
                continue
            try:
                data = read_regular_file(path, MAX_LOG_BYTES)
            except FileNotFoundError:
                out.append(
                    Reason(
                        LOG_MODIFIED,
                        f"{rel}, the {what} the manifest names, is missing; restore it from "
                        f"git or run `{FIX_HINT}`",
                        rel,
                    )
                )
                continue
            except NotRegularFileError as e:
                out.append(
                    Reason(
                        LOG_MODIFIED,
                        f"{str(e).replace(str(logset.folder / name), rel)}; tvmtune-ci reads "
                        "only regular files inside the log folder: replace it with the file "
                        f"itself (restore it from git) or run `{FIX_HINT}`",
                        rel,
                    )
                )
                continue
            except OSError as e:
                out.append(Reason(LOG_MODIFIED, f"{rel} cannot be read: {e.strerror}", rel))
                continue
            actual = sha256_bytes(data)
            if actual != expected:
                out.append(
                    Reason(
                        LOG_MODIFIED,
                        f"{rel} was modified after tuning (sha256 {actual[:12]}, "
                        f"manifest records {str(expected)[:12]})",
                        rel,
                    )
                )
                continue
            # The sha256 matches: a manifest re-hashed over a hand-made file must still
            # not pass (its content checked here, its git blob id below).
            if what == "log":
                problem = _log_problem(data)
                if problem is not None:
                    out.append(
                        Reason(
                            LOG_MODIFIED,
                            f"{rel} is not a tvmtune-ci log ({problem}) although the manifest "
                            f"records its sha256; restore both from git or run `{FIX_HINT}`",
                            rel,
                        )
                    )
                    continue
            elif name in (RESULTS_NAME, RUNS_NAME):
                try:
                    (parse_results if name == RESULTS_NAME else parse_runs)(data, path)
                except CorruptFileError as e:
                    out.append(Reason(LOG_MODIFIED, str(e).replace(str(path), rel) +
                                      " (although the manifest records its sha256)", rel))
                    continue
            if blob and git_read.blob_id(data) != blob:
                # A sha256 re-computed by hand over an edited file leaves the old blob
                # id: both hashes must agree with the bytes.
                fields = (("log_sha256", "log_git_blob") if what == "log"
                          else (f"files.{name}", f"files_git_blob.{name}"))
                out.append(
                    Reason(
                        LOG_MODIFIED,
                        f"{rel} matches the manifest's {fields[0]} but not its {fields[1]}; "
                        f"the manifest was edited by hand: restore both from git or run "
                        f"`{FIX_HINT}`",
                        f"{folder}/{MANIFEST_NAME}",
                    )
                )
        return out


def _log_problem(data: bytes) -> str | None:
    """What is wrong with a log's bytes at the top level, or None.

    The sha256 already ties the log to the manifest; this catches a manifest
    re-hashed over a hand-made file. Records are validated where they are used.
    """
    try:
        log = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        return f"not JSON: {e}"
    if not isinstance(log, dict):
        return "not a JSON object"
    fmt = log.get("format")
    # Every format up to ours reads (records.read_log converts older ones).
    if not (isinstance(fmt, int) and not isinstance(fmt, bool) and 1 <= fmt <= LOG_FORMAT):
        return f"format {fmt!r}, this tvmtune-ci reads formats 1 to {LOG_FORMAT}"
    return None


def _orphans(
    config: Config, cache: SourceCache, templates: dict[str, Path], logs: Path, kept: list[str]
) -> list[Reason]:
    """Log folders of operators without a template or of targets not configured for
    their operator; those that `keep:` declares go to `kept` instead."""
    if not logs.is_dir():
        return []
    known = {slug(op): {t.slug for t in config.targets_for(op)} for op in templates}
    out = []
    for d in sorted(logs.iterdir()):
        if not d.is_dir() or d.name.startswith("."):
            continue
        rel = cache.rel(d)
        if d.name not in known and config.kept(d.name):
            kept.append(f"{rel}/")
            continue
        if d.name not in known:
            out.append(
                Reason(
                    ORPHANED,
                    f"{rel}/ holds logs of operator {d.name!r}, which has no template "
                    f"{config.operators_dir}/{d.name}.py; "
                    "delete the folder or restore the template",
                    rel,
                )
            )
            continue
        for t in sorted(d.iterdir()):
            if t.is_dir() and not t.name.startswith(".") and t.name not in known[d.name]:
                if config.kept(d.name, t.name):
                    kept.append(f"{rel}/{t.name}/")
                    continue
                out.append(
                    Reason(
                        ORPHANED,
                        f"{rel}/{t.name}/ holds logs for target {t.name!r}, which is not "
                        f"configured for {d.name}; "
                        "delete the folder or add the target to tvmtune.yaml",
                        f"{rel}/{t.name}",
                    )
                )
    return out


def _space_advice(entry: Entry, target: TargetConfig, decl: TemplateDecl) -> list[str]:
    """A warning per workload whose design space is outside the advised size, naming the
    knob to change. Only for a template this check parsed (new or edited: the pull
    request that brings it); one whose recorded sources git vouches for is not parsed
    again for it, which keeps `check` fast."""
    low, high = ADVISED_POINTS
    odd = [w for w, (points, _) in sorted(entry.space_sizes.items()) if not low <= points <= high]
    out = []
    for w in odd:
        why = space_advice(decl.knobs, scope(decl.workloads[w], target.target), decl.constraints)
        if why is not None:
            line = min(decl.knob_lines.values(), default=entry.template_line)
            out.append(f"{entry.template_file}:{line}: workload {w!r} on {target.name}: {why}")
    return out


def _renamed(
    config: Config, cache: SourceCache, entries: list[Entry], orphans: list[Reason],
    missing: list[tuple[str, TargetConfig, Fingerprint, str]],
) -> tuple[list[Entry], list[Reason]]:
    """Entries with no log whose template was renamed from an orphaned folder's operator
    (renames.py): their `missing` reason and the folder's warning say so, with the command."""
    from . import renames

    found = {(r.new, r.target_name): r for r in renames.find_renames(config, missing, cache.rel)}
    if not found:
        return entries, orphans
    out = []
    for e in entries:
        r = found.get((e.operator, e.target_name))
        if r is None:
            out.append(e)
            continue
        first = replace(e.reasons[0], detail=(
            f"{e.reasons[0].detail.split('; run')[0]}; renamed from {r.old}: its log {r.folder}/ "
            f"fits this template: `{r.command}` keeps it without re-tuning"))
        out.append(replace(e, reasons=(first, *e.reasons[1:]), renamed_from=r.old))
    by_old = {r.old: r for r in found.values()}
    logs_rel = cache.rel(config.logs_path.resolve())
    fixed = []
    for o in orphans:
        old = o.file.removeprefix(f"{logs_rel}/") if o.file else None
        r = by_old.get(old) if old is not None else None
        if r is not None:
            o = replace(o, detail=(f"{o.file}/ holds logs of operator {r.old!r}, renamed to "
                                   f"{r.new} (the same template): run `{r.command}`"))
        fixed.append(o)
    return out, fixed


def _read_warnings(config: Config, noted: dict[Note, list[str]]) -> list[str]:
    """One warning per read that check reports, at its file:line, naming the operators
    whose templates run it. A read it cannot follow is silent for an operator that
    declares `inputs:` (what it reads is declared there)."""
    out = []
    for n, ops in sorted(noted.items()):
        if n.kind == ENV:
            users = _named(ops)
            out.append(f"{n.file}:{n.line}: reads environment variable {n.what} (run by {users}); "
                       "its value is the runner's and no log records it: set it alike on every "
                       "runner, or make it a knob")
            continue
        undeclared = [op for op in ops if not config.operator(op).inputs]
        if undeclared:
            key = undeclared[0] if len(undeclared) == 1 else "<operator>"
            out.append(f"{n.file}:{n.line}: reads a file tvmtune-ci cannot follow: declare it "
                       f"({n.what}; run by {_named(undeclared)}): list the files it reads under "
                       f"`operators.{key}.inputs` in tvmtune.yaml (globs relative to the "
                       "repository), so that editing them makes the logs stale")
    return out


def _named(ops: Sequence[str], most: int = 4) -> str:
    shown = ", ".join(ops[:most])
    return shown if len(ops) <= most else f"{shown} and {len(ops) - most} more"


def _check_folders(config: Config) -> None:
    """ConfigError when operators_dir is not a folder: a typo must not check nothing."""
    path = config.operators_path
    if path.is_dir():
        return
    name = config.path.name if config.path is not None else "tvmtune.yaml"
    line = config.lines.get("operators_dir")
    what = "is not a folder" if path.exists() else "does not exist"
    if line is None:
        raise ConfigError(
            f"{name}:1: operators_dir is not set and the default folder "
            f"{config.operators_dir}/ {what}; set `operators_dir:` to the folder of "
            "your operator templates"
        )
    raise ConfigError(
        f"{name}:{line}: operators_dir {config.operators_dir!r} {what} ({path}); "
        "fix the path (relative to tvmtune.yaml) or create the folder"
    )


def _touched(entry: Entry, tpl: _Template, changed: set[str], cache: SourceCache) -> bool:
    """Whether `--changed-since` concerns this entry: its code or its log set changed."""
    files = {tpl.rel} | tpl.files
    if tpl.invalid is not None and tpl.invalid.file:
        files.add(tpl.invalid.file)
    if entry.manifest is not None:
        # Dependencies the manifest recorded: a deleted helper file counts.
        files |= {split_key(k)[0] for k in entry.manifest.dependencies}
    if files & changed:
        return True
    # A log set edited by hand is the entry's business too.
    prefix = cache.rel(entry.logset.folder) + "/"
    return any(c.startswith(prefix) for c in changed)


def _module_name(rel: str) -> str:
    """The name an import of this file must spell: its stem, or its package's name."""
    parts = rel.split("/")
    if parts[-1] == "__init__.py":
        return parts[-2] if len(parts) > 1 else ""
    return parts[-1][: -len(".py")]


def _candidates(
    root: Path, templates: dict[str, Path], changed: set[str], cache: SourceCache, logs: Path,
    declared: dict[str, tuple[tuple[str, int], ...]],
) -> set[str] | None:
    """Operators `--changed-since` may concern, found without parsing anything; None: all.

    An entry is touched when its template, an in-repo module it uses (now or when
    tuned), or its log folder changed (`_touched`, which still decides). A module is
    used only through an import that spells its name, so starting from the changed
    .py files, every .py file whose text contains an affected module's name is
    affected too (to a fixed point; a superset of the real import graph). Only
    templates that are affected or have a changed log folder are checked: a PR that
    edits one template checks that template, not all of them.

    Any other changed file may be data a template reads: the operators whose
    `inputs:` globs match it (fnmatch: `*` spans folders, a superset) are touched, and
    a read spells the file's name (`HERE / "tiles.json"`) or takes its module's own
    (`Path(__file__).with_suffix(".json")`), so a .py file that holds its name or is
    its namesake is affected.
    """
    changed_py = {c for c in changed if c.endswith(".py")}
    if any(not (root / c).exists() for c in changed_py):
        return None  # a deleted module: only the manifests' recorded dependencies know who used it
    logs_rel = cache.rel(logs)
    out = {
        op
        for op in templates
        if any(c.startswith(f"{logs_rel}/{slug(op)}/") for c in changed)
    }
    data = {c for c in changed if not c.endswith(".py") and not c.startswith(f"{logs_rel}/")}
    out |= {op for op, globs in declared.items() if op in templates
            and any(fnmatch.fnmatchcase(c, g) for c in data for g, _ in globs)}
    if not changed_py and not data:
        return out
    names = {_module_name(c) for c in changed_py}
    if "" in names:
        return None
    names |= {posixpath.basename(c) for c in data}
    twins = {posixpath.splitext(c)[0] + ".py" for c in data}
    texts: dict[str, str] = {}
    for rel in git_read.python_files(root):
        try:
            texts[rel] = (root / rel).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
    for path in templates.values():
        rel = cache.rel(path)
        if rel not in texts:  # not a file git lists: do not guess
            return None
    affected = set(changed_py) | (twins & set(texts))
    names |= {_module_name(rel) for rel in affected}
    grew = True
    while grew:
        grew = False
        for rel, text in texts.items():
            if rel not in affected and any(n in text for n in names):
                affected.add(rel)
                names.add(_module_name(rel))
                grew = True
    return out | {op for op, path in templates.items() if cache.rel(path) in affected}


@contextlib.contextmanager
def _gc_deferred() -> Iterator[None]:
    # The loop allocates millions of short-lived AST nodes, freed by reference
    # counting (SourceCache.forget breaks the one cycle); collecting during it
    # rescans the growing report again and again. One collection after is cheaper.
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


# --------------------------------------------------------------------------- API


def find_stale(
    config: Config,
    *,
    as_of: datetime.date | None = None,
    changed_since: str | None = None,
    operators: Sequence[str] | None = None,
    targets: Sequence[str] | None = None,
    rehash: bool = False,
) -> Report:
    """Every configured (operator, target), fresh or stale with all its reasons.

    `changed_since=REF` keeps the entries whose template, in-repo dependencies or
    log folder differ between REF and the work tree (all of them when tvmtune.yaml
    does); an unknown REF is a UsageError. `operators`/`targets` select by name.

    A log (or results.json) is read and hashed unless git vouches for it: tracked,
    unmodified in the work tree, and its blob id the one the manifest recorded
    (`log_git_blob`, `files_git_blob`). A template is parsed and fingerprinted
    unless its manifest's `sources` still hold (sources.unchanged). `rehash=True`
    reads, hashes and parses everything regardless.
    """
    as_of = as_of or datetime.date.today()
    cache = SourceCache(config.root, inputs=config.declared_inputs(), config_file=config.path)
    warnings: list[str] = list(config.warnings)
    _check_folders(config)
    # Resolved once: every path below is joined onto these, never resolved again.
    templates = {p.stem: p for p in discover_templates(config.operators_path.resolve())}
    logs_path = config.logs_path.resolve()
    want_ops, want_targets = select_entries(config, operators, targets)
    changed = git_read.changed_files(config.root, changed_since) if changed_since is not None else None

    if not templates:
        warnings.append(
            f"no operator templates in {config.operators_dir}/; add one "
            f"(e.g. {config.operators_dir}/matmul.py) or set operators_dir in tvmtune.yaml"
        )
    for o in config.operators:
        if o.name not in templates:
            warnings.append(
                f"tvmtune.yaml:{o.line}: operators.{o.name} has no template "
                f"{config.operators_dir}/{o.name}.py; fix the name or remove the entry"
            )

    tvm_expected, tvm_source = None, ""
    if config.tvm_version is not None:
        tvm_expected, tvm_source = major_minor(config.tvm_version), "tvm_version in tvmtune.yaml"
    else:
        installed = installed_tvm_version()
        if installed is not None:
            tvm_expected, tvm_source = major_minor(installed), f"installed apache-tvm {installed}"
    if tvm_expected is None:
        warnings.append(
            "the TVM version is unknown, so tvm_changed was not checked; set "
            'tvm_version in tvmtune.yaml (e.g. tvm_version: "0.27") or install apache-tvm'
        )

    checker = _Checker(
        config, cache, as_of, tvm_expected, tvm_source, None if rehash else cache.root
    )
    config_changed = changed is not None and checker.config_rel in changed
    candidates = (
        _candidates(config.root.resolve(), templates, changed, cache, logs_path,
                    config.declared_inputs())
        if changed is not None and not config_changed
        else None
    )
    entries = []
    advice: list[str] = []
    noted: dict[Note, list[str]] = {}  # a read check reports -> the operators that run it
    missing: list[tuple[str, TargetConfig, Fingerprint, str]] = []  # entries with no log
    with _gc_deferred():
        for op in sorted(templates):
            if want_ops is not None and op not in want_ops:
                continue
            if candidates is not None and op not in candidates:
                continue
            parsed: _Template | None = None  # parsed when an entry cannot trust its record
            rel = cache.rel(templates[op])
            for target in config.targets_for(op):
                if want_targets is not None and target.name not in want_targets:
                    continue
                logset = LogSet.of(logs_path, op, target.name)
                read = checker.read(logset)
                tpl = checker.recorded(read[0], rel, target, op) if read[0] is not None else None
                if tpl is None:
                    parsed = parsed or _read_template(templates[op], cache)
                    tpl = parsed
                manifest, reasons = checker.check(tpl, target, logset, read)
                sizes, invalid = _target_space(tpl, target)
                if invalid is not None:
                    reasons.insert(0, invalid)
                entry = Entry(
                    op,
                    target.name,
                    tpl.rel,
                    tpl.line,
                    tuple(reasons),
                    manifest,
                    logset,
                    sizes,
                    as_of,
                )
                if changed is None or config_changed or _touched(entry, tpl, changed, cache):
                    entries.append(entry)
                    if parsed is not None and parsed.decl is not None:
                        advice += _space_advice(entry, target, parsed.decl)
                    for n in tpl.notes:
                        ops = noted.setdefault(n, [])
                        if op not in ops:
                            ops.append(op)
                    if manifest is None and reasons and reasons[0].code == MISSING \
                            and tpl.fingerprint is not None:
                        missing.append((op, target, tpl.fingerprint, tpl.rel))
    warnings += list(dict.fromkeys(advice))
    warnings += _read_warnings(config, noted)
    kept: list[str] = []
    orphans = _orphans(config, cache, templates, logs_path, kept)
    if missing and orphans:
        entries, orphans = _renamed(config, cache, entries, orphans, missing)
    return Report(tuple(entries), tuple(orphans), tuple(warnings), checker.trusted,
                  checker.templates_trusted, tuple(kept))
