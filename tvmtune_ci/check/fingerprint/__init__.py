"""A semantic hash of an operator template and the in-repo code it uses.

What is hashed: the template's `compute`, `reference` and `schedule` functions and
its `KNOBS`, plus, transitively, every definition they name that lives under the
repository root: helper functions, classes and module-level constants of the same
file, and of in-repo modules reached through `from x.y import f`,
`import x.y as z` + `z.f` or relative imports. `WORKLOADS` is not part of the
code hash: workloads are compared as values (`workloads_hash`). TVM, numpy, the
standard library and `tvmtune_ci` itself are external: they are recorded only as
the name a definition binds (`np -> numpy`), never hashed.

Import-time code counts too: retune imports the template, and that runs every
module-level statement of the template and of every in-repo module it imports
(transitively, package `__init__`s included, and modules imported by the code
that is hashed). Each such statement is hashed under
"path.py:<module>.LABEL" (LABEL: the names it binds, or `<expr>`, `<if>`, ...;
`#2` for the second of a label), with the bodies of undecorated functions left
out: they run only when called, and a call is followed to the function. The
order of the statements is "path.py:<module>". A statement already hashed in
full as a definition (`def schedule`, `KNOBS = ...`) has no key of its own, and
the template's `WORKLOADS` literal is compared as values. Code that reaches its
module by a string (`globals()`, `eval`, `sys.modules[__name__]`) makes every
definition of the module count; `__import__("pkg.m")` and
`importlib.import_module("pkg.m")` with a constant name import pkg.m. Code read
from files or built from strings at run time cannot be followed: only the
statement that does it is hashed.

Data files are inputs too: a file the hashed code reads (`open`, `Path.read_text`,
`np.load`, ... with a path built from constants and `__file__`: datafiles.py) is
hashed by content under "path/of/file:<data>", and so is every file its operator
declares (`inputs:` globs in tvmtune.yaml; a glob matching nothing is an error). A
missing data file is an error at the line that reads it. Reads whose path is
computed at run time, and environment variables, are `notes` that `check` reports.

Each definition is hashed from its AST with docstrings dropped and without
positions, so comments, docstrings, blank lines, formatting and line numbers do
not count while any change of meaning does. The per-definition hashes are kept
(`dependencies`, keyed "path/in/repo.py:qualname") so a stale report can name the
function that changed, and where it is now (`lines`).

Nothing here imports or runs template code: files are read as text and parsed.
"""

from __future__ import annotations

from pathlib import Path

from .cache import SourceCache
from .canon import canonical_dump, path_state
from .model import (
    ABSENT,
    ALGORITHM,
    DATA_QUALNAME,
    DIR,
    FILE,
    MISSING_HASH,
    MODULE_QUALNAME,
    DependencyChange,
    Fingerprint,
    compare_dependencies,
    digest_of,
    split_key,
    workloads_hash,
    workloads_json,
)

__all__ = [
    "ABSENT",
    "ALGORITHM",
    "DATA_QUALNAME",
    "DIR",
    "FILE",
    "MISSING_HASH",
    "MODULE_QUALNAME",
    "DependencyChange",
    "Fingerprint",
    "SourceCache",
    "canonical_dump",
    "compare_dependencies",
    "digest_of",
    "fingerprint_template",
    "path_state",
    "split_key",
    "workloads_hash",
    "workloads_json",
]

# --------------------------------------------------------------------------- API


def fingerprint_template(path: Path, root: Path, *, cache: SourceCache | None = None) -> Fingerprint:
    """The fingerprint of the template at `path`, in-repo code resolved under `root`.

    Raises TemplateError (with file:line) when the template or an in-repo module
    it uses cannot be parsed, or the template lacks WORKLOADS/KNOBS/functions.
    Pass one `cache` to fingerprint many templates: shared modules parse once.
    """
    cache = cache if cache is not None else SourceCache(root)
    return cache.fingerprint(path)
