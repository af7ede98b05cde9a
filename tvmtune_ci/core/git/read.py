"""Read-only git queries (no GitPython on the check path).

Only `check --changed-since` and provenance need git; everything else in
`check`/`status` works on a plain folder. Writes (commit, push) are
`publish/gitwrite.py`.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from ..errors import GitError, UsageError
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


def _under(top: Path, root: Path, names: list[str]) -> list[str]:
    """git's paths (relative to the work tree's `top`) made relative to `root`, posix;
    those outside `root` (when it is a subfolder) left out."""
    root = root.resolve()
    out = []
    for name in names:
        try:
            out.append((top / name).relative_to(root).as_posix())
        except ValueError:
            continue
    return out


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
    return set(_under(top, root, names))


def last_commit(root: Path, path: Path | str) -> str | None:
    """The SHA of the last commit that touched `path`; None when none did (or no repo)."""
    if repo_root(root) is None:
        return None
    r = run(root, "log", "-1", "--format=%H", "--", str(path))
    sha = r.stdout.strip()
    return sha if r.returncode == 0 and sha else None


def blob_id(data: bytes) -> str:
    """The id git gives `data` as a blob (sha1 object format), computed without git."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def clean_blobs(folder: Path) -> dict[str, str]:
    """Blob ids of the files under `folder` that git says are unchanged from the index.

    Keyed by absolute posix path. A file is left out when git cannot vouch for it:
    modified, deleted or replaced in the work tree, not tracked, unmerged, marked
    assume-unchanged or skip-worktree (git no longer looks at those), or not a plain
    file. `git status` refreshes stale stat data in memory (re-hashing only files
    whose stat changed, in C) and, with --no-optional-locks, writes nothing. {} outside
    a work tree, without git, or in a sha256-object repository (`blob_id` is sha1).
    """
    try:
        top = repo_root(folder)
        if top is None:
            return {}
        fmt = run(top, "rev-parse", "--show-object-format")
        if fmt.returncode != 0 or fmt.stdout.strip() != "sha1":
            return {}
        # The two git calls run side by side: status stats every tracked file, ls-files
        # reads the index; on 1,000 log sets each takes a noticeable share of check.
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(2) as pool:
            status_f = pool.submit(
                run,
                top,
                "--no-optional-locks",
                "status",
                "--porcelain=v1",
                "-z",
                "--untracked-files=no",
                "--ignore-submodules=all",
                "--no-renames",
                "--",
                str(folder),
            )
            staged_f = pool.submit(run, top, "ls-files", "--stage", "-v", "-z", "--", str(folder))
            status, staged = status_f.result(), staged_f.result()
    except GitError:
        return {}
    if status.returncode != 0 or staged.returncode != 0:
        return {}
    # "XY path": Y is the work tree against the index.
    dirty = {e[3:] for e in _split_z(status.stdout) if len(e) > 3 and e[1] != " "}
    out = {}
    base = top.as_posix().rstrip("/")  # keys built as strings: no Path per file
    for e in _split_z(staged.stdout):
        # "H 100644 <blob> 0\tpath": H = tracked and cached (h: assume-unchanged, S: skip-worktree).
        meta, _, name = e.partition("\t")
        parts = meta.split()
        if len(parts) != 4 or parts[0] != "H" or parts[1] not in ("100644", "100755"):
            continue
        if parts[3] != "0" or name in dirty:
            continue
        out[f"{base}/{name}"] = parts[2]
    return out


def python_files(root: Path) -> list[str]:
    """The .py files git knows under `root` (tracked, plus untracked not ignored),
    relative to `root` (posix); [] outside a work tree."""
    top = repo_root(root)
    if top is None:
        return []
    names = _split_z(output(top, "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", "*.py"))
    # dict.fromkeys: an unmerged file is listed once per stage; keep it once, in order.
    return list(dict.fromkeys(_under(top, root, names)))
