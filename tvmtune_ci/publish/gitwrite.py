"""Commit exactly the files a re-tune wrote, and push them without ever forcing.

Two operations, on real git: commands through `git.run`, the repository, its head,
branch and remotes through GitPython (imported lazily, so that importing this module
costs nothing where no commit is made):

`commit_paths(root, paths, message, identity)` commits the listed paths (new,
modified, renamed or deleted files, or whole folders) and nothing else: it builds
the commit in a temporary index (`GIT_INDEX_FILE`) seeded from `HEAD`, so other
changes in the work tree, staged or not, stay where they are and out of the
commit. Afterwards the real index is brought in line with the new commit for the
listed paths only, as `git commit --only` does. No hooks run: this is a bot
commit of generated files. Nothing to commit raises `GitError` (it never makes an
empty commit).

`push_with_retry(root, attempts)` pushes the current branch to its upstream (or
`origin/<branch>`). When the remote moved because another runner pushed the log
of another (operator, target), it fetches, rebases the local commits onto the
remote branch and pushes again. It never force-pushes and never drops a commit:
a rebase that conflicts is aborted and reported, leaving the local commits as
they were.

Identity: author and committer come from `GitIdentity` (tvmtune.yaml `git:`),
except that `GIT_AUTHOR_NAME`/`GIT_AUTHOR_EMAIL`/`GIT_COMMITTER_NAME`/
`GIT_COMMITTER_EMAIL` set in the environment win. With no identity, git's own
configuration (`user.name`, `user.email`) is used.

Over 400 lines: committing only the listed paths and pushing with rebase-and-retry
are one protocol (the push needs the commit's bookkeeping); apart they would share
its private helpers.
"""

from __future__ import annotations

import os
import random
import re
import tempfile
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.configschema import GitIdentity
from ..core.errors import GitError
from ..core.git import run

if TYPE_CHECKING:  # pragma: no cover
    import git

_IDENTITY_VARS = {
    "GIT_AUTHOR_NAME": "name",
    "GIT_AUTHOR_EMAIL": "email",
    "GIT_COMMITTER_NAME": "name",
    "GIT_COMMITTER_EMAIL": "email",
}


@dataclass(frozen=True)
class PushResult:
    """What `push_with_retry` did."""

    remote: str  # e.g. "origin"
    branch: str  # remote branch name, e.g. "main"
    sha: str  # the commit the remote branch points at now
    attempts: int  # pushes tried, 1 when the first one went through
    rebased: int  # how many times the local commits were rebased onto the remote

    @property
    def ref(self) -> str:
        return f"{self.remote}/{self.branch}"

    def __str__(self) -> str:
        tries = f"{self.attempts} attempt{'s' if self.attempts != 1 else ''}"
        moved = f", rebased {self.rebased}x onto a moved remote" if self.rebased else ""
        return f"{self.ref} at {self.sha[:12]} ({tries}{moved})"


# --------------------------------------------------------------------------- helpers


def _repo(root: Path) -> git.Repo:
    import git

    try:
        return git.Repo(root, search_parent_directories=True)
    except git.InvalidGitRepositoryError:
        raise GitError(
            f"{root} is not inside a git repository; run `git init` or point --config at a tvmtune.yaml in a clone"
        ) from None
    except git.NoSuchPathError:
        raise GitError(f"{root} does not exist; check the path") from None


def _run(repo: git.Repo, *args: str, env: Mapping[str, str] | None = None) -> tuple[int, str, str]:
    """`git ARGS` in the work tree (or the git dir of a bare repository); (status,
    stdout, stderr) with one trailing newline cut, never raises on status."""
    r = run(Path(repo.working_tree_dir or repo.git_dir), *args, env=env)
    return r.returncode, r.stdout.removesuffix("\n"), r.stderr.removesuffix("\n")


def _check(repo: git.Repo, *args: str, env: Mapping[str, str] | None = None, what: str) -> str:
    status, out, err = _run(repo, *args, env=env)
    if status != 0:
        detail = (err or out).strip() or f"exit status {status}"
        raise GitError(f"{what} failed: `git {' '.join(args)}`: {detail}")
    return out


def identity_env(identity: GitIdentity | None, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The GIT_AUTHOR_*/GIT_COMMITTER_* variables to set: `identity` where the
    environment does not already set them (the environment wins)."""
    environ = os.environ if environ is None else environ
    if identity is None:
        return {}
    return {var: getattr(identity, field) for var, field in _IDENTITY_VARS.items() if not environ.get(var)}


def _relative(work_tree: Path, root: Path, path: Path) -> str:
    p = path if path.is_absolute() else root / path
    # Resolve the folder, not the file: the file may be deleted or a symlink.
    parent = p.parent.resolve()
    try:
        rel = (parent / p.name).relative_to(work_tree)
    except ValueError:
        raise GitError(
            f"{path} is outside the repository {work_tree}; only files of the repository can be committed"
        ) from None
    s = rel.as_posix()
    return "." if s in ("", ".") else s


def _head(repo: git.Repo) -> str | None:
    status, out, _ = _run(repo, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
    return out.strip() if status == 0 and out.strip() else None


def _identity_hint() -> str:
    return (
        "set `git: {name: ..., email: ...}` in tvmtune.yaml, or GIT_AUTHOR_NAME/GIT_AUTHOR_EMAIL "
        "and GIT_COMMITTER_NAME/GIT_COMMITTER_EMAIL, or `git config user.name/user.email`"
    )


# --------------------------------------------------------------------------- commit


def commit_paths(root: Path, paths: Sequence[Path], message: str, identity: GitIdentity | None = None) -> str:
    """Commit exactly `paths` (files or folders, absolute or relative to `root`)
    on the current branch; return the new commit's sha.

    Raises GitError when none of the paths differs from HEAD (no empty commits),
    when a path lies outside the repository, or when git fails.
    """
    if not paths:
        raise GitError("nothing to commit: no paths were given")
    if not message.strip():
        raise GitError("the commit message is empty; pass a message")
    repo = _repo(Path(root))
    if repo.bare or repo.working_tree_dir is None:
        raise GitError(f"{repo.git_dir} is a bare repository; commit from a clone with a work tree")
    work_tree = Path(repo.working_tree_dir).resolve()
    root = Path(root).resolve()
    specs = sorted({_relative(work_tree, root, Path(p)) for p in paths})

    head = _head(repo)
    # Literal pathspecs: a log called `x[1].json` is a file, not a glob.
    base_env = {"GIT_LITERAL_PATHSPECS": "1"}
    fd, tmp = tempfile.mkstemp(prefix="tvmtune-index-", dir=repo.git_dir)
    os.close(fd)
    os.unlink(tmp)  # git wants no file or a valid index, not an empty file
    tmp_env = {**base_env, "GIT_INDEX_FILE": tmp}
    try:
        if head is not None:
            _check(repo, "read-tree", head, env=tmp_env, what="seeding the temporary index from HEAD")
        to_add = _stage(repo, work_tree, specs, tmp_env)
        tree = _check(repo, "write-tree", env=tmp_env, what="writing the tree").strip()
        if head is not None:
            head_tree = _check(repo, "rev-parse", f"{head}^{{tree}}", what="reading HEAD's tree").strip()
            if tree == head_tree:
                raise GitError(f"nothing to commit: {', '.join(specs)} already match HEAD ({head[:12]})")
        sha = _commit_tree(repo, tree, head, message, {**base_env, **identity_env(identity)})
    finally:
        for leftover in (tmp, tmp + ".lock"):
            try:
                os.unlink(leftover)
            except FileNotFoundError:
                pass

    # The real index still holds the old content for these paths; align it with
    # the new commit for these paths only (what `git commit --only` does).
    status, _out, err = _run(repo, "reset", "-q", sha, "--", *to_add, env=base_env)
    if status != 0:
        warnings.warn(
            f"committed {sha[:12]} but could not update the index for "
            f"{', '.join(to_add)} ({err.strip()}); "
            f"`git status` may show them as changed; run `git reset -q -- {' '.join(to_add)}`",
            UserWarning,
            stacklevel=2,
        )
    return sha


def _stage(repo: git.Repo, work_tree: Path, specs: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """Add `specs` to the (temporary) index of `env`: those that exist now, and those
    tracked in HEAD that do not (deletions); the pathspecs added."""
    # A path counts when it exists now or was tracked in HEAD (a deletion).
    present = [s for s in specs if (work_tree / s).exists() or (work_tree / s).is_symlink()]
    tracked = _check(repo, "ls-files", "-z", "--", *specs, env=env, what="listing tracked paths").split("\0")
    tracked_specs = [
        s for s in specs if s not in present and any(t == s or t.startswith(s.rstrip("/") + "/") for t in tracked if t)
    ]
    to_add = present + tracked_specs
    if not to_add:
        raise GitError(f"nothing to commit: none of {', '.join(specs)} exists or is tracked; check the paths")
    status, out, err = _run(repo, "add", "--all", "--", *to_add, env=env)
    if status != 0:
        detail = (err or out).strip()
        if "ignored by one of your .gitignore" in detail:
            raise GitError(
                f"cannot commit {', '.join(to_add)}: {detail}; remove the pattern from .gitignore or commit other paths"
            )
        raise GitError(f"staging {', '.join(to_add)} failed: {detail}")
    return to_add


def _commit_tree(repo: git.Repo, tree: str, head: str | None, message: str, env: Mapping[str, str]) -> str:
    """The commit of `tree` on `head` (none: a root commit), with the branch moved to it; its sha."""
    parents = ["-p", head] if head is not None else []
    status, out, err = _run(repo, "commit-tree", tree, *parents, "-m", message, env=env)
    if status != 0:
        detail = (err or out).strip()
        if "tell me who you are" in detail or "empty ident" in detail or "user.email" in detail:
            raise GitError(f"git does not know who commits: {detail.splitlines()[0]}; {_identity_hint()}")
        raise GitError(f"creating the commit failed: {detail}")
    sha = out.strip()
    subject = message.strip().splitlines()[0]
    _check(
        repo,
        "update-ref",
        "-m",
        f"commit (tvmtune-ci): {subject}",
        "HEAD",
        sha,
        head or "0" * len(sha),
        what="moving the branch to the new commit",
    )
    return sha


# --------------------------------------------------------------------------- push


def _branch_and_upstream(repo: git.Repo) -> tuple[str, str, str]:
    """(local branch, remote, remote branch) for the current HEAD."""
    if repo.head.is_detached:
        raise GitError(
            "HEAD is detached, so there is no branch to push; check out the branch first "
            "(`git switch BRANCH`) or, in a workflow, check out `github.ref`"
        )
    branch = repo.active_branch
    tracking = branch.tracking_branch()
    if tracking is not None:
        return branch.name, tracking.remote_name, tracking.remote_head
    remotes = [r.name for r in repo.remotes]
    if "origin" not in remotes:
        raise GitError(
            f"branch {branch.name!r} has no upstream and there is no remote 'origin' "
            f"(remotes: {', '.join(remotes) or 'none'}); "
            f"run `git branch --set-upstream-to REMOTE/{branch.name}`"
        )
    return branch.name, "origin", branch.name


# "[rejected] (fetch first)" / "(non-fast-forward)": the remote has commits we
# lack. "cannot lock ref": another push landed between the remote's check and its
# update. Anything else (auth, protection, hooks) is not fixed by rebasing.
_REMOTE_MOVED = re.compile(r"\(fetch first\)|\(non-fast-forward\)|\bnon-fast-forward\b|cannot lock ref")


def _rejected_because_remote_moved(out: str, err: str) -> bool:
    return bool(_REMOTE_MOVED.search(out) or _REMOTE_MOVED.search(err))


def _push_detail(out: str, err: str) -> str:
    lines = [ln for ln in (out + "\n" + err).splitlines() if ln.strip() and not ln.startswith(("To ", "Done"))]
    return "; ".join(ln.strip() for ln in lines) or "no output"


def push_with_retry(
    root: Path, attempts: int = 5, *, identity: GitIdentity | None = None, backoff_s: float = 1.0
) -> PushResult:
    """Push the current branch; on "remote moved" rejections fetch, rebase, retry.

    At most `attempts` pushes. `identity` is the committer of rebased commits
    (the environment's GIT_COMMITTER_* win). Between attempts it waits a random
    0..`backoff_s` * attempt seconds so that runners finishing together spread out.
    Raises GitError when a push is refused for another reason, when a rebase
    conflicts (aborted, local commits intact) or when all attempts are used up.
    """
    if attempts < 1:
        raise GitError(f"attempts is {attempts}; it must be at least 1")
    repo = _repo(Path(root))
    local, remote, remote_branch = _branch_and_upstream(repo)
    if remote not in [r.name for r in repo.remotes]:
        raise GitError(
            f"the upstream of {local!r} is {remote}/{remote_branch} but there is no remote "
            f"{remote!r}; run `git remote -v`"
        )
    tracking_ref = f"refs/remotes/{remote}/{remote_branch}"
    refspec = f"refs/heads/{local}:refs/heads/{remote_branch}"
    env = {**_rebase_identity_env(repo, identity), "GIT_TERMINAL_PROMPT": "0"}
    rebased = 0
    last = ""
    for attempt in range(1, attempts + 1):
        # No --force, no --force-with-lease, no "+" in the refspec: ever.
        status, out, err = _run(repo, "push", "--porcelain", remote, refspec, env=env)
        if status == 0:
            sha = _check(repo, "rev-parse", f"refs/heads/{local}", what="reading the pushed commit").strip()
            # Keep the remote-tracking ref in step, as a plain `git push` does.
            _run(repo, "update-ref", tracking_ref, sha)
            return PushResult(remote=remote, branch=remote_branch, sha=sha, attempts=attempt, rebased=rebased)
        if not _rejected_because_remote_moved(out, err):
            raise GitError(
                f"pushing {local} to {remote}/{remote_branch} was refused: "
                f"{_push_detail(out, err)}; "
                "check the token's `contents: write` permission and the branch protection rules; "
                "the local commits are intact"
            )
        last = _push_detail(out, err)
        if attempt == attempts:
            break
        _check(
            repo,
            "fetch",
            "--no-tags",
            remote,
            f"+refs/heads/{remote_branch}:{tracking_ref}",
            env=env,
            what=f"fetching {remote}/{remote_branch} after the push was rejected",
        )
        _rebase_onto(repo, local, f"{remote}/{remote_branch}", tracking_ref, env)
        rebased += 1
        if backoff_s > 0:
            time.sleep(random.uniform(0, backoff_s * attempt))
    raise GitError(
        f"pushing {local} to {remote}/{remote_branch} was rejected {attempts} times "
        f"because the remote kept moving (last: {last}); the local commits are intact "
        f"and rebased onto the last fetched {remote}/{remote_branch}; "
        "push again later (`git push`) or raise `attempts`"
    )


def _rebase_identity_env(repo: git.Repo, identity: GitIdentity | None) -> dict[str, str]:
    """Committer of rebased commits: `identity`, else git's configuration, else the
    tvmtune-ci default (a fresh CI runner has no user.name; the commits rebased
    are the bot's own, their authors are kept)."""
    if identity is None and _run(repo, "var", "GIT_COMMITTER_IDENT")[0] != 0:
        identity = GitIdentity()
    return identity_env(identity)


def _rebase_onto(repo: git.Repo, local: str, upstream_name: str, upstream_ref: str, env: Mapping[str, str]) -> None:
    before = _check(repo, "rev-parse", "HEAD", what="reading HEAD").strip()
    # --autostash: a re-tune leaves other files dirty (scratch, other logs); git
    # refuses to rebase a dirty tree otherwise. --no-verify: no hooks on a bot rebase.
    status, out, err = _run(repo, "rebase", "--autostash", "--no-verify", upstream_ref, env=env)
    if status == 0:
        return
    _s, conflicted, _e = _run(repo, "diff", "--name-only", "--diff-filter=U")
    files = [f for f in conflicted.splitlines() if f.strip()]
    abort_status, _ao, abort_err = _run(repo, "rebase", "--abort", env=env)
    after = _run(repo, "rev-parse", "HEAD")[1].strip()
    intact = abort_status == 0 and after == before
    where = f" in {', '.join(files)}" if files else ""
    detail = (err or out).strip().splitlines()
    state = (
        f"the rebase was aborted; {local} is back at {before[:12]} with your commits intact"
        if intact
        else f"`git rebase --abort` failed ({abort_err.strip()}); your commits are still "
        f"reachable at {before[:12]} (see `git reflog`)"
    )
    raise GitError(
        f"rebasing {local} onto {upstream_name} conflicted{where}: "
        "another run changed the same files"
        f"{' (' + detail[-1] + ')' if detail and not files else ''}; {state}; "
        f"to finish by hand: `git pull --rebase`, resolve the conflicts, `git push` "
        f"(or re-run the re-tune on the new {upstream_name})"
    )
