"""Results ingestion: test attempts into the database, in bulk and exactly once.

Attempts come from the executor (read from its progress logs and checked
against the JUnit XML) or straight from a JUnit XML file. A corrupt or
truncated file raises ReportError before anything is committed: a shard is
never half-ingested.
"""

import json
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from crcr_reuse.outcomes import TestRecord
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from crcr_site.lib.redaction import known_secrets, redact
from runs.models import Shard, TestResult
from runs.report_files import parse_junit

BATCH = 2000


COLUMNS = (
    "shard_id", "run_id", "attempt", "node_id", "file_path", "class_name", "test_name",
    "op", "dtype", "module", "mode", "outcome", "duration", "message", "markers", "recorded_at",
)  # fmt: skip


def _properties(record: TestRecord) -> dict[str, str]:
    return {str(pair[0]): str(pair[1]) for pair in record.properties if len(pair) == 2}


def values(shard: Shard, record: TestRecord, now: datetime, secrets: list[str]) -> tuple:
    """One attempt as a row (in COLUMNS order), with its generic test, op, dtype, module;
    its message without the credentials it shows (`secrets`: this worker's own)."""
    props = _properties(record)
    file_path, _, rest = record.node_id.partition("::")
    generic = props.get("crcr_test", "").split("::")
    class_name = generic[1] if len(generic) == 3 else rest.rpartition("::")[0]
    test_name = generic[-1] if len(generic) == 3 else rest.rpartition("::")[2]
    return (
        shard.pk, shard.run_id, record.attempt, record.node_id, file_path, class_name,
        test_name, props.get("op", ""), props.get("dtype", ""), props.get("module", ""),
        props.get("mode", ""), record.outcome, record.duration,
        redact(record.message[-8000:], secrets),
        record.markers, now,
    )  # fmt: skip


def save(shard: Shard, records: Iterable[TestRecord]) -> int:
    """Store attempts in bulk; one already stored (shard, node id, attempt) is kept as is."""
    kept = list(records)
    return _store(shard, lambda: kept)


def ingest_junit(shard: Shard, path: Path, attempt: int = 1) -> int:
    """Stream a JUnit XML file into the database as it is parsed, in one transaction."""

    def records() -> Iterator[TestRecord]:
        for record in parse_junit(path):
            record.attempt = attempt
            yield record

    return _store(shard, records)


def _store(shard: Shard, records: Callable[[], Iterable[TestRecord]]) -> int:
    now, secrets = timezone.now(), known_secrets()

    def rows() -> Iterator[tuple]:
        return (values(shard, record, now, secrets) for record in records())

    if connection.vendor == "postgresql":
        return _copy(shard, rows)
    objects = [TestResult(**dict(zip(COLUMNS, row, strict=True))) for row in rows()]
    stored = 0
    for start in range(0, len(objects), BATCH):
        batch = objects[start : start + BATCH]
        stored += len(TestResult.objects.bulk_create(batch, ignore_conflicts=True))
    return stored


def _copy(shard: Shard, rows: Callable[[], Iterator[tuple]]) -> int:
    """PostgreSQL COPY: straight into the table for a shard with no results yet (the
    usual case); otherwise through a scratch table, inserting only what is new. The
    rows stream as they are made, so the server inserts while the client parses."""
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
                    return _copy_rows(cursor, table, rows())
            except IntegrityError:
                pass
        cursor.execute(
            f"CREATE TEMP TABLE crcr_incoming ON COMMIT DROP AS "
            f"SELECT {columns} FROM {table} WITH NO DATA"
        )
        _copy_rows(cursor, "crcr_incoming", rows())
        cursor.execute(
            f"INSERT INTO {table} ({columns}) SELECT {columns} FROM crcr_incoming "
            "ON CONFLICT DO NOTHING"
        )
        return cursor.rowcount


MARKERS = COLUMNS.index("markers")


def _copy_rows(cursor: Any, table: str, rows: Iterator[tuple]) -> int:
    """COPY rows in, adapted by psycopg's C row writer; the markers go as JSON text."""
    count = 0
    with cursor.cursor.copy(f"COPY {table} ({', '.join(COLUMNS)}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row((*row[:MARKERS], json.dumps(row[MARKERS]), *row[MARKERS + 1 :]))
            count += 1
    return count
