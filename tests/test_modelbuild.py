"""The model build with the committed logs (the product's apply_history_best): every
covered call runs its template's best kernel, the rest goes through TVM; a stale log is
refused like build_best's, or falls back loudly once for each call."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from conftest import LINEAR, TINY_DENSE, dense_model_repo, edit_results, make_repo, write_fresh
from small_mm import SMALL_MM

tvm = pytest.importorskip("tvm")

from tvmtune_ci.core.errors import StaleLogError  # noqa: E402
from tvmtune_ci.loader import FallbackWarning  # noqa: E402
from tvmtune_ci.model.build import build_model  # noqa: E402
from tvmtune_ci.model.fallback import BY_SPATIAL  # noqa: E402
from tvmtune_ci.tune.hostcheck import host_target  # noqa: E402

TARGET = host_target(2)  # the model runs here: this machine's own CPU
# The 64^3 test template, declaring that it implements a plain 2-D matmul.
MM = SMALL_MM.replace(
    "KNOBS = [",
    'IMPLEMENTS = [{"op": "relax.matmul", "args": [["*M", "K"], ["K", "N"]], "dtype": "dtype"}]\n\nKNOBS = [',
    1,
)
# Two matmuls of the template's shape (one GELU between them, which no template has).
MODEL = """\
from tvm.relax.frontend import nn


class TwoMM(nn.Module):
    def __init__(self):
        self.w1 = nn.Parameter((64, 64), "float32")
        self.w2 = nn.Parameter((64, 64), "float32")

    def forward(self, x):
        return nn.op.matmul(nn.op.gelu(nn.op.matmul(x, self.w1)), self.w2)


MODEL = TwoMM
SPEC = {"forward": {"x": nn.spec.Tensor((1, 64, 64), "float32")}}
"""
# Tuned-looking: a config that differs from the default in every knob.
BEST = {"tile_i": [8, 8], "tile_j": [2, 32], "unroll": 16, "cache": True}


def _repo(tmp_path: Path) -> Path:
    config = (
        f'format: 1\ntvm_version: "0.27"\ntargets:\n  host:\n    target: {json.dumps(TARGET)}\n'
        "models:\n  two_mm: {source: models/two_mm.py}\n"
    )
    root = make_repo(tmp_path, config=config, operators=False, files={"operators/mm.py": MM, "models/two_mm.py": MODEL})
    write_fresh(root, "mm", "host")
    edit_results(root / "tuning_logs/mm/host", lambda res: res["s64"]["best"].update(knobs=BEST))
    return root


def _inputs(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype("float32") * 0.2 for s in ((1, 64, 64), (64, 64), (64, 64))]


def _reference(x: np.ndarray, w1: np.ndarray, w2: np.ndarray) -> np.ndarray:
    from math import erf

    h = x @ w1
    gelu = np.vectorize(lambda v: 0.5 * v * (1.0 + erf(v / np.sqrt(2.0))))
    return gelu(h.astype("float64")).astype("float32") @ w2


def _run(executable, arrays: list[np.ndarray]) -> np.ndarray:
    vm = tvm.relax.VirtualMachine(executable, tvm.cpu())
    return vm["forward"](*[tvm.runtime.tensor(a) for a in arrays]).numpy()


def test_a_model_builds_with_the_committed_best_and_matches_the_reference(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    b = build_model("two_mm", target=TARGET, root=root, untemplated="none")
    assert [(s.template, s.workload, dict(s.knobs)) for s in b.swaps] == [("mm", "s64", BEST)] * 2
    assert [s.binding for s in b.swaps] == ["matmul", "matmul1"]
    assert b.uncovered == ("relax.nn.gelu(1x64x64) -> 1x64x64 float32",)
    assert "default loops" in b.untemplated
    arrays = _inputs()
    np.testing.assert_allclose(_run(b.executable, arrays), _reference(*arrays), rtol=1e-4, atol=1e-5)
    # the kernels in the executable are the template's, scheduled at BEST (parallel, cached)
    lib = b.executable.mod.imports[0]
    assert lib.implements_function("mm_s64")


def test_a_stale_log_is_refused_and_the_fallback_warns_once_for_each_call(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    mm = root / "operators/mm.py"
    mm.write_text(mm.read_text().replace("sch.vectorize(j1)", "sch.vectorize(j1)\n    sch.unroll(i1)"))
    with pytest.raises(StaleLogError, match="template_changed") as e:
        build_model("two_mm", target=TARGET, root=root, untemplated="none")
    assert "no usable tuned configuration for mm" in str(e.value)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        b = build_model("two_mm", target=TARGET, root=root, untemplated="none", allow_fallback=True)
    fallbacks = [str(w.message) for w in caught if issubclass(w.category, FallbackWarning)]
    assert len(fallbacks) == 2 and "two_mm: matmul = " in fallbacks[0] and "two_mm: matmul1 = " in fallbacks[1]
    assert all(s.fallback and s.knobs == {} for s in b.swaps)
    arrays = _inputs(1)
    np.testing.assert_allclose(_run(b.executable, arrays), _reference(*arrays), rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_the_calls_no_template_covers_get_metaschedule_and_what_it_leaves_the_built_in_schedule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real search; its database then loses GELU's records, as a search that found no
    valid candidate for a function leaves it."""
    from tvmtune_ci.model import build as model_build

    real_apply = model_build.apply
    dropped: list[str] = []

    def apply_without_gelu(mod, target, db):
        out = real_apply(mod, target, db)
        name = next(gv.name_hint for gv in out.functions if "gelu" in gv.name_hint)
        out = out.clone()
        out[out.get_global_var(name)] = mod[name]  # as before the search: unscheduled
        dropped.append(name)
        return out

    monkeypatch.setattr(model_build, "apply", apply_without_gelu)
    root = _repo(tmp_path)
    b = build_model("two_mm", target=TARGET, root=root, untemplated="metaschedule", trials=8, work_dir=tmp_path / "ms")
    # gelu (fused with the views around it) and the output's copy: one full batch each
    assert b.untemplated.startswith("MetaSchedule tune_relax, 16 trials for each of 2 function(s)"), b.untemplated
    assert f"1 got no valid record and the built-in schedule: {dropped[0]}" in b.untemplated
    assert b.schedules[dropped[0]] == BY_SPATIAL
    assert sorted(b.schedules.values()) == sorted([model_build.BY_METASCHEDULE, BY_SPATIAL]), b.schedules
    assert "naive" not in b.untemplated
    arrays = _inputs(2)
    np.testing.assert_allclose(_run(b.executable, arrays), _reference(*arrays), rtol=1e-4, atol=1e-5)


def test_profile_writes_the_shares_and_a_readme_that_agrees_with_them(tmp_path: Path) -> None:
    from conftest import run_cli

    from tvmtune_ci.core.profiles import read_profile
    from tvmtune_ci.core.profiles import spread as band

    root = _repo(tmp_path)
    args = ("profile", "two_mm", "--target", "host", "--untemplated", "none", "--runs", "3")
    r = run_cli(root, *args)
    assert r.returncode == 0, r.stdout + r.stderr
    profile = read_profile(root / "models/two_mm.profile.json", "two_mm")
    run = profile.latest("host")
    assert run is not None and run.samples == 3
    mm = [c for c in run.calls if c.template == "mm"]
    assert [(c.symbol, c.workload, c.calls) for c in mm] == [("mm_s64", "s64", 2)]
    assert any(c.template is None for c in run.calls)  # gelu: TVM's kernel, listed as such
    shares = run.shares()
    assert set(shares) == {("mm", "s64")} and 0 < shares[("mm", "s64")] < 1
    assert abs(shares[("mm", "s64")] + run.uncovered_share() - 1) < 1e-9
    assert run.speedup is not None and run.speedup_range is not None
    assert run.speedup > 0 and run.speedup_range[0] <= run.speedup_range[1]
    readme = (root / "models/two_mm.host.md").read_text()
    assert f"{run.latency_s * 1e3:.3g} ms" in readme or f"{run.latency_s * 1e6:.3g} us" in readme
    assert f"**Tuning made the model {run.speedup:.2f}x faster**" in readme
    assert "| `mm_s64` | mm/s64 | 2 |" in readme and "One profile run so far" in readme
    assert "| (none: TVM's naive loops) |" in readme  # the schedule gelu got, as asked
    # GFLOPS per kernel, and the fraction of the peak measured in the same timing process
    assert run.peak is not None and run.peak[0] > 0 and run.threads is not None
    assert mm[0].flops == 2 * 64**3 and mm[0].gflops() == pytest.approx(2 * 2 * 64**3 / mm[0].seconds / 1e9)
    g = mm[0].gflops()
    assert g is not None and f"| {g:.1f} ({g / run.peak[0] * 100:.0f}%) |" in readme
    assert (
        f"fp32 peak, measured in the same timing process on the same {run.threads} thread(s): {run.peak[0]:.0f} GFLOPS"
        in readme
    )
    assert (root / "models/two_mm.host.png").read_bytes()[:4] == b"\x89PNG"
    # a second run joins the history, and the README quotes the band across runs
    assert run_cli(root, *args).returncode == 0
    runs = read_profile(root / "models/two_mm.profile.json", "two_mm").runs["host"]
    lo, hi = band([x.latency_s for x in runs])
    assert len(runs) == 2
    assert (
        f"Across the 2 profile runs of this build on this target and these threads: {lo:.2f}-{hi:.2f}x"
        in (root / "models/two_mm.host.md").read_text()
    )
    # the kernel README's "% of peak" reads the profiles' median peak, which the second run
    # moved: profile rewrote it, so it is what `readme` renders now
    assert "**Of peak**" in (root / "tuning_logs/mm/host/README.md").read_text()
    r = run_cli(root, "readme", "mm", "--target", "host")
    assert r.returncode == 0 and "up to date" in r.stdout and "wrote" not in r.stdout, r.stdout


def test_a_model_s_shares_are_the_budget_s_weights(tmp_path: Path) -> None:
    from tvmtune_ci.check.staleness import find_stale
    from tvmtune_ci.commands.retune import make_budget
    from tvmtune_ci.core.config import load_config
    from tvmtune_ci.core.profiles import CallTime, Profile, ProfileRun, write_profile

    root = _repo(tmp_path)
    config = load_config(root)
    entries = find_stale(config).entries
    hand = make_budget(config, entries, 600.0).weights
    assert list(hand.values()) == [1.0]  # no profile: the hand weight (1.0, one workload)
    run = ProfileRun(
        "2026-12-06",
        {},
        "none",
        1e-3,
        0.1,
        3,
        (CallTime("mm_s64", 2, 6e-4, "mm", "s64"), CallTime("fused_gelu", 1, 2e-4)),
    )
    write_profile(root / "models/two_mm.profile.json", Profile("two_mm", {"host": (run,)}))
    weights = make_budget(config, entries, 600.0).weights
    assert list(weights.values()) == [pytest.approx(0.75)]  # mm/s64: 6e-4 of 8e-4


TINY = TINY_DENSE


def test_an_nn_linear_runs_dense_on_the_weight_before_its_transpose(tmp_path: Path) -> None:
    """nn.Linear is matmul(x, permute_dims(W)): the dense template takes W [N, K] itself,
    so the transpose is gone from the build, and x [1, 16, 32] folds into M = 16."""
    root = dense_model_repo(tmp_path, TARGET, TINY, "lin", LINEAR)
    # The default configuration: no log needed to see the swap.
    b = build_model("lin", target=TARGET, root=root, untemplated="none", configs="default")
    assert [(s.template, s.workload, s.kernel) for s in b.swaps] == [("dense", "tiny", "dense_tiny")]
    assert b.uncovered == ("relax.add(1x16x48, 48) -> 1x16x48 float32",)  # the bias; no transpose left
    rng = np.random.default_rng(3)
    x, w, bias = (rng.standard_normal(s).astype("float32") for s in ((1, 16, 32), (48, 32), (48,)))
    np.testing.assert_allclose(_run(b.executable, [x, w, bias]), x @ w.T + bias, rtol=1e-4, atol=1e-5)


EXPORTED_LINEAR = """\
from tvm.relax.frontend import nn


class Exported(nn.Module):
    \"\"\"nn.Linear as torch.onnx.export writes it: MatMul over the weight stored [K, N].\"\"\"

    def __init__(self):
        self.w = nn.Parameter((32, 48), "float32")
        self.v = nn.Parameter((48, 32), "float32")

    def forward(self, x, y):
        return nn.op.matmul(x, self.w), nn.op.matmul(y, nn.op.permute_dims(self.v))


MODEL = Exported
SPEC = {"forward": {"x": nn.spec.Tensor((1, 16, 32), "float32"), "y": nn.spec.Tensor((16, 32), "float32")}}
"""


def test_a_weight_stored_k_by_n_runs_dense_on_its_transpose(tmp_path: Path) -> None:
    """An exporter's nn.Linear, x @ W[K, N], is dense's too: the kernel takes W's
    transpose. Beside it, nn.Linear's own form, x @ permute_dims(V[N, K]), still takes V
    itself: each form its own way, in one model."""
    root = dense_model_repo(tmp_path, TARGET, TINY, "exported", EXPORTED_LINEAR)
    b = build_model("exported", target=TARGET, root=root, untemplated="fallback", configs="default")
    assert [(s.template, s.workload, s.binding) for s in b.swaps] == [
        ("dense", "tiny", "matmul"),
        ("dense", "tiny", "matmul1"),
    ]
    assert b.uncovered == ()  # the transpose of W runs (folded where W is a constant); V's is gone
    rng = np.random.default_rng(4)
    x, y, w, v = (rng.standard_normal(s).astype("float32") for s in ((1, 16, 32), (16, 32), (32, 48), (48, 32)))
    vm = tvm.relax.VirtualMachine(b.executable, tvm.cpu())
    out = vm["forward"](*[tvm.runtime.tensor(a) for a in (x, y, w, v)])
    np.testing.assert_allclose(out[0].numpy(), x @ w, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(out[1].numpy(), y @ v.T, rtol=1e-4, atol=1e-5)


def test_the_nearest_sibling_is_the_same_dtype_and_the_least_log_ratio_away() -> None:
    from tvmtune_ci.model.build import nearest_sibling, shape_name

    wls = {
        "big": {"M": 1024, "N": 1024, "K": 1024, "dtype": "float32"},
        "ffn1": {"M": 128, "N": 3072, "K": 768, "dtype": "float32"},
        "half": {"M": 128, "N": 768, "K": 768, "dtype": "float16"},
    }
    want = {"M": 128, "N": 768, "K": 768, "dtype": "float32"}
    assert nearest_sibling(wls, want) == "ffn1"  # log 4 away; "half" is float16, "big" log 8*... away
    assert nearest_sibling(wls, {**want, "dtype": "int8"}) is None
    assert shape_name(want) == "K768_M128_N768"


def test_an_undeclared_shape_runs_its_template_at_the_nearest_sibling_s_best_mapped(tmp_path: Path) -> None:
    """A 48x64 @ 64x40 matmul the template declares no workload of: by default TVM's
    loops; with uncovered_shapes='sibling', the template's kernel at s64's best mapped
    onto the shape (tile_j [2, 32] no longer divides 40: repaired to a legal tiling),
    warned once for each call, and the output still right."""
    model = MODEL.replace('self.w2 = nn.Parameter((64, 64), "float32")', 'self.w2 = nn.Parameter((64, 40), "float32")')
    root = _repo(tmp_path)
    (root / "models/two_mm.py").write_text(model)
    plain = build_model("two_mm", target=TARGET, root=root, untemplated="none")
    assert [s.workload for s in plain.swaps] == ["s64"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        b = build_model("two_mm", target=TARGET, root=root, untemplated="none", uncovered_shapes="sibling")
    assert [(s.workload, s.mapped_from) for s in b.swaps] == [("s64", None), ("K64_M64_N40", "s64")]
    mapped = b.swaps[1]
    assert mapped.knobs["tile_j"] != BEST["tile_j"] and mapped.knobs["tile_j"][0] * mapped.knobs["tile_j"][1] == 40
    assert mapped.knobs["tile_i"] == BEST["tile_i"] and mapped.knobs["cache"] is True  # kept where legal
    said = [str(w.message) for w in caught if issubclass(w.category, FallbackWarning)]
    assert len(said) == 1 and "with s64's best mapped onto it" in said[0]
    rng = np.random.default_rng(4)
    x, w1, w2 = (rng.standard_normal(s).astype("float32") * 0.2 for s in ((1, 64, 64), (64, 64), (64, 40)))
    np.testing.assert_allclose(_run(b.executable, [x, w1, w2]), _reference(x, w1, w2), rtol=1e-4, atol=1e-5)


def test_profile_lists_the_mapped_shapes_as_workloads_worth_declaring(tmp_path: Path) -> None:
    from conftest import run_cli

    from tvmtune_ci.core.profiles import read_profile

    root = _repo(tmp_path)
    (root / "models/two_mm.py").write_text(
        MODEL.replace('self.w2 = nn.Parameter((64, 64), "float32")', 'self.w2 = nn.Parameter((64, 40), "float32")')
    )
    r = run_cli(
        root, "profile", "--target", "host", "--untemplated", "none", "--uncovered-shapes", "sibling", "--runs", "2"
    )
    assert r.returncode == 0, r.stdout + r.stderr
    run = read_profile(root / "models/two_mm.profile.json", "two_mm").latest("host")
    assert run is not None
    mapped = [c for c in run.calls if c.mapped_from]
    assert [(c.template, c.workload, c.mapped_from) for c in mapped] == [("mm", "K64_M64_N40", "s64")]
    assert set(run.shares()) == {("mm", "s64")}  # a mapped shape is no workload to weigh
    readme = (root / "models/two_mm.host.md").read_text()
    assert "## Shapes worth a workload" in readme and "- `mm` `K64_M64_N40` (" in readme
    assert "mapped from s64)" in readme


@pytest.mark.slow
def test_a_model_s_shares_set_each_workload_s_trials_by_the_tiers(tmp_path: Path) -> None:
    """4.1's tiers: where a model is profiled on the target, a workload's trials follow
    its share of the model's time; `--trials` on the command line still rules."""
    import yaml
    from conftest import run_cli

    from tvmtune_ci.core.manifest import read_manifest
    from tvmtune_ci.core.profiles import CallTime, Profile, ProfileRun, write_profile

    root = _repo(tmp_path)
    cfg = yaml.safe_load((root / "tvmtune.yaml").read_text())
    cfg["trial_tiers"] = {0.5: 6, 0: 3}
    (root / "tvmtune.yaml").write_text(yaml.safe_dump(cfg))
    run = ProfileRun(
        "2026-12-06",
        {},
        "none",
        1e-3,
        0.1,
        3,
        (CallTime("mm_s64", 2, 6e-4, "mm", "s64"), CallTime("fused_gelu", 1, 2e-4)),
    )
    write_profile(root / "models/two_mm.profile.json", Profile("two_mm", {"host": (run,)}))
    r = run_cli(root, "retune", "--all", "--no-carry")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "s64: 6 trials (75% of the profiled models' time: the 50%+ tier)" in r.stdout
    assert read_manifest(root / "tuning_logs/mm/host/manifest.json").trials["s64"].requested == 6
    r = run_cli(root, "retune", "--all", "--no-carry", "--trials", "4")
    assert r.returncode == 0, r.stdout + r.stderr
    assert read_manifest(root / "tuning_logs/mm/host/manifest.json").trials["s64"].requested == 4
