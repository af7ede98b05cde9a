"""Git, one way to run it (`run`) and the reading (`git.read`); the writing (commit,
push) is `publish/gitwrite.py`.

Every git command runs through `run` (the `git` executable via subprocess, in the
given folder, with an optional environment on top of this process's). Reading
(`check --changed-since`, provenance) needs nothing else, so `check` and `status` stay
light; writing (commit, push) also uses GitPython's object model where it reads
better (the repository, its head, branch and remotes), imported lazily.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

from ..errors import GitError


def run(cwd: Path, *args: str, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`git ARGS` in `cwd`; never raises on git's exit status (GitError if git is missing)."""
    try:
        return subprocess.run(
            ["git", "-C", str(cwd), *args],
            capture_output=True,
            text=True,
            encoding="utf-8",
            errors="surrogateescape",
            check=False,
            env={**os.environ, **env} if env else None,
        )
    except FileNotFoundError:
        raise GitError("`git` is not installed or not on PATH; install git") from None


def output(cwd: Path, *args: str) -> str:
    """stdout of `git ARGS` in `cwd`; GitError naming the command when it fails."""
    r = run(cwd, *args)
    if r.returncode != 0:
        raise GitError(f"git {' '.join(args)} failed in {cwd}: {r.stderr.strip() or r.returncode}")
    return r.stdout
