"""Models: the coverage contract (IMPLEMENTS), a model's calls and their coverage (real
TVM on a small nn.Module), the coverage file, and what `check` says about it."""

from __future__ import annotations

import ast
import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest
from conftest import commit_all, freshen_all, git_env, make_repo, run_cli, write

from tvmtune_ci.check.fingerprint import SourceCache
from tvmtune_ci.check.models import COVERAGE_CHANGED, MODEL_CHANGED, MODEL_MISSING, MODEL_UNREADABLE
from tvmtune_ci.check.staleness import find_stale
from tvmtune_ci.core.config import CONFIG_NAME, load_config, parse_config
from tvmtune_ci.core.contract import ABSORBED, COVERED, SHAPE_ONLY, UNCOVERED_OP, UNCOVERED_SHAPE
from tvmtune_ci.core.coverage import read_coverage
from tvmtune_ci.core.errors import ConfigError, TemplateError
from tvmtune_ci.core.template import read_template

PROJECT = Path(__file__).resolve().parents[1]

# Linear 768 -> 3072 is dense's bert_ffn1; Linear 3072 -> 10 is a shape dense
# implements but declares no workload of; softmax over 10 alike; gelu no template has.
TINY = """\
from tvm.relax.frontend import nn


class Tiny(nn.Module):
    def __init__(self):
        self.fc1 = nn.Linear(768, 3072, bias=False)
        self.fc2 = nn.Linear(3072, 10, bias=False)

    def forward(self, x):
        h = nn.op.gelu(self.fc1(x))
        return nn.op.softmax(nn.op.reshape(self.fc2(h), (1, 128, 10)), axis=-1)


MODEL = Tiny
SPEC = {"forward": {"x": nn.spec.Tensor((1, 128, 768), "float32")}}
"""

MODELS = """\
models:
  tiny: {source: models/tiny.py}
"""


def _config() -> str:
    from conftest import CONFIG

    return CONFIG + MODELS


def _repo(tmp_path: Path) -> Path:
    root = make_repo(
        tmp_path, config=_config(), operators=("dense", "softmax"), files={"models/tiny.py": TINY}, commit=False
    )
    freshen_all(root)
    return root


def _generate(root: Path) -> None:
    from tvmtune_ci.commands.models import generate

    config = load_config(root / CONFIG_NAME)
    generate(config, ["tiny"])


# --------------------------------------------------------------------------- contract


@pytest.mark.parametrize(
    "implements, says",
    [
        ('[{"op": "relax.matmul", "args": [["M", "Q"]]}]', "'Q' is not a key of every workload"),
        ('[{"op": "relax.matmul", "args": [["M", "*K"]]}]', "only the first dimension may fold"),
        ('[{"op": "matmul", "args": [["M", "K"]]}]', "must name a Relax op"),
        ('[{"op": "relax.matmul", "args": [["M", "K"]], "dtype": "float32"}]', "'dtype' must name the workload key"),
        ('[{"op": "relax.matmul", "args": [["M", "K"]], "atrs": {}}]', "unknown key(s) 'atrs'"),
        ('[{"op": "relax.matmul", "args": [{"permute": ["N", "K"]}]}]', 'must be {"permute_dims": SHAPE}'),
        ('[{"op": "relax.matmul", "args": [["M", "K"]]}] + []', "must be a literal"),
    ],
)
def test_a_wrong_implements_is_an_error_at_its_line(tmp_path: Path, implements: str, says: str) -> None:
    src = (PROJECT / "operators" / "matmul.py").read_text()
    start = src.index("IMPLEMENTS = [")
    end = src.index("]\n\n", start) + 2
    text = src[:start] + f"IMPLEMENTS = {implements}\n" + src[end:]
    path = write(tmp_path, "operators/matmul.py", text)
    line = text[: text.index("IMPLEMENTS =")].count("\n") + 1
    with pytest.raises(TemplateError) as e:
        read_template(path)
    assert says in e.value.message
    assert e.value.file == str(path) and e.value.line == line


def test_implements_is_no_part_of_the_fingerprint(tmp_path: Path) -> None:
    """Adding or editing IMPLEMENTS leaves the fingerprint (and the logs) alone."""
    root = make_repo(tmp_path, operators=("dense",))
    path = root / "operators" / "dense.py"
    before = SourceCache(root).fingerprint(path).digest
    tree = ast.parse(path.read_text())
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and getattr(stmt.targets[0], "id", "") == "IMPLEMENTS":
            # another form, fewer epilogues (those the workloads use), the weight still packable
            edited = (
                '[{"op": "relax.matmul", "args": [["M", "K"], {"permute_dims": ["N", "K"]}], '
                '"epilogues": {"bias": ["N"], "residual": True, "gelu": True}, "prepack": [1]}]'
            )
            stmt.value = ast.parse(edited, mode="eval").body
    path.write_text(ast.unparse(tree))
    assert SourceCache(root).fingerprint(path).digest == before
    # ...while a change of the code does change it (the test can fail).
    path.write_text(path.read_text().replace("b_transposed=True", "b_transposed=False"))
    assert SourceCache(root).fingerprint(path).digest != before


# --------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    "models, says",
    [
        ("models:\n  tiny: {source: /abs/tiny.py}\n", "is not a .py or .onnx file"),
        ("models:\n  tiny: {source: models/tiny.txt}\n", "is not a .py or .onnx file"),
        ("models:\n  tiny: {sorce: models/tiny.py}\n", "did you mean 'source'?"),
        ("models:\n  tiny: {targets: [avx2]}\n", "has no source"),
        ("models:\n  tiny: {source: models/tiny.py, targets: [avx3]}\n", "did you mean 'avx2'?"),
    ],
)
def test_a_wrong_model_entry_is_an_error_at_its_line(models: str, says: str) -> None:
    from conftest import CONFIG

    text = CONFIG + models
    with pytest.raises(ConfigError) as e:
        parse_config(text, Path("tvmtune.yaml"))
    assert says in str(e.value)
    assert str(e.value).startswith(f"tvmtune.yaml:{CONFIG.count(chr(10)) + 2}:")


def test_models_parse_into_the_config() -> None:
    from conftest import CONFIG

    c = parse_config(CONFIG + "models:\n  bert: {source: models/bert.onnx, targets: [avx2]}\n", Path("tvmtune.yaml"))
    (m,) = c.models
    assert (m.name, m.source, m.kind, m.targets, m.coverage_file) == (
        "bert",
        "models/bert.onnx",
        "onnx",
        ("avx2",),
        "models/bert.coverage.json",
    )


# --------------------------------------------------------------------------- coverage (TVM)


def test_a_models_calls_are_covered_uncovered_or_recorded_as_views(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    _generate(root)
    f = read_coverage(root / "models" / "tiny.coverage.json")
    got = {(sig.op, cov.status, cov.template, cov.workload, n) for sig, cov, n in f.calls}
    assert got == {
        ("relax.permute_dims", ABSORBED, "dense", None, 1),  # fc1's weight: dense reads W
        ("relax.matmul", COVERED, "dense", "bert_ffn1", 1),
        ("relax.nn.gelu", UNCOVERED_OP, None, None, 1),
        ("relax.permute_dims", UNCOVERED_OP, None, None, 1),  # fc2's: its matmul is uncovered
        ("relax.matmul", UNCOVERED_SHAPE, "dense", None, 1),
        ("relax.reshape", SHAPE_ONLY, None, None, 1),
        ("relax.nn.softmax", UNCOVERED_SHAPE, "softmax", None, 1),
    }
    params = {sig.op: dict(cov.params) for sig, cov, _ in f.calls if cov.status == UNCOVERED_SHAPE}
    # What to paste into WORKLOADS: leading dimensions folded (1 x 128 -> M, R).
    assert params == {
        "relax.matmul": {"M": 128, "N": 10, "K": 3072, "dtype": "float32"},
        "relax.nn.softmax": {"R": 128, "N": 10, "dtype": "float32"},
    }
    assert f.source["sha256"] and f.templates.keys() == {"operators/dense.py", "operators/softmax.py"}


def test_model_calls_expose_the_binding_for_the_model_build(tmp_path: Path) -> None:
    from tvmtune_ci.core.contract import match, read_contract
    from tvmtune_ci.model.calls import load_model, model_calls

    root = _repo(tmp_path)
    config = load_config(root / CONFIG_NAME)
    calls = model_calls(load_model(root, config.models[0]))
    dense = read_contract(root / "operators" / "dense.py", "operators/dense.py")
    assert dense is not None
    (first,) = [c for c in calls if c.sig.op == "relax.matmul" and c.sig.shape[-1] == 3072]
    cov = match(first.sig, [dense])
    assert (cov.status, cov.workload) == (COVERED, "bert_ffn1")
    assert first.function == "forward" and first.binding and first.call is not None
    assert first.sig.args[1].permute_of == (3072, 768)  # looked through nn.Linear's transpose
    assert calls[first.producers[1]].sig.op == "relax.permute_dims"


# --------------------------------------------------------------------------- check


def _problems(root: Path) -> list[tuple[str, str]]:
    report = find_stale(load_config(root / CONFIG_NAME))
    return [(p.model, p.code) for p in report.models]


def test_check_reads_the_coverage_file_and_warns_of_uncovered_shapes(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    _generate(root)
    commit_all(root)
    report = find_stale(load_config(root / CONFIG_NAME))
    assert report.models == () and not report.stale
    shape = [w for w in report.warnings if "no workload of it declares" in w]
    assert len(shape) == 2
    assert any(
        "model tiny" in w and "relax.matmul" in w and "operators/dense.py" in w and "'N': 10" in w for w in shape
    )
    assert any("no template implements relax.nn.gelu (1x), relax.permute_dims (1x)" in w for w in report.warnings)
    r = run_cli(root, "check")
    assert r.returncode == 0, r.stdout + r.stderr


def test_check_and_status_say_the_coverage_warnings_in_one_line_and_each_with_verbose(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    _generate(root)
    commit_all(root)
    each = [f"warning: {w}" for w in find_stale(load_config(root / CONFIG_NAME)).warnings if "model tiny" in w]
    # fc2's and softmax's shapes, fc1's GELU (dense could fuse it: no workload declares
    # it), then the ops no template implements
    assert len(each) == 4
    one = (
        "warning: model coverage of 1 model (tiny): 2 call shapes that a template implements but no "
        "workload declares; 1 covered call whose epilogue ops run alone, unfused; 2 ops that no "
        "template implements (TVM's own kernels run them). "
        "Run with `--verbose` to list each, with the workload to add"
    )
    for verb in ("check", "status"):
        r = run_cli(root, verb)
        assert r.returncode == 0, r.stdout + r.stderr
        assert [line for line in r.stdout.splitlines() if "model" in line] == [one], verb
        assert r.stdout.splitlines()[-1] == "all 4 entries fresh"
        r = run_cli(root, verb, "--verbose")
        assert r.returncode == 0, r.stdout + r.stderr
        assert [line for line in r.stdout.splitlines() if "model" in line] == each, verb
    # GitHub: one annotation per model, at its coverage file, holding each call; the
    # step summary lists each; the log says the one line. JSON keeps each warning.
    summary = tmp_path / "summary.md"
    r = run_cli(root, "check", env={"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)})
    assert r.returncode == 0, r.stdout + r.stderr
    notes = [line for line in r.stdout.splitlines() if line.startswith("::") and "tiny" in line]
    assert len(notes) == 1 and notes[0].startswith("::warning file=models/tiny.coverage.json,line=1,")
    assert notes[0].count("no workload of it declares") == 2 and "relax.nn.gelu" in notes[0]
    assert one in r.stdout.splitlines()
    assert summary.read_text().count("no workload of it declares") == 2
    r = run_cli(root, "check", "--format", "json")
    assert r.returncode == 0 and [f"warning: {w}" for w in json.loads(r.stdout)["warnings"]] == each


def test_the_demo_says_the_coverage_line_once_and_ends_with_checks_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _repo(tmp_path)
    _generate(root)
    commit_all(root)
    spec = importlib.util.spec_from_file_location("demo", PROJECT / "scripts" / "demo.py")
    assert spec is not None and spec.loader is not None
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    cli, env = [sys.executable, "-m", "tvmtune_ci"], git_env()
    env.pop("GITHUB_ACTIONS", None)
    shown = demo.show(cli, "status", root, env)
    demo.show(cli, "check", root, env, seen=frozenset(line for line in shown if line.startswith("warning: ")))
    out = capsys.readouterr().out.splitlines()
    assert sum(line.startswith("warning: model coverage of 1 model (tiny)") for line in out) == 1
    assert out[-1] == "all 4 entries fresh" and "$ tvmtune-ci check" in out


def test_a_changed_model_source_makes_its_file_stale(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    _generate(root)
    commit_all(root)
    path = root / "models" / "tiny.py"
    path.write_text(path.read_text().replace("10", "12"))
    assert _problems(root) == [("tiny", MODEL_CHANGED)]
    r = run_cli(root, "check")
    assert r.returncode == 1
    assert "STALE model tiny: model_changed" in r.stdout and "tvmtune-ci models tiny" in r.stdout
    _generate(root)
    assert _problems(root) == []


def test_a_template_change_that_breaks_the_coverage_makes_the_file_stale(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    _generate(root)
    commit_all(root)
    dense = root / "operators" / "dense.py"
    text = dense.read_text()
    # A workload no call uses: the coverage still holds.
    dense.write_text(
        text.replace('"bert_ffn2": {', '"spare": {"M": 1, "N": 16, "K": 16, "dtype": "float32"},\n    "bert_ffn2": {')
    )
    assert _problems(root) == []
    # The uncovered fc2 now has a workload: the recorded coverage no longer holds.
    dense.write_text(
        text.replace(
            '"bert_ffn2": {', '"head": {"M": 128, "N": 10, "K": 3072, "dtype": "float32"},\n    "bert_ffn2": {'
        )
    )
    report = find_stale(load_config(root / CONFIG_NAME))
    assert [(p.model, p.code) for p in report.models] == [("tiny", COVERAGE_CHANGED)]
    assert "was uncovered_shape (dense), now covered by dense/head" in report.models[0].detail
    # A removed IMPLEMENTS too.
    shutil.copy(PROJECT / "operators" / "dense.py", dense)
    dense.write_text(dense.read_text().replace("IMPLEMENTS = [", "_IMPLEMENTS = ["))
    assert _problems(root) == [("tiny", COVERAGE_CHANGED)]


def test_a_missing_or_unreadable_coverage_file_fails_check(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    commit_all(root)
    assert _problems(root) == [("tiny", MODEL_MISSING)]
    (root / "models" / "tiny.coverage.json").write_text('{"format": 9}')
    assert _problems(root) == [("tiny", MODEL_UNREADABLE)]
    r = run_cli(root, "check", "--format", "json")
    assert r.returncode == 1 and '"model_unreadable"' in r.stdout


def test_check_without_models_reads_no_coverage_file(tmp_path: Path) -> None:
    root = make_repo(tmp_path, operators=("dense",))
    freshen_all(root)
    commit_all(root)
    assert _problems(root) == []


@pytest.mark.extra("onnx")
def test_an_onnx_model_is_read_through_tvms_frontend(tmp_path: Path) -> None:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.zeros((16, 8), np.float32), name="W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"]), helper.make_node("Softmax", ["y"], ["z"], axis=-1)],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [4, 8])],
        [w],
    )
    from conftest import CONFIG

    root = make_repo(
        tmp_path,
        config=CONFIG + "models:\n  tiny: {source: models/tiny.onnx}\n",
        operators=("matmul", "softmax"),
        commit=False,
    )
    (root / "models").mkdir()
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(root / "models" / "tiny.onnx"))
    _generate(root)
    f = read_coverage(root / "models" / "tiny.coverage.json")
    got = {(sig.op, cov.status, cov.template): dict(cov.params) for sig, cov, _ in f.calls}
    assert got == {
        ("relax.matmul", UNCOVERED_SHAPE, "matmul"): {"M": 4, "N": 8, "K": 16, "dtype": "float32"},
        ("relax.nn.softmax", UNCOVERED_SHAPE, "softmax"): {"R": 4, "N": 8, "dtype": "float32"},
    }


def test_this_repository_s_model_readmes_agree_with_their_profiles() -> None:
    """Every committed `models/<name>.<target>.md` is what its profile file renders to:
    a README that disagrees with its own profile is a bug (regenerate: `tvmtune-ci
    profile`)."""
    from tvmtune_ci.core.config import load_config
    from tvmtune_ci.core.profiles import profile_path, read_profile
    from tvmtune_ci.core.targets import slug
    from tvmtune_ci.publish.modelreadme import render

    root = Path(__file__).resolve().parents[1]
    config = load_config(root / "tvmtune.yaml")
    checked = 0
    for m in config.models:
        src = root / m.source
        profile = read_profile(profile_path(src, m.name), m.name)
        for target in profile.runs:
            stem = f"{m.name}.{slug(target)}"
            assert (src.parent / f"{stem}.md").read_text() == render(profile, target, f"{stem}.png"), stem
            checked += 1
    assert checked >= 2


def test_a_kernel_s_gflops_and_its_fraction_of_the_measured_peak_in_the_readme() -> None:
    from tvmtune_ci.core.profiles import CallTime, Profile, ProfileRun
    from tvmtune_ci.publish.modelreadme import render

    calls = (
        CallTime("dense_x", 1, 1e-3, "dense", "x", flops=2e8),  # 200 GFLOPS
        CallTime("fused_gelu", 1, 1e-6, flops=1e6),  # 1,000 GFLOPS by the estimate
        CallTime("transpose", 1, 1e-5, flops=0.0),
    )
    run = ProfileRun("2026-12-07", {}, "fallback", 2e-3, 0.1, 3, calls, threads=2, peak=(400.0, 0.03))
    text = render(Profile("m", {"t": (run,)}), "t", "m.t.png")
    assert "| 200.0 (50%) |" in text
    assert "| 1000.0 (estimate above the peak) |" in text
    assert "fp32 peak, measured in the same timing process on the same 2 thread(s): 400 GFLOPS" in text
    older = ProfileRun("2026-12-06", {}, "none", 2e-3, 0.1, 3, tuple(CallTime(c.symbol, 1, c.seconds) for c in calls))
    assert "not recorded in this run" in render(Profile("m", {"t": (older,)}), "t", "m.t.png")


def test_the_readme_sets_what_onnx_runtime_fused_beside_what_the_build_fused() -> None:
    """issue 65 part 5: ONNX Runtime's fusions (made, in place of) and, per template
    kernel, the epilogue it runs and the epilogue ops still alone; none of it in a
    profile that recorded neither (the committed READMEs before it)."""
    from tvmtune_ci.core.profiles import Anchor, CallTime, Profile, ProfileRun
    from tvmtune_ci.publish.modelreadme import render

    calls = (
        CallTime("dense_ffn1_gelu", 1, 1e-3, "dense", "ffn1_gelu", epilogue=("bias", "gelu")),
        CallTime("conv2d_c3", 3, 2e-3, "conv2d", "c3", alone=("bias", "relu")),
    )
    ort = Anchor(
        "onnxruntime", 1e-3, 1.0, (0.9, 1.1), "ONNX Runtime", fused={"made": {"FusedConv": 9}, "gone": {"Relu": 9}}
    )
    run = ProfileRun("2026-12-07", {}, "fallback", 2e-3, 0.1, 3, calls, threads=2, anchors=(ort,))
    text = render(Profile("m", {"t": (run,)}), "t", "m.t.png")
    assert "made FusedConv x9, in place of Relu x9" in text
    assert "`dense_ffn1_gelu` (dense/ffn1_gelu) runs bias, gelu in its kernel" in text
    assert "after `conv2d_c3` (conv2d/c3), bias, relu still run(s) as kernels of their own" in text
    bare = ProfileRun("2026-12-07", {}, "fallback", 2e-3, 0.1, 3, (CallTime("dense_x", 1, 1e-3, "dense", "x"),))
    assert "## Fusion" not in render(Profile("m", {"t": (bare,)}), "t", "m.t.png")


@pytest.mark.extra("onnx")
def test_onnx_runtime_s_fusions_are_read_from_its_optimized_graph(tmp_path: Path) -> None:
    """Conv with its bias, then Relu: ONNX Runtime fuses them (FusedConv); the fusion
    list names what it made and the Relu that is gone."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from tvmtune_ci.model.timing import ort_fusions

    w = numpy_helper.from_array(np.ones((8, 4, 3, 3), dtype=np.float32), "w")
    b = numpy_helper.from_array(np.zeros(8, dtype=np.float32), "b")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])],
        [w, b],
    )
    path = tmp_path / "conv.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    got = ort_fusions(path, tmp_path)
    assert got["gone"].get("Relu") == 1 and got["made"], got
