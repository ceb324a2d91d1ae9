"""The HUD: upstream events as rows, jobs as columns, one character a cell; each job's
pass-rate trend, and the jobs that are red now with what their failure is put down to."""

from collections.abc import Iterable
from dataclasses import dataclass, field
from statistics import median

from django.db.models import Count, Q
from django.utils.safestring import SafeString

from runs import charts
from runs.models import Failure, Run, TestResult

TREND_RUNS = 20  # runs per job in a pass-rate trend
RED_TESTS_SHOWN = 5

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


def recent_runs(limit: int = 200) -> list[Run]:
    """The newest runs, with what the grid, the trends and the red list read of them."""
    return list(
        Run.objects.select_related("trigger__dispatch")
        .order_by("-created_at")
        .only(
            "uuid", "job_name", "status", "pytorch_sha", "created_at", "started_at",
            "finished_at", "changed_since_green", "error", "trigger__kind",
            "trigger__pytorch_sha", "trigger__dispatch__pr_number",
        )[:limit]
    )  # fmt: skip


def grid(runs: list[Run]) -> tuple[list[Row], list[Column], dict[int, str]]:
    """Rows newest first, columns by job name, and each run's character."""
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


def pass_counts(run_ids: Iterable[int]) -> dict[int, tuple[int, int]]:
    """(passed, executed) tests per run, counting each test once at its final outcome.

    A failed test is retried until it passes or runs out of attempts, so a test
    that passed in any attempt passed in its last; skipped tests are not executed."""
    rows = (
        TestResult.objects.filter(run_id__in=list(run_ids))
        .values("run_id")
        .annotate(
            passed=Count("node_id", distinct=True, filter=Q(outcome__in=TestResult.PASSING)),
            executed=Count("node_id", distinct=True, filter=~Q(outcome=TestResult.Outcome.SKIPPED)),
        )
    )
    return {row["run_id"]: (row["passed"], row["executed"]) for row in rows}


def trends(runs: Iterable[Run], current: Run | None = None) -> dict[str, SafeString]:
    """Per job, an SVG of the pass rate of its newest finished runs (`runs` newest first)."""
    per_job: dict[str, list[Run]] = {}
    for run in runs:
        chosen = per_job.setdefault(run.job_name, [])
        if run.is_finished and len(chosen) < TREND_RUNS:
            chosen.append(run)
    rates = pass_counts(run.pk for chosen in per_job.values() for run in chosen)
    charts_by_job = {}
    for job, chosen in sorted(per_job.items()):
        points = [
            charts.Point(
                f"{row_label(run)} {run.pytorch_sha[:12]}",
                *rates.get(run.pk, (0, 0)),
                current=current is not None and run.pk == current.pk,
            )
            for run in reversed(chosen)
        ]
        charts_by_job[job] = charts.pass_rate_trend(job, points)
    return charts_by_job


def job_trend(run: Run) -> SafeString:
    """The pass-rate trend of this run's job, with this run marked when it is among them."""
    runs = (
        Run.objects.filter(job_name=run.job_name, status__in=Run.FINISHED)
        .select_related("trigger__dispatch")
        .order_by("-created_at")[:TREND_RUNS]
    )
    return trends(runs, current=run).get(run.job_name, SafeString(""))


@dataclass
class Red:
    """A job whose newest finished run is red, and the regressions that made it so."""

    run: Run
    regressions: list[Failure]
    count: int


def red_now(runs: Iterable[Run]) -> list[Red]:
    """Jobs whose newest finished run failed (`runs` newest first), by job name."""
    latest: dict[str, Run] = {}
    for run in runs:
        if run.is_finished:
            latest.setdefault(run.job_name, run)
    red = []
    for job in sorted(latest):
        run = latest[job]
        if not run.attribution():
            continue
        regressions = run.failures.filter(verdict=Failure.Verdict.REGRESSION)
        shown = list(
            regressions.select_related("result").order_by("result__node_id")[:RED_TESTS_SHOWN]
        )
        red.append(Red(run, shown, regressions.count()))
    return red
