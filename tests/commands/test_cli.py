"""The command line: every verb listed, a command imports its own module only."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tvmtune_ci.cli import COMMANDS

ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str, code: str | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-c", code, *args] if code else [sys.executable, "-m", "tvmtune_ci", *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_the_help_lists_every_command() -> None:
    """Every command module on disk is a verb the help lists (held against the folder,
    not against `COMMANDS`: a module left out of the registry would pass that)."""
    modules = {p.stem for p in (ROOT / "tvmtune_ci" / "commands").glob("*.py") if p.stem != "__init__"}
    assert {mod for mod, _ in COMMANDS.values()} == modules
    r = cli("--help")
    assert r.returncode == 0
    listed = re.findall(r"^ {4}([a-z][a-z-]*)(?: {2,}|$)", r.stdout, re.M)
    assert sorted(listed) == sorted(modules), r.stdout


def test_a_command_imports_its_own_module_only() -> None:
    probe = (
        "import sys\nfrom tvmtune_ci.cli import main\ncode = main(sys.argv[1:])\n"
        "print(sorted(m for m in sys.modules if m.startswith('tvmtune_ci.commands.')))\n"
    )
    r = cli("check", code=probe)
    assert r.stdout.strip().splitlines()[-1] == "['tvmtune_ci.commands.check']", r.stdout + r.stderr


def test_a_commands_options_and_an_unknown_command() -> None:
    r = cli("retune", "--help")
    assert r.returncode == 0 and "--budget" in r.stdout and "--dry-run" in r.stdout
    r = cli("nosuch")
    assert r.returncode == 2 and "invalid choice: 'nosuch'" in r.stderr and "remeasure" in r.stderr
    r = cli("check", "--no-such-option")
    assert r.returncode == 2 and "unrecognized arguments: --no-such-option" in r.stderr
