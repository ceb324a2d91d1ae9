"""The device health probe: between tests, check that the device still computes correctly.

A device can go bad mid-run (a hardware fault, a runtime whose queue stopped executing):
every later test then fails for the device's sake, not its own. The probe is a check
the backend ships, run in the test process:

    python:MODULE:FUNCTION   a callable; None or True: healthy; False or a string (why),
                             or an exception: the device is poisoned
    command:PROGRAM ARGS...  a canary program (no shell); exit status 0: healthy

When it runs (`ProbeWatch`): before the first test, so a device a crashed process left
bad is caught before any test is blamed; after every test that failed or errored (a
numerical mismatch included) or failed as expected; and every `every` tests. When it
fails, the session stops with `POISONED_EXIT` (Ascend's CI stops on the same status):
the tests run since the last healthy probe are suspects and the rest never ran; the
progress log (`progress_log.py`) gets a `poisoned` line naming the probe, the test it
ran after, its reason and the suspects, which crcr's executor reads.
"""

from __future__ import annotations

import importlib
import re
import shlex
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from .progress_log import PLUGIN_NAME as PROGRESS_LOG

# The exit status of a session stopped by a poisoned device (as Ascend's CI uses;
# sysexits' EX_SOFTWARE, which pytest never uses itself).
POISONED_EXIT = 70
ENV_PROBE = "CRCR_REUSE_HEALTH_PROBE"
PROBE_SECONDS = 60.0  # a probe that takes longer is a hung device: poisoned
_CALLABLE = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")


class ProbeError(ValueError):
    """A probe setting that cannot be used; the message says what is wrong."""


class ProbeTimeout(Exception):
    pass


@dataclass(frozen=True)
class HealthProbe:
    spec: str
    kind: str  # "python" or "command"
    target: str
    seconds: float = PROBE_SECONDS

    @classmethod
    def parse(cls, spec: str) -> HealthProbe:
        """`python:module:function` or `command:program args`; anything else is refused."""
        kind, _, target = spec.strip().partition(":")
        target = target.strip()
        if kind == "python" and _CALLABLE.fullmatch(target):
            return cls(spec.strip(), kind, target)
        if kind == "command" and target:
            try:
                words = shlex.split(target)
            except ValueError as error:
                raise ProbeError(f"health probe {spec!r}: {error}") from None
            if words:
                return cls(spec.strip(), kind, target)
        raise ProbeError(
            f"health probe {spec!r}: write python:MODULE:FUNCTION (a callable in the test "
            "process) or command:PROGRAM [ARGS] (a canary program; exit status 0 is healthy)"
        )

    def resolve(self) -> Callable[[], Any] | None:
        """The probe's callable (None for a command); a missing callable or program is
        refused (a setting to fix, not a poisoned device)."""
        if self.kind != "python":
            program = shlex.split(self.target)[0]
            if shutil.which(program) is None:
                raise ProbeError(f"health probe {self.spec!r}: no program {program} here")
            return None
        module, _, name = self.target.partition(":")
        try:
            found = getattr(importlib.import_module(module), name, None)
        except ImportError as error:
            raise ProbeError(f"health probe {self.spec!r}: {error}") from None
        if not callable(found):
            raise ProbeError(f"health probe {self.spec!r}: {module} has no callable {name}")
        return found

    def check(self, function: Callable[[], Any] | None = None) -> str | None:
        """None when the device is healthy, else why it is not (`function`: the resolved
        callable, else it is resolved now)."""
        try:
            if self.kind == "command":
                return self._run_command()
            function = function or self.resolve()
            assert function is not None
            with _alarm(self.seconds):
                verdict = function()
        except ProbeTimeout:
            return f"no answer within {self.seconds:g} s"
        except Exception as error:  # whatever the device raises: it is not healthy
            return f"{type(error).__name__}: {error}"
        if verdict is None or verdict is True:
            return None
        return verdict if isinstance(verdict, str) and verdict else "it returned False"

    def _run_command(self) -> str | None:
        try:
            done = subprocess.run(
                shlex.split(self.target), capture_output=True, text=True, timeout=self.seconds
            )
        except subprocess.TimeoutExpired:
            return f"no answer within {self.seconds:g} s"
        if done.returncode == 0:
            return None
        tail = (done.stdout + done.stderr).strip()[-500:]
        return f"exit status {done.returncode}" + (f": {tail}" if tail else "")


@contextmanager
def _alarm(seconds: float) -> Iterator[None]:
    """Interrupt a Python probe that hangs (main thread only, as pytest runs tests)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise ProbeTimeout

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class ProbeWatch:
    """The plugin object that probes the device between tests and stops a poisoned session."""

    def __init__(self, probe: HealthProbe, every: int) -> None:
        self.probe, self.every = probe, every
        self.function = probe.resolve()  # a missing callable stops the session at its start
        self.started = False
        self.since_probe: list[str] = []  # tests run since the last healthy probe
        self.failed = False  # one of them failed (or failed as expected)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_protocol(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> Generator[None, Any, Any]:
        if not self.started:
            self.started = True
            self._probe(item.config, after=None)
        result = yield
        self.since_probe.append(item.nodeid)
        if self.failed or (self.every and len(self.since_probe) >= self.every):
            self._probe(item.config, after=item.nodeid)
        return result

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed or (report.skipped and hasattr(report, "wasxfail")):
            self.failed = True

    def _probe(self, config: pytest.Config, after: str | None) -> None:
        reason = self.probe.check(self.function)
        if reason is None:
            self.since_probe, self.failed = [], False
            return
        where = f"after {after}" if after else "before the first test"
        log = config.pluginmanager.get_plugin(PROGRESS_LOG)
        if log is not None:
            event = {"event": "poisoned", "probe": self.probe.spec, "after": after,
                     "reason": reason, "suspects": self.since_probe}  # fmt: skip
            log.write(event, durable=True)
        pytest.exit(
            f"crcr reuse: device poisoned: health probe {self.probe.spec} failed {where}: "
            f"{reason}; {len(self.since_probe)} tests since its last healthy answer are "
            "suspect, the rest did not run",
            returncode=POISONED_EXIT,
        )
