"""Shared test helpers: throwaway git repositories with real config, templates and logs.

Plain functions (import them: `from conftest import make_repo, write_fresh`) plus
a few fixtures built on them. Everything is written under the test's tmp_path;
git runs with a pinned identity and dates and without the user's git config, so
commits are reproducible and nothing outside tmp_path is read or written.

    root = make_repo(tmp_path)          # tvmtune.yaml + operators/ (copied), committed
    write_fresh(root, "matmul", "avx2")  # a manifest + log that `check` finds fresh
    freshen_all(root); commit_all(root)  # every (operator, target) fresh and committed
"""

from __future__ import annotations

import ast
import datetime
import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from tvmtune_ci.check import sources
from tvmtune_ci.check.fingerprint import SourceCache
from tvmtune_ci.core.config import CONFIG_NAME, load_config
from tvmtune_ci.core.fsutil import sha256_bytes
from tvmtune_ci.core.git.read import blob_id
from tvmtune_ci.core.layout import LogSet
from tvmtune_ci.core.manifest import Manifest, Measured, Trials, WorkloadResult, write_manifest
from tvmtune_ci.core.targetinfo import target_facts
from tvmtune_ci.core.template import declared_kinds, discover_templates, read_template

PROJECT = Path(__file__).resolve().parents[1]
OPERATORS = PROJECT / "operators"  # the real templates, copied into each repo

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Test",
    "GIT_AUTHOR_EMAIL": "test@example.com",
    "GIT_COMMITTER_NAME": "Test",
    "GIT_COMMITTER_EMAIL": "test@example.com",
    "GIT_AUTHOR_DATE": "2026-01-02T03:04:05+00:00",
    "GIT_COMMITTER_DATE": "2026-01-02T03:04:05+00:00",
    # Not the developer's ~/.gitconfig (signing, hooks, default branch...).
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}

# Two targets so that per-target behaviour shows; TVM pinned so that tests do not
# depend on the installed apache-tvm.
CONFIG = """\
format: 1
tvm_version: "0.27"
max_age_days: 365
trials: 64
targets:
  avx512:
    target: {kind: llvm, mcpu: skylake-avx512, num-cores: 4}
    runs-on: [self-hosted, linux, x64, avx512]
  avx2:
    target: {kind: llvm, mcpu: haswell}
    runs-on: [self-hosted, linux, x64]
"""

# check only hashes the log, so a minimal well-formed one will do.
LOG = b'{"format": 1, "workloads": [], "records": []}\n'


def git_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    return {**os.environ, **GIT_ENV, **(extra or {})}


def git(root: Path, *args: str) -> str:
    """Run git in `root` with the pinned environment; its stdout, or raise with stderr."""
    r = subprocess.run(["git", *args], cwd=root, env=git_env(), capture_output=True, text=True)
    if r.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {r.stderr}")
    return r.stdout


def commit_all(root: Path, message: str = "update") -> str:
    """Stage everything and commit (allowing an empty commit); the new HEAD sha."""
    git(root, "add", "-A")
    git(root, "commit", "-q", "--allow-empty", "-m", message)
    return git(root, "rev-parse", "HEAD").strip()


def write(root: Path, rel: str, text: str) -> Path:
    """Write `text` (dedented) to root/rel, creating folders."""
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def top_level(tree: ast.Module, name: str) -> ast.stmt:
    """The module-level `def name` or `name = ...` statement of a parsed file."""
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.ClassDef)) and stmt.name == name:
            return stmt
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets):
            return stmt
    raise AssertionError(f"no top-level {name!r}")


def edit_ast(path: Path, edit: Callable[[ast.Module], object] | None = None) -> None:
    """Rewrite a Python file through its AST (`ast.unparse`).

    With `edit` None this is a pure reformat: comments go, layout changes, the
    meaning stays. `edit` mutates the tree to make a change of meaning that
    does not depend on how the file is written today (the real templates evolve).
    """
    tree = ast.parse(path.read_text(encoding="utf-8"))
    if edit is not None:
        edit(tree)
    path.write_text(ast.unparse(ast.fix_missing_locations(tree)) + "\n", encoding="utf-8")


def change_function(path: Path, name: str = "schedule") -> None:
    """A change of meaning in top-level function `name`: one more statement."""
    stmt = ast.parse("_changed = 1").body[0]
    edit_ast(path, lambda t: top_level(t, name).body.append(stmt))  # type: ignore[attr-defined]


def double_a_split_bound(path: Path) -> None:
    """A change of meaning in KNOBS: the first define_split's max_factor doubled."""

    def edit(tree: ast.Module) -> None:
        for call in ast.walk(top_level(tree, "KNOBS")):
            if isinstance(call, ast.Call) and getattr(call.func, "id", None) == "define_split":
                for kw in call.keywords:
                    if kw.arg == "max_factor":
                        kw.value = ast.Constant(ast.literal_eval(kw.value) * 2)
                        return
                call.keywords.append(ast.keyword("max_factor", ast.Constant(128)))
                return
        raise AssertionError("no define_split in KNOBS")

    edit_ast(path, edit)


def double_a_shape(path: Path) -> tuple[str, str, int, int]:
    """Double the first integer of the first workload: (workload, key, old, new)."""
    found: list[tuple[str, str, int, int]] = []

    def edit(tree: ast.Module) -> None:
        workloads = top_level(tree, "WORKLOADS").value  # type: ignore[attr-defined]
        name, params = workloads.keys[0].value, workloads.values[0]
        for k, v in zip(params.keys, params.values, strict=True):
            if isinstance(v, ast.Constant) and type(v.value) is int:
                found.append((name, k.value, v.value, v.value * 2))
                v.value *= 2
                return
        raise AssertionError("no integer in the first workload")

    edit_ast(path, edit)
    return found[0]


def make_repo(
    tmp_path: Path,
    *,
    config: str = CONFIG,
    files: Mapping[str, str] | None = None,
    operators: bool | Sequence[str] = ("matmul",),
    commit: bool = True,
    name: str = "repo",
) -> Path:
    """A git repo at tmp_path/name: tvmtune.yaml, templates from this project, `files`.

    `operators` names the real templates of operators/ to copy (default: matmul,
    so that tests do not change as operators/ grows); True copies every CPU template
    (those of TARGET_KINDS cuda need a GPU target in the config), False none. The private helper modules (`operators/_*.py`) come with any copied
    template. `files` maps repo-relative paths to (dedented) text and may
    override copied files. Committed on branch main unless commit=False.
    """
    root = tmp_path / name
    root.mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    (root / CONFIG_NAME).write_text(config, encoding="utf-8")
    if operators:
        names = (
            {p.name for p in discover_templates(OPERATORS) if "llvm" in read_template(p).kinds}
            if operators is True
            else {f"{op}.py" for op in operators}
        )  # type: ignore[union-attr]
        (root / "operators").mkdir()
        for src in sorted(OPERATORS.glob("*.py")):
            if names is None or src.name in names or src.name.startswith("_"):
                shutil.copy2(src, root / "operators" / src.name)
        missing = (names or set()) - {p.name for p in (root / "operators").iterdir()}
        assert not missing, f"no such template in {OPERATORS}: {sorted(missing)}"
    for rel, text in (files or {}).items():
        write(root, rel, text)
    if commit:
        commit_all(root, "initial")
    return root


def write_fresh(
    root: Path,
    operator: str,
    target: str,
    *,
    tuned_on: str | None = None,
    tvm_version: str = "0.27.0",
    log: bytes = LOG,
    extra_files: Mapping[str, bytes] | None = None,
) -> Manifest:
    """Write a log set for (operator, target) that `check` reads as fresh now.

    The manifest holds the template's real fingerprint, its WORKLOADS, the
    configured target and the sha256 of `log` (and of `extra_files`, written
    beside it). `tuned_on` defaults to today. Returns the manifest written.
    """
    config = load_config(root / CONFIG_NAME)
    path = config.operators_path / f"{operator}.py"
    # Fresh: its inputs are this template's alone (and its operator's declared ones).
    cache = SourceCache(config.root, inputs=config.declared_inputs(), config_file=config.path)
    decl, fp = cache.template(path), cache.fingerprint(path)
    logset = LogSet.of(config.logs_path, operator, target)
    day = tuned_on or datetime.date.today().isoformat()
    logset.folder.mkdir(parents=True, exist_ok=True)
    log_name = logset.log_name(day)
    (logset.folder / log_name).write_bytes(log)
    for fname, data in (extra_files or {}).items():
        (logset.folder / fname).write_bytes(data)
    requested = config.trials_for(operator)
    sizes = decl.space_sizes(config.target(target).target)
    manifest = Manifest(
        operator=operator,
        target_name=target,
        target=config.target(target).target,
        log=log_name,
        log_sha256=sha256_bytes(log),
        log_git_blob=blob_id(log),
        fingerprint=fp.digest,
        dependencies=dict(fp.dependencies),
        workloads=json.loads(json.dumps(decl.workloads)),
        tvm_version=tvm_version,
        tuned_on=day,
        seed=config.seed,
        trials={w: Trials(requested, requested - 4, requested - 5, 1, "early_stop") for w in decl.workloads},
        results={
            w: WorkloadResult(
                best=Measured({}, 0.00125 * (i + 1)),
                baseline=Measured({}, 0.004),
                space_size=sizes[w][0],
                design_spaces=sizes[w][1],
            )
            for i, w in enumerate(decl.workloads)
        },
        measure={},
        template_file=path.relative_to(config.root).as_posix(),
        files={k: sha256_bytes(v) for k, v in (extra_files or {}).items()},
        target_facts=target_facts(config.target(target).target).to_json(),
        sources=sources.record(cache, decl, fp, config.target(target).target).to_json(),
    )
    return write_manifest(logset.manifest, manifest)


def edit_results(folder: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Apply `change` to the `results` of the log set in `folder` and record the new
    results.json's hashes in its manifest: the edit a re-tune could have written
    (a hand edit that leaves the hashes is `log_modified` by its sha256 alone)."""
    path = folder / "results.json"
    data = json.loads(path.read_text())
    change(data["results"])
    raw = json.dumps(data).encode()
    path.write_bytes(raw)
    mpath = folder / "manifest.json"
    m = json.loads(mpath.read_text())
    m["files"]["results.json"] = sha256_bytes(raw)
    m["files_git_blob"]["results.json"] = blob_id(raw)
    mpath.write_text(json.dumps(m))


def manifest_of(files: Mapping[str, bytes]) -> dict[str, Any]:
    """A log set's manifest.json (name -> bytes of the set's files) with its results
    inline, as they were before format 4 moved them to results.json."""
    m = json.loads(files["manifest.json"])
    if "results.json" in files:
        m["results"] = json.loads(files["results.json"])["results"]
    return m


def manifest_at(folder: Path) -> dict[str, Any]:
    """`manifest_of` the log set in `folder`."""
    return manifest_of(
        {n: (folder / n).read_bytes() for n in ("manifest.json", "results.json") if (folder / n).exists()}
    )


def freshen_all(root: Path, **kw: object) -> list[Manifest]:
    """write_fresh for every template and every target configured for it."""
    config = load_config(root / CONFIG_NAME)
    return [
        write_fresh(root, p.stem, t.name, **kw)  # type: ignore[arg-type]
        for p in discover_templates(config.operators_path)
        for t in config.targets_for(p.stem, declared_kinds(p))
    ]


def run_cli(root: Path, *args: str, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m tvmtune_ci ARGS` in `root`, as a user would run it."""
    full = {**git_env(), **(env or {})}
    for k in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY", "CI"):
        if env is None or k not in env:
            full.pop(k, None)  # plain text output unless a test asks for GitHub
    return subprocess.run(
        [sys.executable, "-m", "tvmtune_ci", *args], cwd=root, env=full, capture_output=True, text=True
    )


@pytest.fixture(scope="session")
def _fresh_repo_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = make_repo(tmp_path_factory.mktemp("pristine"))
    freshen_all(root)
    commit_all(root, "tune")
    return root


def tuned_on(root: Path, operator: str = "matmul", target: str = "avx2") -> datetime.date:
    """The day the log set of (operator, target) in `root` says it was tuned.

    The `repo` fixture's sets are written once per session: a suite that crosses
    midnight must count ages from this day, not from today.
    """
    m = json.loads((root / "tuning_logs" / operator / target / "manifest.json").read_text())
    return datetime.date.fromisoformat(m["tuned_on"])


@pytest.fixture
def repo(tmp_path: Path, _fresh_repo_template: Path) -> Path:
    """make_repo with every (operator, target) fresh, all committed: tmp_path/"repo".

    Built once per session and copied (git init and commits are the slow part).
    """
    root = tmp_path / "repo"
    shutil.copytree(_fresh_repo_template, root, symlinks=True)
    return root


@pytest.fixture
def no_github(monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process CLI runs print plain text even when the suite runs in Actions."""
    for k in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY", "CI"):
        monkeypatch.delenv(k, raising=False)


# Tools a test may need that a fresh machine may lack, and how to get each. A test
# that needs one says so with `@pytest.mark.tool(NAME)`: it is skipped, with the
# reason, where NAME is not on PATH, and `.ci/run` runs the whole suite with these
# tools hidden (scripts/without_tools.py) so that a test which forgets the marker
# goes red, then the marked tests with them installed.
OPTIONAL_TOOLS = {
    "aarch64-linux-gnu-gcc": "`make cross-toolchain` (Debian/Ubuntu: apt-get install "
    "gcc-aarch64-linux-gnu); .ci/run installs it"
}

# Optional extras of tvmtune-ci (Python packages), the same way: a test that needs one
# says `@pytest.mark.extra(NAME)` and is skipped, with the reason, where it is not
# installed; `make test` runs without them on a fresh machine, and .ci/run installs
# them afterwards and runs `pytest -m extra`.
OPTIONAL_EXTRAS = {
    "cuda": "pip install 'tvmtune-ci[cuda]' (NVRTC and the CUDA headers from PyPI, Linux: "
    "compiles GPU kernels to cubins); `make test`'s venv has it",
    "onnx": "pip install 'tvmtune-ci[onnx]' (onnx, onnxruntime: ONNX models, docs/models.md)",
}


def _extra_missing(name: str) -> str | None:
    if name == "cuda":
        from tvmtune_ci.tune.nvrtc import missing

        return missing()
    if name == "onnx":
        import importlib.util

        return None if importlib.util.find_spec("onnx") is not None else "onnx is not installed"
    raise AssertionError(name)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "tool(name): needs this optional tool on PATH; skipped, saying so, without it")
    config.addinivalue_line(
        "markers", "extra(name): needs this optional extra of tvmtune-ci; skipped, saying so, without it"
    )


def pytest_runtest_setup(item: pytest.Item) -> None:
    for mark in item.iter_markers("extra"):
        (name,) = mark.args
        assert name in OPTIONAL_EXTRAS, f"extra {name!r}: add it to conftest.OPTIONAL_EXTRAS"
        why = _extra_missing(name)
        if why is not None:
            pytest.skip(f"needs the [{name}] extra ({why}): {OPTIONAL_EXTRAS[name]}")
    for mark in item.iter_markers("tool"):
        (name,) = mark.args
        assert name in OPTIONAL_TOOLS, f"tool {name!r}: add it to conftest.OPTIONAL_TOOLS with how to install it"
        if shutil.which(name) is None:
            pytest.skip(f"needs {name}, which is not on PATH: {OPTIONAL_TOOLS[name]}")


def template_copy(tmp_path_factory: pytest.TempPathFactory, name: str) -> Any:
    """This repository's template `name`, with the GEMM helper it imports, imported from a
    copy in a temp repo (its import leaves no bytecode in the checkout)."""
    pytest.importorskip("tvm")
    from tvmtune_ci.core.template import import_template

    root = tmp_path_factory.mktemp(name)
    (root / "operators").mkdir()
    for f in ("_gemm.py", f"{name}.py"):
        shutil.copy(OPERATORS / f, root / "operators" / f)
    return import_template(root / f"operators/{name}.py", root)


def contracts_with(tmp_path: Path, workloads: Mapping[str, Mapping[str, Any]]) -> list[Any]:
    """The contracts of this repository's templates {name: its WORKLOADS instead of its
    own} (written as Python literals, as `check` reads them), in that order."""
    from tvmtune_ci.core.contract import read_contract

    out = []
    for name, wls in workloads.items():
        text = (OPERATORS / f"{name}.py").read_text()
        start, end = text.index("WORKLOADS = {"), text.index("# The Relax calls")
        path = tmp_path / f"{name}.py"
        path.write_text(text[:start] + f"WORKLOADS = {dict(wls)!r}\n\n" + text[end:])
        out.append(read_contract(path, f"operators/{name}.py"))
    return out


def dense_model_repo(
    tmp_path: Path, target: Mapping[str, Any], workloads: Mapping[str, Any], model: str, source: str
) -> Path:
    """A repo whose one template is this repository's `dense` with `workloads` declared
    instead of its own, and whose one model, `model`, is `source` (a .py model's text, or
    the path of an .onnx file to copy): the model tests' dense kernels at small shapes."""
    dense = (OPERATORS / "dense.py").read_text()
    start, end = dense.index("WORKLOADS = {"), dense.index("IMPLEMENTS = [")
    dense = dense[:start] + f"WORKLOADS = {dict(workloads)!r}\n\n" + dense[end:]
    suffix = ".onnx" if source.endswith(".onnx") else ".py"
    config = (
        f'format: 1\ntvm_version: "0.27"\ntargets:\n  host:\n    target: {json.dumps(dict(target))}\n'
        f"models:\n  {model}: {{source: models/{model}{suffix}}}\n"
    )
    files = {"operators/dense.py": dense}
    if suffix == ".py":
        files[f"models/{model}.py"] = source
    root = make_repo(tmp_path, config=config, operators=("dense",), files=files)
    if suffix == ".onnx":
        (root / "models").mkdir(exist_ok=True)
        (root / f"models/{model}.onnx").write_bytes(Path(source).read_bytes())
    return root


# The model tests' dense kernels at small shapes (`dense_model_repo`): one workload
# 16 x 32 -> 48, an nn.Linear of that shape, and the same with GELU and a sigmoid after
# it (an epilogue chain, and an op no template implements).
TINY_DENSE = {"tiny": {"M": 16, "N": 48, "K": 32, "dtype": "float32"}}
_LINEAR_TEMPLATE = """\
from tvm.relax.frontend import nn


class Lin(nn.Module):
    def __init__(self):
        self.fc = nn.Linear(32, 48, bias=True)

    def forward(self, x):
        return {body}


MODEL = Lin
SPEC = {{"forward": {{"x": nn.spec.Tensor((1, 16, 32), "float32")}}}}
"""
LINEAR = _LINEAR_TEMPLATE.format(body="self.fc(x)")
LINEAR_GELU = _LINEAR_TEMPLATE.format(body="nn.op.sigmoid(nn.op.gelu(self.fc(x)))")
