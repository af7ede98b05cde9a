"""find_stale on real temporary git repositories: every reason, and only the right ones."""

from __future__ import annotations

import ast
import datetime
import json
import re
import shutil
from pathlib import Path

import pytest
from conftest import (
    CONFIG,
    change_function,
    commit_all,
    double_a_shape,
    double_a_split_bound,
    edit_ast,
    freshen_all,
    make_repo,
    top_level,
    tuned_on,
    write,
    write_fresh,
)
from conftest import git as run_git

from tvmtune_ci.check import staleness
from tvmtune_ci.check.fingerprint import fingerprint_template
from tvmtune_ci.check.staleness import Report, find_stale
from tvmtune_ci.core.config import load_config
from tvmtune_ci.core.errors import UsageError
from tvmtune_ci.core.git import read as tvm_git
from tvmtune_ci.core.template import discover_templates, read_template

MATMUL = "operators/matmul.py"


def report_of(root: Path, **kw: object) -> Report:
    return find_stale(load_config(root / "tvmtune.yaml"), **kw)  # type: ignore[arg-type]


def codes(report: Report) -> dict[str, list[str]]:
    return {f"{e.operator}/{e.target_name}": [r.code for r in e.reasons] for e in report.entries}


def edit(root: Path, rel: str, old: str, new: str) -> None:
    p = root / rel
    src = p.read_text()
    assert old in src, f"{old!r} not in {rel}"
    p.write_text(src.replace(old, new, 1))


def stale_codes(report: Report) -> dict[str, list[str]]:
    return {k: v for k, v in codes(report).items() if v}


def matmul(report: Report) -> dict[str, list[str]]:
    """Reason codes of the matmul entries only (the real operators/ may grow)."""
    return {k: v for k, v in codes(report).items() if k.startswith("matmul/")}


FRESH = {"matmul/avx512": [], "matmul/avx2": []}


def test_fresh_repo_is_fresh(repo: Path) -> None:
    report = report_of(repo)
    assert matmul(report) == FRESH
    assert report.stale == () and report.orphans == () and report.warnings == ()
    # Ages count from the day the session's fixture tuned, which may be yesterday.
    report = report_of(repo, as_of=tuned_on(repo))
    e = report.entries[[x.operator for x in report.entries].index("matmul")]
    decl = read_template(repo / MATMUL)
    assert e.fresh and e.age_days == 0 and e.template_file == MATMUL and e.template_line == decl.line
    assert e.manifest is not None and e.manifest.operator == "matmul"
    # The space is the entry's target's: KNOBS name its LANES and VREGS.
    target = {t.name: t.target for t in load_config(repo / "tvmtune.yaml").targets}[e.target_name]
    assert e.space_sizes == decl.space_sizes(target)
    assert all(p > 1 for p, _ in e.space_sizes.values())


def comment_every_def(path: Path) -> None:
    path.write_text(path.read_text().replace("\ndef ", "\n# a comment\n\n\ndef "))


def new_docstrings(path: Path) -> None:
    def edit(tree: ast.Module) -> None:
        tree.body[0] = ast.Expr(ast.Constant("A new module docstring."))
        top_level(tree, "schedule").body.insert(0, ast.Expr(ast.Constant("Schedule it.")))  # type: ignore[attr-defined]

    edit_ast(path, edit)


@pytest.mark.parametrize(
    "cosmetic",
    [comment_every_def, edit_ast, new_docstrings],
    ids=["comments-and-blank-lines", "reformat", "docstrings"],
)
def test_cosmetic_template_edits_keep_entries_fresh(repo: Path, cosmetic) -> None:  # noqa: ANN001
    before = (repo / MATMUL).read_text()
    cosmetic(repo / MATMUL)
    assert (repo / MATMUL).read_text() != before
    assert matmul(report_of(repo)) == FRESH


def test_changing_a_split_bound_is_template_changed_at_knobs(repo: Path) -> None:
    double_a_split_bound(repo / MATMUL)
    report = report_of(repo)
    assert matmul(report) == {"matmul/avx512": ["template_changed"], "matmul/avx2": ["template_changed"]}
    r = report.stale[0].reasons[0]
    knobs_line = next(i for i, x in enumerate((repo / MATMUL).read_text().splitlines(), 1) if x.startswith("KNOBS"))
    assert (r.file, r.line) == (MATMUL, knobs_line)
    assert r.detail == f"operators/matmul.py:KNOBS changed (line {knobs_line})"


def test_changing_the_schedule_names_the_function(repo: Path) -> None:
    change_function(repo / MATMUL, "schedule")
    r = report_of(repo).stale[0].reasons
    assert [(x.code, x.file) for x in r] == [("template_changed", MATMUL)]
    assert r[0].detail.startswith("operators/matmul.py:schedule changed")


def test_changing_a_shape_is_workload_changed_naming_the_key(repo: Path) -> None:
    workload, key, old, new = double_a_shape(repo / MATMUL)
    report = report_of(repo)
    assert matmul(report) == {"matmul/avx512": ["workload_changed"], "matmul/avx2": ["workload_changed"]}
    r = report.stale[0].reasons[0]
    assert r.detail == f"workload {workload}: {key} {old} -> {new}"
    assert r.line == next(
        i for i, x in enumerate((repo / MATMUL).read_text().splitlines(), 1) if x.startswith("WORKLOADS")
    )


def test_adding_a_workload_is_workload_changed(repo: Path) -> None:
    def edit(tree: ast.Module) -> None:
        wl = top_level(tree, "WORKLOADS").value  # type: ignore[attr-defined]
        wl.keys.append(ast.Constant("extra"))
        wl.values.append(wl.values[0])

    edit_ast(repo / MATMUL, edit)
    details = [r.detail for r in report_of(repo).stale[0].reasons]
    assert details == ["workload extra added"]


HELPER_TEMPLATE = '''\
"""A template whose schedule lives in in-repo helpers."""

from tvmtune_ci.template import define_split

from operators._helpers import finish
from mylib.tiling import tile_loops

WORKLOADS = {"small": {"M": 64, "N": 64}}
KNOBS = [define_split("tile_i", "M", parts=2, max_factor=8)]


def compute(M, N):
    from tvm import te

    A = te.placeholder((M, N), "float32", name="A")
    return te.create_prim_func([A, te.compute((M, N), lambda i, j: A[i, j] * 2, name="C")])


def reference(A):
    return A * 2


def schedule(sch, cfg):
    loops = tile_loops(sch, cfg)
    finish(sch, loops)
'''

HELPER_FILES = {
    "operators/scale.py": HELPER_TEMPLATE,
    "operators/_helpers.py": "def finish(sch, loops):\n    sch.vectorize(loops[-1])\n",
    "mylib/__init__.py": "",
    "mylib/tiling.py": '''\
        """Tiling helpers shared by templates."""


        def tile_loops(sch, cfg):
            i, j = sch.get_loops(sch.get_sblock("C"))
            return cfg.split(sch, i, "tile_i") + [j]
        ''',
}


@pytest.fixture
def helper_repo(tmp_path: Path) -> Path:
    # Only the inline templates: independent of how operators/ evolves.
    root = make_repo(tmp_path, files=HELPER_FILES, operators=False, commit=False)
    freshen_all(root)
    commit_all(root, "tuned")
    return root


@pytest.mark.parametrize(
    "rel,old,new,key",
    [
        ("mylib/tiling.py", "+ [j]", "+ [j, j]", "mylib/tiling.py:tile_loops"),
        ("operators/_helpers.py", "vectorize", "parallel", "operators/_helpers.py:finish"),
    ],
)
def test_changing_a_helper_in_another_module_is_template_changed_there(
    helper_repo: Path, rel: str, old: str, new: str, key: str
) -> None:
    assert not report_of(helper_repo).stale
    edit(helper_repo, rel, old, new)
    report = report_of(helper_repo)
    assert stale_codes(report) == {"scale/avx512": ["template_changed"], "scale/avx2": ["template_changed"]}
    r = report.stale[0].reasons[0]
    assert r.file == rel and r.detail.startswith(f"{key} changed")
    assert (
        r.line
        == (helper_repo / rel)
        .read_text()
        .splitlines()
        .index(
            next(x for x in (helper_repo / rel).read_text().splitlines() if x.startswith(f"def {key.split(':')[1]}("))
        )
        + 1
    )


def test_changing_an_in_repo_dependency_of_the_real_template(repo: Path) -> None:
    fp = fingerprint_template(repo / MATMUL, repo)
    # Function definitions only ("path.py:<module>" keys are module-level code).
    helpers = [
        k for k, (f, _) in fp.lines.items() if f != MATMUL and f.endswith(".py") and k.split(":")[1].isidentifier()
    ]
    funcs = [
        k
        for k in helpers
        if isinstance(top_level(ast.parse((repo / k.split(":")[0]).read_text()), k.split(":")[1]), ast.FunctionDef)
    ]
    if not funcs:
        pytest.skip("operators/matmul.py uses no in-repo helper function today")
    file, name = funcs[0].split(":")
    change_function(repo / file, name)
    r = [x for x in report_of(repo).stale if x.operator == "matmul"][0].reasons
    assert [(x.code, x.file) for x in r] == [("template_changed", file)]
    assert r[0].detail.startswith(f"{file}:{name} changed")


def test_a_docstring_edit_in_a_helper_module_keeps_fresh(helper_repo: Path) -> None:
    edit(
        helper_repo,
        "mylib/tiling.py",
        '"""Tiling helpers shared by templates."""',
        '"""Tiling helpers.\n\nShared."""\n# note',
    )
    assert not report_of(helper_repo).stale


def test_changing_the_target_is_target_changed_for_that_target_only(repo: Path) -> None:
    edit(repo, "tvmtune.yaml", "{kind: llvm, mcpu: haswell}", "{kind: llvm, mcpu: haswell, num-cores: 2}")
    report = report_of(repo)
    assert matmul(report) == {"matmul/avx512": [], "matmul/avx2": ["target_changed"]}
    r = report.stale[0].reasons[0]
    assert r.detail == (
        'tuned for {"kind": "llvm", "mcpu": "haswell"}, configured now as '
        '{"kind": "llvm", "mcpu": "haswell", "num-cores": 2}'
    )
    assert (r.file, r.line) == ("tvmtune.yaml", CONFIG.splitlines().index("  avx2:") + 1)


def test_a_modified_log_byte_is_log_modified(repo: Path) -> None:
    log = next((repo / "tuning_logs/matmul/avx2").glob("matmul_avx2_*.json"))
    data = bytearray(log.read_bytes())
    data[3] ^= 1
    log.write_bytes(bytes(data))
    report = report_of(repo)
    assert matmul(report) == {"matmul/avx512": [], "matmul/avx2": ["log_modified"]}
    r = report.stale[0].reasons[0]
    assert r.file == f"tuning_logs/matmul/avx2/{log.name}" and "modified after tuning" in r.detail


def test_a_deleted_log_is_log_modified(repo: Path) -> None:
    next((repo / "tuning_logs/matmul/avx2").glob("matmul_avx2_*.json")).unlink()
    r = report_of(repo).stale[0].reasons
    assert [x.code for x in r] == ["log_modified"] and "is missing" in r[0].detail


def test_an_unparsable_manifest_is_log_modified_not_a_crash(repo: Path) -> None:
    (repo / "tuning_logs/matmul/avx2/manifest.json").write_text("{not json")
    report = report_of(repo)
    assert codes(report)["matmul/avx2"] == ["log_modified"]
    assert "tuning_logs/matmul/avx2/manifest.json" in report.stale[0].reasons[0].detail
    assert report.stale[0].manifest is None


def test_a_log_measured_on_another_cpu_is_fresh_with_a_warning(tmp_path: Path) -> None:
    """Not stale (a re-tune on the same runner would measure it there again), but `check`
    says which machine's timings the log holds, and where to re-tune it."""
    root = make_repo(tmp_path)
    freshen_all(root)
    mpath = root / "tuning_logs/matmul/avx2/manifest.json"
    m = json.loads(mpath.read_text())
    m["host"] = {"runner": "local", "cpu": "AMD EPYC", "llvm_cpu": "znver5"}
    mpath.write_text(json.dumps(m))
    report = report_of(root)
    assert matmul(report) == FRESH and report.stale == ()
    assert report.warnings == (
        "tuning_logs/matmul/avx2/manifest.json: measured on znver5, not the target's haswell: "
        "its timings and ranking are that machine's; re-tune matmul/avx2 on a runner with that "
        "CPU (its runs-on labels in tvmtune.yaml)",
    )
    # Measured on the target's own CPU, or through RPC devices: nothing to say.
    for host in (
        {"runner": "local", "llvm_cpu": "haswell"},
        {"runner": "rpc avx2@127.0.0.1:9190 x1", "llvm_cpu": "znver5"},
    ):
        m["host"] = host
        mpath.write_text(json.dumps(m))
        assert report_of(root).warnings == ()


def test_an_extra_file_of_the_set_is_hashed_too(tmp_path: Path) -> None:
    root = make_repo(tmp_path)
    write_fresh(root, "matmul", "avx2", extra_files={"curve.png": b"\x89PNG"})
    (root / "tuning_logs/matmul/avx2/curve.png").write_bytes(b"\x89PNG!")
    assert matmul(report_of(root, targets=["avx2"])) == {"matmul/avx2": ["log_modified"]}


def test_no_manifest_is_missing(tmp_path: Path) -> None:
    root = make_repo(tmp_path)
    write_fresh(root, "matmul", "avx512")
    report = report_of(root)
    assert matmul(report) == {"matmul/avx512": [], "matmul/avx2": ["missing"]}
    assert report.stale[0].age_days is None and report.stale[0].manifest is None


def test_a_year_and_a_day_later_is_expired(repo: Path) -> None:
    today = tuned_on(repo)
    assert not report_of(repo, as_of=today + datetime.timedelta(days=365)).stale
    report = report_of(repo, as_of=today + datetime.timedelta(days=366))
    assert matmul(report) == {"matmul/avx512": ["expired"], "matmul/avx2": ["expired"]}
    assert report.entries[0].age_days == 366
    assert "max_age_days is 365" in report.entries[0].reasons[0].detail


def test_expiry_follows_tuned_on(tmp_path: Path) -> None:
    root = make_repo(tmp_path)
    freshen_all(root, tuned_on="2024-03-01")
    assert not report_of(root, as_of=datetime.date(2025, 3, 1)).stale
    assert codes(report_of(root, as_of=datetime.date(2025, 3, 2)))["matmul/avx2"] == ["expired"]


def test_another_tvm_minor_is_tvm_changed(tmp_path: Path) -> None:
    root = make_repo(tmp_path)
    freshen_all(root, tvm_version="0.26.1")
    r = report_of(root).entries[0].reasons
    assert [x.code for x in r] == ["tvm_changed"]
    assert "0.26.1" in r[0].detail and "0.27" in r[0].detail
    # A patch release is the same TVM.
    freshen_all(root, tvm_version="0.27.3.post2")
    assert not report_of(root).stale


def test_without_a_pinned_version_the_installed_one_counts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = make_repo(tmp_path, config=CONFIG.replace('tvm_version: "0.27"\n', ""))
    freshen_all(root)
    monkeypatch.setattr(staleness.run, "installed_tvm_version", lambda: "0.28.0")
    assert codes(report_of(root))["matmul/avx2"] == ["tvm_changed"]
    monkeypatch.setattr(staleness.run, "installed_tvm_version", lambda: None)
    report = report_of(root)
    assert not report.stale
    assert any("TVM version is unknown" in w for w in report.warnings)


def test_installed_tvm_version_reads_metadata_only() -> None:
    v = staleness.installed_tvm_version()
    assert v is None or staleness.major_minor(v) is not None


def test_every_reason_that_applies_is_reported(repo: Path) -> None:
    change_function(repo / MATMUL, "schedule")
    double_a_shape(repo / MATMUL)
    edit(repo, "tvmtune.yaml", "mcpu: haswell", "mcpu: znver3")
    next((repo / "tuning_logs/matmul/avx2").glob("matmul_avx2_*.json")).write_bytes(b"{}")
    as_of = tuned_on(repo) + datetime.timedelta(days=400)
    assert codes(report_of(repo, as_of=as_of))["matmul/avx2"] == [
        "template_changed",
        "workload_changed",
        "target_changed",
        "expired",
        "log_modified",
    ]


def test_orphaned_log_folders_are_warnings(repo: Path) -> None:
    (repo / "tuning_logs/retired_op/avx2").mkdir(parents=True)
    (repo / "tuning_logs/matmul/neon").mkdir(parents=True)
    (repo / "tuning_logs/.hidden").mkdir()
    report = report_of(repo)
    assert not report.stale
    assert [(o.code, o.file) for o in report.orphans] == [
        ("orphaned", "tuning_logs/matmul/neon"),
        ("orphaned", "tuning_logs/retired_op"),
    ]
    # Declared as kept: no warning, listed as kept.
    (repo / "tvmtune.yaml").write_text(CONFIG + "keep: [retired_op, matmul/neon]\n")
    report = report_of(repo)
    assert report.orphans == () and report.kept == ("tuning_logs/matmul/neon/", "tuning_logs/retired_op/")
    # A target dropped from an operator's list orphans its folder too.
    (repo / "tvmtune.yaml").write_text(CONFIG + "operators:\n  matmul:\n    targets: [avx512]\n")
    report = report_of(repo)
    assert matmul(report) == {"matmul/avx512": []}
    assert ("orphaned", "tuning_logs/matmul/avx2") in [(o.code, o.file) for o in report.orphans]


@pytest.mark.parametrize(
    "source,where,message",
    [
        ("WORKLOADS = {'a': {'M': 4}}\nKNOBS = []\n\ndef schedule(:\n    pass\n", 4, "syntax error"),
        ("KNOBS = []\ndef compute(): pass\ndef reference(): pass\ndef schedule(): pass\n", None, "missing WORKLOADS"),
        (
            "WORKLOADS = {'a': {'M': 4}}\nKNOBS = [define_split('t', 'Q')]\n"
            "def compute(): pass\ndef reference(): pass\ndef schedule(): pass\n",
            2,
            "no integer 'Q'",
        ),
        (
            "WORKLOADS = make()\nKNOBS = []\ndef compute(): pass\ndef reference(): pass\ndef schedule(): pass\n",
            1,
            "must be a literal",
        ),
    ],
    ids=["syntax", "no-workloads", "bad-extent", "not-literal"],
)
def test_an_unreadable_template_is_template_invalid_not_a_crash(
    repo: Path, source: str, where: int | None, message: str
) -> None:
    write(repo, "operators/broken.py", source)
    report = report_of(repo)
    assert stale_codes(report) == {
        "broken/avx512": ["missing", "template_invalid"],
        "broken/avx2": ["missing", "template_invalid"],
    }
    broken = next(e for e in report.entries if e.operator == "broken")
    r = broken.reasons[1]
    assert (r.file, r.line) == ("operators/broken.py", where)
    prefix = f"operators/broken.py:{where}: " if where else "operators/broken.py: "
    assert r.detail.startswith(prefix) and message in r.detail
    assert broken.space_sizes == {} and broken.template_line == (where or 1)


def test_a_broken_helper_makes_its_templates_invalid(helper_repo: Path) -> None:
    write(helper_repo, "mylib/tiling.py", "def tile_loops(sch, cfg):\n    return [\n")
    report = report_of(helper_repo)
    r = report.stale[0].reasons
    assert [x.code for x in r] == ["template_invalid"]
    assert r[0].file == "mylib/tiling.py" and r[0].detail.startswith("mylib/tiling.py:2: syntax error")


def test_template_code_is_never_run(repo: Path) -> None:
    marker = repo.parent / "ran.txt"
    src = (repo / MATMUL).read_text()
    write(
        repo,
        "operators/evil.py",
        src.replace(
            "import numpy as np\n",
            f"import numpy as np\nopen({str(marker)!r}, 'w').write('ran')\nraise SystemExit('ran')\n",
        ),
    )
    report = report_of(repo)
    assert codes(report)["evil/avx2"] == ["missing"]
    assert not marker.exists()


def test_changed_since_limits_entries_to_touched_code(helper_repo: Path) -> None:
    base = "HEAD"
    assert report_of(helper_repo, changed_since=base).entries == ()
    # An uncommitted edit of a helper module: only its template's entries.
    edit(helper_repo, "mylib/tiling.py", "+ [j]", "+ [j, j]")
    report = report_of(helper_repo, changed_since=base)
    assert sorted(codes(report)) == ["scale/avx2", "scale/avx512"]
    # Committed, the change is still since `base`...
    first = commit_all(helper_repo, "tiling")
    assert sorted(codes(report_of(helper_repo, changed_since="HEAD~1"))) == ["scale/avx2", "scale/avx512"]
    # ...and an untracked edit elsewhere adds nothing; an edited log folder does.
    write(helper_repo, "notes.txt", "x")
    (helper_repo / "tuning_logs/scale/avx2/README.md").write_text("hand edit")
    assert sorted(codes(report_of(helper_repo, changed_since=first))) == ["scale/avx2"]


def test_changed_since_with_a_changed_config_includes_everything(repo: Path) -> None:
    edit(repo, "tvmtune.yaml", "max_age_days: 365", "max_age_days: 300")
    assert len(report_of(repo, changed_since="HEAD").entries) == len(report_of(repo).entries) >= 2


def test_changed_since_an_unknown_ref_is_a_usage_error(repo: Path) -> None:
    with pytest.raises(UsageError, match="unknown git ref 'no-such-branch'"):
        report_of(repo, changed_since="no-such-branch")


def test_selection_by_name_and_unknown_names(repo: Path) -> None:
    assert matmul(report_of(repo, operators=["matmul"], targets=["avx2"])) == {"matmul/avx2": []}
    with pytest.raises(UsageError, match="did you mean 'matmul'"):
        report_of(repo, operators=["matmull"])
    with pytest.raises(UsageError, match="did you mean 'avx2'"):
        report_of(repo, targets=["avx"])


def test_configured_operator_without_template_is_a_warning(repo: Path) -> None:
    (repo / "tvmtune.yaml").write_text(CONFIG + "operators:\n  retired_op:\n    trials: 10\n")
    report = report_of(repo)
    assert any("operators.retired_op has no template operators/retired_op.py" in w for w in report.warnings)


def test_workloads_compare_as_json(tmp_path: Path) -> None:
    # A tuple in the template equals the list the manifest stores.
    files = {
        "operators/t.py": HELPER_TEMPLATE.replace('{"M": 64, "N": 64}', '{"M": 64, "N": 64, "pad": (1, 1)}'),
        **{k: v for k, v in HELPER_FILES.items() if k != "operators/scale.py"},
    }
    root = make_repo(tmp_path, files=files, operators=False)
    freshen_all(root)
    m = json.loads((root / "tuning_logs/t/avx2/manifest.json").read_text())
    assert m["workloads"]["small"]["pad"] == [1, 1]
    assert not report_of(root).stale


def test_git_queries(tmp_path: Path) -> None:
    # The config may live in a subfolder of the repository: paths are relative to it.
    top = tmp_path / "top"
    root = make_repo(top, name="sub", commit=False)
    git_root = top
    shutil.rmtree(root / ".git")  # one repository, at the top
    run_git(git_root, "init", "-q", "-b", "main")
    write(git_root, "outside.txt", "x")
    head = commit_all(git_root, "first")
    assert tvm_git.repo_root(root) == git_root.resolve()
    assert tvm_git.repo_root(tmp_path) is None
    assert tvm_git.last_commit(root, "operators/matmul.py") == head
    assert tvm_git.last_commit(root, "nope.py") is None
    assert tvm_git.last_commit(tmp_path, "x") is None
    # Renames list both names; untracked files count; outside the root does not.
    run_git(git_root, "mv", "sub/operators/matmul.py", "sub/operators/gemm.py")
    write(root, "new.py", "x = 1\n")
    write(git_root, "outside.txt", "y")
    assert tvm_git.changed_files(root, "HEAD") == {"operators/matmul.py", "operators/gemm.py", "new.py"}
    with pytest.raises(UsageError, match="not in a git work tree"):
        tvm_git.changed_files(tmp_path, "HEAD")


def test_every_real_template_can_be_fresh(tmp_path: Path) -> None:
    # operators/ grows: each template must read statically and fingerprint.
    root = make_repo(tmp_path, operators=True)
    freshen_all(root)
    report = report_of(root)
    assert report.stale == () and report.warnings == ()
    assert {e.operator for e in report.entries} == {p.stem for p in discover_templates(root / "operators")}


def test_a_change_in_what_templates_are_told_about_the_target_is_stale(repo: Path) -> None:
    """Same target dict, but the facts the template was scheduled with (recorded in the
    manifest) are not what tvmtune-ci derives now: the log is stale (target_changed)."""
    manifest_path = repo / "tuning_logs/matmul/avx2/manifest.json"
    data = json.loads(manifest_path.read_text())
    assert data["target_facts"]["isa"] == "avx2"
    data["target_facts"] = {**data["target_facts"], "isa": "sse", "vector_bits": 128}
    manifest_path.write_text(json.dumps(data))
    reasons = matmul(report_of(repo))["matmul/avx2"]
    assert reasons == ["target_changed"]
    del data["target_facts"]  # written before templates could ask: nothing to compare
    manifest_path.write_text(json.dumps(data))
    assert matmul(report_of(repo))["matmul/avx2"] == []


# ---------------------------------------------------------------- git's index vouches for logs

AVX2 = "tuning_logs/matmul/avx2"


def logs_read(repo: Path, monkeypatch: pytest.MonkeyPatch, **kw: object) -> tuple[Report, list[str]]:
    """The report, and the log files `check` read (a spy on the one reading function)."""
    read: list[str] = []
    real = staleness.rules.read_regular_file

    def spy(path: Path, limit: int) -> bytes:
        if path.suffix == ".json" and path.name != "manifest.json":
            read.append(path.relative_to(repo).as_posix())
        return real(path, limit)

    monkeypatch.setattr(staleness.rules, "read_regular_file", spy)
    return report_of(repo, **kw), read


def avx2_log(repo: Path) -> Path:
    return next((repo / AVX2).glob("matmul_avx2_*.json"))


def test_the_blob_id_is_gits(tmp_path: Path) -> None:
    data = b'{"format": 2}\n\x00binary\xff'
    (tmp_path / "f").write_bytes(data)
    assert tvm_git.blob_id(data) == run_git(tmp_path, "hash-object", "f").strip()


def test_committed_unmodified_logs_are_not_read(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The fixture's files are copies: their stat data is not the index's, so git
    # re-hashes them once in memory and still vouches for them.
    report, read = logs_read(repo, monkeypatch)
    assert report.stale == () and read == []
    assert report.logs_trusted == len(report.entries) >= 2
    report, read = logs_read(repo, monkeypatch, rehash=True)
    assert report.stale == () and report.logs_trusted == report.templates_trusted == 0
    # --rehash reads every file of every set: the log and results.json.
    assert sorted(read) == sorted(
        f"{e.logset.folder.relative_to(repo).as_posix()}/{name}"
        for e in report.entries
        for name in (e.manifest.log, "results.json")
    )


def test_an_edited_log_is_hashed_whether_committed_or_not(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = avx2_log(repo)
    log.write_bytes(log.read_bytes().replace(b"}", b"} ", 1))
    report, read = logs_read(repo, monkeypatch)
    assert read == [log.relative_to(repo).as_posix()]
    assert matmul(report)["matmul/avx2"] == ["log_modified"]
    commit_all(repo, "hand edit")  # now git's blob is the edited one, not the manifest's
    report, read = logs_read(repo, monkeypatch)
    assert read == [log.relative_to(repo).as_posix()]
    assert matmul(report)["matmul/avx2"] == ["log_modified"]


def test_a_touched_but_unchanged_log_is_still_trusted(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = avx2_log(repo)
    log.write_bytes(log.read_bytes())  # new mtime and size check, same bytes
    report, read = logs_read(repo, monkeypatch)
    assert report.stale == () and read == []


def test_a_log_git_does_not_look_at_is_hashed(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # assume-unchanged / skip-worktree: git reports the file clean without looking.
    for flag in ("--assume-unchanged", "--skip-worktree"):
        log = avx2_log(repo)
        rel = log.relative_to(repo).as_posix()
        run_git(repo, "update-index", flag, rel)
        original = log.read_bytes()
        log.write_bytes(original.replace(b"}", b"} ", 1))
        assert run_git(repo, "status", "--porcelain", "--untracked-files=no") == ""
        report, read = logs_read(repo, monkeypatch)
        assert read == [rel], flag
        assert matmul(report)["matmul/avx2"] == ["log_modified"], flag
        log.write_bytes(original)
        run_git(repo, "update-index", flag.replace("--", "--no-"), rel)


def test_a_manifest_whose_blob_id_disagrees_is_stale(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = repo / AVX2 / "manifest.json"
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "log_git_blob": "0" * 40}))
    report, read = logs_read(repo, monkeypatch)
    assert read == [avx2_log(repo).relative_to(repo).as_posix()]
    (e,) = [e for e in report.entries if (e.operator, e.target_name) == ("matmul", "avx2")]
    (r,) = e.reasons
    assert r.code == "log_modified" and "log_git_blob" in r.detail
    assert r.file == f"{AVX2}/manifest.json"


def test_logs_of_older_manifests_and_outside_git_are_hashed(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = repo / AVX2 / "manifest.json"
    data = json.loads(path.read_text())
    for key in ("log_git_blob", "files_git_blob", "sources"):
        del data[key]
    # Format 2: results inline, no results.json.
    data["results"] = json.loads((repo / AVX2 / "results.json").read_text())["results"]
    (repo / AVX2 / "results.json").unlink()
    path.write_text(json.dumps({**data, "format": 2, "files": {}}))
    report, read = logs_read(repo, monkeypatch)
    assert report.stale == () and read == [avx2_log(repo).relative_to(repo).as_posix()]
    monkeypatch.undo()
    plain = tmp_path / "plain"
    shutil.copytree(repo, plain, ignore=shutil.ignore_patterns(".git"))
    report = report_of(plain)
    assert report.stale == () and report.logs_trusted == 0


# ---------------------------------------------------------------- recorded sources spare the parse


def templates_parsed(root: Path, monkeypatch: pytest.MonkeyPatch, **kw: object) -> tuple[Report, list[str]]:
    """The report, and the templates `check` parsed (a spy on the one parsing function)."""
    parsed: list[str] = []
    real = staleness.templates.read_checked_template
    monkeypatch.setattr(
        staleness.templates, "read_checked_template", lambda p, c: (parsed.append(p.stem), real(p, c))[1]
    )
    try:
        return report_of(root, **kw), parsed
    finally:
        monkeypatch.undo()


def test_committed_unchanged_templates_are_not_parsed(helper_repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    report, parsed = templates_parsed(helper_repo, monkeypatch)
    assert report.stale == () and parsed == []
    assert report.templates_trusted == len(report.entries) == 2
    # What check shows of a template comes from the record, as parsing would give it.
    full, parsed = templates_parsed(helper_repo, monkeypatch, rehash=True)
    assert parsed == ["scale"] and full.templates_trusted == 0
    assert [(e.template_file, e.template_line, e.space_sizes) for e in report.entries] == [
        (e.template_file, e.template_line, e.space_sizes) for e in full.entries
    ]


def _set_manifest(field: str, value: object):  # noqa: ANN202
    def change(root: Path) -> None:
        for path in root.glob("tuning_logs/scale/*/manifest.json"):
            data = json.loads(path.read_text())
            keys = field.split(".")
            obj = data
            for k in keys[:-1]:
                obj = obj[k]
            obj[keys[-1]] = value
            path.write_text(json.dumps(data))

    return change


# Edits the recorded sources cannot vouch for: (edit, commit it?, the codes of the
# scale entries). Each must be parsed, and reported as checking in full reports it.
UNVOUCHED = {
    "a comment in the template": (
        lambda root: edit(root, "operators/scale.py", "def schedule", "# why\ndef schedule"),
        True,
        [],
    ),
    "a helper's code": (lambda root: edit(root, "mylib/tiling.py", "+ [j]", "+ [j, j]"), True, ["template_changed"]),
    "a helper's code, not committed": (
        lambda root: edit(root, "mylib/tiling.py", "+ [j]", "+ [j, j]"),
        False,
        ["template_changed"],
    ),
    # compute() does `from tvm import te`: an in-repo tvm.py now shadows TVM (the
    # recorded files are unchanged; the state of a path the import looked at is not).
    "a module where an import looked": (lambda root: write(root, "tvm.py", "te = None\n"), True, ["template_changed"]),
    "the manifest's fingerprint, by hand": (_set_manifest("fingerprint", "0" * 64), True, ["template_changed"]),
    "the manifest's workloads, by hand": (_set_manifest("workloads.small.M", 128), True, ["workload_changed"]),
    "another fingerprint algorithm": (_set_manifest("sources.algorithm", "tvmtune-fingerprint/0"), True, []),
    "a template git no longer looks at": (
        lambda root: run_git(root, "update-index", "--assume-unchanged", "operators/scale.py"),
        False,
        [],
    ),
}


@pytest.mark.parametrize("edit_name", list(UNVOUCHED))
def test_whatever_the_recorded_sources_cannot_vouch_for_is_parsed(
    helper_repo: Path, monkeypatch: pytest.MonkeyPatch, edit_name: str
) -> None:
    change, commit, expected = UNVOUCHED[edit_name]
    change(helper_repo)
    if commit:
        commit_all(helper_repo, edit_name)
    report, parsed = templates_parsed(helper_repo, monkeypatch)
    assert parsed == ["scale"] and report.templates_trusted == 0, edit_name
    assert {k: list(dict.fromkeys(v)) for k, v in codes(report).items()} == {
        "scale/avx2": expected,
        "scale/avx512": expected,
    }, edit_name
    assert _summary(report) == _summary(report_of(helper_repo, rehash=True))


def test_an_entry_whose_record_holds_parses_even_if_its_sibling_does_not(
    helper_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One target's manifest edited: that entry is parsed and compared, the other not.
    path = helper_repo / "tuning_logs/scale/avx2/manifest.json"
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "fingerprint": "0" * 64}))
    report, parsed = templates_parsed(helper_repo, monkeypatch)
    assert parsed == ["scale"] and report.templates_trusted == 1
    assert codes(report) == {"scale/avx2": ["template_changed"], "scale/avx512": []}


# ---------------------------------------------------------------- --changed-since parses only what it may need


def _summary(report: Report) -> dict[tuple[str, str], list[str]]:
    return {(e.operator, e.target_name): [r.code for r in e.reasons] for e in report.entries}


@pytest.fixture(scope="module")
def _all_ops(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = make_repo(tmp_path_factory.mktemp("allops"), operators=True)
    freshen_all(root)
    commit_all(root, "tuned")
    return root


def _append(rel: str, text: str = "\n# an edit\n"):  # noqa: ANN202
    return lambda root: (root / rel).write_text((root / rel).read_text() + text)


SINCE_EDITS = {
    "nothing": lambda root: None,
    "one template": _append("operators/softmax.py"),
    "the GEMM helper": _append("operators/_gemm.py"),
    "one log folder": lambda root: write(root, "tuning_logs/conv2d/avx2/NOTES.md", "hand edit"),
    "a new helper a template imports": lambda root: (
        write(root, "operators/_extra.py", "X = 1\n"),
        _append("operators/conv2d.py", "\nfrom operators._extra import X  # noqa\n")(root),
    ),
    "a helper deleted": lambda root: (root / "operators/_gemm.py").unlink(),
    "a docs file": lambda root: write(root, "docs/x.md", "x"),
}


@pytest.mark.parametrize("edit_name", list(SINCE_EDITS))
def test_changed_since_reports_what_checking_everything_would(
    _all_ops: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edit_name: str
) -> None:
    """The pre-filter only saves work: the report equals the one that parses every
    template and reads every manifest before filtering."""
    root = tmp_path / "repo"
    shutil.copytree(_all_ops, root, symlinks=True)
    SINCE_EDITS[edit_name](root)
    parsed: list[str] = []
    real = staleness.templates.read_checked_template
    monkeypatch.setattr(
        staleness.templates, "read_checked_template", lambda p, c: (parsed.append(p.stem), real(p, c))[1]
    )
    # The pre-filter alone (--rehash: no template is trusted on its recorded sources)...
    fast = _summary(report_of(root, changed_since="HEAD", rehash=True))
    n_fast = len(parsed)
    # ... and with the recorded sources, which spare the entries git vouches for.
    parsed.clear()
    assert _summary(report_of(root, changed_since="HEAD")) == fast
    n_trusting = len(parsed)
    monkeypatch.setattr(staleness.run, "pr_candidates", lambda *a, **k: None)
    assert fast == _summary(report_of(root, changed_since="HEAD", rehash=True))
    templates = len(discover_templates(root / "operators"))
    users = {p.stem for p in discover_templates(root / "operators") if "operators._gemm" in p.read_text()}
    gemm_users = len(users)

    def naming(names: set[str]) -> int:
        """The templates beyond `names` whose text names one of them (a docstring that
        says `conv2d` too): the pre-filter's documented superset of the imports."""
        return sum(
            p.stem not in names and any(re.search(rf"(?<!\w){n}(?!\w)", p.read_text()) for n in names)
            for p in discover_templates(root / "operators")
        )

    named = {
        "one template": naming({"softmax"}),
        "the GEMM helper": naming(users),
        "a new helper a template imports": naming({"conv2d"}),
    }.get(edit_name, 0)
    expected = {
        "nothing": 0,
        "one template": 1,
        "the GEMM helper": gemm_users,
        "one log folder": 1,
        "a new helper a template imports": 1,
        "a helper deleted": templates,
        "a docs file": 0,
    }[edit_name]
    assert n_fast == expected + named, (edit_name, parsed[:n_fast])
    # Only the templates whose code changed are parsed (the deleted helper's users): the
    # recorded sources say which of those the pre-filter named are really concerned.
    assert n_trusting == {"one log folder": 0, "a helper deleted": gemm_users}.get(edit_name, expected), edit_name


def test_changed_since_follows_imports_through_helpers(helper_repo: Path) -> None:
    # scale.py -> mylib/tiling.py -> zz/middle.py -> aa/leaf.py: an edit of leaf.py
    # concerns scale although scale.py never names it. (Listed in this order, the
    # chain needs more than one pass over the files.)
    for rel, text in {
        "aa/__init__.py": "",
        "aa/leaf.py": "def f():\n    return 1\n",
        "zz/__init__.py": "",
        "zz/middle.py": "from aa.leaf import f\n\n\ndef g():\n    return f()\n",
    }.items():
        write(helper_repo, rel, text)
    edit(helper_repo, "mylib/tiling.py", "def tile_loops", "from zz.middle import g\n\n\ndef tile_loops")
    edit(helper_repo, "mylib/tiling.py", "+ [j]", "+ [j] * g()")
    freshen_all(helper_repo)
    commit_all(helper_repo, "tiling uses middle, middle uses leaf")
    assert report_of(helper_repo, changed_since="HEAD").entries == ()
    edit(helper_repo, "aa/leaf.py", "return 1", "return 2")
    assert stale_codes(report_of(helper_repo, changed_since="HEAD")) == {
        "scale/avx2": ["template_changed"],
        "scale/avx512": ["template_changed"],
    }


def test_each_reason_code_says_what_it_blocks_and_how_to_fix_it() -> None:
    """The pipeline and check read a reason's consequences from its code alone."""
    from tvmtune_ci.check.staleness import Reason
    from tvmtune_ci.core.reasons import Code
    from tvmtune_ci.pipeline.history import REPLAY_BLOCKERS, SAME_TEMPLATE_BLOCKERS

    # An edited template keeps its log replayable; an expired log or a new TVM keeps its
    # best a fair finalist; nothing else does either.
    warn = {Code.ORPHANED}  # a warning, never a reason an entry is stale
    assert {c for c in Code if not c.blocks_replay} - warn == {
        Code.TEMPLATE_CHANGED,
        Code.WORKLOAD_CHANGED,
        Code.EXPIRED,
    }
    assert {c for c in Code if not c.blocks_reuse} - warn == {Code.TVM_CHANGED, Code.EXPIRED}
    assert SAME_TEMPLATE_BLOCKERS == {c for c in Code if c.blocks_reuse}
    assert REPLAY_BLOCKERS == {c for c in Code if c.blocks_replay}
    assert [c.order for c in Code] == list(range(len(Code)))
    assert all("tvmtune-ci retune" in c.hint for c in Code if c not in (Code.TEMPLATE_INVALID, Code.ORPHANED))
    assert "{where}" in Code.TEMPLATE_INVALID.hint
    # The codes are the strings the JSON output and the manifests carry.
    r = Reason("log_modified", "edited", "x.json")
    assert r.code is Code.LOG_MODIFIED and r.code == "log_modified" and f"{r.code}" == "log_modified"
    with pytest.raises(ValueError):
        Reason("no_such_reason", "x")


def test_the_pre_filter_matches_a_module_s_whole_name_not_a_longer_one() -> None:
    """An edit of conv2d.py concerns what imports `conv2d`, not every file that says
    `conv2d_1x1` (the substring test did: it parsed conv2d_1x1 on every conv2d edit)."""
    from tvmtune_ci.check.staleness.prscope import _spells

    assert _spells("from operators.conv2d import compute", "conv2d")
    assert _spells('importlib.import_module("operators.conv2d")', "conv2d")
    assert _spells("see `conv2d`.", "conv2d")  # a docstring that names it: the superset
    assert not _spells("from operators.conv2d_1x1 import compute", "conv2d")
    assert not _spells("import myconv2d", "conv2d")
