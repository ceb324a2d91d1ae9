"""One JSON document with everything recorded about a run: the bundle's metadata.json.

The API answers with it and the reproducibility page reads it. Before a run has
its RunRecord (queued, or planned before the hooks ran) the same fields are
read live and `recorded` says so.
"""

from typing import Any

from django.utils import timezone

from reproducibility import capture
from reproducibility.models import RunRecord, WorkerEnvironment
from runs.models import Failure, Run, TestResult

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
        "test_results": run.test_counts(),
    }


def shard_facts(run: Run) -> list[dict[str, Any]]:
    return [
        {
            "index": shard.index,
            "status": shard.status,
            "tests": len(shard.test_ids),
            "estimated_seconds": shard.estimated_seconds,
            "actual_seconds": shard.actual_seconds,
            "worker": shard.worker,
            "claims": shard.attempts,
            "exit_code": shard.exit_code,
            "error": shard.error,
        }
        for shard in run.shards.order_by("index")
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


def attempts(run: Run) -> list[dict[str, Any]]:
    rows = (
        TestResult.objects.filter(run=run)
        .order_by("shard__index", "node_id", "attempt")
        .values_list(
            "node_id",
            "shard__index",
            "attempt",
            "outcome",
            "duration",
            "message",
            "op",
            "dtype",
            "module",
            "mode",
        )  # fmt: skip
    )
    names = ("node_id", "shard", "attempt", "outcome", "duration", "message",
             "op", "dtype", "module", "mode")  # fmt: skip
    return [dict(zip(names, row, strict=True)) for row in rows]


def failures(run: Run) -> list[dict[str, Any]]:
    rows = Failure.objects.filter(run=run).select_related("result").order_by("result__node_id")
    return [
        {
            "node_id": failure.result.node_id,
            "attempt": failure.result.attempt,
            "category": failure.category,
            "rule": failure.rule,
            "op": failure.op_name,
            "decisive_line": failure.decisive_line,
            "verdict": failure.verdict,
            "verdict_reason": failure.verdict_reason,
        }
        for failure in rows
    ]


def _iso(moment: Any) -> str | None:
    return moment.isoformat() if moment else None
