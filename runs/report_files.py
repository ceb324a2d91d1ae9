"""Reading a pytest process's reports: the progress log (JSON lines) and JUnit XML.

Pure Python (no Django). A report that is corrupt or truncated raises
ReportError naming the file and where it broke; the caller fails the shard as
infrastructure, so a shard is never half-ingested. The one tolerated defect is
the last line of a progress log cut short by a killed process.
"""

import json
import re
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from selection.reuse.idlist import normalize_class

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


def settled(outcome: str, message: str) -> str:
    """The test's outcome as crcr keeps it. A strict xfail that passed fails pytest's run
    (so a plain CI job notices), but the test itself passed: crcr stores an unexpected
    pass, which is never a regression and becomes a promotion proposal (its message,
    kept, still says strict)."""
    if outcome == "failed" and message.startswith(STRICT_XPASS):
        return "xpassed"
    return outcome


def read_progress(path: Path, *, ended: bool) -> tuple[dict[str, TestRecord], list[str]]:
    """Finished tests (the worst phase wins) and the order tests started in, by
    canonical id. `ended`: the process exited by itself, so every line is whole."""
    records: dict[str, TestRecord] = {}
    started: list[str] = []
    if not path.exists():
        return records, started
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = text.splitlines()
    for number, line in enumerate(lines, 1):
        try:
            entry = json.loads(line)
            if entry.get("event") == "start":
                started.append(canonical(entry["node_id"]))
                continue
            record = TestRecord(
                node_id=canonical(entry["node_id"]),
                outcome=settled(entry["outcome"], entry.get("message", "")),
                duration=entry.get("duration", 0.0),
                message=entry.get("message", ""),
                markers=entry.get("markers", []),
                properties=entry.get("properties", []),
            )
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError):
            if number == len(lines) and not ended and not text.endswith("\n"):
                break  # a killed process's last line, cut short
            raise ReportError(f"{path.name}: line {number} is not a progress entry") from None
        previous = records.get(record.node_id)
        if previous is None or record.outcome in FAILING:
            if previous is not None:
                record.duration += previous.duration
            records[record.node_id] = record
    return records, started


def parse_junit(path: Path) -> Iterator[TestRecord]:
    """Test cases of a JUnit XML file, streamed; ReportError on a corrupt or truncated file."""
    for case in _testcases(path):
        yield _case(case)


def _testcases(path: Path) -> Iterator[ElementTree.Element]:
    """Each <testcase> element, cleared once the caller is done with it."""
    try:
        for _, element in ElementTree.iterparse(path, events=("end",)):
            if element.tag == "testcase":
                yield element
                element.clear()
    except ElementTree.ParseError as error:
        line, column = error.position
        raise ReportError(
            f"{path.name}: not well-formed XML at line {line}, column {column}"
        ) from None
    except OSError as error:
        raise ReportError(f"{path.name}: cannot be read ({error.strerror})") from None


def _case(case: ElementTree.Element) -> TestRecord:
    classname, name = case.get("classname", ""), case.get("name", "")
    module, _, cls = classname.rpartition(".")
    node_id = f"{module.replace('.', '/')}.py::{cls}::{name}" if module else f"{cls}::{name}"
    outcome, message = "passed", ""
    for child in case:
        if child.tag in ("failure", "error"):
            outcome = "failed" if child.tag == "failure" else "error"
            message = (child.get("message") or "") + "\n" + (child.text or "")
        elif child.tag == "skipped":
            xfail = (child.get("type") or "") == "pytest.xfail"
            outcome, message = ("xfailed" if xfail else "skipped"), child.get("message") or ""
    props = [[prop.get("name", ""), prop.get("value", "")] for prop in case.iter("property")]
    return TestRecord(
        node_id=canonical(node_id),
        outcome=settled(outcome, message.strip()),
        duration=float(case.get("time") or 0),
        message=message.strip(),
        properties=props,
    )


def junit_address(node_id: str) -> tuple[str, str]:
    """The (classname, name) pytest's junitxml writes for a node id."""
    path, bracket, params = node_id.partition("[")
    names = path.split("::")
    names[0] = re.sub(r"\.py$", "", names[0].replace("/", "."))
    names[-1] += bracket + params
    return normalize_class(".".join(names[:-1])), names[-1]


def check_junit(path: Path, records: Iterable[TestRecord]) -> None:
    """The JUnit XML of a process that ended by itself must be whole and hold
    every test the progress log reports finished."""
    if not path.exists():
        raise ReportError(f"{path.name}: missing although pytest ended normally")
    cases = {
        (normalize_class(case.get("classname", "")), case.get("name", ""))
        for case in _testcases(path)
    }
    missing = [r.node_id for r in records if junit_address(r.node_id) not in cases]
    if missing:
        raise ReportError(
            f"{path.name}: {len(missing)} finished test(s) missing, the first {missing[0]}"
        )
