"""L3 readiness from crcr's own runs: per backend and HUD job, the job pass rate and the
timeout rate over the last 7 days and the last 4 weeks, against RFC 102's thresholds.

RFC 102 (pytorch/rfcs#102, "Refine L3 promotion criteria", in RFC-0050) asks of a backend
before L3: job pass rate above 90 % and timeout rate below 10 %, judged on the HUD. The
HUD's readiness panel (pytorch/test-infra `torchci/clickhouse_queries/crcr_l3_summary`,
`torchci/lib/crcr/l3Readiness.ts`) counts the jobs it stored, and this module counts
crcr's runs the same way:
1. a job is a completed HUD job of a PyTorch pull request (`pr_number > 0`: nightly and
   manual self-reports do not count) that started within the window;
2. of a job re-run, only the latest finished attempt counts (the HUD keeps the highest
   `run_attempt` per run and job);
3. pass rate = jobs concluded `success` / all of them (failure, cancelled and timed_out
   count against it); timeout rate = jobs concluded `timed_out` / all of them;
4. a criterion with no job to judge has no verdict.
crcr's job is the run (`Run.job_name`, the combination): in aggregate mode that is the
HUD job itself; in per-job mode the HUD's shard jobs of a run roll up to it (green only
when every shard is), and a conclusion is the run's (`outbox.CONCLUSIONS`: an
infrastructure error is `cancelled`).
"""

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from fractions import Fraction
from math import floor
from typing import Any

from django.db.models import Count, Q, QuerySet
from django.utils import timezone

from runs import metrics
from runs.models import Run

PASS_RATE_ABOVE = 90.0  # percent of jobs green, strictly above (RFC 102)
TIMEOUT_RATE_BELOW = 10.0  # percent of jobs timed out, strictly below (RFC 102)
WINDOWS = (7, 28)  # days: the promotion week and the 4-week window the HUD also shows


@dataclass(frozen=True, slots=True)
class Figures:
    """One job's (or a backend's) jobs in one window, and how they stand against RFC 102."""

    days: int
    finished: int
    succeeded: int
    timed_out: int

    @property
    def pass_rate(self) -> float | None:
        return _percent(self.succeeded, self.finished)

    @property
    def timeout_rate(self) -> float | None:
        return _percent(self.timed_out, self.finished)

    @property
    def pass_margin(self) -> float | None:
        """Points above the pass-rate threshold (negative: short of it)."""
        rate = self.pass_rate
        return None if rate is None else round(rate - PASS_RATE_ABOVE, 1)

    @property
    def timeout_margin(self) -> float | None:
        """Points below the timeout-rate threshold (negative: over it)."""
        rate = self.timeout_rate
        return None if rate is None else round(TIMEOUT_RATE_BELOW - rate, 1)

    @property
    def pass_meets(self) -> bool | None:
        return None if self.pass_margin is None else self.pass_margin > 0

    @property
    def timeout_meets(self) -> bool | None:
        return None if self.timeout_margin is None else self.timeout_margin > 0

    @property
    def green_needed(self) -> int | None:
        """How far a missed pass rate is in jobs: the fewest green jobs in a row that would
        take it above the bar (None when it is met or nothing is judged)."""
        if not self.finished or self.pass_meets:
            return None
        share = Fraction(str(PASS_RATE_ABOVE)) / 100
        # (succeeded + k) / (finished + k) > share  ⇔  k > (share·finished − succeeded) / (1 − share)
        return floor((share * self.finished - self.succeeded) / (1 - share)) + 1

    @property
    def clean_needed(self) -> int | None:
        """How far a missed timeout rate is in jobs: the fewest jobs in a row without a
        timeout that would take it below the bar (None when it is met or nothing is judged)."""
        if not self.finished or self.timeout_meets:
            return None
        share = Fraction(str(TIMEOUT_RATE_BELOW)) / 100
        # timed_out / (finished + k) < share  ⇔  k > timed_out / share − finished
        return max(0, floor(self.timed_out / share - self.finished) + 1)

    @property
    def ready(self) -> bool | None:
        """Both criteria met; None when there is no job to judge."""
        if self.finished == 0:
            return None
        return bool(self.pass_meets and self.timeout_meets)

    def as_dict(self) -> dict[str, object]:
        return {
            "days": self.days,
            "finished": self.finished,
            "succeeded": self.succeeded,
            "timed_out": self.timed_out,
            "pass_rate": self.pass_rate,
            "pass_rate_margin": self.pass_margin,
            "pass_rate_meets": self.pass_meets,
            "timeout_rate": self.timeout_rate,
            "timeout_rate_margin": self.timeout_margin,
            "timeout_rate_meets": self.timeout_meets,
            "ready": self.ready,
        }


@dataclass(frozen=True, slots=True)
class Row:
    """A backend's figures in each window: for one job, or (`job` empty) all its jobs."""

    backend: str
    job: str
    windows: tuple[Figures, ...]

    def as_dict(self) -> dict[str, object]:
        return {"job_name": self.job, "windows": [figures.as_dict() for figures in self.windows]}


def _percent(part: int, whole: int) -> float | None:
    return None if whole == 0 else round(100.0 * part / whole, 1)


def counted_runs(now: datetime | None = None) -> QuerySet[Run]:
    """The runs that count as HUD jobs in the longest window (steps 1 and 2): the summary's
    pull-request jobs (`runs.metrics.jobs`)."""
    return metrics.jobs((now or timezone.now()) - timedelta(days=max(WINDOWS)), "pr")


def rows(backend_slug: str | None = None, now: datetime | None = None) -> list[Row]:
    """Each backend's row of all its jobs, then one row per job, backends by slug.

    One query: per backend and job, the jobs, the green ones and the timed-out ones, each
    counted once per window.
    """
    now = now or timezone.now()
    runs = counted_runs(now)
    if backend_slug is not None:
        runs = runs.filter(backend__slug=backend_slug)
    counts: dict[str, Count] = {}
    for days in WINDOWS:
        within = Q(began__gte=now - timedelta(days=days))
        counts[f"finished_{days}"] = Count("pk", filter=within)
        counts[f"succeeded_{days}"] = Count("pk", filter=within & Q(status=Run.Status.PASSED))
        counts[f"timed_out_{days}"] = Count("pk", filter=within & Q(status=Run.Status.TIMED_OUT))
    grouped = (
        runs.values("backend__slug", "job_name")
        .annotate(**counts)
        .order_by("backend__slug", "job_name")
    )
    per_job: dict[str, list[Row]] = {}
    for values in grouped:
        row = Row(values["backend__slug"], values["job_name"], _windows(values))
        per_job.setdefault(row.backend, []).append(row)
    return [row for slug, jobs in per_job.items() for row in (_total(slug, jobs), *jobs)]


def _windows(values: Mapping[str, Any]) -> tuple[Figures, ...]:
    return tuple(
        Figures(days, values[f"finished_{days}"], values[f"succeeded_{days}"],
                values[f"timed_out_{days}"])
        for days in WINDOWS
    )  # fmt: skip


def _total(backend: str, jobs: list[Row]) -> Row:
    """All of a backend's jobs together (the HUD judges a repository as a whole)."""
    windows = tuple(
        Figures(
            days,
            sum(job.windows[i].finished for job in jobs),
            sum(job.windows[i].succeeded for job in jobs),
            sum(job.windows[i].timed_out for job in jobs),
        )
        for i, days in enumerate(WINDOWS)
    )
    return Row(backend, "", windows)


def thresholds() -> dict[str, object]:
    return {
        "pass_rate_above": PASS_RATE_ABOVE,
        "timeout_rate_below": TIMEOUT_RATE_BELOW,
        "windows_days": list(WINDOWS),
    }


def of_backend(slug: str, now: datetime | None = None) -> dict[str, object]:
    """One backend's readiness as the API answers it: all its jobs, then each job."""
    found = rows(slug, now)
    overall = found[0] if found else _total(slug, [])
    return {
        "backend": slug,
        "thresholds": thresholds(),
        "overall": overall.as_dict(),
        "jobs": [row.as_dict() for row in found[1:]],
    }
