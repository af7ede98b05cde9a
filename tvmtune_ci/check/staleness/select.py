"""The CLI's choice of entries: `--as-of` dates, operators and targets by name."""

from __future__ import annotations

import datetime
import difflib
from collections.abc import Iterable, Sequence

from ...core.configschema import Config
from ...core.errors import UsageError
from ...core.template import discover_templates


def parse_date(text: str, option: str = "--as-of") -> datetime.date:
    """YYYY-MM-DD, or UsageError (exit 2) saying how to write it."""
    try:
        return datetime.date.fromisoformat(text)
    except ValueError:
        raise UsageError(
            f"{option} {text!r} is not a date; write it as YYYY-MM-DD, "
            f"e.g. {option} {datetime.date.today().isoformat()}"
        ) from None


def select_entries(
    config: Config, operators: Sequence[str] | None, targets: Sequence[str] | None
) -> tuple[set[str] | None, set[str] | None]:
    """The operators and targets a command asked for (None: all), each checked against
    the templates and the configured targets: UsageError (exit 2) naming an unknown
    one and the closest known name."""
    known_ops = [p.stem for p in discover_templates(config.operators_path.resolve())]
    return (_select(operators, known_ops, "operator"), _select(targets, [t.name for t in config.targets], "target"))


def _select(wanted: Sequence[str] | None, known: Iterable[str], what: str) -> set[str] | None:
    if wanted is None:
        return None
    known = list(known)
    for name in wanted:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(known) or '(none)'}"
            raise UsageError(f"unknown {what} {name!r}; {hint}")
    return set(wanted)
