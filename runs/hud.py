"""The HUD grid: upstream events as rows, jobs as columns, one character a cell."""

from dataclasses import dataclass, field
from statistics import median

from django.db.models import Count

from runs.models import Failure, Run

# DESIGN §6: O success, X failure, F passed after retry, C cancelled, T timed out,
# S skipped, ? running.
CELL: dict[str, str] = {
    Run.Status.PASSED: "O",
    Run.Status.FAILED: "X",
    Run.Status.CANCELLED: "C",
    Run.Status.ERROR: "C",
    Run.Status.TIMED_OUT: "T",
}


@dataclass
class Row:
    label: str
    sha: str
    cells: dict[str, Run] = field(default_factory=dict)


@dataclass
class Column:
    job: str
    finished: int = 0
    passed: int = 0
    queue: list[float] = field(default_factory=list)
    execution: list[float] = field(default_factory=list)

    @property
    def pass_rate(self) -> float | None:
        return self.passed / self.finished if self.finished else None

    @property
    def median_queue(self) -> float | None:
        return median(self.queue) if self.queue else None

    @property
    def median_execution(self) -> float | None:
        return median(self.execution) if self.execution else None


def cell(run: Run, flaky_runs: set[int], tests: int) -> str:
    if not run.is_finished:
        return "?"
    if run.status == Run.Status.PASSED and run.pk in flaky_runs:
        return "F"
    if run.status == Run.Status.FAILED and tests == 0:
        return "S"
    return CELL.get(run.status, "X")


def row_label(run: Run) -> str:
    trigger = run.trigger
    if trigger.dispatch and trigger.dispatch.pr_number:
        return f"#{trigger.dispatch.pr_number}"
    return trigger.get_kind_display()


def grid(limit: int = 200) -> tuple[list[Row], list[Column], dict[int, str]]:
    """Rows newest first, columns by job name, and each run's character."""
    runs = list(
        Run.objects.select_related("trigger__dispatch")
        .order_by("-created_at")
        .only(
            "uuid", "job_name", "status", "pytorch_sha", "created_at", "started_at",
            "finished_at", "trigger__kind", "trigger__pytorch_sha", "trigger__dispatch__pr_number",
        )[:limit]
    )  # fmt: skip
    flaky = set(
        Failure.objects.filter(run__in=runs, verdict=Failure.Verdict.FLAKY).values_list(
            "run_id", flat=True
        )
    )
    totals = dict(
        Run.objects.filter(pk__in=[r.pk for r in runs])
        .annotate(total=Count("results"))
        .values_list("pk", "total")
    )
    rows: dict[tuple[str, str], Row] = {}
    columns: dict[str, Column] = {}
    chars: dict[int, str] = {}
    for run in runs:
        key = (row_label(run), run.pytorch_sha)
        rows.setdefault(key, Row(*key)).cells.setdefault(run.job_name, run)
        column = columns.setdefault(run.job_name, Column(run.job_name))
        chars[run.pk] = cell(run, flaky, totals.get(run.pk, 0))
        _measure(column, run)
    return list(rows.values()), sorted(columns.values(), key=lambda c: c.job), chars


def _measure(column: Column, run: Run) -> None:
    if run.started_at:
        column.queue.append((run.started_at - run.created_at).total_seconds())
    if run.is_finished:
        column.finished += 1
        column.passed += run.status == Run.Status.PASSED
        if run.started_at and run.finished_at:
            column.execution.append((run.finished_at - run.started_at).total_seconds())
