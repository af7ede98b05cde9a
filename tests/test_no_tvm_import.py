"""`check` and `status` never import TVM (nor GitPython) and never run template code.

They run on GitHub-hosted PR runners without TVM, on forks' templates. Each test
runs the real CLI in a subprocess, so nothing imported by the test session itself
can hide an import.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import git_env, run_cli, write

PROBE = """\
import sys
from tvmtune_ci.cli import main
code = main(sys.argv[1:])
leaked = sorted(m for m in sys.modules if m == "tvm" or m.startswith(("tvm.", "tvm_ffi")))
assert not leaked, f"imported: {leaked}"
# Nor GitPython (slow to import): --changed-since runs the git command instead.
assert "git" not in sys.modules, "imported GitPython"
sys.exit(code)
"""


@pytest.mark.parametrize(
    "command", [["check"], ["status"], ["check", "--format", "json"], ["check", "--changed-since", "HEAD"]]
)
def test_tvm_is_not_in_sys_modules(repo: Path, command: list[str]) -> None:
    r = subprocess.run([sys.executable, "-c", PROBE, *command], cwd=repo, env=git_env(), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr + r.stdout


def test_an_importable_tvm_that_refuses_is_never_touched(repo: Path, tmp_path: Path) -> None:
    marker = tmp_path / "tvm-was-imported"
    fake = tmp_path / "fake"
    write(fake, "tvm/__init__.py", f"open({str(marker)!r}, 'w').close()\nraise RuntimeError('tvm imported')\n")
    write(fake, "tvm_ffi/__init__.py", f"open({str(marker)!r}, 'w').close()\nraise RuntimeError('tvm_ffi')\n")
    env = {"PYTHONPATH": str(fake)}
    # The fake really is what `import tvm` would find.
    r = subprocess.run([sys.executable, "-c", "import tvm"], env={**git_env(), **env}, capture_output=True, text=True)
    assert "tvm imported" in r.stderr and marker.exists()
    marker.unlink()
    for args in (["check"], ["status"], ["check", "--format", "github"]):
        r = run_cli(repo, *args, env=env)
        assert r.returncode == 0, r.stderr
        assert not marker.exists(), args


def test_template_module_code_is_not_run(repo: Path, tmp_path: Path) -> None:
    marker = tmp_path / "side-effect"
    src = (repo / "operators/matmul.py").read_text()
    write(
        repo,
        "operators/sneaky.py",
        src.replace(
            "import numpy as np\n",
            f"import numpy as np\nopen({str(marker)!r}, 'w').write('ran')\nraise SystemExit(42)\n",
        ),
    )
    for args in (["check"], ["status"]):
        r = run_cli(repo, *args)
        assert r.returncode == (1 if args == ["check"] else 0), r.stderr
        assert "sneaky/avx2" in r.stdout
        assert not marker.exists()
