"""Archive the previous log set as `.bak`, then publish the new one, atomically.

A log set is one folder (`tuning_logs/<op>/<target>/`). We build the complete new
folder beside it: the new files, plus every file of the old folder under its
archived `.bak` name (hard links, so nothing is copied and nothing is lost), then
swap the two folders in one `renameat2(RENAME_EXCHANGE)`. Killed before the
swap, the old folder is untouched; after it, the new one is complete. What is
left in the staging folder afterwards is exactly the old folder's names, all of
which also live on in the new folder; it is then removed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .manifest import MANIFEST_NAME
from .manifest import read_manifest as _read_manifest

STAGING_SUFFIX = ".tvmtune-new"
_RENAME_EXCHANGE = 2
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


@dataclass(frozen=True)
class Published:
    folder: Path
    written: tuple[Path, ...]  # new files, in the folder
    archived: dict[str, str]  # old name -> .bak name
    removed: tuple[Path, ...]  # paths that no longer exist under their old name

    @property
    def changed_paths(self) -> tuple[Path, ...]:
        """Every path a commit of this publication must include."""
        return tuple(sorted({*self.written, *(self.folder / b for b in self.archived.values()), *self.removed}))


def staging_folder(folder: Path) -> Path:
    return folder.with_name(f".{folder.name}{STAGING_SUFFIX}")


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths (Linux renameat2). False where unsupported."""
    libc_name = ctypes.util.find_library("c")
    if not libc_name:
        return False
    libc = ctypes.CDLL(libc_name, use_errno=True)
    fn = getattr(libc, "renameat2", None)
    if fn is None:
        return False
    at_fdcwd = -100
    rc = fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), _RENAME_EXCHANGE)
    if rc != 0:
        err = ctypes.get_errno()
        if err in (22, 38, 95):  # EINVAL, ENOSYS, EOPNOTSUPP: filesystem can't
            return False
        raise OSError(err, os.strerror(err), str(a))
    return True


def _old_date(folder: Path) -> str:
    """The date of the set being archived: its manifest's tuned_on, else its log name."""
    try:
        return _read_manifest(folder / MANIFEST_NAME).tuned_on
    except Exception:
        for p in sorted(folder.glob("*.json")):
            m = _DATE.search(p.name)
            if m:
                return m.group(0)
    return "undated"


def archive_names(folder: Path) -> dict[str, str]:
    """Old current file name -> its `.bak` name; never one that already exists."""
    if not folder.is_dir():
        return {}
    date = _old_date(folder)
    taken = {p.name for p in folder.iterdir()}
    out: dict[str, str] = {}
    for p in sorted(folder.iterdir()):
        if p.name.endswith(".bak") or p.name.startswith(".") or not p.is_file():
            continue
        stem, dot, ext = p.name.partition(".")
        # Dated log names already carry the date; the rest get the old date.
        base = p.name if _DATE.search(p.name) else f"{stem}_{date}{dot}{ext}"
        bak = f"{base}.bak"
        n = 2
        while bak in taken or bak in out.values():
            bak = f"{base}.{n}.bak"
            n += 1
        out[p.name] = bak
    return out


def recover(folder: Path) -> None:
    """Remove a staging folder a killed run left behind (the live folder is whole)."""
    staging = staging_folder(folder)
    if staging.exists():
        if not folder.exists():
            # Killed between the two renames of the non-atomic fallback: the
            # staging folder is the complete new set.
            os.replace(staging, folder)
        else:
            shutil.rmtree(staging)


def publish(folder: Path, files: Mapping[str, bytes]) -> Published:
    """Replace `folder`'s current set by `files` (name -> bytes), archiving the old."""
    recover(folder)
    staging = staging_folder(folder)
    staging.mkdir(parents=True)
    archived = archive_names(folder)
    if folder.is_dir():
        for p in folder.iterdir():
            if p.is_file() and not p.name.startswith("."):
                os.link(p, staging / archived.get(p.name, p.name))
    for name, data in files.items():
        target = staging / name
        if target.exists():
            raise FileExistsError(f"{target}: a new file would overwrite an archived one; this is a bug")
        with open(target, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    dirfd = os.open(staging, os.O_RDONLY)
    try:
        os.fsync(dirfd)
    finally:
        os.close(dirfd)
    if folder.is_dir():
        if _exchange(staging, folder):
            shutil.rmtree(staging)  # the old names; all hard-linked into the new set
        else:
            old = folder.with_name(f".{folder.name}.tvmtune-old")
            os.replace(folder, old)
            os.replace(staging, folder)
            shutil.rmtree(old)
    else:
        os.replace(staging, folder)
    written = tuple(folder / n for n in files)
    removed = tuple(folder / old for old in archived if old not in files)
    return Published(folder, written, archived, removed)
