"""The package's layout is its boundary: a static rule over every import.

tvmtune_ci is four subpackages by job and, on top, the re-tune pipeline and the commands:

- `core`: TVM-free formats, config, the template API, files, reading git;
- `check`: is a log set still true (staleness, fingerprints, sources, selection);
- `tune`: everything that builds, runs and measures with TVM;
- `publish`: writing log sets, READMEs and commits.

`core` imports no other subpackage; `check` only `core`; `publish` `core` and `check`;
`tune` `core` and `check`. None of `core`, `check` or `publish` may reach TVM, numpy or
GitPython (except `publish.gitwrite`, GitPython's one user). The light commands
(`check`, `status`, `matrix`, `readme`, `adopt`) run on GitHub-hosted PR runners without
TVM: from them no import may reach `tune` (`tests/test_no_tvm_import.py` runs them and
looks at sys.modules; this reads the code, so an import on a path those runs did not
take, an error branch or an option, fails too). Every import is followed, module-level
and inside functions, except those under `if TYPE_CHECKING:` (never executed).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "tvmtune_ci"

LIGHT_COMMANDS = ["commands.check", "commands.status", "commands.matrix", "commands.readme", "commands.adopt"]
SIDES = ("core", "check", "tune", "publish")
# What each subpackage may import of tvmtune_ci (besides itself).
MAY_IMPORT = {"core": set(), "check": {"core"}, "publish": {"core", "check"}, "tune": {"core", "check"}}
FORBIDDEN_EXTERNAL = {"tvm", "tvm_ffi", "numpy", "git"}  # git: GitPython
# Modules of the TVM-free subpackages allowed one of those, and why.
EXTERNAL_ALLOWED = {("publish.gitwrite", "ext:git"): "commits and pushes with GitPython"}
# The one door from the light side to the tuning side, and why it may stay open.
ALLOWED = {
    ("commands.check", "tune.buildcheck"): "check --build compiles GPU templates: TVM and the [cuda] extra, asked for"
}


def side(module: str) -> str:
    """The subpackage a module belongs to ("" for the pipeline and commands on top)."""
    top = module.split(".")[0]
    return top if top in SIDES else ""


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
                out.add(a.name[len("tvmtune_ci.") :] if top == "tvmtune_ci" else "ext:" + top)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)] if node.level > 1 else package
                mod = ".".join([*base, *([node.module] if node.module else [])])
            elif node.module and node.module.split(".")[0] == "tvmtune_ci":
                mod = node.module[len("tvmtune_ci") :].lstrip(".")
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


@pytest.mark.parametrize("sub", SIDES)
def test_a_subpackage_imports_only_the_ones_below_it(sub: str) -> None:
    graph = _graph()
    wrong = sorted(
        f"{m} -> {d}"
        for m, deps in graph.items()
        if side(m) == sub
        for d in deps
        if not d.startswith("ext:") and side(d) not in {sub, *MAY_IMPORT[sub]}
    )
    assert not wrong, f"{sub} may import only {sorted(MAY_IMPORT[sub]) or 'itself'}: " + "; ".join(wrong)


@pytest.mark.parametrize("sub", ["core", "check", "publish"])
def test_the_tvm_free_subpackages_never_reach_tvm_numpy_or_gitpython(sub: str) -> None:
    graph = _graph()
    bad = {f"ext:{m}" for m in FORBIDDEN_EXTERNAL}
    for m in sorted(graph):
        if side(m) == sub:
            allowed = {d for (a, d) in EXTERNAL_ALLOWED if a == m}
            chain = _path(graph, m, bad - allowed)
            assert chain is None, "imports reach TVM, numpy or GitPython: " + " -> ".join(chain or [])


@pytest.mark.parametrize("command", LIGHT_COMMANDS)
def test_a_light_command_never_reaches_the_tuning_side(command: str) -> None:
    graph = _graph()
    assert command in graph
    bad = {m for m in graph if side(m) == "tune"} | {f"ext:{m}" for m in FORBIDDEN_EXTERNAL}
    chain = _path(graph, command, bad)
    assert chain is None, "imports reach the tuning side: " + " -> ".join(chain or [])


def test_the_rule_sees_an_import_inside_a_function(tmp_path: Path) -> None:
    """The rule's own check: a function-level import of TVM in a light module is found,
    and one under TYPE_CHECKING is not."""
    f = tmp_path / "x.py"
    f.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import numpy\n"
        "def go():\n    import tvm\n    from .tune.tuner import tune_workload\n"
    )
    global PKG
    saved, PKG = PKG, tmp_path
    try:
        deps = _imports(f)
    finally:
        PKG = saved
    assert "ext:tvm" in deps and "tune.tuner" in deps and "ext:numpy" not in deps


def test_the_rule_fails_for_a_check_module_that_imports_the_tuning_side() -> None:
    """The rule's own check on a graph with one wrong edge."""
    graph = _graph()
    graph["check.sources"] = graph["check.sources"] | {"tune.measure"}
    wrong = [
        d for d in graph["check.sources"] if not d.startswith("ext:") and side(d) not in {"check", *MAY_IMPORT["check"]}
    ]
    assert wrong == ["tune.measure"]
    assert _path(graph, "commands.check", {"tune.measure"}) is not None


def test_every_named_module_exists() -> None:
    names = {_module_name(p) for p in PKG.rglob("*.py")}
    assert {a for a, _ in ALLOWED} | {b for _, b in ALLOWED} | {a for a, _ in EXTERNAL_ALLOWED} <= names
    assert {side(n) for n in names} == {"", *SIDES}


def test_the_tuner_and_the_modules_its_types_pass_through_have_no_cycle() -> None:
    """search, journal and records take the tuner's outcome types from core.tunetypes
    and its request from tune.request, not from the tuner that imports them."""
    graph = _graph()
    for m in ("tune.search", "tune.journal", "core.records", "core.tunetypes", "tune.request"):
        assert _path(graph, m, {"tune.tuner"}) is None, m


def test_the_retune_and_the_history_run_share_the_thread_policy_without_a_cycle() -> None:
    """The thread policy lives below both orchestrators (tune.runners.threads): the
    history run (remeasure) never reaches the re-tune (pipeline, which imports it in a
    step), and the pipeline's parts never reach the module that assembles them."""
    graph = _graph()
    assert _path(graph, "tune.runners.threads", {"pipeline.steps", "pipeline.remeasure"}) is None
    assert _path(graph, "pipeline.remeasure", {"pipeline.steps", "pipeline"}) is None
    parts = sorted(m for m in graph if m.startswith("pipeline.") and m != "pipeline.steps")
    assert len(parts) >= 8, parts
    for m in parts:
        assert _path(graph, m, {"pipeline.steps", "pipeline"}) is None, m


def test_the_tracker_module_does_not_import_the_rpc_runner() -> None:
    """devices (the tracker protocol, the preflight) and the RPC runner share their rules
    through rpclimits; the runner asks devices for the tracker's queue, not the reverse."""
    graph = _graph()
    assert _path(graph, "tune.devices", {"tune.runners.rpc", "tune.runners"}) is None
    assert _path(graph, "tune.rpclimits", {"tune.runners.rpc", "tune.devices", "ext:tvm"}) is None


# Who may import the model wing (model/, TVM side): its two commands and the package's
# face (`tvmtune_ci.build_model`, lazily); nothing below it, and not the re-tune.
MODEL_IMPORTERS = {"commands.profile", "commands.models", ""}


def test_the_model_wing_is_reached_only_from_its_commands_and_the_public_face() -> None:
    """model/ sits on top beside pipeline/: core, check, tune and publish never import
    it (their model halves are TVM-free: core/contract, core/coverage, core/profiles,
    check/models), the re-tune never reaches it, and the light commands reach it only
    through tune/, which the rule above already forbids."""
    mods = {_module_name(p) for p in PKG.rglob("*.py")}
    wing = {m for m in mods if m == "model" or m.startswith("model.")}
    assert {"model.calls", "model.build", "model.metaschedule", "model.timing", "model.profile"} <= wing
    importers = set()
    for p in PKG.rglob("*.py"):
        me = _module_name(p)
        if me in wing:
            continue
        if any(d in wing for d in _imports(p)):
            importers.add(me)
    assert importers <= MODEL_IMPORTERS, sorted(importers - MODEL_IMPORTERS)
    graph = _graph()
    for start in ("pipeline.steps", "pipeline.remeasure", *LIGHT_COMMANDS):
        assert _path(graph, start, wing) is None, start
