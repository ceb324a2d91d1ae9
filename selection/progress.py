"""Progress of long stages: a bar on the command line, a live status row for the page.

A progress callback is `callback(stage, done, total)`. `Bar` draws on a
terminal stream, `RunStatus` writes the `SelectionRun` row the page polls (at
most once a second), and `both()` feeds several.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from selection.models import SelectionRun

Progress = Callable[[str, int, int], None]
WIDTH = 30


class Bar:
    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.stage = ""
        self.interactive = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.last = 0.0
        self.shown: tuple[str, int] = ("", -1)

    def __call__(self, stage: str, done: int, total: int) -> None:
        if stage != self.stage:
            if self.stage and self.interactive:
                self.stream.write("\n")  # keep the finished stage's bar on screen
            self.stage = stage
            self.last = 0.0
        now = time.monotonic()
        finished = total and done >= total
        if not self.interactive and (
            (stage, done) == self.shown or (not finished and now - self.last < 5)
        ):
            return  # in logs, a line every few seconds, and only when it moved
        self.last, self.shown = now, (stage, done)
        filled = int(WIDTH * done / total) if total else 0
        bar = "#" * filled + "." * (WIDTH - filled)
        count = f"{done}/{total}" if total else ""
        end = "\r" if self.interactive else "\n"
        self.stream.write(f"[{bar}] {count:>11} {stage}{end}")
        self.stream.flush()

    def close(self) -> None:
        if self.stage and self.interactive:
            self.stream.write("\n")


class RunStatus:
    def __init__(self, run: SelectionRun) -> None:
        self.run = run
        self.last = 0.0
        self.stage = ""

    def __call__(self, stage: str, done: int, total: int) -> None:
        now = time.monotonic()
        if stage == self.stage and now - self.last < 1.0 and done < total:
            return
        self.stage, self.last = stage, now
        self.run.report(stage, done, total)


def both(*callbacks: Progress | None) -> Progress:
    active = [c for c in callbacks if c is not None]

    def report(stage: str, done: int, total: int) -> None:
        for callback in active:
            callback(stage, done, total)

    return report
