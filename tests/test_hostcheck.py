from __future__ import annotations

import re

import pytest

tvm = pytest.importorskip("tvm")

from tvmtune_ci.core.errors import HostError  # noqa: E402
from tvmtune_ci.tune.hostcheck import _X86_FEATURES, check_host, host_cpu_flags, host_target  # noqa: E402


def _host_target() -> dict:
    return host_target()


def _target_lacking_a_feature() -> tuple[dict, str]:
    """An LLVM x86 CPU whose ISA needs a feature this host does not report."""
    flags = host_cpu_flags()
    assert flags is not None, "this test needs /proc/cpuinfo"
    probe = tvm.target.Target({"kind": "llvm", "mcpu": "x86-64"})
    for cpu in tvm.target.codegen.llvm_get_cpu_archlist(probe):
        feats = set(tvm.target.codegen.llvm_get_cpu_features(tvm.target.Target({"kind": "llvm", "mcpu": str(cpu)})))
        lacking = [f for f in feats if f in _X86_FEATURES and _X86_FEATURES[f] not in flags]
        if lacking:
            return {"kind": "llvm", "mcpu": str(cpu)}, lacking[0]
    pytest.fail("every LLVM x86 CPU's features are on this host; cannot build a refused target")


def test_host_cpu_target_is_accepted() -> None:
    check_host(_host_target())


def test_target_needing_a_missing_feature_is_refused_before_any_trial() -> None:
    target, feature = _target_lacking_a_feature()
    with pytest.raises(HostError) as e:
        check_host(target)
    assert feature in str(e.value) and target["mcpu"] in str(e.value)
    assert "runs-on" in str(e.value)


def test_other_architecture_and_missing_gpu_are_refused() -> None:
    with pytest.raises(HostError, match="aarch64"):
        check_host({"kind": "llvm", "mtriple": "aarch64-linux-gnu"})
    if not tvm.cuda(0).exist:
        with pytest.raises(HostError, match="cuda"):
            check_host({"kind": "cuda"})


@pytest.mark.tool("aarch64-linux-gnu-gcc")
def test_remote_targets_are_left_to_the_tracker_preflight() -> None:
    check_host({"kind": "llvm", "mtriple": "aarch64-linux-gnu"}, remote=True)


def test_a_remote_target_still_needs_its_linker_here(tmp_path, monkeypatch) -> None:
    """The devices measure, but this machine builds: a missing cross compiler is
    refused before any trial, remote or not, naming the package."""
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(HostError, match="apt-get install gcc-aarch64-linux-gnu"):
        check_host({"kind": "llvm", "mtriple": "aarch64-linux-gnu"}, remote=True)


def test_a_host_without_a_c_compiler_is_refused_before_any_trial(tmp_path, monkeypatch) -> None:
    """TVM links every kernel with g++/gcc/clang/cc: a machine with none is told so
    up front, not by a build error in every trial."""
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.delenv("CC", raising=False)
    with pytest.raises(HostError, match=re.escape("apt-get install g++")):
        check_host(_host_target())


def test_the_host_target_is_one_this_machine_runs() -> None:
    """LLVM names the CPU; features the VM hides (AMX on an Emerald Rapids guest) are
    turned off in mattr, so the host check accepts it and tuning here works."""
    target = host_target(2)
    assert target["mcpu"] == str(tvm.target.codegen.llvm_get_system_cpu())
    assert target["num-cores"] == 2
    check_host(target)
    flags = host_cpu_flags()
    for attr in target.get("mattr", []):
        assert attr.startswith("-") and _X86_FEATURES[attr[1:]] not in flags


def test_the_host_description_names_the_cpu_s_family_and_model(tmp_path) -> None:
    """The model name of a VM's CPU can hide its generation: vendor, family and model go
    with it, from the first processor's block of /proc/cpuinfo."""
    from tvmtune_ci.tune.hostcheck import host_description

    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\n"
                    "model name\t: AMD EPYC\n\nprocessor\t: 1\nvendor_id\t: Other\ncpu family\t: 1\n")
    got = host_description(info)
    assert got["cpu"] == "AMD EPYC" and got["cpu_id"] == "AuthenticAMD family 26 model 2"
    info.write_text("model name\t: Some CPU\n")  # no family or model: none claimed
    assert "cpu_id" not in host_description(info) and host_description(info)["cpu"] == "Some CPU"
    here = host_description()  # this machine's
    assert here["cores"] and here["cpu"]
