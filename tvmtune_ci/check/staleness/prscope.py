"""Which entries a pull request concerns (`--changed-since`): the templates, in-repo
dependencies and log folders its changed files touch, parsing only what may."""

from __future__ import annotations

import fnmatch
import posixpath
import re
from pathlib import Path

from ...core.git import read as git_read
from ...core.targets import slug
from ..fingerprint import SourceCache, split_key
from .model import Entry
from .templates import CheckedTemplate


def touched(entry: Entry, tpl: CheckedTemplate, changed: set[str], cache: SourceCache) -> bool:
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


def _spells(text: str, name: str) -> bool:
    """`name` in `text` as a whole name (an import spells it so): `conv2d` is not in
    `conv2d_1x1`. The plain substring test first: it rules out almost every text."""
    if name not in text:
        return False
    return re.search(rf"(?<![\w]){re.escape(name)}(?![\w])", text) is not None


def pr_candidates(
    root: Path,
    templates: dict[str, Path],
    changed: set[str],
    cache: SourceCache,
    logs: Path,
    declared: dict[str, tuple[tuple[str, int], ...]],
) -> set[str] | None:
    """Operators `--changed-since` may concern, found without parsing anything; None: all.

    An entry is touched when its template, an in-repo module it uses (now or when
    tuned), or its log folder changed (`touched`, which still decides). A module is
    used only through an import that spells its name, so starting from the changed
    .py files, every .py file whose text spells an affected module's name as a whole
    name is affected too (to a fixed point; a superset of the real import graph: a
    docstring that names a module counts). Only
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
    out = {op for op in templates if any(c.startswith(f"{logs_rel}/{slug(op)}/") for c in changed)}
    data = {c for c in changed if not c.endswith(".py") and not c.startswith(f"{logs_rel}/")}
    out |= {
        op
        for op, globs in declared.items()
        if op in templates and any(fnmatch.fnmatchcase(c, g) for c in data for g, _ in globs)
    }
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
    # To the fixed point, each text searched for each name once: a text not affected
    # was searched for every earlier name, so a pass needs only the names found in
    # the one before. (Searching every name again on each addition was quadratic:
    # an edit of a helper all 1,000 templates import made 440,000 searches.)
    searched: set[str] = set()
    frontier = names
    while frontier:
        searched |= frontier
        found = {rel for rel, text in texts.items() if rel not in affected and any(_spells(text, n) for n in frontier)}
        affected |= found
        frontier = {_module_name(rel) for rel in found} - searched
    return out | {op for op, path in templates.items() if cache.rel(path) in affected}
