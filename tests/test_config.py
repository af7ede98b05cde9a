"""tvmtune.yaml parsing: values, and every error naming file:line and the fix."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from conftest import CONFIG, OPERATORS

from tvmtune_ci.core.config import load_config, parse_config
from tvmtune_ci.core.configschema import EarlyStop
from tvmtune_ci.core.errors import ConfigError
from tvmtune_ci.core.template import CPU_KINDS, declared_kinds, discover_templates, read_template

MINIMAL = "targets:\n  cpu:\n    target: {kind: llvm, mcpu: skylake-avx512}\n"


def parse(text: str):  # noqa: ANN201
    return parse_config(text, Path("/repo/tvmtune.yaml"))


def error_of(text: str) -> str:
    with pytest.raises(ConfigError) as e:
        parse(text)
    return str(e.value)


def test_full_config() -> None:
    c = parse(
        CONFIG + "operators:\n  matmul:\n    trials: 10\n    targets: [avx2]\n"
        "early_stop: {patience: 0}\nmeasure: {precision: 0.02, timeout_s: 30}\npr_check: warn\n"
    )
    assert c.root == Path("/repo") and c.tvm_version == "0.27" and c.trials == 64
    assert [t.name for t in c.targets] == ["avx512", "avx2"]
    assert c.target("avx512").target == {"kind": "llvm", "mcpu": "skylake-avx512", "num-cores": 4}
    assert c.target("avx512").runs_on == ("self-hosted", "linux", "x64", "avx512")
    assert c.target("avx2").line == CONFIG.splitlines().index("  avx2:") + 1
    assert [t.name for t in c.targets_for("matmul", CPU_KINDS)] == ["avx2"]
    assert [t.name for t in c.targets_for("conv2d", CPU_KINDS)] == ["avx512", "avx2"]
    assert c.trials_for("matmul") == 10 and c.trials_for("conv2d") == 64
    assert c.early_stop == EarlyStop(patience=0, min_improvement=0.01)
    assert c.measure.precision == 0.02 and c.measure.timeout_s == 30.0 and isinstance(c.measure.timeout_s, float)
    assert c.pr_check == "warn"


def test_defaults() -> None:
    c = parse(MINIMAL)
    assert (c.operators_dir, c.logs_dir, c.trials, c.max_age_days, c.tvm_version, c.pr_check) == (
        "operators",
        "tuning_logs",
        300,
        365,
        None,
        "fail",
    )


@pytest.mark.parametrize(
    "text,message",
    [
        (MINIMAL + "trails: 10\n", "tvmtune.yaml:4: unknown key 'trails' in the top level; did you mean 'trials'?"),
        (
            MINIMAL + "measure:\n  precison: 0.02\n",
            "tvmtune.yaml:5: unknown key 'precison' in measure; did you mean 'precision'?",
        ),
        (
            MINIMAL.replace("    target:", "    runs_on: [x]\n    target:"),
            "tvmtune.yaml:3: unknown key 'runs_on' in targets.cpu; did you mean 'runs-on'?",
        ),
        (MINIMAL + "zzz: 1\n", "tvmtune.yaml:4: unknown key 'zzz' in the top level; allowed keys: format, targets"),
    ],
    ids=["top", "nested", "target", "no-suggestion"],
)
def test_unknown_keys_name_the_line_and_a_suggestion(text: str, message: str) -> None:
    assert error_of(text).startswith(message)


@pytest.mark.parametrize(
    "text,message",
    [
        (
            MINIMAL + "trials: many\n",
            "tvmtune.yaml:4: trials is 'many' (str), expected int; write for example `trials: 300`",
        ),
        (MINIMAL + "trials: true\n", "tvmtune.yaml:4: trials is True (bool), expected int"),
        (MINIMAL + "trials: 0\n", "tvmtune.yaml:4: trials is 0, it must be positive"),
        (MINIMAL + "measure: {precision: high}\n", "tvmtune.yaml:4: measure.precision is 'high' (str), expected float"),
        (MINIMAL + "pr_check: maybe\n", "tvmtune.yaml:4: pr_check is 'maybe', it must be 'fail' or 'warn'"),
        (MINIMAL + "tvm_version: 1\n", "tvmtune.yaml:4: tvm_version '1' is not MAJOR.MINOR"),
        (MINIMAL + "measure: 5\n", "tvmtune.yaml:4: measure must be a mapping"),
        (
            MINIMAL + "operators:\n  matmul:\n    targets: [cpuu]\n",
            "tvmtune.yaml:6: operators.matmul.targets names unknown target 'cpuu'; did you mean 'cpu'?",
        ),
        (
            "targets:\n  cpu:\n    target: {mcpu: x}\n",
            "tvmtune.yaml:3: target 'cpu' must be a TVM target dict with a 'kind'",
        ),
        ("targets:\n  cpu:\n    runs-on: [x]\n", "tvmtune.yaml:3: target 'cpu' needs a 'target' entry"),
        ("trials: 3\n", "tvmtune.yaml:1: no `targets:`"),
        ("", "tvmtune.yaml:1: the file is empty"),
        (MINIMAL + "trials: 1\ntrials: 2\n", "tvmtune.yaml:5: duplicate key 'trials' in the top level"),
        ("format: 2\n" + MINIMAL, "tvmtune.yaml:1: format 2 is not understood"),
        (MINIMAL + "keep: zen3-2c\n", "tvmtune.yaml:4: keep must be a list of log folders"),
        (MINIMAL + "keep: [a/b/c]\n", "tvmtune.yaml:4: keep entry 'a/b/c' is not a target name"),
    ],
    ids=[
        "type",
        "bool-for-int",
        "range",
        "float",
        "choice",
        "version",
        "mapping",
        "op-target",
        "no-kind",
        "no-target",
        "no-targets",
        "empty",
        "duplicate",
        "format",
        "keep-not-a-list",
        "keep-path",
    ],
)
def test_wrong_values_name_the_line_and_the_fix(text: str, message: str) -> None:
    assert error_of(text).startswith(message)


@pytest.mark.parametrize(
    "text,line",
    [(MINIMAL + "trials: [1, 2\n", 5), (MINIMAL + "  bad indent: 1\n  : x\n", 5), ("targets:\n\tcpu: 1\n", 2)],
)
def test_bad_yaml_names_the_line(text: str, line: int) -> None:
    msg = error_of(text)
    assert msg.startswith(f"tvmtune.yaml:{line}: invalid YAML"), msg
    assert "fix the syntax" in msg


def test_legacy_string_target_is_converted_with_a_warning() -> None:
    legacy = "llvm -mcpu=skylake-avx512 -num-cores=4 -mattr=+avx512f,+avx2"
    text = f"targets:\n  cpu:\n    target: {legacy}\n"
    with pytest.warns(UserWarning, match=r"tvmtune.yaml:3: target 'cpu' uses the removed string form") as w:
        c = parse(text)
    assert c.target("cpu").target == {
        "kind": "llvm",
        "mattr": ["+avx2", "+avx512f"],
        "mcpu": "skylake-avx512",
        "num-cores": 4,
    }
    assert "read as {'kind': 'llvm', 'mattr'" in str(w[0].message)  # says what to write instead


def test_bad_legacy_string_is_an_error() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert error_of("targets:\n  cpu:\n    target: -mcpu=x\n").startswith(
            "tvmtune.yaml:3: target 'cpu': target string '-mcpu=x' does not start with a target kind"
        )


def test_int_for_a_float_field_and_unquoted_version() -> None:
    c = parse(MINIMAL + "measure: {time_cap_s: 1, timeout_s: 30}\ntvm_version: 0.30\n")
    assert c.measure.time_cap_s == 1.0 and c.measure.timeout_s == 30.0
    # Unquoted 0.30 is the YAML float 0.3; the version meant is 0.30.
    assert c.tvm_version == "0.30"


def test_rpc_runner() -> None:
    c = parse(MINIMAL + "    runner: {rpc: {tracker: 'host:9190', key: pi, devices: 2}}\n")
    rpc = c.target("cpu").rpc
    assert rpc is not None and (rpc.tracker_host, rpc.tracker_port, rpc.key, rpc.devices) == ("host", 9190, "pi", 2)
    assert error_of(MINIMAL + "    runner: {rpc: {tracker: host, key: pi}}\n").startswith(
        "tvmtune.yaml:4: rpc.tracker is 'host', it must be HOST:PORT"
    )


def test_load_config_finds_the_nearest_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "tvmtune.yaml").write_text(MINIMAL)
    (tmp_path / "a/b").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "a/b")
    assert load_config().root == tmp_path.resolve()
    assert load_config(tmp_path / "a").path == (tmp_path / "tvmtune.yaml").resolve()
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")


# ----------------------------------------------------------------- issue 11: typos that checked nothing


def test_an_empty_targets_mapping_is_an_error() -> None:
    msg = error_of("targets: {}\n")
    assert msg.startswith("tvmtune.yaml:1: targets is empty, so nothing would be checked; add one"), msg


@pytest.mark.parametrize("value", ["2.0", "2.5", "'2'", "true"])
def test_num_cores_must_be_an_integer(value: str) -> None:
    msg = error_of(f"targets:\n  cpu:\n    target: {{kind: llvm, mcpu: haswell, num-cores: {value}}}\n")
    assert msg.startswith("tvmtune.yaml:3: target 'cpu': num-cores is "), msg
    assert "TVM takes an integer; write" in msg
    if value == "2.0":
        assert msg.endswith("write `num-cores: 2`")


def test_a_float_anywhere_in_a_target_is_an_error() -> None:
    msg = error_of("targets:\n  cpu:\n    target: {kind: llvm, mcpu: haswell, opt: {x: 1.5}}\n")
    assert msg.startswith("tvmtune.yaml:3: target 'cpu': opt.x is the float 1.5"), msg


@pytest.mark.parametrize("version", ['"a.b"', '"0"', '"x0.27"', "[0, 27]"])
def test_tvm_version_must_be_major_minor(version: str) -> None:
    msg = error_of(MINIMAL + f"tvm_version: {version}\n")
    assert msg.startswith("tvmtune.yaml:4: tvm_version ") and "is not MAJOR.MINOR" in msg, msg


@pytest.mark.parametrize("version", ['"0.27"', '"0.27.0.post1"', '"v1.2"', "0.30"])
def test_tvm_version_accepts_real_versions(version: str) -> None:
    assert parse(MINIMAL + f"tvm_version: {version}\n").tvm_version


def test_the_legacy_target_warning_is_kept_in_the_config() -> None:
    with pytest.warns(UserWarning):
        c = parse("targets:\n  cpu:\n    target: llvm -mcpu=haswell\n")
    (w,) = c.warnings
    assert w.startswith("tvmtune.yaml:3: target 'cpu' uses the removed string form 'llvm -mcpu=haswell'")
    assert w.endswith("write that dict instead")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert parse(MINIMAL).warnings == ()


def test_seed_from_is_the_nearest_by_default_names_another_target_or_is_off() -> None:
    assert parse(MINIMAL).target("cpu").seed_from is None and parse(MINIMAL).target("cpu").seed_nearest
    off = parse(MINIMAL + "    seed-from: false\n").target("cpu")
    assert off.seed_from is None and not off.seed_nearest
    c = parse(MINIMAL + "  new:\n    target: {kind: llvm, mcpu: znver5}\n    seed-from: cpu\n")
    assert c.target("new").seed_from == "cpu"
    # A retired target (its logs kept, no longer configured) may seed too.
    assert parse(MINIMAL + "    seed-from: zen3-2c\n").target("cpu").seed_from == "zen3-2c"


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("cpu", "target 'cpu' cannot seed from itself"),
        ("[a, b]", "seed-from of target 'cpu' must be a target name"),
        ("'///'", "seed-from '///' of target 'cpu' cannot name a log folder"),
    ],
)
def test_a_seed_from_that_cannot_work_is_an_error_with_the_line(value: str, words: str) -> None:
    msg = error_of(MINIMAL + f"    seed-from: {value}\n")
    assert msg.startswith(f"tvmtune.yaml:4: {words}"), msg
    assert "seed-from: zen4-2c" in msg


def test_a_tvm_cuda_tag_is_expanded_to_its_dict() -> None:
    c = parse("targets:\n  h100:\n    target: nvidia/nvidia-h100\n    runs-on: [self-hosted, gpu, h100]\n")
    assert c.target("h100").target == {
        "arch": "sm_90a",
        "kind": "cuda",
        "l2_cache_size_bytes": 52428800,
        "max_shared_memory_per_block": 49152,
        "max_threads_per_block": 1024,
        "registers_per_block": 65536,
        "thread_warp_size": 32,
    }
    assert not c.warnings


def test_an_unknown_tag_suggests_one() -> None:
    msg = error_of("targets:\n  h100:\n    target: nvidia/nvidia-h10\n")
    assert "tvmtune.yaml:3" in msg and "'nvidia/nvidia-h100'" in msg


@pytest.mark.parametrize(
    "target",
    [
        "{kind: cuda, arch: sm_90}",
        "'cuda -arch=sm_90'",
        "{kind: cuda, arch: sm_90, max_shared_memory_per_block: 49152, max_threads_per_block: 1024, "
        "thread_warp_size: 32}",
    ],
)
def test_a_cuda_target_without_its_limits_is_an_error_with_the_line(target: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        msg = error_of(f"targets:\n  gpu:\n    target: {target}\n")
    assert "tvmtune.yaml:3" in msg and "registers_per_block" in msg and "nvidia/nvidia-h100" in msg


def test_a_gpu_target_measured_on_its_runner_names_the_gpu_label() -> None:
    msg = error_of("targets:\n  h100:\n    target: nvidia/nvidia-h100\n    runs-on: [linux, x64]\n")
    assert "tvmtune.yaml:4" in msg and "'gpu' label" in msg
    ok = parse(
        "targets:\n  h100:\n    target: nvidia/nvidia-h100\n    runner: {rpc: {tracker: '127.0.0.1:9190', key: h100}}\n"
    )
    assert ok.target("h100").rpc is not None  # measured through RPC: any runner builds


def test_targets_pair_by_kind_unless_an_operator_lists_them(tmp_path: Path) -> None:
    c = parse(
        MINIMAL + "  h100:\n    target: nvidia/nvidia-h100\n    runs-on: [self-hosted, gpu]\n"
        "operators:\n  listed: {targets: [cpu, h100]}\n"
    )
    assert [t.kind for t in c.targets] == ["llvm", "cuda"]  # a tag's, from its dict

    def names(targets: tuple) -> list[str]:
        return [t.name for t in targets]

    assert names(c.targets_for("dense", CPU_KINDS)) == ["cpu"]
    assert names(c.targets_for("dense_cuda", ("cuda",))) == ["h100"]
    assert names(c.targets_for("listed", ("cuda",))) == ["cpu", "h100"]  # as written
    assert names(c.targets_for("unreadable", None)) == ["cpu", "h100"]
    assert c.coverage({"dense": CPU_KINDS, "dense_cuda": ("cuda",), "listed": CPU_KINDS}) == {
        "cpu": ("dense", "listed"),
        "h100": ("dense_cuda", "listed"),
    }
    # declared_kinds reads TARGET_KINDS as read_template does, without parsing the rest.
    for p in discover_templates(OPERATORS):
        assert declared_kinds(p) == read_template(p).kinds, p
    t = tmp_path / "t.py"
    for text, kinds in (
        ("X = 1\n", CPU_KINDS),
        ("TARGET_KINDS = ('c',)\n", ("c",)),
        ("TARGET_KINDS = 'cuda'\n", None),
        ("TARGET_KINDS = [\n", None),
    ):
        t.write_text(text)
        assert declared_kinds(t) == kinds, text
