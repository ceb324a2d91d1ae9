"""Results ingestion: test attempts into the database, in bulk and exactly once.

Attempts come from the executor's progress logs or from JUnit XML files. A
corrupt or truncated file is refused whole (ReportError naming the file and
where it broke): a shard is never half-ingested.
"""

import json
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from runs.executor import TestRecord
from runs.models import Shard, TestResult

BATCH = 2000


class ReportError(Exception):
    """A report file that cannot be read; the shard fails as infrastructure."""


COLUMNS = (
    "shard_id", "run_id", "attempt", "node_id", "file_path", "class_name", "test_name",
    "op", "dtype", "module", "mode", "outcome", "duration", "message", "markers", "recorded_at",
)  # fmt: skip


def _properties(record: TestRecord) -> dict[str, str]:
    return {str(pair[0]): str(pair[1]) for pair in record.properties if len(pair) == 2}


def values(shard: Shard, record: TestRecord, now: datetime) -> tuple:
    """One attempt as a row (in COLUMNS order), with its generic test, op, dtype, module."""
    props = _properties(record)
    file_path, _, rest = record.node_id.partition("::")
    generic = props.get("crcr_test", "").split("::")
    class_name = generic[1] if len(generic) == 3 else rest.rpartition("::")[0]
    test_name = generic[-1] if len(generic) == 3 else rest.rpartition("::")[2]
    return (
        shard.pk, shard.run_id, record.attempt, record.node_id, file_path, class_name,
        test_name, props.get("op", ""), props.get("dtype", ""), props.get("module", ""),
        props.get("mode", ""), record.outcome, record.duration, record.message[-8000:],
        record.markers, now,
    )  # fmt: skip


def save(shard: Shard, records: Iterable[TestRecord]) -> int:
    """Store attempts in bulk; one already stored (shard, node id, attempt) is kept as is."""
    now = timezone.now()
    rows = [values(shard, record, now) for record in records]
    if connection.vendor == "postgresql":
        return _copy(shard, rows)
    objects = [TestResult(**dict(zip(COLUMNS, row, strict=True))) for row in rows]
    stored = 0
    for start in range(0, len(objects), BATCH):
        batch = objects[start : start + BATCH]
        stored += len(TestResult.objects.bulk_create(batch, ignore_conflicts=True))
    return stored


def _copy(shard: Shard, rows: list[tuple]) -> int:
    """PostgreSQL COPY: straight into the table for a shard with no results yet (the
    usual case); otherwise through a scratch table, inserting only what is new."""
    table, columns = TestResult._meta.db_table, ", ".join(COLUMNS)
    with transaction.atomic(), connection.cursor() as cursor:
        # Results are reproducible from the shard: should the server crash in the
        # instant after this commit, the shard stays unfinished and is re-run, so
        # the commit need not wait for the WAL flush.
        cursor.execute("SET LOCAL synchronous_commit TO OFF")
        if not TestResult.objects.filter(shard=shard).exists():
            try:
                # A savepoint: a concurrent ingestion of the same shard makes the
                # COPY hit the unique constraint, and the slower path takes over.
                with transaction.atomic():
                    _copy_rows(cursor, table, rows)
                return len(rows)
            except IntegrityError:
                pass
        cursor.execute(
            f"CREATE TEMP TABLE crcr_incoming ON COMMIT DROP AS "
            f"SELECT {columns} FROM {table} WITH NO DATA"
        )
        _copy_rows(cursor, "crcr_incoming", rows)
        cursor.execute(
            f"INSERT INTO {table} ({columns}) SELECT {columns} FROM crcr_incoming "
            "ON CONFLICT DO NOTHING"
        )
        return cursor.rowcount


# COPY's text format: a tab between fields, a newline between rows, and these escaped.
_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def _copy_rows(cursor: Any, table: str, rows: list[tuple]) -> None:
    """Stream rows in COPY text format, a megabyte at a time."""
    escape, dumps = _COPY_ESCAPES, json.dumps
    with cursor.cursor.copy(f"COPY {table} ({', '.join(COLUMNS)}) FROM STDIN") as copy:
        chunk: list[str] = []
        size = 0
        for (
            shard,
            run,
            attempt,
            node,
            path,
            cls,
            test,
            op,
            dtype,
            module,
            mode,
            outcome,
            *rest,
        ) in rows:
            duration, message, markers, stamp = rest
            line = (
                f"{shard}\t{run}\t{attempt}\t{node.translate(escape)}\t"
                f"{path.translate(escape)}\t{cls.translate(escape)}\t{test.translate(escape)}\t"
                f"{op.translate(escape)}\t{dtype.translate(escape)}\t{module.translate(escape)}\t"
                f"{mode.translate(escape)}\t{outcome}\t{duration!r}\t{message.translate(escape)}\t"
                f"{dumps(markers).translate(escape)}\t{stamp.isoformat()}\n"
            )
            chunk.append(line)
            size += len(line)
            if size > 1 << 20:
                copy.write("".join(chunk))
                chunk, size = [], 0
        copy.write("".join(chunk))


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
    return save(shard, records)
