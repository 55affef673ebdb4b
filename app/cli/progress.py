"""Load and import progress on a terminal: one line that updates in place, nothing when
stderr is not a terminal (a script or a log file wants no progress lines). No Qt."""

import sys
import time
from collections.abc import Callable
from typing import TextIO

from engine.types import LoadProgress

MIN_INTERVAL_S = 0.1  # a terminal line redrawn faster than this only flickers


class TerminalProgress:
    """A progress callback: `progress=TerminalProgress()`; call `.finish()` when it is over."""

    def __init__(self, stream: TextIO | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock
        self.live = self.stream.isatty()
        self._shown = ""
        self._stage = ""
        self._last = 0.0

    def __call__(self, p: LoadProgress) -> None:
        if not self.live:
            return
        percent = f" {min(100, int(100 * p.done / p.total))}%" if p.total else "…"
        text = f"{p.stage}{percent}"
        now = self.clock()
        too_soon = p.stage == self._stage and now - self._last < MIN_INTERVAL_S and p.done < p.total
        if text == self._shown or too_soon:
            return
        self._shown, self._stage, self._last = text, p.stage, now
        print(f"\r\033[K{text}", end="", file=self.stream, flush=True)

    def finish(self) -> None:
        """Clear the line, so what follows starts on a clean one."""
        if self.live and self._shown:
            print("\r\033[K", end="", file=self.stream, flush=True)
            self._shown = ""
