"""Progress of a re-tune: a bar with best-so-far in a terminal, plain lines in CI.

CI logs are not terminals: a redrawn bar becomes thousands of lines there, so on
CI (or when stdout is not a TTY) we print one line per batch at most every
`interval` seconds, plus the last one.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from .ci import on_ci


def _fmt_latency(s: float | None) -> str:
    if s is None:
        return "-"
    return f"{s * 1e3:.3f} ms" if s >= 1e-4 else f"{s * 1e6:.1f} us"


class Progress:
    def __init__(self, label: str, stream: TextIO | None = None, interval: float = 10.0) -> None:
        self.label = label
        self.stream = stream or sys.stdout
        self.tty = self.stream.isatty() and not on_ci()
        self.interval = interval
        self._last = 0.0
        self._start = time.monotonic()
        self._said_resumed = False

    def __call__(self, event: Any) -> None:
        """Accepts the tuner's BatchEvent (duck-typed: trials_done, budget, best_latency_s, best_gflops)."""
        done = int(getattr(event, "trials_done", 0))
        budget = max(int(getattr(event, "budget", 0)) or 1, 1)
        best = getattr(event, "best_latency_s", None)
        gflops = getattr(event, "best_gflops", None)
        failed = getattr(event, "failed", None)
        elapsed = time.monotonic() - self._start
        resumed = int(getattr(event, "resumed", 0) or 0)
        if resumed and not self._said_resumed:
            self._said_resumed = True
            print(
                f"{self.label}: resuming from {resumed} trials measured by an interrupted run",
                file=self.stream,
                flush=True,
            )
        # The search's own figure, labelled as such: the published best is the finals'.
        best_s = f"search best {_fmt_latency(best)}" + (f" ({gflops:.1f} GFLOPS)" if gflops else "")
        fail_s = f", {failed} failed" if failed else ""
        if self.tty:
            width = 28
            filled = int(width * min(done, budget) / budget)
            bar = "#" * filled + "-" * (width - filled)
            self.stream.write(f"\r{self.label} [{bar}] {done}/{budget} {best_s}{fail_s} {elapsed:5.0f}s ")
            self.stream.flush()
            return
        now = time.monotonic()
        if now - self._last >= self.interval or done >= budget:
            self._last = now
            print(
                f"{self.label}: {done}/{budget} trials, {best_s}{fail_s}, {elapsed:.0f}s", file=self.stream, flush=True
            )

    def close(self, message: str = "") -> None:
        if self.tty:
            self.stream.write("\n")
        if message:
            print(f"{self.label}: {message}", file=self.stream, flush=True)
