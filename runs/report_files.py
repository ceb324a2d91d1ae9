"""Reading a pytest process's JUnit XML (its progress log: `crcr_reuse.outcomes`).

Pure Python (no Django). A report that is corrupt or truncated raises
ReportError naming the file and where it broke; the caller fails the shard as
infrastructure, so a shard is never half-ingested.
"""

import xml.etree.ElementTree as ElementTree
from collections.abc import Iterable, Iterator
from pathlib import Path

from crcr_reuse.idlist import normalize_class
from crcr_reuse.outcomes import ReportError, TestRecord, canonical, junit_address, settled


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


def check_junit(path: Path, records: Iterable[TestRecord]) -> None:
    """The JUnit XML of a process that ended by itself must be whole and hold
    every test the progress log reports finished."""
    if not path.exists():
        raise ReportError(f"{path.name}: missing although pytest ended normally")
    cases = {
        (normalize_class(case.get("classname", "")), case.get("name", ""))
        for case in _testcases(path)
    }
    missing = [r.node_id for r in records if junit_address(canonical(r.node_id)) not in cases]
    if missing:
        raise ReportError(
            f"{path.name}: {len(missing)} finished test(s) missing, the first {missing[0]}"
        )
