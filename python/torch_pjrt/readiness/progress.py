"""The console progress bar of a readiness run (on stderr).

On a terminal one line is redrawn in place; elsewhere (a CI log, a pipe) a
line is printed each time a part enters a new phase, so logs stay short.
"""

from __future__ import annotations

import sys
import time
from typing import Optional, TextIO


def _clock(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s"


class Progress:
    def __init__(self, parts: int, budget_s: Optional[float], stream: TextIO = sys.stderr,
                 width: int = 24) -> None:
        self.parts = parts
        self.budget_s = budget_s
        self.stream = stream
        self.width = width
        self.start = time.time()
        self.tty = hasattr(stream, "isatty") and stream.isatty()
        self._last = ""

    def update(self, index: int, name: str, phase: str, fraction: float) -> None:
        """Part `index` (0-based) is in `phase`, `fraction` of the way through."""
        done = (index + max(0.0, min(1.0, fraction))) / max(self.parts, 1)
        filled = int(round(done * self.width))
        bar = "#" * filled + "." * (self.width - filled)
        elapsed = time.time() - self.start
        budget = f" / {_clock(self.budget_s)} budget" if self.budget_s else ""
        line = f"[{bar}] {done * 100:3.0f}%  {name}: {phase}  {_clock(elapsed)}{budget}"
        if self.tty:
            self.stream.write("\r" + line.ljust(len(self._last)))
            self.stream.flush()
            self._last = line
        elif f"{name}: {phase}" not in self._last:
            self.stream.write(line + "\n")
            self.stream.flush()
            self._last = line

    def message(self, text: str) -> None:
        if self.tty and self._last:
            self.stream.write("\n")
            self._last = ""
        self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty and self._last:
            self.stream.write("\n")
            self.stream.flush()
