"""The HUD's summaries: each job's trend of tests passing, and the jobs that are red now
with what their failure is put down to. (The grid itself is `runs.hud_grid`.)

Both read finished runs alone, and a finished run changes no more (its status, tests and
failures were stored when it finished), so the two, as HTML, are kept in Django's cache
while no run is added, finishes or is deleted (`section`).
"""

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.core.cache import cache
from django.db.models import Case, Count, F, QuerySet, TextField, Value, When, Window
from django.db.models.functions import RowNumber
from django.template.loader import render_to_string
from django.utils.safestring import SafeString, mark_safe

from crcr_site.lib.ranking import first_of_each
from runs import charts
from runs.hud_grid import UPSTREAM, nightly_only, shown
from runs.models import Failure, Run, Trigger
from runs.models.results import final_counts, summary
from runs.models.runs import attribution

TREND_RUNS = 20  # runs per job in a trend of tests passing
RED_TESTS_SHOWN = 5
KINDS = dict(Trigger.Kind.choices)
SECTION_FORMAT = 2  # bumped when the section's HTML changes
SECTION_KEPT_SECONDS = 24 * 3600


def section(job: str, state: str) -> SafeString:
    """The HUD's "Red now" and "Tests passing per job" for the jobs whose names contain
    `job`, from the cache while the runs' `state` (`runs.hud_grid.state`) is the same."""
    key = f"hud-section:{SECTION_FORMAT}:{state}"
    html = cache.get(key)
    if html is None:
        finished = newest_finished(job)
        html = render_to_string(
            "runs/hud_section.html", {"trends": trends(finished), "red": red_now(finished)}
        )
        cache.set(key, html, SECTION_KEPT_SECONDS)
    return mark_safe(html)  # rendered by the template, which escapes


def _finished_runs(job: str) -> QuerySet[Run]:
    # A bundle's re-run is no job of its own, nor a verdict (runs.hud_grid.UPSTREAM).
    runs = shown(Run.objects.filter(UPSTREAM, status__in=Run.FINISHED), nightly_only())
    return runs.filter(job_name__icontains=job) if job else runs


@dataclass(slots=True)
class Finished:
    """A finished run as a trend's point and a red job's line read it: a row of values (the
    HUD reads 20 of each job's; as model instances with their trigger and dispatch, those
    400 cost more than the query)."""

    pk: int
    uuid: UUID
    job_name: str
    pytorch_sha: str
    status: str
    changed_since_green: list[str] | None  # read for a red run only
    error: str  # read for a red run only
    test_summary: dict[str, int] | None
    failure_summary: list[list[Any]] | None  # read for a red run only
    trigger_kind: str
    pr_number: int | None

    @property
    def label(self) -> str:
        """What built it: its PR, else its trigger's kind."""
        return f"#{self.pr_number}" if self.pr_number else KINDS.get(self.trigger_kind, "")

    def attribution(self) -> str:
        return attribution(self.status, self.changed_since_green or [])


def _finished(runs: QuerySet[Run]) -> list[Finished]:
    """`runs` as `Finished` rows, in their order. What a red line reads (what changed, the
    error, the failures' counts) is read for red runs alone: a JSON value costs more than
    the rest of a row."""
    red = {"status__in": (Run.Status.FAILED, Run.Status.TIMED_OUT)}
    columns = [
        "pk", "uuid", "job_name", "pytorch_sha", "status", "red_changes", "red_error",
        "test_summary", "red_failures", "trigger__kind", "trigger__dispatch__pr_number",
    ]  # fmt: skip
    return [
        Finished(*values)
        for values in runs.annotate(
            red_changes=Case(When(**red, then="changed_since_green")),
            red_error=Case(When(**red, then="error"), default=Value(""), output_field=TextField()),
            red_failures=Case(When(**red, then="failure_summary")),
        ).values_list(*columns)
    ]


def newest_finished(job: str = "", per_job: int = TREND_RUNS) -> list[Finished]:
    """Each job's newest `per_job` finished runs (job names containing `job`), newest first:
    two queries whatever the number of jobs and runs.

    1. the kept runs' ids: a window ranks each job's finished runs, newest first, reading
       the (job, time, id, status) index alone (ranked with their trigger and dispatch
       joined, the 20,000 runs of bench/pages_at_scale.py took 100 ms);
    2. those runs, with their trigger's kind and its PR, by id.
    """
    runs = _finished_runs(job)
    newest = [F("created_at").desc(), F("pk").desc()]
    ranked = runs.annotate(
        rank=Window(RowNumber(), partition_by=F("job_name"), order_by=newest)
    ).filter(rank__lte=per_job)
    kept = list(ranked.values_list("pk", flat=True))
    return _finished(Run.objects.filter(pk__in=kept).order_by("-created_at", "-pk"))


def pass_counts(runs: Iterable[Finished]) -> dict[int, tuple[int, int]]:
    """(passed, executed) tests per run, counting each test once at its final outcome
    (in the database, one query: `runs.models.results.final_counts`); skipped tests
    are not executed."""
    totals = {run_id: summary(counts) for run_id, counts in final_counts(runs).items()}
    return {
        run_id: (total["passed"], total["total"] - total["skipped"])
        for run_id, total in totals.items()
        if total["total"]
    }


def trends(runs: Iterable[Finished], current: Run | None = None) -> dict[str, SafeString]:
    """Per job, an SVG of the share of tests passing in its newest finished runs (`runs`
    newest first)."""
    per_job: dict[str, list[Finished]] = {}
    for run in runs:
        chosen = per_job.setdefault(run.job_name, [])
        if len(chosen) < TREND_RUNS:
            chosen.append(run)
    rates = pass_counts(run for chosen in per_job.values() for run in chosen)
    charts_by_job = {}
    for job, chosen in sorted(per_job.items()):
        points = [
            charts.Point(
                f"{run.label} {run.pytorch_sha[:12]}",
                *rates.get(run.pk, (0, 0)),
                current=current is not None and run.pk == current.pk,
            )
            for run in reversed(chosen)
        ]
        charts_by_job[job] = charts.pass_rate_trend(job, points)
    return charts_by_job


def job_trend(run: Run) -> SafeString:
    """The trend of tests passing in this run's job, with this run marked when it is among them."""
    runs = Run.objects.filter(job_name=run.job_name, status__in=Run.FINISHED)
    newest = _finished(runs.order_by("-created_at")[:TREND_RUNS])
    return trends(newest, current=run).get(run.job_name, SafeString(""))


@dataclass
class Red:
    """A job whose newest finished run is red, and the regressions that made it so."""

    run: Finished
    regressions: list[Failure]
    count: int


def red_now(finished: list[Finished]) -> list[Red]:
    """Jobs whose newest finished run (the first of each job in `finished`, newest first)
    is red, by job name, with their first regressions: one query whatever the number of
    red jobs and of their failures, none when none is red.

    1. the first `RED_TESTS_SHOWN` regressions (first classified) of each red run with
       their results, by the ids of `crcr_site.lib.ranking.first_of_each` over the (run,
       verdict, id) index (ranked by test id, through a join of all their results, they
       took 100 ms), listed by test id;
    2. how many there are: stored when the run finished (`Run.failure_summary`), else
       counted from the same index (one query more).
    """
    newest: dict[str, Finished] = {}
    for run in finished:
        newest.setdefault(run.job_name, run)
    red_runs = sorted(
        (run for run in newest.values() if run.attribution()), key=lambda run: run.job_name
    )
    if not red_runs:
        return []
    regressions = Failure.objects.filter(
        run__in=[run.pk for run in red_runs], verdict=Failure.Verdict.REGRESSION
    )
    counts = {
        run.pk: sum(
            size
            for _, verdict, size in run.failure_summary
            if verdict == Failure.Verdict.REGRESSION
        )
        for run in red_runs
        if run.failure_summary is not None
    }
    if len(counts) < len(red_runs):
        counted = regressions.exclude(run__in=list(counts)).values("run_id")
        counts |= dict(counted.annotate(n=Count("pk")).values_list("run_id", "n"))
    first = first_of_each(regressions, [{"run_id": run.pk} for run in red_runs], RED_TESTS_SHOWN)
    shown: dict[int, list[Failure]] = {}
    listed = Failure.objects.filter(pk__in=first)
    for failure in listed.select_related("result").order_by("run_id", "result__node_id", "pk"):
        shown.setdefault(failure.run_id, []).append(failure)
    return [Red(run, shown.get(run.pk, []), counts.get(run.pk, 0)) for run in red_runs]
