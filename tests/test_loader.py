"""The loader on a host that cannot run the target: refused before SIGILL, unless cross-compiling."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import edit_results, git_env, make_repo, write_fresh
from small_mm import SMALL_MM

pytest.importorskip("tvm")

from tvmtune_ci.tune.hostcheck import HOST_ENV  # noqa: E402

# Zen 5 code uses AVX-512; a host without it dies with SIGILL running it.
FOREIGN = {"kind": "llvm", "mcpu": "znver5", "num-cores": 2}

CONFIG = """\
format: 1
tvm_version: "0.27"
targets:
  zen5:
    target: {kind: llvm, mcpu: znver5, num-cores: 2}
"""

# Runs in a child: with the old behaviour the call kills it (SIGILL), not the suite.
SCRIPT = textwrap.dedent("""\
    import sys

    import numpy as np
    import tvm

    from tvmtune_ci import build_best
    from tvmtune_ci.core.errors import HostError

    target, root = {target!r}, sys.argv[1]
    try:
        ex = build_best("mm", target=target, root=root)
    except HostError as e:
        print("REFUSED", e)
    else:
        dev = tvm.cpu()
        a, b, c = (tvm.runtime.tensor(np.ones((64, 64), "float32"), dev) for _ in range(3))
        ex["main"](a, b, c)
        print("RAN")
    ex = build_best("mm", target=target, root=root, allow_foreign_host=True)
    print("CROSS-COMPILED", ex is not None)
""").format(target=FOREIGN)


def test_build_best_refuses_a_target_this_cpu_cannot_run(tmp_path: Path) -> None:
    """On an AVX2-only host (synthetic: the same on any machine), a Zen 5 log is refused;
    cross-compiling it on request still works."""
    root = make_repo(tmp_path, config=CONFIG, files={"operators/mm.py": SMALL_MM}, operators=False)
    write_fresh(root, "mm", "zen5")
    # Vectorised 32 wide (the default configuration would not vectorise at all).
    best = {"tile_i": [8, 8], "tile_j": [2, 32], "unroll": 0, "cache": False}
    edit_results(root / "tuning_logs/mm/zen5", lambda res: res["s64"]["best"].update(knobs=best))
    r = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(root)],
        env={**git_env(), HOST_ENV: "znver3"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    refused = next(x for x in r.stdout.splitlines() if x.startswith("REFUSED"))
    assert "mm: target" in refused and "znver5" in refused and "avx512f" in refused
    assert "SIGILL" in refused and "allow_foreign_host=True" in refused
    assert "runs-on" not in refused  # re-tune advice does not fit a library call
    assert "CROSS-COMPILED True" in r.stdout
