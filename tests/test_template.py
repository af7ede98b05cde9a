"""The template API read statically: declarations, space sizes, errors with file:line."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest
from conftest import OPERATORS, write

from tvmtune_ci.core.errors import TemplateError
from tvmtune_ci.core.extents import count_perfect_tiles, eval_extent
from tvmtune_ci.core.targetinfo import scope
from tvmtune_ci.core.template import (
    Categorical,
    Split,
    Structural,
    define_knob,
    define_split,
    define_structure,
    design_spaces,
    discover_templates,
    read_template,
    space_size,
)

BODY = "def compute(M):\n    pass\n\n\ndef reference(A):\n    pass\n\n\ndef schedule(sch, cfg):\n    pass\n"


def brute_tiles(extent: int, parts: int, max_inner: int) -> int:
    """Every ordered `parts`-tuple of factors whose product is `extent`, inner <= max."""
    divisors = [d for d in range(1, extent + 1) if extent % d == 0]
    return sum(1 for t in itertools.product(divisors, repeat=parts) if math.prod(t) == extent and t[-1] <= max_inner)


@pytest.mark.parametrize("extent,parts,max_inner", [(8, 2, 64), (512, 3, 8), (96, 3, 16), (7, 2, 1), (360, 4, 12)])
def test_count_perfect_tiles_matches_brute_force(extent: int, parts: int, max_inner: int) -> None:
    assert count_perfect_tiles(extent, parts, max_inner) == brute_tiles(extent, parts, max_inner)


TARGETS = [
    {"kind": "llvm", "mcpu": "znver4"},
    {"kind": "llvm", "mcpu": "znver3"},
    {"kind": "llvm", "mtriple": "aarch64-linux-gnu"},
]


def test_the_real_templates_read_statically() -> None:
    # operators/ evolves: check what holds for any template, against brute force.
    paths = discover_templates(OPERATORS)
    assert any(p.name == "matmul.py" for p in paths)
    for path in paths:
        decl = read_template(path)
        src = path.read_text().splitlines()
        assert decl.name == path.stem
        assert src[decl.line - 1].startswith("def schedule(")
        assert set(decl.functions) == {"compute", "reference", "schedule"}
        if decl.constraints or "llvm" not in decl.kinds:
            continue  # GPU templates' legal points: tests/test_constraints.py, test_operators_cuda.py
        for target in TARGETS:  # KNOBS may name the target's facts (LANES, VREGS)
            for name, wl in decl.workloads.items():
                names = scope(wl, target)
                expected = 1
                for k in decl.knobs:
                    if isinstance(k, Split):
                        expected *= brute_tiles(eval_extent(k.extent, names), k.parts, eval_extent(k.max_factor, names))
                    elif isinstance(k, Categorical):
                        expected *= len(k.candidates)
                spaces = math.prod(len(k.candidates) for k in decl.knobs if isinstance(k, Structural))
                assert decl.space_sizes(target)[name] == (expected, spaces)


def test_eval_extent() -> None:
    wl = {"H": 30, "pad": 1, "R": 3, "stride": 2, "dtype": "float32"}
    assert eval_extent("(H + 2*pad - R)//stride + 1", wl) == 15
    assert eval_extent(7, wl) == 7
    with pytest.raises(TemplateError, match="no integer 'dtype'"):
        eval_extent("dtype", wl)
    with pytest.raises(TemplateError, match="only workload keys"):
        eval_extent("H ** 2", wl)
    with pytest.raises(TemplateError, match="evaluates to 0"):
        eval_extent("H - 30", wl)


def test_design_spaces_and_space_size() -> None:
    knobs = [
        define_split("t", "M", parts=2, max_factor=4),
        define_knob("u", [0, 8]),
        define_structure("a", [True, False]),
        define_structure("b", ["x", "y", "z"]),
    ]
    assert len(design_spaces(knobs)) == 6
    assert design_spaces(knobs)[0] == {"a": True, "b": "x"}
    assert space_size(knobs, {"M": 16}) == (brute_tiles(16, 2, 4) * 2, 6)
    assert isinstance(knobs[0], Split) and isinstance(knobs[1], Categorical) and isinstance(knobs[2], Structural)


@pytest.mark.parametrize(
    "call,message",
    [
        (lambda: define_split("s", "M", parts=1), "parts must be >= 2"),
        (lambda: define_knob("k", []), "needs at least one candidate"),
        (lambda: define_knob("k", [1, "a"]), "candidates must be integers"),
        (lambda: define_structure("s", []), "needs at least one candidate"),
    ],
)
def test_definer_errors(call, message: str) -> None:  # noqa: ANN001
    with pytest.raises(TemplateError, match=message):
        call()


@pytest.mark.parametrize(
    "source,message",
    [
        ("KNOBS = []\n" + BODY, r"op\.py: not an operator template: missing WORKLOADS"),
        ("WORKLOADS = {'w': {'M': 4}}\nKNOBS = []\n", "missing compute, reference, schedule"),
        ("WORKLOADS = {'w': {'M': M0}}\nKNOBS = []\n" + BODY, r"op\.py:1: WORKLOADS must be a literal"),
        ("WORKLOADS = {'w': {[1]: 4}}\nKNOBS = []\n" + BODY, r"op\.py:1: WORKLOADS must be a literal"),
        ("WORKLOADS = {}\nKNOBS = []\n" + BODY, "WORKLOADS must be a non-empty dict"),
        ("WORKLOADS = {'w': {'M': 4}}\nKNOBS = make()\n" + BODY, r"op\.py:2: KNOBS must be a list"),
        (
            "WORKLOADS = {'w': {'M': 4}}\nKNOBS = [\n    tile('t', 'M'),\n]\n" + BODY,
            r"op\.py:3: tile\(\) is not a knob",
        ),
        (
            "WORKLOADS = {'w': {'M': 4}}\nKNOBS = [define_split('t', 'M', parts=1)]\n" + BODY,
            r"op\.py:2: .*parts must be >= 2",
        ),
        (
            "WORKLOADS = {'w': {'M': 4}}\nKNOBS = [define_split('t', 'M', bogus=1)]\n" + BODY,
            r"op\.py:2: define_split\(\): .*bogus",
        ),
        (
            "WORKLOADS = {'w': {'M': 4}}\nKNOBS = [define_knob('u', [1]), define_knob('u', [2])]\n" + BODY,
            "knob names must be unique; repeated: u",
        ),
        (
            "WORKLOADS = {'w': {'M': 4}}\n\nKNOBS = [define_split('t', 'N')]\n" + BODY,
            r"op\.py:3: knob 't', workload 'w': extent 'N': workload has no integer 'N'",
        ),
        ("WORKLOADS = {'w': {'M': 4}\n" + BODY, r"op\.py:1: syntax error"),
    ],
    ids=[
        "no-workloads",
        "no-functions",
        "name-in-workloads",
        "unhashable",
        "empty",
        "knobs-not-list",
        "not-a-knob",
        "bad-parts",
        "bad-kwarg",
        "duplicate",
        "bad-extent",
        "syntax",
    ],
)
def test_read_template_errors_name_the_file_and_line(tmp_path: Path, source: str, message: str) -> None:
    p = write(tmp_path, "op.py", source)
    with pytest.raises(TemplateError, match=message):
        read_template(p)


def test_reading_never_runs_the_module(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    p = write(
        tmp_path,
        "op.py",
        f"open({str(marker)!r}, 'w').close()\nraise SystemExit(3)\n"
        "WORKLOADS = {'w': {'M': 4}}\nKNOBS = [define_split('t', 'M')]\n" + BODY,
    )
    decl = read_template(p)
    assert decl.workloads == {"w": {"M": 4}} and not marker.exists()


def test_discover_templates_skips_private_helpers(tmp_path: Path) -> None:
    for name in ("b.py", "a.py", "_helpers.py", "notes.txt"):
        write(tmp_path, f"operators/{name}", "")
    assert [p.name for p in discover_templates(tmp_path / "operators")] == ["a.py", "b.py"]
    assert discover_templates(tmp_path / "missing") == []


def test_import_runs_the_tree_it_was_given_not_the_file_as_it_is_now(tmp_path: Path) -> None:
    """retune reads, fingerprints and imports one parse of the template: an edit
    landing in between must not make the tuned code differ from the fingerprinted."""
    from tvmtune_ci.check.fingerprint import SourceCache
    from tvmtune_ci.core.template import import_template

    head = 'WORKLOADS = {"w": {"M": %d}}\nKNOBS = [define_knob("u", [0, 16])]\n'
    path = write(tmp_path, "operators/op.py", "from tvmtune_ci.template import define_knob\n" + head % 64 + BODY)
    cache = SourceCache(tmp_path)
    decl, tree = cache.template(path), cache.tree(path)
    path.write_text(path.read_text().replace("64", "128"))
    module = import_template(path, tmp_path, tree)
    assert module.WORKLOADS == decl.workloads == {"w": {"M": 64}}
    assert import_template(path, tmp_path).WORKLOADS == {"w": {"M": 128}}
    with pytest.raises(TemplateError, match="ZeroDivisionError"):
        import_template(path, tmp_path, compile_tree("x = 1 // 0\n"))


def compile_tree(source: str):  # noqa: ANN201
    import ast

    return ast.parse(source)


def test_an_extent_typo_is_reported_at_the_knob_with_only_the_integer_names(tmp_path: Path) -> None:
    """Not at `KNOBS = [`: at the line of the knob whose extent fails, offering only the
    names an extent can use (a dtype is no extent)."""
    src = (
        "from tvmtune_ci.template import define_knob, define_split\n"
        "WORKLOADS = {'w': {'R': 4096, 'C': 768, 'dtype': 'float32'}}\n"
        "KNOBS = [\n"
        "    define_split('tile_r', 'R', parts=2),\n"
        "    define_knob('unroll', [0, 16]),\n"
        "    define_split('tile_c', 'CC//LANES', parts=2),\n"
        "]\n" + BODY
    )
    path = write(tmp_path, "operators/ln.py", src)
    with pytest.raises(TemplateError) as e:
        read_template(path)
    assert e.value.line == 6, str(e.value)
    assert "knob 'tile_c'" in str(e.value) and "'CC'" in str(e.value)
    assert "the integers it has: R, C" in str(e.value) and "dtype" not in str(e.value)
