from __future__ import annotations

import pytest

tvm = pytest.importorskip("tvm")

from tvmtune_ci.errors import HostError  # noqa: E402
from tvmtune_ci.hostcheck import _X86_FEATURES, check_host, host_cpu_flags  # noqa: E402


def _host_target() -> dict:
    return {"kind": "llvm", "mcpu": str(tvm.target.codegen.llvm_get_system_cpu())}


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


def test_remote_targets_are_left_to_the_tracker_preflight() -> None:
    check_host({"kind": "llvm", "mtriple": "aarch64-linux-gnu"}, remote=True)
