"""One JSON document with everything recorded about a run: the bundle's metadata.json.

The API answers with it and the reproducibility page reads it. Before a run has
its RunRecord (queued, or planned before the hooks ran) the same fields are
read live and `recorded` says so.
"""

import json
from typing import Any

from django.db import connection
from django.db.models import F, Func, QuerySet, TextField, Value
from django.db.models.functions import Cast
from django.utils import timezone

from reproducibility import capture
from reproducibility.models import RunRecord, WorkerEnvironment
from runs.models import Failure, Run, TestResult
from runs.models.results import summary

# Recorded variables the reproduce script does not replay: it sets its own.
HOST_ONLY_VARS = ("TORCH_ROOT", "TMPDIR")


def metadata(run: Run, with_attempts: bool = True) -> dict[str, Any]:
    """The whole document; without attempts and failures for a page that lists its own."""
    run = Run.objects.select_related("backend", "trigger", "config_version").get(pk=run.pk)
    saved = RunRecord.objects.filter(run=run).first()
    record = (
        {field: getattr(saved, field) for field in capture_fields()}
        if saved
        else capture.record_fields(run)
    )
    environments = [environment_facts(row) for row in WorkerEnvironment.objects.of_run(run)]
    return {
        "format": capture.FORMAT,
        "generated_at": timezone.now().isoformat(),
        "recorded": saved is not None,
        "run": run_facts(run),
        "trigger": record["trigger"],
        "artifacts": record["artifacts"],
        "config": {
            "number": record["config_number"],
            "sha256": record["config_sha256"],
            "file": "config.yaml",
            "text": record["config_text"],
        },
        "test_tree": record["test_tree"],
        "crcr": record["crcr"],
        "seeds": record["seeds"],
        "command": record["command"],
        "plan": record["plan"],
        "shards": shard_facts(run),
        "environments": environments,
        "reproduce": {"env": replay_env(record, environments)},
        "attempts": attempts(run) if with_attempts else [],
        "failures": failures(run) if with_attempts else [],
    }


def capture_fields() -> tuple[str, ...]:
    return ("trigger", "artifacts", "config_number", "config_sha256", "config_text", "plan",
            "seeds", "command", "test_tree", "crcr")  # fmt: skip


def run_facts(run: Run) -> dict[str, Any]:
    return {
        "uuid": str(run.uuid),
        "url": run.page_url(),
        "job_name": run.job_name,
        "status": run.status,
        "error": run.error,
        "backend": {
            "slug": run.backend.slug,
            "name": run.backend.name,
            "device_module": run.backend.device_module,
        },
        "backend_version": run.backend_version,
        "pytorch_sha": run.pytorch_sha,
        "test_suite_sha": run.test_suite_sha,
        "changed_since_green": run.changed_since_green,
        "created_at": _iso(run.created_at),
        "started_at": _iso(run.started_at),
        "finished_at": _iso(run.finished_at),
        # A finished run stores its counts; a running one is counted.
        "test_results": (
            summary(run.test_summary) if run.test_summary is not None else run.test_counts()
        ),
    }


def shard_facts(run: Run) -> list[dict[str, Any]]:
    return [
        {
            "index": shard.index,
            "status": shard.status,
            "tests": shard.test_count,
            "estimated_seconds": shard.estimated_seconds,
            "actual_seconds": shard.actual_seconds,
            "worker": shard.worker,
            "claims": shard.attempts,
            "exit_code": shard.exit_code,
            "error": shard.error,
        }
        for shard in run.shards.listed().order_by("index")
    ]


def environment_facts(row: WorkerEnvironment) -> dict[str, Any]:
    return {
        "hostname": row.hostname,
        "shard": row.shard.index if row.shard else None,
        "shard_claim": row.shard_attempt,
        "python_version": row.python_version,
        "torch_version": row.torch_version,
        "backend_version": row.backend_version,
        "cuda": row.cuda,
        "os": row.os,
        "cpu_arch": row.cpu_arch,
        "env_vars": row.env_vars,
        "pip_freeze": row.pip_freeze,
        "environment": row.environment,
        "captured_at": row.captured_at.isoformat(),
    }


def replay_env(record: dict[str, Any], environments: list[dict[str, Any]]) -> dict[str, str]:
    """The variables a re-run sets: the run's own plus the first worker's relevant ones.

    Paths inside the run's test tree become ${TORCH_ROOT}, so they follow the tree.
    """
    tree = record["command"].get("env", {}).get("TORCH_ROOT", "")
    env = dict(environments[0]["env_vars"]) if environments else {}
    env.update(record["command"].get("env", {}))
    return {
        name: value.replace(tree, "${TORCH_ROOT}") if tree else value
        for name, value in sorted(env.items())
        if name not in HOST_ONLY_VARS
    }


def reproduction(run: Run) -> dict[str, Any]:
    """What re-running the run's tests takes, as its bundle records it: the pytest command's
    shape (`command`) and the variables a re-run sets (`replay_env`), for a log page."""
    saved = RunRecord.objects.filter(run=run).values_list("command", flat=True).first()
    record = {"command": saved} if saved is not None else capture.record_fields(run)
    first = WorkerEnvironment.objects.of_run(run).first()
    environments = [environment_facts(first)] if first else []
    return {"command": record["command"], "env": replay_env(record, environments)}


ATTEMPT_FIELDS = {"node_id": "node_id", "shard": "shard__index", "attempt": "attempt",
                  "outcome": "outcome", "duration": "duration", "message": "message", "op": "op",
                  "dtype": "dtype", "module": "module", "mode": "mode"}  # fmt: skip


def _attempt_rows(run: Run) -> QuerySet[TestResult]:
    return TestResult.objects.filter(run=run).order_by("shard__index", "node_id", "attempt")


def attempts(run: Run) -> list[dict[str, Any]]:
    rows = _attempt_rows(run).values_list(*ATTEMPT_FIELDS.values())
    return [dict(zip(ATTEMPT_FIELDS, row, strict=True)) for row in rows]


class JSONText(Func):
    """Fields as a JSON object's text, keys in the order given, made by the database."""

    function = "JSON_OBJECT"  # SQLite
    output_field = TextField()

    def __init__(self, fields: dict[str, Any]) -> None:
        pairs = [(Cast(Value(name), TextField()), value) for name, value in fields.items()]
        super().__init__(*[part for pair in pairs for part in pair])

    def as_postgresql(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        # json, not jsonb: it keeps the keys' order and takes half the time to make.
        template = "%(function)s(%(expressions)s)::text"
        return self.as_sql(compiler, connection, "JSON_BUILD_OBJECT", template, **extra)


def attempt_texts(run: Run) -> tuple[list[str], dict[str, str]]:
    """`attempts` as JSON texts made by the database (in order, a text may hold several
    joined by `,\\n    `), and each test's final outcome (for the attestation). As Python
    dicts, then encoded, a run's 100,000 attempts took a second of its bundle's build.
    A shard at a time: no sort of the whole run spills to disk."""
    if connection.vendor == "postgresql":
        return _attempt_texts_postgresql(run)
    texts: list[str] = []
    final: dict[str, str] = {}
    latest: dict[str, int] = {}
    for index, shard_id in run.shards.order_by("index").values_list("index", "pk"):
        fields = {name: Value(index) if name == "shard" else F(field)
                  for name, field in ATTEMPT_FIELDS.items()}  # fmt: skip
        rows = (
            TestResult.objects.filter(run=run, shard_id=shard_id)
            .order_by("node_id", "attempt")
            .values_list(JSONText(fields), "node_id", "attempt", "outcome")
        )
        for text, node_id, attempt, outcome in rows:
            texts.append(text)
            if attempt >= latest.get(node_id, 0):
                final[node_id], latest[node_id] = outcome, attempt
    return texts, final


def _attempt_texts_postgresql(run: Run) -> tuple[list[str], dict[str, str]]:
    """attempt_texts with one row a shard: its attempts' texts already joined, and its
    [node id, outcome] pairs by attempt, so no Python object is made per attempt."""
    column = {field.name: field.column for field in TestResult._meta.concrete_fields}
    pairs = ", ".join(
        "'shard', %s::integer" if name == "shard" else f"'{name}', {column[field]}"
        for name, field in ATTEMPT_FIELDS.items()
    )
    sql = (
        f"SELECT string_agg(json_build_object({pairs})::text, E',\\n    ' "
        "ORDER BY node_id, attempt), json_agg(json_build_array(node_id, outcome) "
        f"ORDER BY attempt)::text FROM {TestResult._meta.db_table} "
        "WHERE run_id = %s AND shard_id = %s"
    )
    texts: list[str] = []
    final: dict[str, str] = {}
    with connection.cursor() as cursor:
        for index, shard_id in run.shards.order_by("index").values_list("index", "pk"):
            cursor.execute(sql, [index, run.pk, shard_id])
            joined, outcomes = cursor.fetchone()
            if joined is not None:
                texts.append(joined)
                final.update(json.loads(outcomes))
    return texts, final


def failures(run: Run) -> list[dict[str, Any]]:
    rows = (
        Failure.objects.filter(run=run)
        .order_by("result__node_id")
        .values_list("result__node_id", "result__attempt", "category", "rule", "op_name",
                     "decisive_line", "verdict", "verdict_reason")
    )  # fmt: skip
    names = ("node_id", "attempt", "category", "rule", "op", "decisive_line", "verdict",
             "verdict_reason")  # fmt: skip
    return [dict(zip(names, row, strict=True)) for row in rows]


def _iso(moment: Any) -> str | None:
    return moment.isoformat() if moment else None
