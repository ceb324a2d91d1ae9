"""Results: a run's shards, each test attempt's outcome, failures and duration history."""

import uuid
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from django.db import connection, models
from django.utils import timezone

from runs.models.runs import Run
from runs.triage import error_line

if TYPE_CHECKING:
    from runs.charts import Bar


class JSONArrayLength(models.Func):
    """The length of a JSON array column, in the database (SQLite and PostgreSQL)."""

    function = "JSON_ARRAY_LENGTH"
    output_field = models.IntegerField()

    def as_postgresql(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        return self.as_sql(compiler, connection, function="JSONB_ARRAY_LENGTH", **extra)


class ShardQuerySet(models.QuerySet):
    def listed(self) -> "ShardQuerySet":
        """Shards for a table: each with `test_count`, without reading its (long) list of ids."""
        return self.defer("test_ids").annotate(test_count=JSONArrayLength("test_ids"))


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
    # What its HUD job reports as `environment`: the SDK and device versions the tests ran
    # with, written by reproducibility's record of the worker that claimed it.
    environment = models.JSONField(default=dict, blank=True)

    objects = ShardQuerySet.as_manager()

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

    def tests_stored(self) -> int:
        """How many of its tests have a stored result (each once, whatever its attempts)."""
        return self.results.values("node_id").distinct().count()

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
    # PyTorch's parametrized ids run well past 500 characters: no length limit.
    node_id = models.TextField()
    file_path = models.CharField(max_length=300)
    class_name = models.CharField(max_length=200, blank=True)
    test_name = models.TextField(help_text="generic test (source method) name")
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
        indexes = [
            # The run page's failures and counts, and the verdict's "last green" lookup.
            models.Index(fields=["run", "outcome"], name="result_run_outcome"),
            # `final_counts`: a run's retried attempts, the few rows that supersede others.
            models.Index(
                fields=["run"], condition=models.Q(attempt__gt=1), name="result_run_retried"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.node_id} #{self.attempt}: {self.outcome}"


_SUPERSEDED = """
    SELECT run_id, outcome, COUNT(*) FROM {table} WHERE run_id IN ({ids}) GROUP BY run_id, outcome
    UNION ALL
    SELECT run_id, outcome, -COUNT(*) FROM {table} WHERE id IN (
        SELECT earlier.id FROM {table} later JOIN {table} earlier
        ON earlier.shard_id = later.shard_id AND earlier.node_id = later.node_id
        AND earlier.attempt < later.attempt
        WHERE later.run_id IN ({ids}) AND later.attempt > 1
    ) GROUP BY run_id, outcome
"""


class Counted(Protocol):
    """A run as `final_counts` reads it (a Run, or a row of its values)."""

    @property
    def pk(self) -> Any: ...

    @property
    def test_summary(self) -> Any: ...


def final_counts(runs: Iterable[Counted]) -> dict[int, Counter[str]]:
    """Per run, its tests counted once each at their final attempt's outcome.

    A run that stored its counts when it finished (`Run.test_summary`) costs nothing;
    the others are counted in the database in one query, never read into Python:
    1. every attempt, counted by outcome (the (run, outcome) index alone answers it);
    2. less the attempts a later attempt of the same test in the same shard supersedes,
       found from the retried rows (attempt > 1, their own partial index), which are few.
    """
    counts: dict[int, Counter[str]] = {}
    ids = []
    for run in runs:
        counts[run.pk] = Counter(run.test_summary or {})
        if run.test_summary is None:
            ids.append(run.pk)
    if not ids:
        return counts
    marks = ", ".join(["%s"] * len(ids))
    with connection.cursor() as cursor:
        cursor.execute(_SUPERSEDED.format(table=TestResult._meta.db_table, ids=marks), [*ids, *ids])
        for run_id, outcome, number in cursor.fetchall():
            counts[run_id][outcome] += number
    return counts


# As plain strings: an enum member hashes in Python, and the HUD sums 1,000 runs' counts.
_PASSING = tuple(str(outcome.value) for outcome in TestResult.PASSING)
_SKIPPED = str(TestResult.Outcome.SKIPPED.value)


def summary(outcomes: Mapping[str, int]) -> dict[str, int]:
    """passed/failed/skipped/total from final outcomes' counts."""
    get = outcomes.get
    passed = sum(get(outcome, 0) for outcome in _PASSING)
    skipped = get(_SKIPPED, 0)
    total = sum(outcomes.values())
    return {
        "passed": passed,
        "failed": total - passed - skipped,
        "skipped": skipped,
        "total": total,
    }


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

    class Meta:
        indexes = [
            # The run page's groups (`Run.failure_groups`): each group's first failures
            # and its size, read from the index in its order, without a sort.
            models.Index(fields=["run", "category", "verdict", "id"], name="failure_run_group"),
            # The HUD's "red now": a red run's regressions, counted and the first few ranked
            # from the index alone (`runs.hud.red_now`).
            models.Index(fields=["run", "verdict", "id"], name="failure_run_verdict"),
        ]

    def __str__(self) -> str:
        return f"{self.result.node_id}: {self.category} ({self.verdict})"

    @property
    def first_line(self) -> str:
        """The line that says what failed: the one its rule decided on, else the trace's error
        line (`AssertionError: …`, never a frame's `self = <…>`)."""
        return self.decisive_line.strip() or error_line(self.result.message)


class TestDuration(models.Model):
    """Duration history of one test on one device, robust to outliers."""

    __test__ = False

    test_id = models.TextField()
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
