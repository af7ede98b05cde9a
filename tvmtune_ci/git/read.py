"""Read-only git queries (no GitPython on the check path).

Only `check --changed-since` and provenance need git; everything else in
`check`/`status` works on a plain folder. Writes (commit, push) are `git.write`.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import UsageError
from . import output, run


def repo_root(path: Path) -> Path | None:
    """The top folder of the git work tree holding `path`; None outside any."""
    r = run(path if path.is_dir() else path.parent, "rev-parse", "--show-toplevel")
    if r.returncode != 0:
        return None
    return Path(r.stdout.strip()).resolve()


def resolve_ref(root: Path, ref: str) -> str:
    """The commit `ref` names; UsageError (exit 2) naming the ref when there is none."""
    if repo_root(root) is None:
        raise UsageError(
            f"{root} is not in a git work tree, so a ref such as {ref!r} means nothing; "
            "run inside a clone or drop --changed-since"
        )
    r = run(root, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}")
    if r.returncode != 0 or not r.stdout.strip():
        raise UsageError(
            f"unknown git ref {ref!r}: no such branch, tag or commit in {root}; "
            "fetch it first (in GitHub Actions: actions/checkout with fetch-depth: 0) "
            "or name an existing one"
        )
    return r.stdout.strip()


def _split_z(text: str) -> list[str]:
    return [p for p in text.split("\0") if p]


def changed_files(root: Path, ref: str) -> set[str]:
    """Files that differ between `ref` and the work tree, relative to `root` (posix).

    Committed, staged and unstaged changes (`git diff REF`) plus untracked files
    that are not ignored. Renames count as a deletion and an addition, so both
    names are listed. Files outside `root` (when it is a subfolder) are left out.
    """
    commit = resolve_ref(root, ref)
    top = repo_root(root)
    assert top is not None  # resolve_ref checked
    names = _split_z(output(top, "diff", "--name-only", "--no-renames", "-z", commit, "--"))
    names += _split_z(output(top, "ls-files", "--others", "--exclude-standard", "-z"))
    root = root.resolve()
    out = set()
    for name in names:
        try:
            out.add((top / name).relative_to(root).as_posix())
        except ValueError:
            continue
    return out


def last_commit(root: Path, path: Path | str) -> str | None:
    """The SHA of the last commit that touched `path`; None when none did (or no repo)."""
    if repo_root(root) is None:
        return None
    r = run(root, "log", "-1", "--format=%H", "--", str(path))
    sha = r.stdout.strip()
    return sha if r.returncode == 0 and sha else None
