"""What a log's template declarations and fingerprint were computed from.

A re-tune records, in the manifest (`Manifest.sources`), the git blob id of every
file it read for the template (the template, the in-repo modules it uses, and the
data files they read or its operator declares as `inputs:`), the state of every path
an import looked for (a module that is absent today may shadow an external one
tomorrow), the files each declared glob matched (a file added under a glob tomorrow
is an input too), the fingerprint algorithm, and what `check` shows without judging:
the template's line, its space sizes on the entry's target, and the reads it reports
(environment variables, paths it cannot follow: `datafiles.Note`).

`check` then knows that the template's declarations and fingerprint are those the
manifest recorded, without parsing anything, when git's index vouches for every
recorded file (tracked, unmodified, the very blob) and every probed path is in
the state it was: the same inputs give the same outputs. Parsing and hashing
1,000 templates is a second of `check`'s time on a real repository
(benchmarks/bench_check.py). Anything else (an edited or untracked file, a new
module where an import looked, another fingerprint algorithm, another target)
takes the full path, which decides as before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.manifest import Manifest
from ..core.template import TemplateDecl
from .datafiles import Note, expand
from .fingerprint import ALGORITHM, Fingerprint, SourceCache, path_state, workloads_hash

# 2: data files are inputs (in `blobs`), with the declared globs' matches (`globs`) and
# the reported reads (`notes`). A version-1 record knew no data files: it could vouch
# for a template whose data changed, so it is never trusted (the template is parsed).
VERSION = 2


@dataclass(frozen=True)
class Sources:
    """The inputs of one template's declarations and fingerprint, as recorded."""

    algorithm: str  # fingerprint.ALGORITHM when recorded
    # The fingerprint and the hash of WORKLOADS computed from these inputs: a
    # manifest whose own fields disagree was edited by hand and is checked in full.
    fingerprint: str
    workloads_hash: str
    template_line: int  # TemplateDecl.line
    blobs: dict[str, str]  # repo-relative file -> git blob id of the bytes read
    probes: dict[str, str]  # repo-relative path -> FILE / DIR / ABSENT
    space_sizes: dict[str, tuple[int, int]]  # on the manifest's target
    version: int = VERSION  # 1: recorded before data files were inputs
    globs: dict[str, tuple[str, ...]] = field(default_factory=dict)  # declared glob -> files
    notes: tuple[Note, ...] = ()  # environment variables, reads it cannot follow

    def to_json(self) -> dict[str, Any]:
        return {
            "algorithm": self.algorithm,
            "fingerprint": self.fingerprint,
            "workloads_hash": self.workloads_hash,
            "template_line": self.template_line,
            "blobs": dict(self.blobs),
            "probes": dict(self.probes),
            "space_sizes": {w: list(s) for w, s in self.space_sizes.items()},
            "version": self.version,
            "globs": {g: list(f) for g, f in self.globs.items()},
            "notes": [n.to_json() for n in self.notes],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Sources:
        """From a manifest whose shape `manifest.validate_manifest_shape` checked."""
        return cls(
            data["algorithm"],
            data["fingerprint"],
            data["workloads_hash"],
            data["template_line"],
            data["blobs"],
            data["probes"],
            {w: (s[0], s[1]) for w, s in data["space_sizes"].items()},
            data.get("version", 1),
            {g: tuple(f) for g, f in data.get("globs", {}).items()},
            tuple(Note.from_json(n) for n in data.get("notes", ())),
        )


def record(cache: SourceCache, decl: TemplateDecl, fp: Fingerprint, target: Mapping[str, Any]) -> Sources:
    """The inputs of `decl` and `fp`, from the fresh cache that computed them (one
    template per cache: `SourceCache.inputs`)."""
    blobs, probes = cache.inputs()
    return Sources(
        ALGORITHM,
        fp.digest,
        fp.workloads_hash,
        decl.line,
        blobs,
        probes,
        decl.space_sizes(target),
        VERSION,
        dict(fp.globs),
        fp.notes,
    )


def unchanged(
    sources: Sources,
    manifest: Manifest,
    template_rel: str,
    root: Path,
    index: Mapping[str, str],
    states: dict[str, str] | None = None,
    declared: Sequence[str] = (),
    matches: dict[str, list[str]] | None = None,
) -> bool:
    """Whether the template's declarations and fingerprint are still the ones
    `manifest` recorded: same algorithm and record version, the manifest's
    fingerprint and workloads those computed from `sources`, the same template file,
    every recorded file vouched for by git's index (`index`: absolute posix path ->
    blob id of clean tracked files) with the recorded blob, every probed path in its
    recorded state, and the operator's `declared` input globs the recorded ones,
    matching the same files. `states` and `matches` memoise path states and glob
    matches over one run: templates probe the same paths (every `import numpy` looks
    for numpy.py)."""
    if sources.algorithm != ALGORITHM or sources.version != VERSION:
        return False
    if template_rel not in sources.blobs or set(declared) != set(sources.globs):
        return False
    if manifest.fingerprint != sources.fingerprint:
        return False
    if not isinstance(manifest.workloads, dict) or workloads_hash(manifest.workloads) != sources.workloads_hash:
        return False
    top = root.as_posix()
    for rel, blob in sources.blobs.items():
        if index.get(f"{top}/{rel}") != blob:
            return False
    if states is None:
        states = {}
    for rel, state in sources.probes.items():
        path = f"{top}/{rel}"
        now = states.get(path)
        if now is None:
            now = states[path] = path_state(path)
        if now != state:
            return False
    if matches is None:
        matches = {}
    for pattern, files in sources.globs.items():
        found = matches.get(pattern)
        if found is None:
            found = matches[pattern] = expand(root, pattern)
        if list(files) != found:
            return False
    return True
