"""`tvmtune-ci merge`: one log from logs measured on several devices of one target."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..core.errors import UsageError
from ..core.fsutil import atomic_write_text
from ..publish.merge import merge_logs, render


def register(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "logs", nargs="+", metavar="LOG", type=Path, help="tuning logs (tvmtune-ci format 1) of one operator and target"
    )
    p.add_argument("-o", "--output", required=True, type=Path, metavar="PATH", help="where to write the merged log")


def run(args: argparse.Namespace) -> int:
    result = merge_logs(args.logs)
    try:
        atomic_write_text(args.output, render(result))
    except OSError as e:  # a folder, a read-only place, ...
        raise UsageError(
            f"{args.output}: cannot write the merged log ({e.strerror}); pass a file path in a writable folder with -o"
        ) from None
    print(
        f"merged {len(args.logs)} logs of {result.log['operator']}: {result.records_in} records -> "
        f"{result.records_out} configurations ({result.replaced} measured more than once, the faster kept) -> {args.output}"
    )
    return 0
