"""The host check: a target this CPU cannot run is refused before any trial.

Every test gets its host injected (a synthetic one: the features LLVM gives a named
CPU), so the suite says the same on an AVX2-only Zen 3, an AVX-512 Zen 4, an AMX Xeon
and an aarch64 board. The tests marked `host` use `this_host()`, which .ci/run points
at each synthetic host in turn (TVMTUNE_TEST_HOST_CPU); one reads the real host on
purpose, where a real host is the point."""

from __future__ import annotations

import re

import pytest

tvm = pytest.importorskip("tvm")

from tvmtune_ci.core.errors import HostError  # noqa: E402
from tvmtune_ci.tune import hostcheck  # noqa: E402
from tvmtune_ci.tune.hostcheck import (  # noqa: E402
    HOST_ENV,
    Host,
    check_host,
    detect_host,
    host_target,
    missing_features,
    missing_of,
    synthetic_host,
    this_host,
)

# Synthetic hosts: one of each kind the runners have been, and for each, a real LLVM
# CPU whose code it cannot run and a feature that says why. sapphirerapids -> znver5:
# avx512vp2intersect, which no hand table of this product ever listed.
HOSTS = {
    "znver3": ("znver4", "avx512f"),  # AVX2 only
    "znver4": ("sapphirerapids", "amx-tile"),  # AVX-512, no AMX
    "sapphirerapids": ("znver5", "avx512vp2intersect"),  # AMX and AVX-512 FP16
    "aarch64:neoverse-n1": ("znver4", None),  # another architecture
}


@pytest.fixture(params=sorted(HOSTS))
def host(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Host:
    """A synthetic host, and this_host() (what check_host reads) pointed at it."""
    monkeypatch.setenv(HOST_ENV, request.param)
    h = this_host()
    assert h.synthetic and h.cpu == request.param.rpartition(":")[2]
    return h


def test_a_synthetic_host_has_the_features_llvm_gives_its_cpu(host: Host) -> None:
    if host.arch == "x86_64":
        assert "sse2" in host.features
        assert ("avx512f" in host.features) == (host.cpu != "znver3")
        assert ("amx-tile" in host.features) == (host.cpu == "sapphirerapids")
    else:
        assert host.arch == "aarch64" and "neon" in host.features


def test_the_host_target_is_accepted_on_every_host(host: Host) -> None:
    target = host_target(2)
    assert target["mcpu"] == host.cpu and target["num-cores"] == 2
    check_host(target)


def test_a_target_needing_a_feature_the_host_lacks_is_refused_naming_it(host: Host) -> None:
    cpu, feature = HOSTS[f"{host.arch}:{host.cpu}" if host.arch != "x86_64" else host.cpu]
    with pytest.raises(HostError) as e:
        check_host({"kind": "llvm", "mcpu": cpu})
    msg = str(e.value)
    assert cpu in msg and "runs-on" in msg, msg
    if feature is None:  # another architecture
        assert "is for x86_64" in msg and "aarch64" in msg, msg
    else:
        assert "lacks" in msg and feature in msg, msg
        assert host.cpu in msg and HOST_ENV in msg  # says which host refused it


def test_a_feature_outside_any_table_is_refused_on_a_host_without_it() -> None:
    """Fail closed: amx-fp16 and avx512vp2intersect were outside the old 33-entry table
    and passed it; now every LLVM ISA feature counts, read from LLVM."""
    spr = synthetic_host("sapphirerapids")
    assert "amx-fp16" not in spr.features
    assert missing_features({"kind": "llvm", "mcpu": "sapphirerapids", "mattr": ["+amx-fp16"]}, spr) == ["amx-fp16"]
    assert "avx512vp2intersect" in missing_features({"kind": "llvm", "mcpu": "znver5"}, spr)
    # what passes: the target's own CPU, and the same with a feature turned off
    assert missing_features({"kind": "llvm", "mcpu": "sapphirerapids"}, spr) == []
    z5 = synthetic_host("znver5")
    assert missing_features({"kind": "llvm", "mcpu": "znver5", "mattr": ["-avx512vp2intersect"]}, spr) == [
        f for f in missing_features({"kind": "llvm", "mcpu": "znver5"}, spr) if f != "avx512vp2intersect"
    ]
    assert missing_features({"kind": "llvm", "mcpu": "znver4"}, z5) == []


def test_a_feature_no_one_can_vouch_for_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A name the host check has never seen (an ISA extension newer than any table, or
    than LLVM's host detection) is refused, not waved through; LLVM's tuning
    preferences and the architecture's baseline are not features a CPU can lack."""
    host = Host(arch="x86_64", cpu="x", features=frozenset({"avx2"}), known=frozenset({"avx2", "avx512f"}))
    got = missing_of(
        ["avx2", "avx512f", "avx12.0", "x87", "fast-gather", "slow-3ops-lea", "macrofusion"], host, baseline=["x87"]
    )
    assert got == ["avx12.0", "avx512f"]
    # No real LLVM feature is unknown to LLVM's own detection, so the list is injected
    # here to see the refusal say why an unreported one is refused.
    monkeypatch.setattr(hostcheck, "this_host", lambda: host)
    monkeypatch.setattr(hostcheck, "missing_features", lambda target, h=None: got)
    with pytest.raises(HostError) as e:
        check_host({"kind": "llvm", "mcpu": "znver4"})
    assert "lacks: avx12.0, avx512f (avx12.0: not a feature LLVM's host detection reports" in str(e.value)


def test_a_vm_hiding_system_instructions_still_runs_its_cpu_s_target() -> None:
    """A Zen 4 guest here reports no mwaitx, pku, rdpru or wbnoinvd, which LLVM's znver4
    enables: instructions LLVM emits only for their intrinsics, which no kernel calls.
    Its own target (this repo's zen4-2c) is not refused for them; a vector feature is."""
    z4 = synthetic_host("znver4")
    hidden = {"mwaitx", "pku", "rdpru", "wbnoinvd"}
    assert hidden <= z4.features
    guest = Host(arch="x86_64", cpu="znver4", features=z4.features - hidden)
    assert missing_features({"kind": "llvm", "mcpu": "znver4", "num-cores": 2}, guest) == []
    no_gfni = Host(arch="x86_64", cpu="znver4", features=z4.features - {"gfni"})
    assert missing_features({"kind": "llvm", "mcpu": "znver4"}, no_gfni) == ["gfni"]


def test_features_a_vm_hides_are_turned_off_in_the_host_target() -> None:
    """An Emerald Rapids guest without AMX is still `emeraldrapids` to LLVM: the host
    target turns AMX off, so the host check accepts it and tuning there works."""
    emr = synthetic_host("emeraldrapids")
    guest = Host(
        arch="x86_64", cpu="emeraldrapids", features=frozenset(f for f in emr.features if not f.startswith("amx"))
    )
    target = host_target(2, host=guest)
    assert sorted(target["mattr"]) == ["-amx-bf16", "-amx-int8", "-amx-tile"]
    assert missing_features(target, guest) == []
    assert missing_features({"kind": "llvm", "mcpu": "emeraldrapids"}, guest) == ["amx-bf16", "amx-int8", "amx-tile"]


@pytest.mark.host
def test_this_host_target_passes_its_own_check() -> None:
    """Under each synthetic host .ci/run sets, and on the real one without it."""
    check_host(host_target())


def test_the_real_host_is_read_from_llvm(monkeypatch: pytest.MonkeyPatch) -> None:
    """The one place the real machine is the point: LLVM's host detection gives its CPU
    and features, and the target built from them passes the check here."""
    monkeypatch.delenv(HOST_ENV, raising=False)
    real = detect_host()
    assert real.cpu == str(tvm.target.codegen.llvm_get_system_cpu())
    assert real.known is not None and real.features <= real.known and not real.synthetic
    assert this_host() == real
    check_host(host_target(2))


@pytest.mark.host
def test_other_architecture_and_missing_gpu_are_refused() -> None:
    other = "aarch64" if this_host().arch == "x86_64" else "x86_64"
    with pytest.raises(HostError, match=other):
        check_host({"kind": "llvm", "mtriple": f"{other}-linux-gnu"})
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
        check_host(host_target(host=synthetic_host("znver4")))


def test_the_host_description_names_the_cpu_s_family_and_model(tmp_path) -> None:
    """The model name of a VM's CPU can hide its generation: vendor, family and model go
    with it, from the first processor's block of /proc/cpuinfo."""
    from tvmtune_ci.tune.hostcheck import host_description

    info = tmp_path / "cpuinfo"
    info.write_text(
        "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\n"
        "model name\t: AMD EPYC\n\nprocessor\t: 1\nvendor_id\t: Other\ncpu family\t: 1\n"
    )
    got = host_description(info)
    assert got["cpu"] == "AMD EPYC" and got["cpu_id"] == "AuthenticAMD family 26 model 2"
    info.write_text("model name\t: Some CPU\n")  # no family or model: none claimed
    assert "cpu_id" not in host_description(info) and host_description(info)["cpu"] == "Some CPU"
