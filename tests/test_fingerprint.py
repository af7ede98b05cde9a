"""fingerprint_template: what counts as a change of meaning, and what does not."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from conftest import write

from tvmtune_ci.check.fingerprint import (
    MISSING_HASH,
    SourceCache,
    canonical_dump,
    compare_dependencies,
    fingerprint_template,
)
from tvmtune_ci.core.errors import TemplateError

TEMPLATE = '''\
"""A small template: schedule uses a local helper and a constant."""

from tvmtune_ci.template import define_knob, define_split

import numpy as np

WORKLOADS = {"w": {"M": 64, "N": 32}}

KNOBS = [
    define_split("tile_i", "M", parts=2, max_factor=8),
    define_knob("unroll", [0, 16]),
]

VECTOR = 8


def _inner(sch, loop):
    """Vectorise the innermost loop."""
    sch.vectorize(loop)
    return VECTOR


def _unused(x):
    return x + 1


def compute(M, N):
    from tvm import te

    return te.placeholder((M, N), "float32")


def reference(A):
    return np.asarray(A)


def schedule(sch, cfg):
    i, j = sch.get_loops(sch.get_sblock("C"))
    io, ii = cfg.split(sch, i, "tile_i")
    _inner(sch, j)
'''

# Pinned so that an accidental change of the algorithm (or of the canonical form)
# shows: every committed manifest would silently read as stale. (Re-pinned for
# tvmtune-fingerprint/2, which hashes import-time code too.)
GOLDEN_DIGEST = "0f6c9a46fa017d53c4116a668f714859af919752f863d0d4c6dcb8192a76bd6b"
GOLDEN_SCHEDULE = "207c9adfc1b7e0cc629c0a57acac77db1a480eb6454aaa7fe4ab22f02ff4c45d"


def fp_of(root: Path, rel: str = "operators/op.py"):  # noqa: ANN201
    return fingerprint_template(root / rel, root)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "repo"
    write(r, "operators/op.py", TEMPLATE)
    return r


def test_golden_digest(root: Path) -> None:
    fp = fp_of(root)
    assert sorted(fp.dependencies) == [
        # What importing the template runs: the statement order, its imports and
        # the `def _unused` statement (not its body); the rest is hashed whole below.
        "operators/op.py:<module>",
        "operators/op.py:<module>._unused",
        "operators/op.py:<module>.define_knob,define_split",
        "operators/op.py:<module>.np",
        "operators/op.py:KNOBS",
        "operators/op.py:VECTOR",
        "operators/op.py:_inner",
        "operators/op.py:compute",
        "operators/op.py:reference",
        "operators/op.py:schedule",
    ]
    assert fp.dependencies["operators/op.py:schedule"] == GOLDEN_SCHEDULE
    assert fp.digest == GOLDEN_DIGEST


def test_lines_locate_each_dependency(root: Path) -> None:
    fp = fp_of(root)
    lines = TEMPLATE.splitlines()
    assert fp.lines["operators/op.py:schedule"] == ("operators/op.py", lines.index("def schedule(sch, cfg):") + 1)
    assert fp.lines["operators/op.py:_inner"] == ("operators/op.py", lines.index("def _inner(sch, loop):") + 1)
    assert fp.lines["operators/op.py:VECTOR"] == ("operators/op.py", lines.index("VECTOR = 8") + 1)
    assert fp.files == {"operators/op.py"}
    # Moving code down moves the lines, not the hashes.
    (root / "operators/op.py").write_text("\n\n\n" + TEMPLATE)
    moved = fp_of(root)
    assert moved.digest == fp.digest
    assert moved.lines["operators/op.py:schedule"][1] == fp.lines["operators/op.py:schedule"][1] + 3


@pytest.mark.parametrize(
    "old,new",
    [
        ("    _inner(sch, j)\n", "    _inner(sch, j)  # the vector loop\n"),
        ('"""Vectorise the innermost loop."""', '"""Vectorise the innermost loop (a new docstring)."""'),
        ('def _inner(sch, loop):\n    """Vectorise the innermost loop."""\n', "def _inner(sch, loop):\n"),
        ("\n\ndef schedule", "\n\n\n\n# a comment\n\ndef schedule"),
        (
            'io, ii = cfg.split(sch, i, "tile_i")',
            "io, ii = cfg.split(\n        sch,\n        i,\n        'tile_i',\n    )",
        ),
        ('    define_knob("unroll", [0, 16]),\n', "    define_knob('unroll', [0,\n                           16]),\n"),
        ("def _unused(x):\n    return x + 1", "def _unused(x):\n    return x + 2"),  # nothing uses it
    ],
    ids=["comment", "docstring", "drop-docstring", "blank-lines", "reformat-call", "reformat-knobs", "unused-helper"],
)
def test_cosmetic_edits_keep_the_digest(root: Path, old: str, new: str) -> None:
    before = fp_of(root)
    src = (root / "operators/op.py").read_text()
    assert old in src
    (root / "operators/op.py").write_text(src.replace(old, new))
    after = fp_of(root)
    assert after.digest == before.digest
    assert after.dependencies == before.dependencies


@pytest.mark.parametrize(
    "old,new,changed",
    [
        ("max_factor=8", "max_factor=16", "operators/op.py:KNOBS"),
        ("VECTOR = 8", "VECTOR = 4", "operators/op.py:VECTOR"),
        ("    sch.vectorize(loop)\n", "    sch.parallel(loop)\n", "operators/op.py:_inner"),
        ('"float32")', '"float16")', "operators/op.py:compute"),
        ("_inner(sch, j)", "_inner(sch, i)", "operators/op.py:schedule"),
        (
            "import numpy as np",
            "import cupy as np",
            # The import statement runs at import, and reference reads the name.
            ["operators/op.py:<module>.np", "operators/op.py:reference"],
        ),
    ],
    ids=["split-bound", "constant", "helper", "compute", "schedule", "external-binding"],
)
def test_changes_of_meaning_change_the_named_dependency(
    root: Path, old: str, new: str, changed: str | list[str]
) -> None:
    before = fp_of(root)
    src = (root / "operators/op.py").read_text()
    (root / "operators/op.py").write_text(src.replace(old, new))
    after = fp_of(root)
    assert after.digest != before.digest
    diff = compare_dependencies(before.dependencies, after)
    keys = [changed] if isinstance(changed, str) else changed
    assert [(c.key, c.change) for c in diff] == [(k, "changed") for k in keys]
    assert after.workloads_hash == before.workloads_hash


def test_workloads_are_hashed_as_values_not_code(root: Path) -> None:
    before = fp_of(root)
    src = (root / "operators/op.py").read_text()
    (root / "operators/op.py").write_text(src.replace('"M": 64', '"M": 128'))
    after = fp_of(root)
    assert after.dependencies == before.dependencies
    assert after.workloads_hash != before.workloads_hash
    assert after.digest != before.digest
    # Reformatting the literal is not a change.
    (root / "operators/op.py").write_text(src.replace('{"w": {"M": 64, "N": 32}}', "{'w': {'N': 32,\n 'M': 64}}"))
    assert fp_of(root).digest == before.digest


def test_a_new_helper_shows_as_added_and_a_dropped_one_as_removed(root: Path) -> None:
    before = fp_of(root)
    src = (root / "operators/op.py").read_text()
    src = (
        src.replace("    _inner(sch, j)\n", "    _other(sch, j)\n")
        + "\n\ndef _other(sch, loop):\n    sch.unroll(loop)\n"
    )
    (root / "operators/op.py").write_text(src)
    diff = {c.key: c for c in compare_dependencies(before.dependencies, fp_of(root))}
    assert diff["operators/op.py:_other"].change == "added"
    assert diff["operators/op.py:_other"].line == src.splitlines().index("def _other(sch, loop):") + 1
    assert diff["operators/op.py:_inner"].change == "removed" and diff["operators/op.py:_inner"].line is None
    assert diff["operators/op.py:VECTOR"].change == "removed"  # only _inner used it
    assert diff["operators/op.py:schedule"].change == "changed"


USES_MODULES = """\
from tvmtune_ci.template import define_split
import mylib.tiling as T
import mylib.deep.inner
from mylib import reexported
from operators._helpers import helper
from . import _rel

WORKLOADS = {"w": {"M": 8}}
KNOBS = [define_split("t", "M")]


def compute(M):
    return reexported(M)


def reference(A):
    return mylib.deep.inner.ref(A)


def schedule(sch, cfg):
    T.tile(sch)
    helper(sch)
    _rel.rel_fn(sch)
"""

MODULES = {
    "operators/__init__.py": "",
    "operators/op.py": USES_MODULES,
    "operators/_helpers.py": ("from mylib.tiling import factor\n\n\ndef helper(sch):\n    return factor(sch)\n"),
    "operators/_rel.py": "def rel_fn(sch):\n    return sch\n\n\ndef not_used():\n    pass\n",
    "mylib/__init__.py": "from .tiling import tile as reexported\n",
    "mylib/tiling.py": (
        "STEP = 4\n\n\ndef factor(n):\n    return n * STEP\n\n\ndef tile(sch):\n    return factor(sch)\n"
    ),
    "mylib/deep/inner.py": "def ref(a):\n    return a\n",
}


@pytest.fixture
def modroot(tmp_path: Path) -> Path:
    r = tmp_path / "repo"
    for rel, text in MODULES.items():
        write(r, rel, text)
    return r


def test_in_repo_modules_are_followed_through_every_import_form(modroot: Path) -> None:
    fp = fp_of(modroot)
    assert sorted(k for k in fp.dependencies if ":<module>" not in k) == [
        "mylib/deep/inner.py:ref",
        "mylib/tiling.py:STEP",
        "mylib/tiling.py:factor",
        "mylib/tiling.py:tile",
        "operators/_helpers.py:helper",
        "operators/_rel.py:rel_fn",
        "operators/op.py:KNOBS",
        "operators/op.py:compute",
        "operators/op.py:reference",
        "operators/op.py:schedule",
    ]
    # Every module the imports run, packages included (an empty __init__ too).
    assert sorted(k for k in fp.dependencies if k.endswith(":<module>")) == [
        "mylib/__init__.py:<module>",
        "mylib/deep/inner.py:<module>",
        "mylib/tiling.py:<module>",
        "operators/__init__.py:<module>",
        "operators/_helpers.py:<module>",
        "operators/_rel.py:<module>",
        "operators/op.py:<module>",
    ]
    assert fp.lines["mylib/tiling.py:tile"] == ("mylib/tiling.py", 8)
    assert fp.files == {
        "mylib/__init__.py",
        "operators/__init__.py",
        "mylib/deep/inner.py",
        "mylib/tiling.py",
        "operators/_helpers.py",
        "operators/_rel.py",
        "operators/op.py",
    }


@pytest.mark.parametrize(
    "rel,old,new,changed",
    [
        ("mylib/tiling.py", "STEP = 4", "STEP = 2", "mylib/tiling.py:STEP"),
        ("mylib/tiling.py", "return n * STEP", "return n * STEP + 1", "mylib/tiling.py:factor"),
        ("mylib/deep/inner.py", "return a", "return -a", "mylib/deep/inner.py:ref"),
        ("operators/_rel.py", "return sch\n\n\ndef not", "return None\n\n\ndef not", "operators/_rel.py:rel_fn"),
    ],
)
def test_a_change_in_another_module_names_that_module(
    modroot: Path, rel: str, old: str, new: str, changed: str
) -> None:
    before = fp_of(modroot)
    src = (modroot / rel).read_text()
    assert old in src
    (modroot / rel).write_text(src.replace(old, new))
    after = fp_of(modroot)
    assert after.digest != before.digest
    assert [c.key for c in compare_dependencies(before.dependencies, after)] == [changed]


def test_unused_code_in_a_used_module_does_not_count(modroot: Path) -> None:
    before = fp_of(modroot)
    p = modroot / "operators/_rel.py"
    p.write_text(p.read_text().replace("def not_used():\n    pass", "def not_used():\n    return 42"))
    (modroot / "mylib/unrelated.py").write_text("X = 1\n")
    assert fp_of(modroot).digest == before.digest


def test_external_code_is_never_hashed(tmp_path: Path) -> None:
    # A vendored tvmtune_ci under the root is still external.
    root = tmp_path / "repo"
    write(root, "tvmtune_ci/template.py", "def define_split(*a):\n    return a\n")
    write(root, "operators/op.py", TEMPLATE)
    fp = fp_of(root)
    assert all(k.startswith("operators/op.py:") for k in fp.dependencies)


def test_missing_name_in_an_in_repo_module_is_recorded(modroot: Path) -> None:
    p = modroot / "operators/op.py"
    p.write_text(
        p.read_text().replace("from operators._helpers import helper", "from operators._helpers import helper, gone")
    )
    p.write_text(p.read_text().replace("    helper(sch)\n", "    helper(sch)\n    gone(sch)\n"))
    assert fp_of(modroot).dependencies["operators/_helpers.py:gone"] == MISSING_HASH


def test_import_cycles_terminate(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    write(root, "a.py", "from b import f\n")
    write(root, "b.py", "from a import f\n")
    write(
        root,
        "operators/op.py",
        TEMPLATE.replace("    _inner(sch, j)\n", "    f(sch)\n").replace(
            "import numpy as np", "import numpy as np\nfrom a import f"
        ),
    )
    deps = fp_of(root).dependencies
    # op.py's `f` is a.py's, which is b.py's, which is a.py's again: the walk stops where
    # the cycle closes and records that name as defined nowhere; both modules' import-time
    # code and their `from ... import f` lines are hashed on the way.
    assert deps["a.py:f"] == MISSING_HASH
    assert {k for k in deps if k.startswith(("a.py:", "b.py:"))} == {
        "a.py:<module>",
        "a.py:<module>.f",
        "a.py:f",
        "b.py:<module>",
        "b.py:<module>.f",
    }


def test_each_file_is_parsed_once_per_cache(modroot: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(modroot, "operators/op2.py", USES_MODULES.replace('"M": 8', '"M": 16'))
    parsed: list[str] = []
    real = ast.parse

    def counting(source, filename="<unknown>", *a, **kw):  # noqa: ANN001, ANN002, ANN003, ANN202
        if str(filename).startswith(str(modroot)):
            parsed.append(Path(filename).relative_to(modroot).as_posix())
        return real(source, filename, *a, **kw)

    monkeypatch.setattr(ast, "parse", counting)
    cache = SourceCache(modroot)
    fp1 = fingerprint_template(modroot / "operators/op.py", modroot, cache=cache)
    fp2 = fingerprint_template(modroot / "operators/op2.py", modroot, cache=cache)
    assert sorted(parsed) == sorted(set(parsed)), parsed  # no file twice
    assert {"mylib/tiling.py", "operators/op.py", "operators/op2.py"} <= set(parsed)
    assert fp1.digest != fp2.digest and fp1.dependencies.keys() == {
        k.replace("op2.py", "op.py") for k in fp2.dependencies
    }


def test_a_broken_helper_is_a_template_error_naming_its_line(modroot: Path) -> None:
    (modroot / "mylib/tiling.py").write_text("STEP = 4\n\ndef factor(n:\n    return n\n")
    with pytest.raises(TemplateError, match=r"mylib/tiling\.py:3: syntax error"):
        fp_of(modroot)


def test_canonical_dump_ignores_positions_and_docstrings() -> None:
    a = ast.parse('def f(x):\n    """doc"""\n    return x  # c\n')
    b = ast.parse("\n\ndef f(x): return x\n")
    c = ast.parse("def f(x):\n    return -x\n")
    assert canonical_dump(a) == canonical_dump(b) != canonical_dump(c)
    assert "lineno" not in canonical_dump(a) and "doc" not in canonical_dump(a)
    # A docstring-only function means `pass`.
    assert canonical_dump(ast.parse('def g():\n    """only a doc"""\n')) == canonical_dump(
        ast.parse("def g():\n    pass\n")
    )
