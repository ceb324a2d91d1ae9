"""The summary and metrics pages' figures: per backend and job, the finished jobs of pull
requests or of nightlies in a window, counted in the database.

The pages follow PyTorch's HUD CRCR pages (test-infra `torchci/pages/crcr/`: a summary per
downstream repository with a pull-request and a nightly tab, and a metrics page of daily
pass rate, failures and runs), counting crcr's runs as `runs.readiness` counts HUD jobs:
1. a job is a finished run (crcr's HUD job) that started within the window, of a pull
   request's dispatch (`pr`) or of PyTorch's nightly (`nightly`: the nightly schedule's
   trigger, or a nightly dispatch of a nightly-only backend);
2. of a job re-run, only the latest finished attempt counts;
3. success = jobs that passed; failures = the others (red, timed out, cancelled,
   infrastructure errors), so success + failures = total; timed out, a part of failures;
4. times from the run's fields: queue = creation to start, execution = start to end,
   duration = creation to end (end to end), each averaged over the jobs that have it.
"""

from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from typing import Any, TypeVar

from django.core.cache import cache
from django.db.models import (
    Case,
    Count,
    DurationField,
    Exists,
    ExpressionWrapper,
    F,
    Max,
    OuterRef,
    Q,
    QuerySet,
    Sum,
    Value,
    When,
)
from django.db.models.functions import Coalesce, TruncDate
from django.utils import timezone
from django.utils.safestring import SafeString

from runs import charts, hud_grid
from runs.models import Backend, Run, Trigger
from runs.models.intake import NIGHTLY_REF

EVENTS = {"pr": "Pull requests", "nightly": "Nightly"}
RUNS_OF = {
    "pr": Q(trigger__dispatch__event_type="pull_request"),
    "nightly": Q(trigger__kind=Trigger.Kind.NIGHTLY) | Q(trigger__dispatch__base_ref=NIGHTLY_REF),
}
KEPT_SECONDS = 60  # the windows slide with the clock: a minute's figures at most
SUMMARY_DAYS = (1, 7, 30, 90)  # the summary's windows: 24 h, 7, 30 and 90 days
METRICS_DAYS = (7, 14, 30, 90)  # the metrics page's
T = TypeVar("T")


def kept(name: str, figures: Callable[..., T], *args: Any) -> T:
    """`figures(*args)`, kept in Django's cache for a minute while the runs are the same
    (`runs.hud_grid.state`, read from indexes: a run added, finished or deleted changes
    it), as PyTorch's summary refreshes every minute: 20,000 runs counted took 5 to 8
    trivial pages (bench/pages_at_scale.py)."""
    key = f"metrics:{name}:{':'.join(map(str, args))}:{hud_grid.state()}"
    found = cache.get(key)
    if found is None:
        found = figures(*args)
        cache.set(key, found, KEPT_SECONDS)
    return found


def jobs(since: datetime, event: str = "") -> QuerySet[Run]:
    """The runs that count as `event`'s jobs (both events' when empty) started since
    `since` (steps 1 and 2), each with `began` (its start, else its creation)."""
    # A later finished attempt of the same HUD run (`Run.hud_run_id`, here `hud_id`)
    # replaces this one. One equality, so the database anti-joins the few later attempts
    # by hash; a probe of the attempts' index per run cost 20,000 probes on the bench.
    later = Run.objects.filter(
        retry_of=OuterRef("hud_id"),
        status__in=Run.FINISHED,
        run_attempt__gt=OuterRef("run_attempt"),
    )
    kind = RUNS_OF[event] if event else RUNS_OF["pr"] | RUNS_OF["nightly"]
    return (
        Run.objects.annotate(
            began=Coalesce("started_at", "created_at"), hud_id=Coalesce("retry_of", "pk")
        )
        .filter(kind, status__in=Run.FINISHED, began__gte=since)
        .exclude(Exists(later))
    )


def _between(start: str, end: str) -> ExpressionWrapper:
    return ExpressionWrapper(F(end) - F(start), output_field=DurationField())


# Sums and their counts, not averages: a backend's averages are its jobs' sums added up
# (an average of the jobs' averages would weigh a job of 2 runs like one of 200).
COUNTS = {
    "total": Count("pk"),
    "succeeded": Count("pk", filter=Q(status=Run.Status.PASSED)),
    "timed_out": Count("pk", filter=Q(status=Run.Status.TIMED_OUT)),
    "duration": Sum(_between("created_at", "finished_at")),
    "ended": Count("finished_at"),
    "queue": Sum(_between("created_at", "started_at")),
    "execution": Sum(_between("started_at", "finished_at")),
    "started": Count("started_at"),
    "newest": Max("pk"),
}


@dataclass(frozen=True, slots=True)
class Jobs:
    """Some jobs: how many, how many passed (step 3)."""

    total: int
    succeeded: int

    @property
    def failures(self) -> int:
        return self.total - self.succeeded

    @property
    def pass_rate(self) -> float | None:
        return None if not self.total else round(100.0 * self.succeeded / self.total, 1)

    @property
    def note(self) -> str:
        """The figures in words (a chart's hover text)."""
        if not self.total:
            return "no job"
        return f"{self.succeeded} of {self.total} jobs passed ({self.pass_rate:.1f} %)"


@dataclass(frozen=True, slots=True)
class Latest:
    """A job's newest run (the last created): the summary's last run links to it."""

    pk: int
    uuid: Any
    status: str
    pytorch_sha: str
    began: datetime


@dataclass(frozen=True, slots=True)
class Summary(Jobs):
    """One job's (or, `job` empty, a backend's) jobs in a window (module docstring)."""

    backend: str
    job: str
    level: str
    timed_out: int
    duration: timedelta | None
    queue: timedelta | None
    execution: timedelta | None
    latest: Latest | None

    @property
    def timeout_rate(self) -> float | None:
        return None if not self.total else round(100.0 * self.timed_out / self.total, 1)

    @property
    def tone(self) -> str:
        """The pass rate's colour, as the HUD's summary colours it: all green, at least
        90 %, or less."""
        rate = self.pass_rate
        if rate is None:
            return "grey"
        return "green" if rate >= 100 else "amber" if rate >= 90 else "red"


def summary(event: str, days: int, now: datetime | None = None) -> list[Summary]:
    """Each backend's row of all its jobs, then one row per job, backends by slug.

    Two queries whatever the number of runs:
    1. per backend and job, the counts, the times' sums and the newest run's id;
    2. those newest runs, by id.
    A backend's row adds up its jobs' (its averages from their sums)."""
    now = now or timezone.now()
    counted = jobs(now - timedelta(days=days), event)
    backend = ("backend__slug", "backend__relay_url", "backend__relay_sender")
    grouped = list(
        counted.values(*backend, "job_name")
        .annotate(**COUNTS)
        .order_by("backend__slug", "job_name")
    )
    newest = Run.objects.filter(pk__in=[values["newest"] for values in grouped])
    columns = ("pk", "uuid", "status", "pytorch_sha", "began")
    latest = {
        values[0]: Latest(*values)
        for values in newest.annotate(began=Coalesce("started_at", "created_at")).values_list(
            *columns
        )
    }
    per_backend: dict[str, list[dict[str, Any]]] = {}
    for values in grouped:
        per_backend.setdefault(values["backend__slug"], []).append(values)
    rows = []
    for jobs_of in per_backend.values():
        whole = {name: _add(each[name] for each in jobs_of) for name in COUNTS if name != "newest"}
        whole["newest"] = max(each["newest"] for each in jobs_of)
        rows.append(_row(jobs_of[0] | whole, "", latest))
        rows += [_row(values, values["job_name"], latest) for values in jobs_of]
    return rows


def _add(values: Any) -> Any:
    """Counts or time spans added up; None when there is none."""
    present = [value for value in values if value is not None]
    return sum(present[1:], present[0]) if present else None


def _average(total: timedelta | None, count: int) -> timedelta | None:
    return None if total is None or not count else total / count


def _row(values: dict[str, Any], job: str, latest: dict[int, Latest]) -> Summary:
    return Summary(
        backend=values["backend__slug"], job=job,
        level=Backend.level_of(values["backend__relay_url"], values["backend__relay_sender"]),
        total=values["total"], succeeded=values["succeeded"], timed_out=values["timed_out"],
        duration=_average(values["duration"], values["ended"]),
        queue=_average(values["queue"], values["started"]),
        execution=_average(values["execution"], values["started"]),
        latest=latest.get(values["newest"]),
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Day(Jobs):
    """One day's jobs of one event."""

    day: date


def daily(days: int, backend: str = "", now: datetime | None = None) -> dict[str, list[Day]]:
    """Per event, its jobs per day over the last `days` days (today included), oldest
    first, a day without a job included (total 0): one query for both events."""
    now = now or timezone.now()
    today = timezone.localdate(now)
    first = today - timedelta(days=days - 1)
    counted = jobs(timezone.make_aware(datetime.combine(first, time.min)))
    if backend:
        counted = counted.filter(backend__slug=backend)
    event = Case(When(RUNS_OF["pr"], then=Value("pr")), default=Value("nightly"))
    by_day = (
        counted.annotate(day=TruncDate("began"), event=event)
        .values("event", "day")
        .annotate(total=Count("pk"), succeeded=Count("pk", filter=Q(status=Run.Status.PASSED)))
    )
    found = {(row["event"], row["day"]): (row["total"], row["succeeded"]) for row in by_day}
    dates = [first + timedelta(days=n) for n in range(days)]
    return {
        event: [Day(*found.get((event, day), (0, 0)), day=day) for day in dates] for event in EVENTS
    }


def total(days: list[Day]) -> Jobs:
    """A window's days of one event added up (the figures under the metrics page's charts)."""
    return Jobs(sum(day.total for day in days), sum(day.succeeded for day in days))


COLOURS = {"pr": "#1f6feb", "nightly": "#8250df"}  # each event's line and bars
CHARTS = (  # the metrics page's: title, the figure a day, a percentage or a count
    ("Job pass rate a day", "pass_rate", True),
    ("Failed jobs a day", "failures", False),
    ("Jobs a day", "total", False),
)


def charts_of(per_event: dict[str, list[Day]]) -> list[SafeString]:
    """The metrics page's charts of `daily`'s days: a series per event in each."""
    dates = [day.day for day in next(iter(per_event.values()))]
    return [
        charts.daily(title, dates, [
            charts.Series(
                EVENTS[event], COLOURS[event], [getattr(day, figure) for day in found],
                [f"{EVENTS[event]}, {day.day:%b %d}: {day.note}" for day in found],
            )
            for event, found in per_event.items()
        ], percent)
        for title, figure, percent in CHARTS
    ]  # fmt: skip
