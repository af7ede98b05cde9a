"""The light side never imports the tuning side: a static rule over every import.

`check`, `status`, `matrix` and `readme` run on GitHub-hosted PR runners without TVM
(`tests/test_no_tvm_import.py` runs them and looks at sys.modules). This test reads
the code instead, so a TVM import on a path those runs did not take (an error branch,
an option) fails too: from the light commands' modules, every import is followed,
module-level and inside functions, except those under `if TYPE_CHECKING:` (never
executed). None may reach a tuning-side module, TVM, numpy or GitPython.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "tvmtune_ci"

LIGHT_COMMANDS = ["commands.check", "commands.status", "commands.matrix", "commands.readme",
                  "commands.adopt"]
# The tuning side: modules that import TVM, or call what does.
TUNE = {"tvmsetup", "builder", "space", "search", "journal", "tuner", "measure", "sampling",
        "numerics", "hostcheck", "priors", "remeasure", "devices", "runners", "runners.local",
        "runners.rpc", "runners.controls", "gpubuild", "nvrtc", "buildcheck", "calibration",
        "pipeline", "gpu_server", "loader", "workload"}
FORBIDDEN_EXTERNAL = {"tvm", "tvm_ffi", "numpy", "git"}  # git: GitPython
# The one door from the light side to the tuning side, and why it may stay open.
ALLOWED = {
    ("commands.check", "buildcheck"): "check --build compiles GPU templates: TVM and the [cuda] extra, asked for",
}


def _module_name(path: Path) -> str:
    rel = path.relative_to(PKG).with_suffix("")
    parts = [p for p in rel.parts if p != "__init__"]
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """Every module `path` imports (package-relative names for our own; top-level names
    for others), outside `if TYPE_CHECKING:` blocks."""
    tree = ast.parse(path.read_text())
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(d) for c in node.body for d in ast.walk(c))
    me = _module_name(path)
    package = me.split(".")[:-1] if path.name != "__init__.py" else me.split(".") if me else []
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            for a in node.names:
                top = a.name.split(".")[0]
                out.add(a.name[len("tvmtune_ci."):] if top == "tvmtune_ci" else "ext:" + top)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)] if node.level > 1 else package
                mod = ".".join([*base, *([node.module] if node.module else [])])
            elif node.module and node.module.split(".")[0] == "tvmtune_ci":
                mod = node.module[len("tvmtune_ci"):].lstrip(".")
            else:
                out.add("ext:" + (node.module or "").split(".")[0])
                continue
            out.add(mod)
            out.update(f"{mod}.{a.name}".lstrip(".") for a in node.names)
    return out


def _graph() -> dict[str, set[str]]:
    mods = {_module_name(p): p for p in PKG.rglob("*.py")}
    graph = {}
    for name, path in mods.items():
        deps = _imports(path)
        # `import tvmtune_ci` runs the package's __init__, whose lazy __getattr__ (the
        # public build_best/best_config) imports the loader only when those are used.
        graph[name] = {d for d in deps if d in mods and d != "" or d.startswith("ext:")}
    return graph


def _path(graph: dict[str, set[str]], start: str, bad: set[str]) -> list[str] | None:
    """The first import chain from `start` to a module in `bad`, or None."""
    parent: dict[str, str] = {}
    stack, seen = [start], {start}
    while stack:
        m = stack.pop()
        for d in sorted(graph.get(m, ())):
            if (m, d) in ALLOWED:
                continue
            if d in bad:
                chain = [d, m]
                while chain[-1] in parent:
                    chain.append(parent[chain[-1]])
                return chain[::-1]
            if d not in seen and not d.startswith("ext:"):
                seen.add(d)
                parent[d] = m
                stack.append(d)
    return None


@pytest.mark.parametrize("command", LIGHT_COMMANDS)
def test_a_light_command_never_reaches_the_tuning_side(command: str) -> None:
    graph = _graph()
    assert command in graph
    bad = TUNE | {f"ext:{m}" for m in FORBIDDEN_EXTERNAL}
    chain = _path(graph, command, bad)
    assert chain is None, "imports reach the tuning side: " + " -> ".join(chain or [])


def test_the_rule_sees_an_import_inside_a_function(tmp_path: Path) -> None:
    """The rule's own check: a function-level import of TVM in a light module is found,
    and one under TYPE_CHECKING is not."""
    f = tmp_path / "x.py"
    f.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import numpy\n"
                 "def go():\n    import tvm\n    from .tuner import tune_workload\n")
    global PKG
    saved, PKG = PKG, tmp_path
    try:
        deps = _imports(f)
    finally:
        PKG = saved
    assert "ext:tvm" in deps and "tuner" in deps and "ext:numpy" not in deps


def test_every_tuning_side_name_is_a_module() -> None:
    names = {_module_name(p) for p in PKG.rglob("*.py")}
    assert TUNE <= names, TUNE - names
    assert {a for a, _ in ALLOWED} | {b for _, b in ALLOWED} <= names


def test_the_tuner_and_the_modules_its_types_pass_through_have_no_cycle() -> None:
    """search, journal and records take the tuner's request and outcome types from
    tunetypes, not from the tuner that imports them."""
    graph = _graph()
    for m in ("search", "journal", "records", "tunetypes"):
        assert _path(graph, m, {"tuner"}) is None, m


def test_the_tracker_module_does_not_import_the_rpc_runner() -> None:
    """devices (the tracker protocol, the preflight) and the RPC runner share their rules
    through rpclimits; the runner asks devices for the tracker's queue, not the reverse."""
    graph = _graph()
    assert _path(graph, "devices", {"runners.rpc", "runners"}) is None
    assert _path(graph, "rpclimits", {"runners.rpc", "devices", "ext:tvm"}) is None
