"""fingerprint_template: code that runs when the template is imported counts.

retune imports the template, which runs every module-level statement of it and
of every in-repo module it imports. A change there is a change of meaning (and a
place to hide code), so it must change the fingerprint and be named in the report,
while the fingerprint itself stays AST-only.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import write

from tvmtune_ci.check.fingerprint import compare_dependencies, fingerprint_template

TEMPLATE = '''\
"""A template whose schedule uses a helper module."""

from __future__ import annotations

from operators._h import tile
from tvmtune_ci.template import define_knob

WORKLOADS = {"w": {"M": 64}}

KNOBS = [define_knob("unroll", [0, 16])]


def compute(M):
    from tvm import te

    return te.placeholder((M,), "float32")


def reference(A):
    return A


def schedule(sch, cfg):
    tile(sch)
'''

HELPER = '''\
"""Helpers (not a template)."""

from __future__ import annotations

import os

STEP = 4


def tile(sch):
    return sch.split(STEP)


def unused(x):
    return x + 1
'''

OTHER = """\
def g():
    return 1


def h():
    return 2
"""


def fp_of(root: Path):  # noqa: ANN201
    return fingerprint_template(root / "operators/op.py", root)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "repo"
    write(r, "operators/op.py", TEMPLATE)
    write(r, "operators/_h.py", HELPER)
    write(r, "operators/_other.py", OTHER)
    return r


def edit(root: Path, rel: str, old: str, new: str) -> str:
    """Replace `old` (which must be there) by `new` in root/rel; the new text."""
    path = root / rel
    src = path.read_text()
    assert old in src, (rel, old)
    src = src.replace(old, new, 1)
    path.write_text(src)
    return src


def line_of(src: str, text: str) -> int:
    return next(i for i, line in enumerate(src.splitlines(), 1) if text in line)


def changes(before, after) -> dict[str, tuple[str, int | None]]:  # noqa: ANN001
    return {c.key: (c.change, c.line) for c in compare_dependencies(before.dependencies, after)}


# --------------------------------------------------------------------------- the template


def test_a_statement_after_the_imports_of_the_template_counts(root: Path) -> None:
    before = fp_of(root)
    src = edit(
        root,
        "operators/op.py",
        "from tvmtune_ci.template import define_knob\n",
        "from tvmtune_ci.template import define_knob\nimport os\nos.system('true')\n",
    )
    after = fp_of(root)
    assert after.digest != before.digest
    assert changes(before, after) == {
        "operators/op.py:<module>": ("changed", 1),
        "operators/op.py:<module>.os": ("added", line_of(src, "import os")),
        "operators/op.py:<module>.<expr>": ("added", line_of(src, "os.system")),
    }


def test_a_call_at_module_level_hashes_the_function_it_calls(root: Path) -> None:
    # `_x = f()` runs f at import: f's body counts although nothing else uses it.
    edit(root, "operators/op.py", "WORKLOADS =", "def _setup():\n    return 1\n\n\n_x = _setup()\n\nWORKLOADS =")
    before = fp_of(root)
    assert "operators/op.py:_setup" in before.dependencies
    edit(root, "operators/op.py", "    return 1\n", "    return __import__('os').getpid()\n")
    after = fp_of(root)
    assert after.digest != before.digest
    assert set(changes(before, after)) == {"operators/op.py:_setup"}


# --------------------------------------------------------------------------- helper modules

HELPER_PAYLOADS = {
    "call": "os.system('true')\n",
    "assign-call": "_x = os.getcwd()\n",
    "if": "if os.environ.get('X'):\n    os.system('true')\n",
    "try": "try:\n    os.system('true')\nexcept OSError:\n    pass\n",
    "for": "for _i in range(3):\n    os.system('true')\n",
    "with": "with open(os.devnull) as _f:\n    pass\n",
    "decorated": "@os.system\ndef _run():\n    pass\n",
    "class": "class _C:\n    x = os.system('true')\n",
    "default-arg": "def _f(x=os.system('true')):\n    pass\n",
    "import": "import operators._other\n",
}


@pytest.mark.parametrize("payload", list(HELPER_PAYLOADS.values()), ids=list(HELPER_PAYLOADS))
def test_a_statement_at_module_level_of_a_helper_counts(root: Path, payload: str) -> None:
    before = fp_of(root)
    src = edit(root, "operators/_h.py", "STEP = 4\n", f"{payload}STEP = 4\n")
    after = fp_of(root)
    assert after.digest != before.digest
    diff = changes(before, after)
    # Named like any other dependency: file, statement, current line.
    first = payload.splitlines()[0]
    added = {k: v for k, v in diff.items() if v[0] == "added"}
    assert any(
        k.startswith("operators/_h.py:<module>.") and line == line_of(src, first) for k, (_, line) in added.items()
    ), diff


@pytest.mark.parametrize(
    "import_line",
    [
        "from operators._h import tile",
        "import operators._h\ntile = operators._h.tile",
        "from operators import _h\ntile = _h.tile",
        "from ._h import *",
        "from . import _h\ntile = _h.tile",
    ],
    ids=["from-module", "import-dotted", "from-package", "relative-star", "relative-module"],
)
def test_every_import_form_runs_the_helper(root: Path, import_line: str) -> None:
    edit(root, "operators/op.py", "from operators._h import tile", import_line)
    before = fp_of(root)
    edit(root, "operators/_h.py", "STEP = 4\n", "STEP = 4\n_x = os.system('true')\n")
    after = fp_of(root)
    assert after.digest != before.digest
    assert "operators/_h.py:<module>._x" in changes(before, after)


@pytest.mark.parametrize(
    "import_line", ["import operators._h", "from operators import _h", "from . import _h", "from ._h import *"]
)
def test_a_helper_imported_only_for_its_side_effects_counts(root: Path, import_line: str) -> None:
    edit(root, "operators/op.py", "from operators._h import tile", f"{import_line}  # noqa")
    edit(root, "operators/op.py", "    tile(sch)\n", "    pass\n")
    before = fp_of(root)
    edit(root, "operators/_h.py", "STEP = 4\n", "STEP = 4\nos.system('true')\n")
    assert fp_of(root).digest != before.digest


def test_a_helper_imported_inside_a_hashed_function_counts(root: Path) -> None:
    # schedule runs the import when it is called: the module's top level runs then.
    edit(root, "operators/op.py", "from operators._h import tile\n", "")
    edit(root, "operators/op.py", "    tile(sch)\n", "    import operators._h  # noqa: F401\n")
    before = fp_of(root)
    edit(root, "operators/_h.py", "STEP = 4\n", "STEP = 4\nos.system('true')\n")
    assert fp_of(root).digest != before.digest


def test_what_a_helpers_module_level_code_reaches_counts_transitively(root: Path) -> None:
    # _h runs `_other.g()` at import: g's body counts, h's (never called) does not.
    edit(root, "operators/_h.py", "STEP = 4\n", "from operators import _other\n\n_v = _other.g()\nSTEP = 4\n")
    before = fp_of(root)
    assert "operators/_other.py:g" in before.dependencies
    edit(root, "operators/_other.py", "return 2", "return 3")
    assert fp_of(root).digest == before.digest
    edit(root, "operators/_other.py", "return 1", "return __import__('os').getpid()")
    after = fp_of(root)
    assert after.digest != before.digest
    assert set(changes(before, after)) == {"operators/_other.py:g"}


def test_a_package_init_on_the_way_counts(root: Path) -> None:
    write(root, "operators/__init__.py", "")
    before = fp_of(root)
    write(root, "operators/__init__.py", "import os\nos.system('true')\n")
    after = fp_of(root)
    assert after.digest != before.digest
    assert "operators/__init__.py:<module>.<expr>" in changes(before, after)


@pytest.mark.parametrize(
    "old,new",
    [
        ("@os.system\ndef _run():\n    pass\n", "@os.system\ndef _run():\n    return 1\n"),
        ("class _C:\n    def m(self):\n        pass\n", "class _C:\n    def m(self):\n        return 1\n"),
        ("def _f(x=1):\n    pass\n", "def _f(x=2):\n    pass\n"),
        ("def _f(x: int):\n    pass\n", "def _f(x: float):\n    pass\n"),
    ],
    ids=["decorated-body", "class-method-body", "default-value", "annotation"],
)
def test_what_a_definition_runs_at_import_counts(root: Path, old: str, new: str) -> None:
    # A decorator may call the function, a class body runs (and its metaclass or
    # base may call a method), defaults and annotations are evaluated.
    edit(root, "operators/_h.py", "STEP = 4\n", f"STEP = 4\n{old}")
    before = fp_of(root)
    edit(root, "operators/_h.py", old, new)
    assert fp_of(root).digest != before.digest


@pytest.mark.parametrize(
    "old,new",
    [
        ("    return x + 1", "    return x + 2"),  # a body that never runs
        ("STEP = 4\n", "STEP = 4  # the step\n"),
        ('"""Helpers (not a template)."""', '"""Helpers, reworded."""'),
        ("import os\n", "\n\nimport os\n\n"),
        ("def unused(x):\n", 'def unused(x):\n    """Now documented."""\n'),
        ("return sch.split(STEP)", "return sch.split(\n        STEP,\n    )"),
    ],
    ids=["unused-function-body", "comment", "docstring", "blank-lines", "new-docstring", "reformat"],
)
def test_cosmetic_edits_to_module_level_code_do_not_count(root: Path, old: str, new: str) -> None:
    before = fp_of(root)
    edit(root, "operators/_h.py", old, new)
    after = fp_of(root)
    assert after.digest == before.digest
    assert after.dependencies == before.dependencies


def test_a_string_statement_does_not_count(root: Path) -> None:
    before = fp_of(root)
    edit(root, "operators/_h.py", "STEP = 4\n", 'STEP = 4\n"""STEP: the split factor."""\n')
    assert fp_of(root).digest == before.digest


def test_reordering_module_level_statements_counts(root: Path) -> None:
    # `X = 1; X = 2; Y = X` is not `X = 1; Y = X; X = 2`.
    edit(root, "operators/_h.py", "STEP = 4\n", "X = 1\nX = 2\nY = X\nSTEP = 4\n")
    before = fp_of(root)
    edit(root, "operators/_h.py", "X = 2\nY = X\n", "Y = X\nX = 2\n")
    after = fp_of(root)
    assert after.digest != before.digest
    assert "operators/_h.py:<module>" in changes(before, after)


def test_workloads_are_still_compared_as_values(root: Path) -> None:
    before = fp_of(root)
    edit(root, "operators/op.py", '{"M": 64}', '{"M": 128}')
    after = fp_of(root)
    assert after.dependencies == before.dependencies
    assert after.workloads_hash != before.workloads_hash


def test_fingerprinting_never_runs_module_level_code(root: Path, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    payload = f"open({str(marker)!r}, 'w').close()\n"
    edit(root, "operators/op.py", "WORKLOADS =", f"{payload}WORKLOADS =")
    edit(root, "operators/_h.py", "STEP = 4\n", f"STEP = 4\n{payload}")
    fp = fp_of(root)
    assert "operators/_h.py:<module>.<expr>" in fp.dependencies
    assert not marker.exists()


# --------------------------------------------------------------------------- names in strings


@pytest.mark.parametrize(
    "call",
    ["globals()['_payload']()", "eval('_payload()')", "getattr(__import__('sys').modules[__name__], '_payload')()"],
    ids=["globals", "eval", "sys-modules"],
)
def test_a_function_reached_by_a_string_counts(root: Path, call: str) -> None:
    # Its name is never written as code: every definition of the module counts.
    edit(root, "operators/_h.py", "STEP = 4\n", f"STEP = 4\n\n\ndef _payload():\n    pass\n\n\n{call}\n")
    before = fp_of(root)
    edit(root, "operators/_h.py", "def _payload():\n    pass\n", "def _payload():\n    os.getpid()\n")
    after = fp_of(root)
    assert after.digest != before.digest
    assert "operators/_h.py:_payload" in changes(before, after)


@pytest.mark.parametrize(
    "line",
    ["__import__('operators._other')", "import importlib\nimportlib.import_module('operators._other')"],
    ids=["__import__", "import_module"],
)
def test_a_module_imported_by_a_string_counts(root: Path, line: str) -> None:
    edit(root, "operators/_h.py", "STEP = 4\n", f"STEP = 4\n{line}\n")
    before = fp_of(root)
    edit(root, "operators/_other.py", "def g():", "_v = 1\n\n\ndef g():")
    after = fp_of(root)
    assert after.digest != before.digest
    # What it returns is used as a value: all of its definitions count.
    assert "operators/_other.py:_v" in changes(before, after)
