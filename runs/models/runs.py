"""Runs: one combination tested per HUD job, and the built artifacts it installs."""

import uuid
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Count
from django.urls import reverse
from django.utils import timezone

from crcr_site.lib.leases import Leased
from crcr_site.lib.ranking import first_of_each
from runs.models.backends import Backend
from runs.models.intake import Trigger


class Artifact(models.Model):
    """A built file (PyTorch or backend wheel), registered once and verified by hash."""

    class Kind(models.TextChoices):
        PYTORCH = "pytorch", "PyTorch wheel"
        BACKEND = "backend", "backend wheel"

    kind = models.CharField(max_length=10, choices=Kind.choices)
    name = models.CharField(max_length=200)
    version = models.CharField(max_length=100)
    sha256 = models.CharField(max_length=64, unique=True)
    size = models.BigIntegerField(default=0)
    file = models.FileField(upload_to="artifacts/", blank=True, max_length=500)
    location = models.CharField(max_length=500, blank=True, help_text="where it came from")
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.name} {self.version}"


FAILURES_SHOWN = 10  # per category and verdict on the run page; the rest are counted


class Run(Leased):
    """One combination (backend × PyTorch SHA × test suite × config): one HUD job."""

    class Status(models.TextChoices):
        QUEUED = "queued", "queued"
        PLANNING = "planning", "planning"
        RUNNING = "running", "running"
        PASSED = "passed", "passed"
        FAILED = "failed", "failed"
        CANCELLED = "cancelled", "cancelled"
        TIMED_OUT = "timed_out", "timed out"
        ERROR = "error", "infrastructure error"

    FINISHED = (Status.PASSED, Status.FAILED, Status.CANCELLED, Status.TIMED_OUT, Status.ERROR)

    uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    trigger = models.ForeignKey(Trigger, on_delete=models.PROTECT, related_name="runs")
    backend = models.ForeignKey(Backend, on_delete=models.PROTECT, related_name="runs")
    job_name = models.CharField(max_length=200)
    is_primary = models.BooleanField(default=True)
    backend_version = models.CharField(max_length=100)
    pytorch_sha = models.CharField(max_length=40)
    test_suite_sha = models.CharField(max_length=40)
    config_version = models.ForeignKey(
        "selection.ConfigVersion", on_delete=models.PROTECT, related_name="runs"
    )
    artifacts = models.ManyToManyField(Artifact, blank=True, related_name="runs")
    run_attempt = models.PositiveIntegerField(default=1)
    # A later attempt re-runs the failed shards of its first attempt's run (`runs.attempts`).
    retry_of = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="attempts"
    )
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    changed_since_green = models.JSONField(
        default=list, blank=True, help_text="what moved since the job's last green run"
    )
    error = models.TextField(blank=True, help_text="why the run could not run, if it could not")
    stage = models.CharField(max_length=300, blank=True, help_text="what planning is doing now")
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Counted once when the run finishes: the HUD and the run page read it instead of
    # counting 100,000 results on every view (`runs.models.results.final_counts`).
    test_summary = models.JSONField(
        null=True, blank=True, help_text="tests per final outcome, stored when the run finished"
    )
    # [category, verdict, failures] per group, stored with `test_summary`: the run page's
    # group sizes, the HUD's flaky cells and red jobs' regressions, without a count.
    failure_summary = models.JSONField(
        null=True, blank=True, help_text="failures per category and verdict, stored when finished"
    )

    class Meta:
        indexes = [
            # A job's runs newest first: "last green run of this job", a cell's later
            # attempts, and the HUD's trends, ranked from the index alone (with the status).
            models.Index(
                fields=["job_name", "-created_at", "-id"], include=["status"], name="run_job_newest"
            ),
            # The HUD grid: a page's commits walked from the newest run back, and their runs.
            models.Index(fields=["created_at", "id"], name="run_newest"),
            models.Index(fields=["pytorch_sha", "created_at", "id"], name="run_by_commit"),
            # What the HUD's cached summaries check (`runs.hud._section_key`): the last end,
            # and the runs not finished (not in Run.FINISHED), a few of many.
            models.Index(fields=["finished_at"], name="run_ended"),
            models.Index(
                fields=["id"],
                condition=~models.Q(
                    status__in=["passed", "failed", "cancelled", "timed_out", "error"]
                ),
                name="run_unfinished",
            ),
        ]
        constraints = [
            models.UniqueConstraint(fields=["retry_of", "run_attempt"], name="run_attempt_once")
        ]
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.job_name} @ {self.pytorch_sha[:12]}"

    @property
    def hud_run_id(self) -> int:
        """The run every attempt reports under: the first attempt's."""
        return self.retry_of_id or self.pk

    @property
    def is_finished(self) -> bool:
        return self.status in self.FINISHED

    def only_upstream_changed(self) -> bool:
        """Since the job's last green run, only PyTorch (and so its test suite) moved."""
        changed = set(self.changed_since_green)
        return bool(changed) and changed <= {"PyTorch", "test suite"}

    def attribution(self) -> str:
        """What a red run's failure is put down to (`attribution`)."""
        return attribution(self.status, self.changed_since_green)

    def failure_groups(self) -> list[dict[str, Any]]:
        """Failures grouped by category and verdict: each group's size and its first
        `FAILURES_SHOWN` failures, in two queries however many failures the run has (one
        once it finished; one more on SQLite).

        1. each group's size: stored when the run finished (`summarise`), else a count over
           the (run, category, verdict) index;
        2. each group's first failures with their results, by the ids of
           `crcr_site.lib.ranking.first_of_each` (on PostgreSQL a walk of that index that
           stops at `FAILURES_SHOWN` a group, where a window read all 10,000 of a big
           run's)."""
        from runs.models.results import Failure  # results.py imports this module

        groups: dict[tuple[str, str], dict[str, Any]] = {
            (category, verdict): {
                "category": Failure.Category(category).label, "count": size, "failures": [],
                "verdict": Failure.Verdict(verdict).label,
            }
            for category, verdict, size in sorted(self.failure_counts())
        }  # fmt: skip
        keys = [{"category": category, "verdict": verdict} for category, verdict in groups]
        ids = first_of_each(self.failures.all(), keys, FAILURES_SHOWN)
        shown = Failure.objects.filter(pk__in=ids).select_related("result")
        for failure in shown.order_by("pk"):
            # A failure classified between the two queries is left for the next view.
            if (failure.category, failure.verdict) in groups:
                groups[(failure.category, failure.verdict)]["failures"].append(failure)
        for each in groups.values():
            each["more"] = max(0, each["count"] - len(each["failures"]))
        return list(groups.values())

    def unexpected_passes(self) -> dict[str, Any]:
        """Tests listed xfail that passed (XPASS, strict or not): how many, the first few.
        Never failures: the review queue holds their promotion proposals. None, without a
        query, when the counts the run stored say so."""
        if self.test_summary is not None and not self.test_summary.get("xpassed"):
            return {"count": 0, "first": [], "more": 0}
        passed = self.results.filter(outcome="xpassed")  # the (run, outcome) index
        first = list(passed.order_by("node_id").values_list("node_id", "mode")[:FAILURES_SHOWN])
        count = passed.count() if len(first) == FAILURES_SHOWN else len(first)
        return {"count": count, "first": first, "more": count - len(first)}

    def page_url(self, base: str = "") -> str:
        """The absolute URL of the run's page, for links crcr sends out: on the server
        `base` when given (where a person asked for them), else CRCR_PUBLIC_URL."""
        base = (base or settings.CRCR_PUBLIC_URL).rstrip("/")
        return f"{base}{reverse('runs:run_detail', args=[self.uuid])}"

    def log_url(self, shard_index: int | None = None) -> str:
        """The absolute URL of the run's log (the page of its first failure), or of one
        shard's output: reproducibility's log pages, reached by name (runs never imports
        that app)."""
        base = settings.CRCR_PUBLIC_URL.rstrip("/")
        path = reverse("reproducibility:test_log", args=[self.uuid])
        return f"{base}{path}" + (f"shard-{shard_index}/" if shard_index is not None else "")

    def test_counts(self) -> dict[str, int]:
        """passed/failed/skipped/total over each test's final attempt, counted in the database."""
        # Imported here: results.py imports Run for its foreign keys.
        from runs.models.results import final_counts, summary

        return summary(final_counts([self])[self.pk])

    def failure_counts(self) -> list[tuple[str, str, int]]:
        """(category, verdict, failures) per group: stored once the run finished, else
        counted (over the (run, category, verdict) index)."""
        if self.failure_summary is not None:
            return [(category, verdict, size) for category, verdict, size in self.failure_summary]
        sizes = self.failures.values_list("category", "verdict").annotate(n=Count("pk"))
        return list(sizes.order_by("category", "verdict"))

    def summarise(self) -> None:
        """Store the final outcomes' counts and the failures' per group (unsaved): done when
        the run finishes, after its failures are classified."""
        from runs.models.results import final_counts

        self.test_summary = self.failure_summary = None
        self.test_summary = dict(final_counts([self])[self.pk])
        self.failure_summary = [list(group) for group in self.failure_counts()]


def attribution(status: str, changed_since_green: list[str]) -> str:
    """What a red run's failure is put down to, from what moved since the job's last green run.

    Empty for a run that is not red. PyTorch and its test suite move together
    (the suite is PyTorch's tests at that SHA), so either alone reads as upstream.
    """
    if status not in (Run.Status.FAILED, Run.Status.TIMED_OUT):
        return ""
    changed = set(changed_since_green)
    if "no green run yet" in changed:
        return "no earlier green run to compare with"
    if not changed:
        return "nothing changed since the last green run: flaky or infrastructure"
    names = []
    if "PyTorch" in changed:
        names.append("PyTorch")
    elif "test suite" in changed:
        names.append("the test suite")
    names += [f"the {name}" for name in ("backend", "config") if name in changed]
    if len(names) == 1:
        return f"only {names[0]} changed since the last green run"
    if len(names) == 2:
        return f"both {names[0]} and {names[1]} changed since the last green run"
    return f"{', '.join(names[:-1])} and {names[-1]} changed since the last green run"
