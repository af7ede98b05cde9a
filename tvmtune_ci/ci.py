"""CI-aware output: GitHub Actions workflow commands, step summary, outputs."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path


def on_github() -> bool:
    return os.environ.get("GITHUB_ACTIONS") == "true"


def on_ci() -> bool:
    return bool(os.environ.get("CI")) or on_github()


def _escape_data(s: str) -> str:
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_prop(s: str) -> str:
    return _escape_data(s).replace(":", "%3A").replace(",", "%2C")


def annotation(
    level: str, message: str, file: str | None = None, line: int | None = None, title: str | None = None
) -> str:
    """`::error file=..,line=..,title=..::message` (level: error, warning, notice)."""
    props = []
    if file:
        props.append(f"file={_escape_prop(file)}")
    if line:
        props.append(f"line={line}")
    if title:
        props.append(f"title={_escape_prop(title)}")
    return f"::{level} {','.join(props)}::{_escape_data(message)}" if props else f"::{level}::{_escape_data(message)}"


@contextlib.contextmanager
def group(title: str, stream=None) -> Iterator[None]:
    """A collapsible `::group::` in GitHub logs; a plain heading elsewhere."""
    stream = stream or sys.stdout
    if on_github():
        print(f"::group::{title}", file=stream, flush=True)
    else:
        print(f"== {title}", file=stream, flush=True)
    try:
        yield
    finally:
        if on_github():
            print("::endgroup::", file=stream, flush=True)


def append_step_summary(markdown: str) -> bool:
    """Append to $GITHUB_STEP_SUMMARY when set; returns whether it was written."""
    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if not path:
        return False
    with open(path, "a", encoding="utf-8") as f:
        f.write(markdown.rstrip("\n") + "\n")
    return True


def set_outputs(**values: str) -> bool:
    """Write `name=value` lines to $GITHUB_OUTPUT when set."""
    path = os.environ.get("GITHUB_OUTPUT")
    if not path:
        return False
    with open(Path(path), "a", encoding="utf-8") as f:
        for k, v in values.items():
            if "\n" in v:
                f.write(f"{k}<<__TVMTUNE_EOF__\n{v}\n__TVMTUNE_EOF__\n")
            else:
                f.write(f"{k}={v}\n")
    return True


def md_escape(text: str) -> str:
    """Text safe inside a Markdown table cell (step summaries)."""
    return text.replace("|", "\\|").replace("\n", " ")
