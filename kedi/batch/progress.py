"""The batch's progress: a rich bar on a terminal, plain periodic lines otherwise."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import IO, Any

from kedi.batch.limits import LimiterState

PLAIN_INTERVAL = 10.0
"""Seconds between plain progress lines (the last line always prints)."""


@dataclass(slots=True)
class Counts:
    """What a run has done so far."""

    total: int | None
    skipped: int = 0
    """Rows finished by an earlier run of the job."""
    ran: int = 0
    failed: int = 0
    tokens: int = 0
    started: float = 0.0

    def rate(self) -> float:
        elapsed = time.monotonic() - self.started
        return self.ran / elapsed if elapsed > 0 else 0.0

    def eta(self) -> float | None:
        rate = self.rate()
        if self.total is None or rate <= 0:
            return None
        return max(0, self.total - self.skipped - self.ran) / rate


def describe(counts: Counts, limits: LimiterState | None) -> str:
    """One line: rows, failures, rate, ETA, tokens and the limits' state."""
    total = "?" if counts.total is None else str(counts.total)
    eta = counts.eta()
    parts = [
        f"{counts.skipped + counts.ran}/{total} rows",
        f"{counts.failed} failed",
        f"{counts.rate():.1f} rows/s",
        f"ETA {_duration(eta)}" if eta is not None else "ETA ?",
        f"{counts.tokens} tokens",
    ]
    if counts.skipped:
        parts.insert(1, f"{counts.skipped} resumed")
    if limits is not None:
        parts.append(f"concurrency {limits.concurrency}")
        if limits.throttled:
            parts.append(f"{limits.throttled} throttled (429)")
        if limits.paused_for > 0:
            parts.append(f"paused {limits.paused_for:.1f}s")
    return ", ".join(parts)


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class Progress:
    """Shows `Counts` as they change; `rich` on a terminal, else a line every `interval` seconds."""

    def __init__(
        self,
        counts: Counts,
        *,
        stream: IO[str] | None = None,
        interval: float = PLAIN_INTERVAL,
        quiet: bool = False,
    ) -> None:
        self.counts = counts
        self._stream = stream or sys.stderr
        self._interval = interval
        self._quiet = quiet
        self._last = 0.0
        self._live: Any = None
        self._task: Any = None
        if not quiet and self._stream.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, TextColumn
            from rich.progress import Progress as RichProgress

            self._live = RichProgress(
                BarColumn(),
                TextColumn("{task.description}"),
                console=Console(file=self._stream),
                transient=False,
            )
            self._task = self._live.add_task("", total=counts.total)
            self._live.start()

    def update(self, limits: LimiterState | None) -> None:
        """Refresh the display (plain lines only when `interval` has passed)."""
        if self._quiet:
            return
        if self._live is not None:
            self._live.update(
                self._task,
                completed=self.counts.skipped + self.counts.ran,
                description=describe(self.counts, limits),
            )
            return
        now = time.monotonic()
        if now - self._last >= self._interval:
            self._last = now
            print(describe(self.counts, limits), file=self._stream, flush=True)

    def close(self, limits: LimiterState | None) -> None:
        """Show the final figures."""
        if self._live is not None:
            self.update(limits)
            self._live.stop()
        elif not self._quiet:
            print(describe(self.counts, limits), file=self._stream, flush=True)
