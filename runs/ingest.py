"""Results ingestion: test attempts into the database, in bulk and exactly once.

Attempts come from the executor's progress logs or from JUnit XML files. A
corrupt or truncated file is refused whole (ReportError naming the file and
where it broke): a shard is never half-ingested.
"""

import xml.etree.ElementTree as ElementTree
from collections.abc import Iterable, Iterator
from pathlib import Path

from django.db import transaction

from runs.executor import TestRecord
from runs.models import Shard, TestResult

BATCH = 2000


class ReportError(Exception):
    """A report file that cannot be read; the shard fails as infrastructure."""


def _properties(record: TestRecord) -> dict[str, str]:
    return {str(pair[0]): str(pair[1]) for pair in record.properties if len(pair) == 2}


def to_row(shard: Shard, record: TestRecord) -> TestResult:
    """One attempt as a row, with its generic test, op, dtype and module when known."""
    props = _properties(record)
    file_path, _, rest = record.node_id.partition("::")
    generic = props.get("crcr_test", "").split("::")
    class_name = generic[1] if len(generic) == 3 else rest.rpartition("::")[0]
    return TestResult(
        shard=shard,
        run_id=shard.run_id,
        attempt=record.attempt,
        node_id=record.node_id,
        file_path=file_path,
        class_name=class_name,
        test_name=generic[-1] if len(generic) == 3 else rest.rpartition("::")[2],
        op=props.get("op", ""),
        dtype=props.get("dtype", ""),
        module=props.get("module", ""),
        mode=props.get("mode", ""),
        outcome=record.outcome,
        duration=record.duration,
        message=record.message[-8000:],
        markers=record.markers,
    )


def save(rows: Iterable[TestResult]) -> int:
    """Bulk insert; a row already stored (same shard, node id, attempt) is kept as is."""
    count = 0
    batch: list[TestResult] = []
    for row in rows:
        batch.append(row)
        if len(batch) == BATCH:
            count += len(TestResult.objects.bulk_create(batch, ignore_conflicts=True))
            batch = []
    if batch:
        count += len(TestResult.objects.bulk_create(batch, ignore_conflicts=True))
    return count


def parse_junit(path: Path) -> Iterator[TestRecord]:
    """Test cases of a JUnit XML file, streamed; ReportError on a corrupt file."""
    try:
        for _, element in ElementTree.iterparse(path, events=("end",)):
            if element.tag == "testcase":
                yield _case(element)
                element.clear()
    except ElementTree.ParseError as error:
        line, column = error.position
        raise ReportError(
            f"{path.name}: not well-formed XML at line {line}, column {column}"
        ) from None


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
        node_id=node_id,
        outcome=outcome,
        duration=float(case.get("time") or 0),
        message=message.strip(),
        properties=props,
    )


def ingest_junit(shard: Shard, path: Path, attempt: int = 1) -> int:
    """Parse the whole file first, then store it in one transaction."""
    records = list(parse_junit(path))
    for record in records:
        record.attempt = attempt
    with transaction.atomic():
        return save(to_row(shard, record) for record in records)
