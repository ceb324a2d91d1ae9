"""Upstream events, runs, shards, results and HUD callbacks."""

import uuid
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import models
from django.urls import reverse
from django.utils import timezone

if TYPE_CHECKING:
    from runs.charts import Bar


class Backend(models.Model):
    """An out-of-tree accelerator backend and how crcr treats it."""

    class RelayMode(models.TextChoices):
        PER_JOB = "per_job", "per job (each shard is a HUD job)"
        AGGREGATE = "aggregate", "aggregate (one HUD job per run)"

    slug = models.SlugField(unique=True)
    name = models.CharField(max_length=200)
    device_module = models.CharField(
        max_length=200, help_text="Python module that registers the privateuse1 backend"
    )
    repository = models.CharField(max_length=200, help_text="owner/name on GitHub")
    version = models.CharField(max_length=100, default="0.0.0")
    extra_versions = models.JSONField(
        default=list, blank=True, help_text="other backend versions tested against each SHA"
    )
    extension_points = models.JSONField(
        default=list, blank=True, help_text="hooked areas: eager, autograd, inductor, …"
    )
    scope_preference = models.TextField(blank=True, help_text='e.g. "no autograd yet"')
    gate_policy = models.JSONField(default=dict, blank=True)
    tracked_release = models.CharField(max_length=100, blank=True, help_text="release/X.Y")
    relay_mode = models.CharField(
        max_length=20, choices=RelayMode.choices, default=RelayMode.AGGREGATE
    )
    relay_url = models.URLField(blank=True, help_text="CRCR callback endpoint; empty: none")
    relay_token = models.CharField(
        max_length=300, default="none", help_text="oidc, file:/path/to/token or none"
    )
    webhook_secret = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return self.name


class Dispatch(models.Model):
    """One upstream event as CRCR (or a GitHub webhook) delivered it, stored raw first."""

    class Source(models.TextChoices):
        CRCR = "crcr", "CRCR repository_dispatch"
        WEBHOOK = "webhook", "GitHub webhook"

    class Verdict(models.TextChoices):
        PENDING = "pending", "pending"
        ACCEPTED = "accepted", "accepted: built"
        RECORDED = "recorded", "recorded, not built"
        RECHECK = "recheck", "waiting for a re-check"
        REJECTED = "rejected", "rejected"

    uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    backend = models.ForeignKey(Backend, on_delete=models.PROTECT, related_name="dispatches")
    delivery_id = models.CharField(max_length=100)
    source = models.CharField(max_length=10, choices=Source.choices, default=Source.CRCR)
    event_type = models.CharField(max_length=40)
    raw_body = models.TextField()
    payload = models.JSONField()
    action = models.CharField(max_length=40, blank=True)
    pr_number = models.PositiveIntegerField(null=True, blank=True)
    base_ref = models.CharField(max_length=200, blank=True)
    head_sha = models.CharField(max_length=40, blank=True)
    verdict = models.CharField(max_length=10, choices=Verdict.choices, default=Verdict.PENDING)
    verdict_reason = models.TextField(blank=True)
    recheck_at = models.DateTimeField(null=True, blank=True)
    received_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            # Idempotent intake: a redelivery finds the first record.
            models.UniqueConstraint(
                fields=["backend", "delivery_id"], name="dispatch_unique_delivery"
            )
        ]
        # The dispatch list, newest first.
        indexes = [models.Index(fields=["-received_at"], name="dispatch_recent")]
        ordering = ["-received_at"]

    def __str__(self) -> str:
        return f"{self.event_type} {self.delivery_id}"

    @staticmethod
    def fields_from_payload(event_type: str, payload: dict[str, Any]) -> dict[str, Any]:
        """The columns the gate and the pages read, taken from a validated payload."""
        if event_type == "pull_request":
            pull = payload["pull_request"]
            return {
                "action": payload["action"],
                "pr_number": pull["number"],
                "base_ref": pull["base"]["ref"],
                "head_sha": pull["head"]["sha"],
            }
        return {"action": "push", "base_ref": payload["ref"], "head_sha": payload["after"]}

    @property
    def labels(self) -> list[str]:
        if self.event_type != "pull_request":
            return []
        return [label["name"] for label in self.payload["pull_request"].get("labels", [])]

    def decide(self, verdict: str, reason: str, expected: tuple[str, ...]) -> bool:
        """Record the gate's verdict if the dispatch is still in an expected state."""
        # Conditional update: a redelivered gate task finds the verdict taken and stops.
        changed = Dispatch.objects.filter(pk=self.pk, verdict__in=expected).update(
            verdict=verdict, verdict_reason=reason
        )
        if changed:
            self.verdict, self.verdict_reason = verdict, reason
        return bool(changed)


class Trigger(models.Model):
    """What asked for a build: a dispatch, the nightly schedule, a release or a person."""

    class Kind(models.TextChoices):
        DISPATCH = "dispatch", "dispatch"
        NIGHTLY = "nightly", "nightly"
        RELEASE = "release", "release"
        MANUAL = "manual", "manual"

    uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    backend = models.ForeignKey(Backend, on_delete=models.PROTECT, related_name="triggers")
    kind = models.CharField(max_length=10, choices=Kind.choices)
    dispatch = models.OneToOneField(
        Dispatch, null=True, blank=True, on_delete=models.PROTECT, related_name="trigger"
    )
    ref = models.CharField(max_length=200, blank=True, help_text="branch the SHA came from")
    pytorch_sha = models.CharField(max_length=40)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.kind} {self.pytorch_sha[:12]}"


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


class Run(models.Model):
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
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    changed_since_green = models.JSONField(
        default=list, blank=True, help_text="what moved since the job's last green run"
    )
    error = models.TextField(blank=True, help_text="why the run could not run, if it could not")
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        # The HUD grid and "last green run of this job".
        indexes = [models.Index(fields=["job_name", "-created_at"], name="run_job_recent")]
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.job_name} @ {self.pytorch_sha[:12]}"

    @property
    def is_finished(self) -> bool:
        return self.status in self.FINISHED

    def only_upstream_changed(self) -> bool:
        """Since the job's last green run, only PyTorch (and so its test suite) moved."""
        changed = set(self.changed_since_green)
        return bool(changed) and changed <= {"PyTorch", "test suite"}

    def attribution(self) -> str:
        """What a red run's failure is put down to, from what moved since the job's last green run.

        Empty for a run that is not red. PyTorch and its test suite move together
        (the suite is PyTorch's tests at that SHA), so either alone reads as upstream.
        """
        if self.status not in (self.Status.FAILED, self.Status.TIMED_OUT):
            return ""
        changed = set(self.changed_since_green)
        if "no green run yet" in changed:
            return "no green run yet: nothing to compare with"
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

    def failure_groups(self) -> list[dict[str, Any]]:
        """Failures grouped by category and verdict, each with its tests' first lines."""
        groups: dict[tuple[str, str], dict[str, Any]] = {}
        failures = self.failures.select_related("result").order_by("category", "verdict")
        for failure in failures:
            key = (failure.get_category_display(), failure.get_verdict_display())
            group = groups.setdefault(key, {"category": key[0], "verdict": key[1], "failures": []})
            group["failures"].append(failure)
        return list(groups.values())

    def page_url(self) -> str:
        """The absolute URL of the run's page, for links crcr sends out."""
        base = settings.CRCR_PUBLIC_URL.rstrip("/")
        return f"{base}{reverse('runs:run_detail', args=[self.uuid])}"

    def test_counts(self) -> dict[str, int]:
        """passed/failed/skipped/total over each test's final attempt."""
        final = {}
        for node_id, outcome in self.results.order_by("attempt").values_list("node_id", "outcome"):
            final[node_id] = outcome
        outcomes = list(final.values())
        passed = sum(o in TestResult.PASSING for o in outcomes)
        skipped = sum(o == TestResult.Outcome.SKIPPED for o in outcomes)
        failed = len(outcomes) - passed - skipped
        return {"passed": passed, "failed": failed, "skipped": skipped, "total": len(outcomes)}


class Shard(models.Model):
    """A slice of a run's tests executed in one pytest process on a device host."""

    class Status(models.TextChoices):
        PENDING = "pending", "pending"
        RUNNING = "running", "running"
        DONE = "done", "done"
        LOST = "lost", "lost to infrastructure"
        ERROR = "error", "infrastructure error"

    uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="shards")
    index = models.PositiveIntegerField()
    test_ids = models.JSONField(default=list)
    estimated_seconds = models.FloatField(default=0)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    worker = models.CharField(max_length=200, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    tests_done = models.PositiveIntegerField(
        default=0, help_text="tests the running attempt has finished, as of its last heartbeat"
    )
    exit_code = models.IntegerField(null=True, blank=True)
    error = models.TextField(blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "index"], name="shard_unique_index")]
        ordering = ["run", "index"]

    def __str__(self) -> str:
        return f"{self.run} shard {self.index}"

    @property
    def actual_seconds(self) -> float | None:
        if self.started_at is None or self.finished_at is None:
            return None
        return (self.finished_at - self.started_at).total_seconds()

    def test_counts(self) -> dict[str, int]:
        return self.results.all().counts()

    def chart_bar(self) -> "Bar":
        from runs.charts import Bar

        return Bar(f"shard {self.index}", self.estimated_seconds, self.actual_seconds)


class TestResultQuerySet(models.QuerySet):
    def counts(self) -> dict[str, int]:
        """passed/failed/skipped/total over each test's final attempt."""
        final = dict(self.order_by("attempt").values_list("node_id", "outcome"))
        outcomes = list(final.values())
        passed = sum(o in TestResult.PASSING for o in outcomes)
        skipped = sum(o == TestResult.Outcome.SKIPPED for o in outcomes)
        failed = len(outcomes) - passed - skipped
        return {"passed": passed, "failed": failed, "skipped": skipped, "total": len(outcomes)}


class TestResult(models.Model):
    """One attempt of one test; retries add rows, never overwrite them."""

    class Outcome(models.TextChoices):
        PASSED = "passed", "passed"
        FAILED = "failed", "failed"
        ERROR = "error", "error"
        SKIPPED = "skipped", "skipped"
        XFAILED = "xfailed", "expected failure"
        XPASSED = "xpassed", "unexpected pass"
        CRASHED = "crashed", "crashed"
        TIMED_OUT = "timed_out", "timed out"

    __test__ = False  # not a pytest test class
    PASSING = (Outcome.PASSED, Outcome.XFAILED, Outcome.XPASSED)
    FAILING = (Outcome.FAILED, Outcome.ERROR, Outcome.CRASHED, Outcome.TIMED_OUT)

    # No index of their own: the unique (shard, node_id, attempt) and the
    # (run, outcome) indexes lead with them, and each index costs every insert.
    shard = models.ForeignKey(
        Shard, on_delete=models.CASCADE, related_name="results", db_index=False
    )
    # The shard's run, copied for the run page's queries; the shard's foreign key
    # already guarantees it, so the database skips a second check per inserted row.
    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, related_name="results", db_index=False, db_constraint=False
    )
    attempt = models.PositiveIntegerField(default=1)
    node_id = models.CharField(max_length=500)
    file_path = models.CharField(max_length=300)
    class_name = models.CharField(max_length=200, blank=True)
    test_name = models.CharField(max_length=300, help_text="generic test (source method) name")
    op = models.CharField(max_length=100, blank=True)
    dtype = models.CharField(max_length=40, blank=True)
    module = models.CharField(max_length=200, blank=True)
    mode = models.CharField(max_length=20, blank=True)
    outcome = models.CharField(max_length=10, choices=Outcome.choices)
    duration = models.FloatField(default=0)
    message = models.TextField(blank=True)
    markers = models.JSONField(default=list, blank=True)
    recorded_at = models.DateTimeField(default=timezone.now)

    objects = TestResultQuerySet.as_manager()

    class Meta:
        constraints = [
            # Ingestion is idempotent: a re-delivered report cannot double-count.
            models.UniqueConstraint(
                fields=["shard", "node_id", "attempt"], name="result_unique_attempt"
            )
        ]
        # The run page's failures and the verdict's "last green" lookup.
        indexes = [models.Index(fields=["run", "outcome"], name="result_run_outcome")]

    def __str__(self) -> str:
        return f"{self.node_id} #{self.attempt}: {self.outcome}"


class Failure(models.Model):
    """The classification and verdict of a test's final failing outcome in a run."""

    class Category(models.TextChoices):
        UNSUPPORTED_OP = "unsupported_op", "unsupported op"
        UNSUPPORTED_DTYPE = "unsupported_dtype", "unsupported dtype"
        NUMERICAL_MISMATCH = "numerical_mismatch", "numerical mismatch"
        CRASH = "crash", "crash"
        TIMEOUT = "timeout", "timeout"
        INFRA = "infra", "infrastructure"
        TEST_ERROR = "test_error", "test error"
        OTHER = "other", "other"

    class Verdict(models.TextChoices):
        REGRESSION = "regression", "regression"
        FLAKY = "flaky", "flaky"
        KNOWN = "known", "known"
        INFRA = "infra", "infrastructure"

    result = models.OneToOneField(TestResult, on_delete=models.CASCADE, related_name="failure")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="failures")
    category = models.CharField(max_length=20, choices=Category.choices)
    rule = models.CharField(max_length=100, blank=True)
    op_name = models.CharField(max_length=100, blank=True)
    decisive_line = models.TextField(blank=True)
    verdict = models.CharField(max_length=12, choices=Verdict.choices)
    verdict_reason = models.TextField(blank=True)

    def __str__(self) -> str:
        return f"{self.result.node_id}: {self.category} ({self.verdict})"

    @property
    def first_line(self) -> str:
        text = self.decisive_line or self.result.message
        return next((line for line in text.splitlines() if line.strip()), "")


class TestDuration(models.Model):
    """Duration history of one test on one device, robust to outliers."""

    __test__ = False

    test_id = models.CharField(max_length=500)
    device = models.CharField(max_length=100)
    seconds = models.FloatField(help_text="decayed mean")
    spread = models.FloatField(default=0, help_text="decayed mean absolute deviation")
    samples = models.PositiveIntegerField(default=1)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["test_id", "device"], name="duration_unique_test")
        ]

    def __str__(self) -> str:
        return f"{self.test_id} on {self.device}: {self.seconds:.2f}s"


class RelayCallback(models.Model):
    """Outbox row: one CRCR callback, delivered in order and at most once."""

    class Transition(models.TextChoices):
        IN_PROGRESS = "in_progress", "in progress"
        COMPLETED = "completed", "completed"

    class Status(models.TextChoices):
        PENDING = "pending", "pending"
        SENDING = "sending", "sending"
        DELIVERED = "delivered", "delivered"
        REJECTED = "rejected", "rejected (final)"

    uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="callbacks")
    shard = models.ForeignKey(
        Shard, null=True, blank=True, on_delete=models.CASCADE, related_name="callbacks"
    )
    delivery_id = models.CharField(max_length=100)
    workflow_name = models.CharField(max_length=200)
    job_name = models.CharField(max_length=200)
    # The HUD job identity's run_id/run_attempt (strings in the CRCR schema).
    hud_run_id = models.CharField(max_length=100)
    hud_run_attempt = models.CharField(max_length=20, default="1")
    transition = models.CharField(max_length=12, choices=Transition.choices)
    body = models.JSONField()
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    last_status_code = models.IntegerField(null=True, blank=True)
    last_response = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            # One callback per transition per HUD job identity.
            models.UniqueConstraint(
                fields=[
                    "delivery_id",
                    "job_name",
                    "hud_run_id",
                    "hud_run_attempt",
                    "transition",
                ],
                name="callback_unique_transition",
            )
        ]
        # The relay worker's "what is due" scan.
        indexes = [models.Index(fields=["status", "next_attempt_at"], name="callback_due")]
        ordering = ["created_at"]

    def __str__(self) -> str:
        return f"{self.job_name} {self.transition} ({self.status})"
