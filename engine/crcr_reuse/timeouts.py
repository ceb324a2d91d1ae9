"""A per-test time limit that reports a hung test instead of hanging the run.

Two layers: SIGALRM raises ``TestTimeout`` in the test (this ends hangs in
Python code or interruptible waits, and the test is reported as timed out);
if the test is stuck where the signal cannot reach, faulthandler dumps every
thread's stack and ends the process after a grace period.
"""

from __future__ import annotations

import faulthandler
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .report import TIMEOUT_MARK

GRACE_SECONDS = 10.0


class TestTimeout(Exception):
    __test__ = False  # not a pytest test class


@contextmanager
def time_limit(seconds: float | None, nodeid: str) -> Iterator[None]:
    usable = seconds and seconds > 0 and threading.current_thread() is threading.main_thread()
    if not usable or not hasattr(signal, "setitimer"):
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise TestTimeout(f"{TIMEOUT_MARK} {seconds:g} s: {nodeid}")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, float(seconds))  # type: ignore[arg-type]
    faulthandler.dump_traceback_later(float(seconds) + GRACE_SECONDS, exit=True, file=sys.stderr)  # type: ignore[arg-type]
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        faulthandler.cancel_dump_traceback_later()
        signal.signal(signal.SIGALRM, previous)
