"""Which TVM the logs must have been tuned with: the installed one's version, without
importing it."""

from __future__ import annotations

import re

_VERSION = re.compile(r"^\s*v?(\d+)\.(\d+)")


def major_minor(version: str) -> str | None:
    """ "0.27.0.post1" -> "0.27"; None when `version` does not start with MAJOR.MINOR."""
    m = _VERSION.match(version or "")
    return f"{int(m.group(1))}.{int(m.group(2))}" if m else None


def installed_tvm_version() -> str | None:
    """The installed apache-tvm distribution's version, from metadata: TVM is not imported."""
    import importlib.metadata  # only when tvmtune.yaml does not pin tvm_version

    try:
        return importlib.metadata.version("apache-tvm")
    except importlib.metadata.PackageNotFoundError:
        return None
