"""Fixtures of the command tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tvmtune_ci.cli import main


@pytest.fixture
def cli(repo: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], no_github: None):  # noqa: ANN201
    """Run `tvmtune-ci ARGS` in-process inside the fresh repo: (exit code, stdout, stderr)."""
    monkeypatch.chdir(repo)

    def run(*args: str) -> tuple[int, str, str]:
        code = main(list(args))
        out, err = capsys.readouterr()
        return code, out, err

    return run
