"""CONSTRAINTS: counted without TVM (equal to a brute-force count), refused before a
build (fixed configurations), never proposed by the search, and errors at the line."""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

import pytest

from tvmtune_ci.core.errors import TemplateError
from tvmtune_ci.core.template import check_imported_agrees, import_template, read_template

H100 = {
    "kind": "cuda",
    "arch": "sm_90a",
    "max_shared_memory_per_block": 49152,
    "max_threads_per_block": 1024,
    "thread_warp_size": 32,
    "registers_per_block": 65536,
}
SMALL_GPU = dict(H100, max_shared_memory_per_block=1024, max_threads_per_block=64)
CPU = {"kind": "llvm", "mcpu": "znver3"}

GPU_TEMPLATE = """\
from tvmtune_ci.template import define_constraint, define_knob, define_split, define_structure

TARGET_KINDS = ["cuda"]
WORKLOADS = WL
KNOBS = [
    define_split("tile_i", "M", parts=4, max_factor=4, default=[None, 1, 2, 1]),
    define_split("tile_j", "N", parts=4, max_factor=4, default=[None, 1, 16, 1]),
    define_split("tile_k", "K", parts=2, max_factor=16, default=[None, 4]),
    define_knob("vec", [1, 2, 4]),
    define_structure("stages", [1, 2]),
]
CONSTRAINTS = [
    define_constraint("threads", "tile_i[2] * tile_j[2] <= THREADS"),
    define_constraint("warps", "tile_i[2] * tile_j[2] % WARP == 0"),
    define_constraint("smem", "(tile_i[1] * tile_i[2] * tile_i[3] + tile_j[1] * tile_j[2] * tile_j[3]) * tile_k[1] * 4 * stages <= SMEM"),
    define_constraint("vector", "tile_k[1] % vec == 0 and vec <= LANES"),
]


def compute(M, N, K, dtype):
    pass


def reference(A, B):
    pass


def schedule(sch, cfg):
    pass
"""


def write(tmp_path: Path, text: str, name: str = "gemm_gpu") -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(text)
    return path


def gpu_template(tmp_path: Path, workloads: dict[str, Any]) -> Path:
    return write(tmp_path, GPU_TEMPLATE.replace("WL", repr(workloads)))


def _tilings(extent: int, parts: int, max_inner: int) -> list[tuple[int, ...]]:
    """Every `parts`-tuple of positive integers whose product is `extent`, innermost
    at most `max_inner`: by brute force over divisors, independent of template.py."""
    divisors = [d for d in range(1, extent + 1) if extent % d == 0]
    return [t for t in itertools.product(divisors, repeat=parts) if math.prod(t) == extent and t[-1] <= max_inner]


ALL = [
    "ti[2] * tj[2] <= THREADS",
    "ti[2] * tj[2] % WARP == 0",
    "(ti[1] * ti[2] * ti[3] + tj[1] * tj[2] * tj[3]) * tk[1] * 4 * stages <= SMEM",
    "tk[1] % vec == 0 and vec <= LANES",
]
# Only some factors of each split: tilings that agree on them count together.
THREADS_ONLY = ALL[:2]


def brute_force(workload: dict[str, int], facts: dict[str, int], exprs: list[str]) -> int:
    """Every point of every design space, each constraint evaluated by Python."""
    n = 0
    for ti, tj, tk, vec, stages in itertools.product(
        _tilings(workload["M"], 4, 4), _tilings(workload["N"], 4, 4), _tilings(workload["K"], 2, 16), [1, 2, 4], [1, 2]
    ):
        env = {"ti": ti, "tj": tj, "tk": tk, "vec": vec, "stages": stages, **facts}
        n += all(eval(e, {}, env) for e in exprs)  # noqa: S307 - the test's own literals
    return n


@pytest.mark.parametrize("exprs", [ALL, THREADS_ONLY], ids=["all", "threads-only"])
@pytest.mark.parametrize("target", [H100, SMALL_GPU], ids=["h100", "small-gpu"])
@pytest.mark.parametrize("shape", [(16, 32, 8), (32, 16, 16), (8, 64, 4)])
def test_the_count_equals_a_brute_force_count(
    tmp_path: Path, shape: tuple[int, int, int], target: dict[str, Any], exprs: list[str]
) -> None:
    m, n, k = shape
    wl = {"M": m, "N": n, "K": k, "dtype": "float32"}
    text = GPU_TEMPLATE.replace("WL", repr({"w": wl}))
    if exprs is THREADS_ONLY:
        text = "\n".join(x for x in text.splitlines() if '"smem"' not in x and '"vector"' not in x)
    decl = read_template(write(tmp_path, text))
    facts = {
        "THREADS": target["max_threads_per_block"],
        "WARP": 32,
        "SMEM": target["max_shared_memory_per_block"],
        "LANES": 4,
    }
    expected = brute_force(wl, facts, exprs)
    assert 0 < expected
    assert decl.space_sizes(target)["w"] == (expected, 1)


def test_the_count_is_per_target(tmp_path: Path) -> None:
    decl = read_template(gpu_template(tmp_path, {"w": {"M": 64, "N": 64, "K": 32, "dtype": "float32"}}))
    big, small = decl.space_sizes(H100)["w"][0], decl.space_sizes(SMALL_GPU)["w"][0]
    assert small < big


def test_a_gpu_template_on_a_cpu_target_says_so(tmp_path: Path) -> None:
    decl = read_template(gpu_template(tmp_path, {"w": {"M": 64, "N": 64, "K": 32, "dtype": "float32"}}))
    with pytest.raises(TemplateError, match=r"schedules for cuda targets \(TARGET_KINDS\), not llvm"):
        decl.space_sizes(CPU)


@pytest.mark.parametrize(
    ("old", "new", "words"),
    [
        ('"tile_i[2] * tile_j[2] <= THREADS"', '"tile_i[2] * tile_x[2] <= THREADS"', "'tile_x' is no knob"),
        ('"tile_i[2] * tile_j[2] <= THREADS"', '"tile_i[7] <= THREADS"', r"tile_i\[0\] to tile_i\[3\]"),
        ('"tile_i[2] * tile_j[2] <= THREADS"', '"tile_i <= THREADS"', r"tile_i\[0\] to tile_i\[3\]"),
        ('"tile_i[2] * tile_j[2] <= THREADS"', '"__import__(1)"', "is not allowed"),
        (
            '"tile_i[2] * tile_j[2] <= THREADS"',
            '"tile_i[2] * tile_j[2] <= 16"',
            "default configuration of design space",
        ),
    ],
)
def test_a_bad_constraint_is_reported_at_its_line(tmp_path: Path, old: str, new: str, words: str) -> None:
    text = gpu_template(tmp_path, {"w": {"M": 64, "N": 64, "K": 32, "dtype": "float32"}}).read_text()
    assert old in text
    path = write(tmp_path, text.replace(old, new), "bad")
    line = next(i for i, x in enumerate(path.read_text().splitlines(), 1) if '"threads"' in x)
    with pytest.raises(TemplateError, match=words) as e:
        read_template(path).space_sizes(H100)
    assert e.value.line == line, str(e.value)


def test_a_default_that_does_not_divide_is_reported_at_its_knob(tmp_path: Path) -> None:
    path = gpu_template(tmp_path, {"w": {"M": 9, "N": 64, "K": 32, "dtype": "float32"}})
    line = next(i for i, x in enumerate(path.read_text().splitlines(), 1) if '"tile_i"' in x)
    with pytest.raises(TemplateError, match="multiple of 2") as e:
        read_template(path)
    assert e.value.line == line


def test_a_constraint_edit_makes_the_log_stale(tmp_path: Path) -> None:
    """CONSTRAINTS are part of the fingerprint: the legal space is what was searched."""
    from tvmtune_ci.check.fingerprint import SourceCache

    path = gpu_template(tmp_path, {"w": {"M": 64, "N": 64, "K": 32, "dtype": "float32"}})
    before = SourceCache(tmp_path).fingerprint(path).digest
    path.write_text(path.read_text().replace("* 4 * stages <= SMEM", "* 4 * stages <= SMEM // 2"))
    assert SourceCache(tmp_path).fingerprint(path).digest != before


# --------------------------------------------------------------------------- with TVM

LIMIT = "tile_i[1] * tile_j[1] <= 64"  # a register tile's bound, on a CPU template


def constrained_mm(folder: Path, name: str = "mm_limited") -> Any:
    from test_tuner import SMALL_MM, load_template

    src = SMALL_MM.replace("REFERENCE", "A @ B").replace("    EXTRA\n", "")
    src = src.replace("define_split, define_structure", "define_constraint, define_split, define_structure")
    src = src.replace("]\n\n\ndef compute", f']\nCONSTRAINTS = [define_constraint("regs", {LIMIT!r})]\n\n\ndef compute')
    path = folder / f"{name}.py"
    path.write_text(src)
    return load_template(path)


def test_a_configuration_that_breaks_a_constraint_is_never_built(tmp_path: Path) -> None:
    from tvmtune_ci.tune.builder import schedule_config
    from tvmtune_ci.tune.numerics import check_correct

    template = constrained_mm(tmp_path)
    schedule_config(template, "m64", {"tile_i": [8, 8], "tile_j": [8, 8]})  # 64: legal
    with pytest.raises(TemplateError, match="breaks constraint.*'regs'.*not built"):
        schedule_config(template, "m64", {"tile_i": [4, 16], "tile_j": [8, 8]})
    with pytest.raises(TemplateError, match="'regs'"):
        check_correct(template, "m64", {"kind": "llvm", "num-cores": 2}, {"tile_i": [4, 16], "tile_j": [8, 8]})


def test_the_search_never_builds_a_point_that_breaks_a_constraint(tmp_path: Path) -> None:
    """29% of this space breaks the constraint: 24 random-ish trials without the
    check would include one with probability 1 - 0.71^24 > 0.999."""
    from test_tuner import request

    from tvmtune_ci.tune.tuner import tune_workload

    template = constrained_mm(tmp_path)
    out = tune_workload(request(template, tmp_path / "work", trials=24))
    searched = [r["knobs"] for r in out.records if r.get("knobs")]
    assert len(searched) >= 20
    for kv in searched:
        i, j = kv.get("tile_i", [64, 1]), kv.get("tile_j", [64, 1])
        assert i[1] * j[1] <= 64, kv
    # The reported size is the legal points' (35 of the 5 x 7 split pairs are 25).
    assert out.space_size == 25 * 5 * 3 * 2 and out.design_spaces == 2


@pytest.mark.parametrize(
    "edit",
    [
        'CONSTRAINTS.append(define_constraint("more", "vec <= 2"))',
        "CONSTRAINTS.pop()",
        'CONSTRAINTS[0] = define_constraint("threads", "tile_i[2] * tile_j[2] <= THREADS // 2")',
    ],
)
def test_constraints_changed_at_import_are_refused(tmp_path: Path, edit: str) -> None:
    """The tuner keeps to the imported CONSTRAINTS, `check` counts the space by the
    literal: a template whose CONSTRAINTS change at import is refused, naming them."""
    wl = {"w": {"M": 64, "N": 64, "K": 32, "dtype": "float32"}}
    path = gpu_template(tmp_path, wl)
    check_imported_agrees(import_template(path, tmp_path), read_template(path))  # as written: agrees
    edited = write(tmp_path, GPU_TEMPLATE.replace("WL", repr(wl)) + f"\n{edit}\n", "gemm_gpu_edited")
    with pytest.raises(TemplateError, match="CONSTRAINTS after import differs from the literal"):
        check_imported_agrees(import_template(edited, tmp_path), read_template(edited))
