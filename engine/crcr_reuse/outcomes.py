"""Tests' outcomes as crcr keeps them, read from the progress log (`progress_log.py`).

Pure Python: no Django, no pytest. crcr's shard executor (`runs/crash_pinning.py`)
and the stand-alone supervisor (`supervisor.py`) both read a process's progress
log here, so "the test that started and never finished is the one that crashed"
is decided in one place. The log is JSON lines: `start` and `finish` per test,
in a resumed run `collected` (the ids a process set out to run), and `poisoned` when
the device's health probe failed and stopped the process (`health_probe.py`).
"""

from __future__ import annotations

import json
import re
import signal
from dataclasses import dataclass, field
from pathlib import Path

from .idlist import normalize_class

FAILING = ("failed", "error")
# pytest fails a strict xfail that passed, with this at the head of its message.
STRICT_XPASS = "[XPASS(strict)]"


class ReportError(Exception):
    """A report file that cannot be read; the shard fails as infrastructure."""


@dataclass
class TestRecord:
    __test__ = False  # not a pytest test class

    node_id: str
    outcome: str
    duration: float = 0.0
    message: str = ""
    markers: list[str] = field(default_factory=list)
    properties: list[list] = field(default_factory=list)
    attempt: int = 1


def canonical(node_id: str) -> str:
    """A node id with the backend's class suffix in one spelling (torch flips it)."""
    parts = node_id.split("::")
    if len(parts) == 3:
        parts[1] = normalize_class(parts[1])
    return "::".join(parts)


def junit_address(node_id: str) -> tuple[str, str]:
    """The (classname, name) pytest's junitxml writes for a node id."""
    path, bracket, params = node_id.partition("[")
    names = path.split("::")
    names[0] = re.sub(r"\.py$", "", names[0].replace("/", "."))
    names[-1] += bracket + params
    return ".".join(names[:-1]), names[-1]


def settled(outcome: str, message: str) -> str:
    """The test's outcome as crcr keeps it. A strict xfail that passed fails pytest's run
    (so a plain CI job notices), but the test itself passed: crcr stores an unexpected
    pass, which is never a regression and becomes a promotion proposal (its message,
    kept, still says strict)."""
    if outcome == "failed" and message.startswith(STRICT_XPASS):
        return "xpassed"
    return outcome


def death(exit_code: int | None) -> str:
    """How a test process ended mid-test, from its exit status (negative: a signal)."""
    if exit_code is not None and exit_code < 0:
        name = signal.Signals(-exit_code).name
        return f"the test process was killed by signal {name} ({-exit_code})"
    return f"the test process exited with status {exit_code} mid-test"


@dataclass(frozen=True)
class Poisoning:
    """The device's health probe failed: which probe, after which test (None: before the
    first), why, and the tests run since its last healthy answer (canonical ids)."""

    probe: str
    after: str | None
    reason: str
    suspects: tuple[str, ...]

    def describe(self) -> str:
        where = f"after {self.after}" if self.after else "before the first test"
        return f"device poisoned: health probe {self.probe} failed {where}: {self.reason}"


@dataclass
class Progress:
    """What a progress log says, by canonical id."""

    records: dict[str, TestRecord] = field(default_factory=dict)  # the worst phase wins
    started: list[str] = field(default_factory=list)  # in the order tests started
    collected: list[str] = field(default_factory=list)  # the latest resumed process's
    spelled: dict[str, str] = field(default_factory=dict)  # the id as pytest spelled it
    poisoned: Poisoning | None = None

    def unfinished(self) -> str | None:
        """The last test that started without an outcome: the crashing or hanging one."""
        for node_id in reversed(self.started):
            if node_id not in self.records:
                return node_id
        return None

    def remaining(self) -> list[str]:
        """What the latest resumed process collected and has no outcome yet."""
        return [node_id for node_id in self.collected if node_id not in self.records]


def read_progress(path: Path, *, ended: bool) -> Progress:
    """The progress log at `path` (none yet: empty). `ended`: the process exited by
    itself, so every line is whole; else a last line cut short is left out."""
    progress = Progress()
    if not path.exists():
        return progress
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = text.splitlines()
    for number, line in enumerate(lines, 1):
        try:
            entry = json.loads(line)
            _add(progress, entry)
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError):
            if number == len(lines) and not ended and not text.endswith("\n"):
                break  # a killed process's last line, cut short
            raise ReportError(f"{path.name}: line {number} is not a progress entry") from None
    return progress


def _add(progress: Progress, entry: dict) -> None:
    event = entry.get("event")
    if event == "collected":
        progress.collected = [canonical(node_id) for node_id in entry["node_ids"]]
        return
    if event == "poisoned":
        after = entry["after"]
        progress.poisoned = Poisoning(
            str(entry["probe"]), canonical(after) if after else None, str(entry["reason"]),
            tuple(canonical(node_id) for node_id in entry["suspects"]),
        )  # fmt: skip
        return
    node_id = canonical(entry["node_id"])
    progress.spelled.setdefault(node_id, entry["node_id"])
    if event == "start":
        progress.started.append(node_id)
        return
    record = TestRecord(
        node_id=node_id,
        outcome=settled(entry["outcome"], entry.get("message", "")),
        duration=entry.get("duration", 0.0),
        message=entry.get("message", ""),
        markers=entry.get("markers", []),
        properties=entry.get("properties", []),
    )
    previous = progress.records.get(node_id)
    if previous is None or record.outcome in FAILING:
        if previous is not None:
            record.duration += previous.duration
        progress.records[node_id] = record


def record_crash(path: Path, node_id: str, message: str) -> None:
    """Append the outcome `crashed` of a test whose process died, so a resumed process
    deselects it like any finished test. A last line the dead process left cut short
    is dropped first (appending to it would corrupt both)."""
    text = path.read_bytes() if path.exists() else b""
    if text and not text.endswith(b"\n"):
        path.write_bytes(text[: text.rfind(b"\n") + 1])
    entry = {"node_id": node_id, "event": "finish", "outcome": "crashed", "message": message}
    with path.open("a", encoding="utf-8") as stream:
        stream.write(json.dumps(entry) + "\n")
