"""The readable form of a run's reproducibility data, for its page.

Worker environments are grouped: identical ones (same facts, same `pip
freeze`) form one column with the shards they ran; a fact or a package whose
value differs between columns is flagged so the page highlights it.
"""

from dataclasses import dataclass, field
from typing import Any

from django.db.models import Count, QuerySet

from reproducibility import metadata as run_metadata
from reproducibility.models import Bisection, Bundle, Rerun, WorkerEnvironment
from runs.models import Run, TestResult

ATTEMPTS_SHOWN = 500


@dataclass
class EnvColumn:
    row: WorkerEnvironment
    shards: list[int] = field(default_factory=list)


@dataclass
class DiffRow:
    label: str
    values: list[str]

    @property
    def differs(self) -> bool:
        return len(set(self.values)) > 1


def environment_columns(rows: list[WorkerEnvironment]) -> list[EnvColumn]:
    columns: dict[tuple[Any, ...], EnvColumn] = {}
    for row in rows:
        key = (tuple(row.comparable().items()), row.pip_freeze)
        column = columns.setdefault(key, EnvColumn(row))
        if row.shard is not None and row.shard.index not in column.shards:
            column.shards.append(row.shard.index)
    return list(columns.values())


def fact_rows(columns: list[EnvColumn]) -> list[DiffRow]:
    facts = [column.row.comparable() for column in columns]
    labels = list(dict.fromkeys(label for fact in facts for label in fact))
    return [DiffRow(label, [fact.get(label, "—") for fact in facts]) for label in labels]


def package_rows(columns: list[EnvColumn]) -> list[DiffRow]:
    """Only the packages whose `pip freeze` line differs between the columns."""
    packages = [column.row.packages() for column in columns]
    names = sorted({name for listing in packages for name in listing})
    rows = [DiffRow(name, [listing.get(name, "—") for listing in packages]) for name in names]
    return [row for row in rows if row.differs]


def attempts(run: Run, outcome: str) -> tuple[QuerySet[TestResult], int]:
    results = run.results.select_related("shard").order_by("shard__index", "node_id", "attempt")
    if outcome:
        results = results.filter(outcome=outcome)
    return results[:ATTEMPTS_SHOWN], results.count()


def outcome_counts(run: Run) -> dict[str, int]:
    rows = run.results.values("outcome").annotate(n=Count("pk")).order_by("outcome")
    return {row["outcome"]: row["n"] for row in rows}


def context(run: Run, outcome: str) -> dict[str, Any]:
    """Everything the reproducibility page shows."""
    meta = run_metadata.metadata(run, with_attempts=False)
    columns = environment_columns(list(WorkerEnvironment.objects.of_run(run)))
    shown, matching = attempts(run, outcome)
    return {
        "run": run,
        "meta": meta,
        "columns": columns,
        "fact_rows": fact_rows(columns),
        "package_rows": package_rows(columns),
        "hosts": len({column.row.hostname for column in columns}),
        "attempts": shown,
        "attempts_matching": matching,
        "attempts_limit": ATTEMPTS_SHOWN,
        "failing": [str(outcome) for outcome in TestResult.FAILING],  # their messages link a log
        "outcome_counts": outcome_counts(run),
        "counts": run.test_counts(),  # per test at its final attempt, as the run page counts
        "bundles": list(run.bundles.order_by("-created_at", "-pk")[:10]),
        "reruns": list(Rerun.objects.filter(original=run).select_related("run")),
        "rerun_of": Rerun.objects.filter(run=run).select_related("original").first(),
        "bisections": list(Bisection.objects.filter(bad_run=run).order_by("-created_at")),
        "bundle_pending": run.bundles.filter(
            status__in=(Bundle.Status.PENDING, Bundle.Status.BUILDING)
        ).exists(),
    }
