"""The rules: each reason a log set is stale, decided from its manifest and what the
repository says now, and the integrity of the files the manifest names (git's index
vouches for committed, unmodified ones).

Over 400 lines: every reason is decided here, in one order, so that how the reasons
interact stays visible."""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path
from typing import Any

from ...core import templateapi
from ...core.configschema import Config, TargetConfig
from ...core.errors import CorruptFileError, TemplateError
from ...core.fsutil import NotRegularFileError, read_regular_file, sha256_bytes, what_is
from ...core.git import read as git_read
from ...core.layout import LogSet
from ...core.manifest import Manifest, parse_results
from ...core.manifestformat import MANIFEST_NAME, RESULTS_NAME
from ...core.records import LOG_FORMAT
from ...core.runs import RUNS_NAME, parse_runs
from ...core.targetinfo import target_facts
from ...core.targets import canonical_target, target_json
from .. import sources
from ..fingerprint import DATA_QUALNAME, DependencyChange, Fingerprint, SourceCache, compare_dependencies, split_key
from ..tvmversion import major_minor
from .model import (
    EXPIRED,
    FIX_HINT,
    LOG_MODIFIED,
    MISSING,
    TARGET_CHANGED,
    TEMPLATE_API_CHANGED,
    TEMPLATE_CHANGED,
    TVM_CHANGED,
    WORKLOAD_CHANGED,
    Reason,
    tuned_on,
)
from .templates import CheckedTemplate, recorded_template, value_diff

# Reads of committed files are bounded: a manifest is a few KB, a log a few MB.
MAX_MANIFEST_BYTES = 16 << 20
MAX_LOG_BYTES = 512 << 20
# A log tuned "tomorrow" is a time zone, not a hand edit.
FUTURE_SLACK = datetime.timedelta(days=1)


def _symlinked_folder(logset: LogSet) -> Path | None:
    """The log folder or its operator folder when it is a symlink (it could lead anywhere)."""
    # os.path on the string: asked for every entry of every check.
    folder = str(logset.folder)
    if os.path.islink(folder):
        return logset.folder
    if os.path.islink(os.path.dirname(folder)):
        return logset.folder.parent
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


class Checker:
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

    def recorded(
        self, manifest: Manifest, template_rel: str, target: TargetConfig, operator: str
    ) -> CheckedTemplate | None:
        """The template as `manifest` recorded it, when git and the file system vouch
        that nothing its declarations and fingerprint were computed from has changed
        and the target is the one it was tuned for; None: parse it (`read_checked_template`)."""
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
        if not sources.unchanged(
            src, manifest, template_rel, self.cache.root, self.index(), self._states, declared, self._matches
        ):
            return None
        self.templates_trusted += 1
        return recorded_template(template_rel, src)

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
                json.loads(read_regular_file(logset.manifest, MAX_MANIFEST_BYTES)), logset.manifest, lazy_results=True
            )
        except FileNotFoundError:
            reasons.append(
                Reason(
                    MISSING,
                    f"no tuned log: {folder}/{logset.manifest.name} does not exist; run `{FIX_HINT}` to tune it",
                    folder,
                    None,
                )
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
        self, tpl: CheckedTemplate, target: TargetConfig, logset: LogSet, read: tuple[Manifest | None, list[Reason]]
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

    def _template(self, tpl: CheckedTemplate, manifest: Manifest) -> list[Reason]:
        assert tpl.fingerprint is not None and tpl.decl is not None
        out = []
        # The manifest's workloads come from JSON already; the template's are
        # normalised once per template (CheckedTemplate.workloads).
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
                    detail = f"workload {w}: {value_diff(old_wl[w], new_wl[w])}"
                else:
                    continue
                out.append(Reason(WORKLOAD_CHANGED, detail, tpl.rel, tpl.workloads_line))
        return out

    def _data_reason(self, c: DependencyChange, fp: Fingerprint) -> Reason:
        """template_changed naming a data file the template reads (or declares)."""
        site = fp.inputs.get(c.key, "")
        how = f"declared at {site} (inputs)" if site.startswith(f"{self.config_rel}:") else f"read at {site}"
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
                f"tuned with TVM {manifest.tvm_version}, expected {self.tvm_expected}.x ({self.tvm_source})",
            )
        ]

    def _age(self, manifest: Manifest, folder: str) -> list[Reason]:
        tuned = tuned_on(manifest)
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
                f"tuned on {tuned} ({age} days before {self.as_of}); max_age_days is {self.config.max_age_days}",
            )
        ]

    def _files(self, logset: LogSet, manifest: Manifest, folder: str) -> list[Reason]:
        """Why the files the manifest names (its log, then the others by name) are not
        the ones it recorded: one reason per file at most."""
        out = []
        top = logset.folder.as_posix()
        for name, expected, what in [
            (manifest.log, manifest.log_sha256, "log"),
            *((n, h, "file") for n, h in sorted(manifest.files.items())),
        ]:
            reason = self._file(logset, manifest, folder, top, name, expected, what)
            if reason is not None:
                out.append(reason)
        return out

    def _file(
        self, logset: LogSet, manifest: Manifest, folder: str, top: str, name: str, expected: str, what: str
    ) -> Reason | None:
        """Why one file the manifest names (`what`: "log" or "file") is not the one it
        recorded, or None: its name, its bytes (unless git vouches for them), their
        content, and their git blob id."""
        rel = f"{folder}/{name}"
        if not _safe_name(name):
            return Reason(
                LOG_MODIFIED,
                f"the manifest names {what} {name!r}, not a file in its folder; "
                f"the manifest was edited by hand: restore it from git or run "
                f"`{FIX_HINT}`",
                f"{folder}/{MANIFEST_NAME}",
            )
        blob = manifest.log_git_blob if what == "log" else manifest.files_git_blob.get(name, "")
        if blob and self.index().get(f"{top}/{name}") == blob:
            # Committed (or staged), unmodified, and the very blob the manifest
            # recorded: git has hashed these bytes already; reading 0.2-1 MB per log
            # again is most of `check`'s time on a real repository.
            if what == "log":
                self.trusted += 1
            return None
        path = logset.folder / name
        data = _read_named(path, rel, what)
        if isinstance(data, Reason):
            return data
        actual = sha256_bytes(data)
        if actual != expected:
            return Reason(
                LOG_MODIFIED,
                f"{rel} was modified after tuning (sha256 {actual[:12]}, manifest records {str(expected)[:12]})",
                rel,
            )
        # The sha256 matches: a manifest re-hashed over a hand-made file must still
        # not pass (its content checked here, its git blob id below).
        wrong = _content_reason(data, path, rel, name, what)
        if wrong is not None:
            return wrong
        if blob and git_read.blob_id(data) != blob:
            # A sha256 re-computed by hand over an edited file leaves the old blob
            # id: both hashes must agree with the bytes.
            fields = ("log_sha256", "log_git_blob") if what == "log" else (f"files.{name}", f"files_git_blob.{name}")
            return Reason(
                LOG_MODIFIED,
                f"{rel} matches the manifest's {fields[0]} but not its {fields[1]}; "
                f"the manifest was edited by hand: restore both from git or run "
                f"`{FIX_HINT}`",
                f"{folder}/{MANIFEST_NAME}",
            )
        return None


def _read_named(path: Path, rel: str, what: str) -> bytes | Reason:
    """The bytes of a file the manifest names, or why they cannot be read."""
    try:
        return read_regular_file(path, MAX_LOG_BYTES)
    except FileNotFoundError:
        return Reason(
            LOG_MODIFIED,
            f"{rel}, the {what} the manifest names, is missing; restore it from git or run `{FIX_HINT}`",
            rel,
        )
    except NotRegularFileError as e:
        return Reason(
            LOG_MODIFIED,
            f"{str(e).replace(str(path), rel)}; tvmtune-ci reads "
            "only regular files inside the log folder: replace it with the file "
            f"itself (restore it from git) or run `{FIX_HINT}`",
            rel,
        )
    except OSError as e:
        return Reason(LOG_MODIFIED, f"{rel} cannot be read: {e.strerror}", rel)


def _content_reason(data: bytes, path: Path, rel: str, name: str, what: str) -> Reason | None:
    """Why bytes whose sha256 the manifest records are still not a tvmtune-ci file: a
    log that is not a log, a results or runs file that does not parse; None when fine."""
    if what == "log":
        problem = _log_problem(data)
        if problem is not None:
            return Reason(
                LOG_MODIFIED,
                f"{rel} is not a tvmtune-ci log ({problem}) although the manifest "
                f"records its sha256; restore both from git or run `{FIX_HINT}`",
                rel,
            )
    elif name in (RESULTS_NAME, RUNS_NAME):
        try:
            (parse_results if name == RESULTS_NAME else parse_runs)(data, path)
        except CorruptFileError as e:
            return Reason(
                LOG_MODIFIED, str(e).replace(str(path), rel) + " (although the manifest records its sha256)", rel
            )
    return None


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
