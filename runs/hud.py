"""The HUD's summaries: each job's trend of tests passing, and the jobs that are red now
with what their failure is put down to. (The grid itself is `runs.hud_grid`.)"""

from collections.abc import Iterable
from dataclasses import dataclass

from django.db.models import Count, F, QuerySet, Window
from django.db.models.functions import RowNumber
from django.utils.safestring import SafeString

from runs import charts
from runs.models import Failure, Run
from runs.models.results import final_counts, summary

TREND_RUNS = 20  # runs per job in a trend of tests passing
RED_TESTS_SHOWN = 5


def row_label(run: Run) -> str:
    trigger = run.trigger
    if trigger.dispatch and trigger.dispatch.pr_number:
        return f"#{trigger.dispatch.pr_number}"
    return trigger.get_kind_display()


def newest_finished(job: str = "", per_job: int = TREND_RUNS) -> QuerySet[Run]:
    """Each job's newest `per_job` finished runs (job names containing `job`), newest first:
    one query whatever the number of jobs and runs."""
    runs = Run.objects.filter(status__in=Run.FINISHED)
    if job:
        runs = runs.filter(job_name__icontains=job)
    newest = [F("created_at").desc(), F("pk").desc()]
    return (
        runs.annotate(rank=Window(RowNumber(), partition_by=F("job_name"), order_by=newest))
        .filter(rank__lte=per_job)
        .select_related("trigger__dispatch")
        .defer("trigger__dispatch__payload", "trigger__dispatch__raw_body")
        .order_by("-created_at", "-pk")
    )


def pass_counts(runs: Iterable[Run]) -> dict[int, tuple[int, int]]:
    """(passed, executed) tests per run, counting each test once at its final outcome
    (in the database, one query: `runs.models.results.final_counts`); skipped tests
    are not executed."""
    totals = {run_id: summary(counts) for run_id, counts in final_counts(runs).items()}
    return {
        run_id: (total["passed"], total["total"] - total["skipped"])
        for run_id, total in totals.items()
        if total["total"]
    }


def trends(runs: Iterable[Run], current: Run | None = None) -> dict[str, SafeString]:
    """Per job, an SVG of the share of tests passing in its newest finished runs (`runs`
    newest first)."""
    per_job: dict[str, list[Run]] = {}
    for run in runs:
        chosen = per_job.setdefault(run.job_name, [])
        if run.is_finished and len(chosen) < TREND_RUNS:
            chosen.append(run)
    rates = pass_counts(run for chosen in per_job.values() for run in chosen)
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
    """The trend of tests passing in this run's job, with this run marked when it is among them."""
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


def red_now(job: str = "") -> list[Red]:
    """Jobs whose newest finished run is red, by job name, with their first regressions
    (three queries whatever the number of red jobs, one when none is red)."""
    red_runs = sorted(
        (run for run in newest_finished(job, per_job=1) if run.attribution()),
        key=lambda run: run.job_name,
    )
    if not red_runs:
        return []
    regressions = Failure.objects.filter(run__in=red_runs, verdict=Failure.Verdict.REGRESSION)
    counts = dict(regressions.values("run_id").annotate(n=Count("pk")).values_list("run_id", "n"))
    by_name = [F("result__node_id").asc(), F("pk").asc()]
    shown: dict[int, list[Failure]] = {}
    first = regressions.annotate(
        rank=Window(RowNumber(), partition_by=F("run_id"), order_by=by_name)
    ).filter(rank__lte=RED_TESTS_SHOWN)
    for failure in first.select_related("result").order_by("run_id", "result__node_id"):
        shown.setdefault(failure.run_id, []).append(failure)
    return [Red(run, shown.get(run.pk, []), counts.get(run.pk, 0)) for run in red_runs]
