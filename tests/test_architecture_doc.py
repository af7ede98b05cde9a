"""docs/architecture.md's table of long modules, held against the tree.

The table ("## Modules over N lines", N read from the heading) lists every module of
`tvmtune_ci/` longer than N lines, its size, and the reason its docstring gives. This
fails when:

- a module over N lines is missing from the table;
- a listed module no longer exists or is no longer over N lines;
- a listed size is off by more than `TOLERANCE` (15%) of the module's size today;
- the reason column and the docstring disagree: a reason listed where the docstring
  has no "Over N lines:" paragraph, or "none given" where it has one.

Why a tolerance and not the exact count: the sizes tell a reader how long a module
is, which an exact count does not tell better, and pinning them would fail on every
edit of any of these modules, so the table would be rewritten daily or dropped. 15%
lets ordinary edits through (a module of 500 lines may move by 75) and still catches
what made the old table wrong: a module that grew from 658 to 1,142 lines, or a split.
Lines are counted as `wc -l` counts them. The failure message prints the rows the tree
gives today, to paste into the table.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
PKG = ROOT / "tvmtune_ci"
TOLERANCE = 0.15
NONE_GIVEN = "none given"

HEADING = re.compile(r"^## Modules over (\d+) lines\s*$", re.M)
ROW = re.compile(r"^\| `([^`]+\.py)` \| ([\d,]+) \| (.+?) \|\s*$")


def _table() -> tuple[int, dict[str, tuple[int, str]]]:
    text = DOC.read_text(encoding="utf-8")
    m = HEADING.search(text)
    assert m, f"{DOC}: no '## Modules over N lines' section"
    body = text[m.end() :]
    nxt = re.search(r"^## ", body, re.M)
    rows: dict[str, tuple[int, str]] = {}
    for line in body[: nxt.start() if nxt else None].splitlines():
        if r := ROW.match(line):
            assert r.group(1) not in rows, f"{DOC}: {r.group(1)} listed twice"
            rows[r.group(1)] = (int(r.group(2).replace(",", "")), r.group(3).strip())
    assert rows, f"{DOC}: the table under '{m.group(0).strip()}' has no rows"
    return int(m.group(1)), rows


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def _long_modules(threshold: int) -> dict[str, int]:
    sizes = {p.relative_to(PKG).as_posix(): _lines(p) for p in PKG.rglob("*.py")}
    return {rel: n for rel, n in sizes.items() if n > threshold}


def _gives_reason(path: Path, threshold: int) -> bool:
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    return f"Over {threshold} lines" in doc


def _suggested_rows(threshold: int) -> str:
    long = _long_modules(threshold)
    return "\n".join(
        f"| `{rel}` | {n:,} | {'(its reason)' if _gives_reason(PKG / rel, threshold) else NONE_GIVEN} |"
        for rel, n in sorted(long.items(), key=lambda kv: -kv[1])
    )


def test_the_table_lists_every_long_module_and_only_those() -> None:
    threshold, rows = _table()
    long = _long_modules(threshold)
    missing = sorted(set(long) - set(rows))
    not_long = sorted(set(rows) - set(long))
    assert not missing and not not_long, (
        f"{DOC.name}: over {threshold} lines but not listed: {missing}; listed but not over "
        f"{threshold} lines (or gone): {not_long}. The tree today:\n{_suggested_rows(threshold)}"
    )


def test_the_listed_sizes_are_within_the_tolerance() -> None:
    threshold, rows = _table()
    off = {}
    for rel, (listed, _) in rows.items():
        path = PKG / rel
        if path.is_file():  # a module gone is the other test's failure
            n = _lines(path)
            if abs(listed - n) > TOLERANCE * n:
                off[rel] = f"listed {listed}, is {n}"
    assert not off, (
        f"{DOC.name}: sizes off by more than {TOLERANCE:.0%}: {off}. The tree today:\n{_suggested_rows(threshold)}"
    )


def test_the_reason_column_agrees_with_each_docstring() -> None:
    threshold, rows = _table()
    wrong = []
    for rel, (_, why) in rows.items():
        path = PKG / rel
        if not path.is_file():
            continue
        gives, says_none = _gives_reason(path, threshold), why.startswith(NONE_GIVEN)
        if gives == says_none:
            wrong.append(
                f"{rel}: the table says {why!r}, the docstring "
                f"{'has' if gives else 'has no'} an 'Over {threshold} lines:' paragraph"
            )
    assert not wrong, f"{DOC.name}:\n" + "\n".join(wrong)


def _named(rel: str, text: str) -> bool:
    """A module is named by its path (`model/build.py`), or, inside its folder's list,
    by its file name (`search.py`) or its bare name in backticks (`canon`)."""
    path = Path(rel)
    if path.parent.name == "commands" and "`commands/<verb>.py`" in text:
        return True  # one module per command, named by the pattern
    return any(f"`{form}`" in text or f"`{form}:" in text for form in (rel, path.name, path.stem)) or (
        f"{path.parent.name}/" in text and f"`{path.stem}`" in text
    )


def test_every_module_of_the_package_is_named_in_the_map() -> None:
    """The module map is complete: a module added to the package (not an __init__) and
    named nowhere in docs/architecture.md fails here, naming it."""
    text = DOC.read_text(encoding="utf-8")
    missing = sorted(
        rel
        for p in PKG.rglob("*.py")
        if p.name != "__init__.py" and not _named(rel := p.relative_to(PKG).as_posix(), text)
    )
    assert not missing, f"{DOC.name} names none of these modules; add them to the map: {missing}"
