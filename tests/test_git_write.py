"""publish/gitwrite.py on real git: a work repo, a bare repo as origin, and second clones."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tvmtune_ci.core.configschema import GitIdentity
from tvmtune_ci.core.errors import GitError
from tvmtune_ci.publish.gitwrite import commit_paths, identity_env, push_with_retry

PINNED = {
    "GIT_AUTHOR_NAME": "Test Author",
    "GIT_AUTHOR_EMAIL": "author@example.com",
    "GIT_COMMITTER_NAME": "Test Committer",
    "GIT_COMMITTER_EMAIL": "committer@example.com",
    "GIT_AUTHOR_DATE": "2026-01-02T03:04:05+00:00",
    "GIT_COMMITTER_DATE": "2026-01-02T03:04:05+00:00",
}


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.fixture(autouse=True)
def isolated_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No user or system git config leaks in; identity and dates pinned. (Not named
    `git_env`: that is conftest's helper, which this fixture's name would shadow.)"""
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text("[init]\n\tdefaultBranch = main\n[advice]\n\tdetachedHead = false\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(home / ".gitconfig"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for var in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        monkeypatch.delenv(var, raising=False)
    for k, v in PINNED.items():
        monkeypatch.setenv(k, v)


def write(root: Path, rel: str, text: str) -> Path:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p


def make_repo(path: Path, files: dict[str, str]) -> Path:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    for rel, text in files.items():
        write(path, rel, text)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "initial")
    return path


def changed_in(root: Path, rev: str = "HEAD") -> set[str]:
    """`STATUS\tpath` lines of one commit, renames shown as delete + add."""
    out = git(root, "show", "--no-renames", "--name-status", "--format=", rev)
    return {line for line in out.splitlines() if line}


def status(root: Path) -> set[str]:
    return {line for line in git(root, "status", "--porcelain", "--untracked-files=all").splitlines() if line}


def test_git_runs_isolated_with_the_pinned_identity(tmp_path: Path) -> None:
    """What `isolated_git` promises, checked: a commit here carries the pinned author,
    committer and dates, and git reads the test's own global config only."""
    root = make_repo(tmp_path / "work", {"a.txt": "a\n"})
    who = git(root, "log", "-1", "--format=%an <%ae> %aI / %cn <%ce> %cI").strip()
    assert who == (
        f"{PINNED['GIT_AUTHOR_NAME']} <{PINNED['GIT_AUTHOR_EMAIL']}> 2026-01-02T03:04:05+00:00 / "
        f"{PINNED['GIT_COMMITTER_NAME']} <{PINNED['GIT_COMMITTER_EMAIL']}> 2026-01-02T03:04:05+00:00"
    )
    origins = git(root, "config", "--show-origin", "--list", "--global").splitlines()
    assert origins and all(str(tmp_path / "home" / ".gitconfig") in o for o in origins), origins


# --------------------------------------------------------------------------- commit_paths


def test_commit_paths_commits_only_the_listed_paths_while_others_are_dirty_and_staged(tmp_path: Path) -> None:
    root = make_repo(
        tmp_path / "repo",
        {
            "operators/matmul.py": "v1\n",
            "tuning_logs/matmul/cpu/log.json": "old log\n",
            "README.md": "readme\n",
            "notes.txt": "notes\n",
            "gone.txt": "will be deleted and staged\n",
        },
    )
    # Someone else's work in progress: staged edits, a staged new file, a staged
    # deletion, an unstaged edit and an untracked file.
    write(root, "operators/matmul.py", "v2 staged\n")
    write(root, "staged_new.txt", "staged new\n")
    git(root, "add", "operators/matmul.py", "staged_new.txt")
    git(root, "rm", "-q", "gone.txt")
    write(root, "README.md", "readme edited, not staged\n")
    write(root, "untracked.txt", "untracked\n")
    # The re-tune's output: a modified log and a new manifest.
    write(root, "tuning_logs/matmul/cpu/log.json", "new log\n")
    write(root, "tuning_logs/matmul/cpu/manifest.json", "{}\n")
    before = git(root, "rev-parse", "HEAD").strip()

    sha = commit_paths(
        root,
        [Path("tuning_logs/matmul/cpu/log.json"), root / "tuning_logs/matmul/cpu/manifest.json"],
        "tvmtune-ci: re-tune matmul on cpu",
        GitIdentity("bot", "bot@example.com"),
    )

    assert sha == git(root, "rev-parse", "HEAD").strip()
    assert git(root, "rev-parse", "HEAD~1").strip() == before
    assert changed_in(root) == {"M\ttuning_logs/matmul/cpu/log.json", "A\ttuning_logs/matmul/cpu/manifest.json"}
    assert git(root, "show", "HEAD:tuning_logs/matmul/cpu/log.json") == "new log\n"
    # Everything else is exactly as it was: staged stays staged, dirty stays dirty.
    assert status(root) == {
        "M  operators/matmul.py",
        "A  staged_new.txt",
        "D  gone.txt",
        " M README.md",
        "?? untracked.txt",
    }
    assert git(root, "diff", "--cached", "--name-only").split() == ["gone.txt", "operators/matmul.py", "staged_new.txt"]
    assert (root / "README.md").read_text() == "readme edited, not staged\n"
    assert git(root, "log", "-1", "--format=%s").strip() == "tvmtune-ci: re-tune matmul on cpu"
    # A later plain `git commit` commits the other person's staged work, not ours.
    git(root, "commit", "-q", "-m", "theirs")
    assert changed_in(root) == {"M\toperators/matmul.py", "A\tstaged_new.txt", "D\tgone.txt"}


def test_commit_paths_rename_to_bak_is_a_delete_plus_add(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "repo", {"tuning_logs/mm/cpu/mm_cpu_2025-01-01.json": "old\n", "other.txt": "x\n"})
    old = root / "tuning_logs/mm/cpu/mm_cpu_2025-01-01.json"
    bak = root / "tuning_logs/mm/cpu/mm_cpu_2025-01-01.json.bak"
    os.rename(old, bak)
    write(root, "tuning_logs/mm/cpu/mm_cpu_2026-01-01.json", "new\n")
    write(root, "other.txt", "dirty\n")

    commit_paths(root, [old, bak, root / "tuning_logs/mm/cpu/mm_cpu_2026-01-01.json"], "archive and publish", None)

    assert changed_in(root) == {
        "D\ttuning_logs/mm/cpu/mm_cpu_2025-01-01.json",
        "A\ttuning_logs/mm/cpu/mm_cpu_2025-01-01.json.bak",
        "A\ttuning_logs/mm/cpu/mm_cpu_2026-01-01.json",
    }
    assert status(root) == {" M other.txt"}


def test_commit_paths_takes_a_folder_with_deletions_inside(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "repo", {"logs/a/1.json": "1\n", "logs/a/2.json": "2\n", "keep.txt": "k\n"})
    (root / "logs/a/1.json").unlink()
    write(root, "logs/a/3.json", "3\n")
    write(root, "keep.txt", "dirty\n")

    commit_paths(root, [Path("logs/a")], "refresh folder", None)

    assert changed_in(root) == {"D\tlogs/a/1.json", "A\tlogs/a/3.json"}
    assert status(root) == {" M keep.txt"}


def test_commit_paths_whole_folder_deleted(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "repo", {"logs/a/1.json": "1\n", "keep.txt": "k\n"})
    (root / "logs/a/1.json").unlink()
    (root / "logs/a").rmdir()
    commit_paths(root, [root / "logs/a"], "drop folder", None)
    assert changed_in(root) == {"D\tlogs/a/1.json"}
    assert status(root) == set()


def test_commit_paths_root_below_the_repository_top(tmp_path: Path) -> None:
    """tvmtune.yaml may live in a sub-folder of the repository."""
    repo = make_repo(tmp_path / "repo", {"sub/tuning_logs/x.json": "1\n"})
    write(repo, "sub/tuning_logs/x.json", "2\n")
    commit_paths(repo / "sub", [Path("tuning_logs/x.json")], "sub", None)
    assert changed_in(repo) == {"M\tsub/tuning_logs/x.json"}


def test_commit_paths_first_commit_of_an_empty_repository(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    write(root, "a.txt", "a\n")
    write(root, "b.txt", "b\n")
    sha = commit_paths(root, [Path("a.txt")], "first", None)
    assert git(root, "rev-list", "--count", sha).strip() == "1"
    assert git(root, "ls-tree", "--name-only", "HEAD").split() == ["a.txt"]
    assert status(root) == {"?? b.txt"}


def test_commit_paths_nothing_changed_raises(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "repo", {"a.txt": "a\n", "b.txt": "b\n"})
    write(root, "b.txt", "dirty\n")
    head = git(root, "rev-parse", "HEAD").strip()
    with pytest.raises(GitError, match="nothing to commit: a.txt already match HEAD"):
        commit_paths(root, [Path("a.txt")], "nothing", None)
    with pytest.raises(GitError, match="nothing to commit: none of missing.txt exists or is tracked"):
        commit_paths(root, [Path("missing.txt")], "nothing", None)
    with pytest.raises(GitError, match="no paths were given"):
        commit_paths(root, [], "nothing", None)
    assert git(root, "rev-parse", "HEAD").strip() == head
    assert status(root) == {" M b.txt"}
    assert not list((root / ".git").glob("tvmtune-index-*")), "temporary index left behind"


def test_commit_paths_outside_the_repository_raises(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    outside = write(tmp_path, "elsewhere.txt", "x\n")
    with pytest.raises(GitError, match="outside the repository"):
        commit_paths(root, [outside], "msg", None)


def test_commit_paths_ignored_file_names_the_fix(tmp_path: Path) -> None:
    root = make_repo(tmp_path / "repo", {".gitignore": "*.tmp\n"})
    write(root, "x.tmp", "x\n")
    with pytest.raises(GitError, match=r"\.gitignore"):
        commit_paths(root, [Path("x.tmp")], "msg", None)


def test_identity_from_config_unless_environment_sets_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    for var in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL"):
        monkeypatch.delenv(var)
    write(root, "a.txt", "1\n")
    commit_paths(root, [Path("a.txt")], "one", GitIdentity("tvmtune bot", "bot@example.com"))
    assert (
        git(root, "log", "-1", "--format=%an <%ae> / %cn <%ce>").strip()
        == "tvmtune bot <bot@example.com> / tvmtune bot <bot@example.com>"
    )

    # The environment wins, variable by variable.
    monkeypatch.setenv("GIT_AUTHOR_NAME", "Env Author")
    monkeypatch.setenv("GIT_COMMITTER_EMAIL", "env-committer@example.com")
    write(root, "a.txt", "2\n")
    commit_paths(root, [Path("a.txt")], "two", GitIdentity("tvmtune bot", "bot@example.com"))
    assert (
        git(root, "log", "-1", "--format=%an <%ae> / %cn <%ce>").strip()
        == "Env Author <bot@example.com> / tvmtune bot <env-committer@example.com>"
    )


def test_identity_env_is_pure() -> None:
    ident = GitIdentity("n", "e@x")
    assert identity_env(None, {}) == {}
    assert identity_env(ident, {"GIT_AUTHOR_NAME": "A"}) == {
        "GIT_AUTHOR_EMAIL": "e@x",
        "GIT_COMMITTER_NAME": "n",
        "GIT_COMMITTER_EMAIL": "e@x",
    }


def test_missing_identity_names_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    for var in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL"):
        monkeypatch.delenv(var)
    monkeypatch.setenv("EMAIL", "")
    git(root, "config", "user.useConfigOnly", "true")
    write(root, "a.txt", "1\n")
    with pytest.raises(GitError, match=r"git: \{name: \.\.\., email: \.\.\.\}"):
        commit_paths(root, [Path("a.txt")], "msg", None)


def test_importing_git_write_does_not_import_gitpython() -> None:
    code = "import sys, tvmtune_ci.publish.gitwrite; print('git' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "False"


# --------------------------------------------------------------------------- push_with_retry


@pytest.fixture
def origin(tmp_path: Path) -> Path:
    """A bare origin seeded with one commit; it refuses non-fast-forward updates,
    so a force-push would fail loudly rather than pass unnoticed."""
    seed = make_repo(tmp_path / "seed", {"tuning_logs/README.md": "logs\n", "shared.txt": "base\n"})
    bare = tmp_path / "origin.git"
    git(tmp_path, "clone", "-q", "--bare", str(seed), str(bare))
    git(bare, "config", "receive.denyNonFastForwards", "true")
    git(bare, "config", "receive.denyDeletes", "true")
    return bare


def clone(origin: Path, dest: Path) -> Path:
    git(origin.parent, "clone", "-q", str(origin), str(dest))
    return dest


def origin_log(origin: Path) -> list[str]:
    return git(origin, "log", "--format=%s", "main").splitlines()


def test_two_runners_push_different_logs_both_land_on_origin(origin: Path, tmp_path: Path) -> None:
    a = clone(origin, tmp_path / "runner-a")
    b = clone(origin, tmp_path / "runner-b")
    start = git(a, "rev-parse", "HEAD").strip()
    assert git(b, "rev-parse", "HEAD").strip() == start

    write(a, "tuning_logs/matmul/cpu/log.json", "a\n")
    sha_a = commit_paths(a, [Path("tuning_logs/matmul/cpu/log.json")], "re-tune matmul on cpu", None)
    write(b, "tuning_logs/conv2d/gpu/log.json", "b\n")
    sha_b = commit_paths(b, [Path("tuning_logs/conv2d/gpu/log.json")], "re-tune conv2d on gpu", None)
    # Runner B also has unrelated dirty and staged files: the rebase keeps them.
    write(b, "shared.txt", "dirty on b\n")
    write(b, "scratch.txt", "staged on b\n")
    git(b, "add", "scratch.txt")

    ra = push_with_retry(a, backoff_s=0)
    assert (ra.attempts, ra.rebased, ra.sha) == (1, 0, sha_a)

    rb = push_with_retry(b, backoff_s=0)
    assert rb.attempts == 2 and rb.rebased == 1
    assert rb.sha != sha_b  # rebased onto A's commit
    assert rb.ref == "origin/main" and "rebased 1x" in str(rb)

    assert origin_log(origin) == ["re-tune conv2d on gpu", "re-tune matmul on cpu", "initial"]
    head = git(origin, "rev-parse", "main").strip()
    assert head == rb.sha
    # Nothing was force-pushed: A's pushed commit is an ancestor of the new tip.
    subprocess.run(["git", "merge-base", "--is-ancestor", sha_a, head], cwd=origin, check=True)
    assert git(origin, "show", "main:tuning_logs/matmul/cpu/log.json") == "a\n"
    assert git(origin, "show", "main:tuning_logs/conv2d/gpu/log.json") == "b\n"
    # B's other work is exactly as it was.
    assert (b / "shared.txt").read_text() == "dirty on b\n"
    assert status(b) == {" M shared.txt", "A  scratch.txt"}
    assert git(b, "rev-parse", "origin/main").strip() == head
    assert git(b, "stash", "list") == ""


def behind_a_pushed_commit(
    origin: Path, tmp_path: Path, a: tuple[str, str, str], b: tuple[str, str, str]
) -> tuple[Path, str]:
    """Runner A commits (file, text, message) and pushes; runner B, cloned before,
    commits its own: B's clone and commit, B's push still to come."""
    ra, rb = clone(origin, tmp_path / "runner-a"), clone(origin, tmp_path / "runner-b")
    write(ra, a[0], a[1])
    commit_paths(ra, [Path(a[0])], a[2], None)
    push_with_retry(ra, backoff_s=0)
    write(rb, b[0], b[1])
    return rb, commit_paths(rb, [Path(b[0])], b[2], None)


def test_conflicting_rebase_aborts_and_keeps_the_local_commit(origin: Path, tmp_path: Path) -> None:
    b, sha_b = behind_a_pushed_commit(
        origin, tmp_path, ("shared.txt", "from a\n", "a edits shared"), ("shared.txt", "from b\n", "b edits shared")
    )

    with pytest.raises(GitError) as exc:
        push_with_retry(b, backoff_s=0)

    msg = str(exc.value)
    assert "conflicted in shared.txt" in msg
    assert "rebase was aborted" in msg and "commits intact" in msg
    assert "git pull --rebase" in msg
    assert exc.value.exit_code == 8
    assert git(b, "rev-parse", "HEAD").strip() == sha_b
    assert git(b, "symbolic-ref", "--short", "HEAD").strip() == "main"
    assert not (b / ".git/rebase-merge").exists() and not (b / ".git/rebase-apply").exists()
    assert (b / "shared.txt").read_text() == "from b\n"
    assert status(b) == set()
    assert origin_log(origin) == ["a edits shared", "initial"]


def test_gives_up_after_the_attempts_and_never_forces(origin: Path, tmp_path: Path) -> None:
    b, sha_b = behind_a_pushed_commit(origin, tmp_path, ("a.txt", "a\n", "a"), ("b.txt", "b\n", "b"))
    with pytest.raises(GitError, match="rejected 1 times because the remote kept moving"):
        push_with_retry(b, attempts=1, backoff_s=0)
    assert git(b, "rev-parse", "HEAD").strip() == sha_b
    assert origin_log(origin) == ["a", "initial"]


def test_push_without_upstream_goes_to_origin_same_branch(origin: Path, tmp_path: Path) -> None:
    a = clone(origin, tmp_path / "runner-a")
    git(a, "switch", "-q", "-c", "retune-branch")
    write(a, "a.txt", "a\n")
    sha = commit_paths(a, [Path("a.txt")], "a", None)
    r = push_with_retry(a, backoff_s=0)
    assert (r.remote, r.branch, r.sha) == ("origin", "retune-branch", sha)
    assert git(origin, "rev-parse", "retune-branch").strip() == sha


def test_push_refused_for_another_reason_is_not_retried(origin: Path, tmp_path: Path) -> None:
    hook = origin / "hooks/pre-receive"
    hook.write_text("#!/bin/sh\necho 'protected branch: use a pull request' >&2\nexit 1\n")
    hook.chmod(0o755)
    a = clone(origin, tmp_path / "runner-a")
    write(a, "a.txt", "a\n")
    sha = commit_paths(a, [Path("a.txt")], "a", None)
    with pytest.raises(GitError, match="was refused: .*protected branch") as exc:
        push_with_retry(a, backoff_s=0)
    assert "contents: write" in str(exc.value)
    assert git(a, "rev-parse", "HEAD").strip() == sha


def test_detached_head_is_refused(origin: Path, tmp_path: Path) -> None:
    a = clone(origin, tmp_path / "runner-a")
    git(a, "switch", "-q", "--detach")
    with pytest.raises(GitError, match="HEAD is detached"):
        push_with_retry(a, backoff_s=0)


def test_rebase_without_any_configured_identity_uses_the_bot(
    origin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = clone(origin, tmp_path / "runner-a")
    b = clone(origin, tmp_path / "runner-b")
    write(a, "a.txt", "a\n")
    commit_paths(a, [Path("a.txt")], "a", None)
    push_with_retry(a, backoff_s=0)
    # A fresh CI runner: no identity anywhere but tvmtune.yaml's, which the
    # commit used and the retrying push was not given.
    for var in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL"):
        monkeypatch.delenv(var)
    monkeypatch.setenv("EMAIL", "")
    git(b, "config", "user.useConfigOnly", "true")
    write(b, "b.txt", "b\n")
    commit_paths(b, [Path("b.txt")], "b", GitIdentity("cfg bot", "cfg@example.com"))
    r = push_with_retry(b, backoff_s=0)
    assert r.rebased == 1
    assert git(origin, "log", "-1", "--format=%an / %cn", "main").strip() == "cfg bot / tvmtune-ci"
