"""Parses the command line and dispatches to `commands/<verb>.py`; nothing else.

Each command module exposes `register(parser)` (its options) and
`run(args) -> int`. Command modules never import TVM at module level: `check`,
`status` and `matrix` must run where TVM is not installed.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback
import warnings
from collections.abc import Sequence

from . import __version__
from .core.errors import TvmtuneError

# verb -> (module, one-line help). Modules are imported only to build the parser.
COMMANDS: dict[str, tuple[str, str]] = {
    "check": ("check", "exit 1 when any committed log is stale (no TVM needed)"),
    "status": ("status", "table of every (operator, target): state, age, trials, best"),
    "retune": ("retune", "re-tune stale (or all) entries and write fresh logs"),
    "readme": ("readme", "regenerate the README of a log folder from its manifest and log"),
    "matrix": ("matrix", "print the stale entries as a GitHub Actions matrix"),
    "devices": ("devices", "show an RPC tracker's device queue"),
    "merge": ("merge", "merge logs measured on several devices of one target"),
    "remeasure": ("remeasure", "re-measure each committed best on its runner and report drift"),
    "adopt": ("adopt", "keep the logs of a renamed template: move them to its new name, no re-tune"),
    "models": ("models", "list each model's Relax calls and write which template covers each ([tune])"),
    "profile": (
        "profile",
        "build each model with the committed logs, time it per call here, write its shares and README ([tune])",
    ),
}

CRASH_EXIT = 70  # EX_SOFTWARE: a bug in tvmtune-ci, not in the user's input


def _available(only: str | None = None) -> dict[str, object]:
    mods: dict[str, object] = {}
    for verb, (mod, _) in COMMANDS.items():
        if only is not None and verb != only:
            continue
        try:
            mods[verb] = importlib.import_module(f"tvmtune_ci.commands.{mod}")
        except ModuleNotFoundError as e:
            if e.name != f"tvmtune_ci.commands.{mod}":
                raise
    return mods


def build_parser(only: str | None = None) -> tuple[argparse.ArgumentParser, dict[str, object]]:
    """The parser of every command, or with `only` (the verb being run) the options of
    that one alone: the other command modules are not imported (the PR check's `check`
    pays for its own imports only). Every verb is still listed in the help."""
    parser = argparse.ArgumentParser(
        prog="tvmtune-ci", description="Keep the tuning logs of TVM operator templates true."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    mods = _available(only)
    for verb in COMMANDS:
        if verb not in mods and only is None:
            continue  # a command whose module is missing from this install
        p = sub.add_parser(verb, help=COMMANDS[verb][1], description=COMMANDS[verb][1])
        if verb in mods:
            p.add_argument(
                "--config",
                metavar="PATH",
                default=None,
                help="tvmtune.yaml to use (default: the nearest one above the current folder)",
            )
            mods[verb].register(p)  # type: ignore[attr-defined]
    return parser, mods


def _format_warning(message, category, filename, lineno, line=None) -> str:  # noqa: ANN001
    return f"warning: {message}\n"


def main(argv: Sequence[str] | None = None) -> int:
    warnings.formatwarning = _format_warning
    argv = list(sys.argv[1:] if argv is None else argv)
    verb = argv[0] if argv and argv[0] in COMMANDS else None
    parser, mods = build_parser(verb)
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    try:
        return int(mods[args.command].run(args))  # type: ignore[attr-defined]
    except TvmtuneError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception:
        traceback.print_exc()
        print(
            f"tvmtune-ci {__version__} crashed; this is a bug in tvmtune-ci, please report it with the traceback above.",
            file=sys.stderr,
        )
        return CRASH_EXIT


if __name__ == "__main__":
    sys.exit(main())
