"""The HUD grid: upstream commits as rows, newest first and a page at a time; jobs as
columns grouped by backend; one coloured letter a cell.

Every run of a job at a commit is an attempt of that job's cell (a "re-run failed jobs"
attempt, a manual trigger at the same SHA, a bundle's re-run): the cell shows the newest.
A page costs the same few queries whatever is stored:
1. the page's commits (the SHAs of the runs that match the filters, by first run, newest
   first), one more than a page to know whether another follows;
2. their runs (each with whether it was flaky), their triggers' facts (read from the
   dispatch payload in the database), and the test counts of the runs that did not store
   theirs when they finished.
"""

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from statistics import median
from typing import Any
from uuid import UUID

from django.db.models import (
    Case,
    DurationField,
    Exists,
    ExpressionWrapper,
    F,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
    When,
)
from django.db.models.fields.json import KeyTextTransform, KeyTransform
from django.db.models.functions import Concat, Replace
from django.utils.dateparse import parse_datetime

from runs.combinations import RERUN_SUFFIX
from runs.models import Failure, Run, TestResult, Trigger
from runs.models.results import final_counts, summary
from runs.models.runs import attribution

PER_PAGE = 50
DEFAULT_REPOSITORY = "pytorch/pytorch"
REPOSITORY_RE = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")

# The HUD job of a run: a bundle's re-run counts as an attempt of its job.
HUD_JOB = Replace(F("job_name"), Value(RERUN_SUFFIX), Value(""))

# DESIGN §6: O success, X failure, F passed after a retry, C cancelled, T timed out,
# S nothing ran, ? running. The letter stays next to the colour for colour-blind readers.
LETTERS: dict[str, str] = {
    Run.Status.PASSED: "O",
    Run.Status.FAILED: "X",
    Run.Status.CANCELLED: "C",
    Run.Status.ERROR: "C",
    Run.Status.TIMED_OUT: "T",
}
TONES = {"O": "green", "X": "red", "T": "red", "F": "amber", "?": "amber", "C": "grey"}
LEGEND = [
    ("O", "passed"),
    ("X", "failed"),
    ("T", "timed out"),
    ("F", "flaky: passed after a retry"),
    ("?", "running"),
    ("C", "cancelled or infrastructure error"),
    ("S", "no test ran"),
]


@dataclass(slots=True)
class Attempt:
    """A run as the grid reads it: a row of values. A page of 50 commits x 20 jobs has
    1,000 of them; as model instances they cost more than the SQL that read them."""

    pk: int
    uuid: UUID
    job_name: str
    cell_job: str  # the HUD job: a bundle's re-run is an attempt of its job (`HUD_JOB`)
    backend: str
    pytorch_sha: str
    status: str
    queued: timedelta | None  # from its creation to its start; None when not started
    ran: timedelta | None  # from its start to its end; None when not ended
    changed_since_green: list[str] | None  # read for a red run only
    test_summary: dict[str, int] | None
    flaky: bool  # passed, with a failure put down to flakiness

    @property
    def is_finished(self) -> bool:
        return self.status in Run.FINISHED

    def attribution(self) -> str:
        return attribution(self.status, self.changed_since_green or [])


# Attempt's fields, read with `values_list` in this order (`build`). Durations, not three
# timestamps: read into Python, a timestamp costs as much as a whole row of the rest.
# What moved since green is read for red runs alone (their attribution): a JSON value
# costs more than the rest of a row.
ATTEMPT_COLUMNS = (
    "pk", "uuid", "job_name", "cell_job", "backend_slug", "pytorch_sha", "status", "queued",
    "ran", "red_changes", "test_summary", "flaky",
)  # fmt: skip
RED = (Run.Status.FAILED, Run.Status.TIMED_OUT)


@dataclass
class Cell:
    """One job at one commit: its attempts oldest first, shown as the newest."""

    attempts: list[Attempt]
    letter: str = "?"
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def run(self) -> Attempt:
        return self.attempts[-1]

    @property
    def tone(self) -> str:
        return TONES.get(self.letter, "grey")

    @property
    def title(self) -> str:
        """The hover text: status, attribution, attempt, test counts; earlier attempts."""
        run, total = self.run, len(self.attempts)
        lines = [_describe(run, f"attempt {total} of {total}")]
        if counts := self.counts:
            lines.append(
                f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped"
            )
        for number in range(total - 1, 0, -1):
            lines.append(_describe(self.attempts[number - 1], f"attempt {number}"))
        return "\n".join(lines)


STATUS_LABELS = dict(Run.Status.choices)


def _describe(run: Attempt, attempt: str) -> str:
    text = f"{run.job_name}: {STATUS_LABELS.get(run.status, run.status)}"
    if attribution := run.attribution():
        text += f" · {attribution}"
    return f"{text} · {attempt}"


@dataclass
class Job:
    """A column, with what the footer says of its cells on this page."""

    name: str
    backend: str
    finished: int = 0
    passed: int = 0
    queue: list[float] = field(default_factory=list)
    execution: list[float] = field(default_factory=list)

    @property
    def label(self) -> str:
        """The job name less its backend (that is the header above it)."""
        rest = self.name.removeprefix(self.backend).strip(" ()")
        return rest or "latest"

    @property
    def median_queue(self) -> float | None:
        return median(self.queue) if self.queue else None

    @property
    def median_execution(self) -> float | None:
        return median(self.execution) if self.execution else None


@dataclass
class Commit:
    """A row: an upstream commit, what crcr knows of it, and its cells in column order."""

    sha: str
    repository: str = DEFAULT_REPOSITORY
    pr_number: int | None = None
    title: str = ""
    author: str = ""
    when: datetime | None = None
    when_label: str = ""
    kinds: list[str] = field(default_factory=list)
    cells: dict[str, Cell] = field(default_factory=dict)
    row: list[Cell | None] = field(default_factory=list)

    @property
    def commit_url(self) -> str:
        return f"https://github.com/{self.repository}/commit/{self.sha}"

    @property
    def pr_url(self) -> str:
        return f"https://github.com/{self.repository}/pull/{self.pr_number}"

    @property
    def red(self) -> bool:
        return any(cell.tone == "red" for cell in self.cells.values())


@dataclass
class Grid:
    commits: list[Commit]
    jobs: list[Job]
    page: int
    has_next: bool

    @property
    def groups(self) -> list[tuple[str, int]]:
        """(backend, number of its jobs) in column order, for the header's first row."""
        groups: list[tuple[str, int]] = []
        for job in self.jobs:
            if groups and groups[-1][0] == job.backend:
                groups[-1] = (job.backend, groups[-1][1] + 1)
            else:
                groups.append((job.backend, 1))
        return groups


def matching_runs(job: str = "") -> QuerySet[Run]:
    runs = Run.objects.alias(hud_job=HUD_JOB)
    return runs.filter(hud_job__icontains=job) if job else runs


def red_cells(runs: QuerySet[Run]) -> QuerySet[Run]:
    """Runs that are the newest attempt of their cell and red (failed with tests, or timed out)."""
    # By job_name, not HUD_JOB, so that the run_job_newest index finds later attempts.
    same_job = Q(job_name=OuterRef("hud_job")) | Q(
        job_name=Concat(OuterRef("hud_job"), Value(RERUN_SUFFIX))
    )
    later = Q(created_at__gt=OuterRef("created_at")) | Q(
        created_at=OuterRef("created_at"), pk__gt=OuterRef("pk")
    )
    newer = Run.objects.filter(same_job, later, pytorch_sha=OuterRef("pytorch_sha"))
    # Whether tests ran: from the counts a finished run stored, else from its results (for
    # a run without any, PostgreSQL may read every result looking for one: 10 minutes for
    # the 2,800 red runs of bench/pages_at_scale.py).
    stored = Q(test_summary__isnull=False) & ~Q(test_summary={})
    ran = Q(test_summary__isnull=True) & Exists(TestResult.objects.filter(run=OuterRef("pk")))
    red = Q(status=Run.Status.TIMED_OUT) | Q(stored | ran, status=Run.Status.FAILED)
    return runs.filter(red).exclude(Exists(newer))


def build(job: str = "", failures_only: bool = False, page: int = 1) -> Grid:
    """The page's commits, newest first, and their cells, under the filters."""
    runs = matching_runs(job)
    start = (page - 1) * PER_PAGE
    shas = [
        row["pytorch_sha"] for row in _commits(runs, failures_only)[start : start + PER_PAGE + 1]
    ]
    rows = {sha: Commit(sha) for sha in shas[:PER_PAGE]}
    jobs: dict[str, Job] = {}
    for run in _attempts(runs, list(rows)):
        jobs.setdefault(run.cell_job, Job(run.cell_job, run.backend))
        cells = rows[run.pytorch_sha].cells
        cells.setdefault(run.cell_job, Cell([])).attempts.append(run)
    _add_facts(rows)
    _mark(rows.values())
    ordered = sorted(jobs.values(), key=lambda j: (j.backend, j.name != j.backend, j.name))
    for commit in rows.values():
        commit.row = [commit.cells.get(j.name) for j in ordered]
        for name, cell in commit.cells.items():
            _measure(jobs[name], cell)
    return Grid(list(rows.values()), ordered, page, has_next=len(shas) > PER_PAGE)


def _commits(runs: QuerySet[Run], failures_only: bool) -> QuerySet[Any, Any]:
    """The commits of `runs` (`pytorch_sha`), by their first run, newest first."""
    if failures_only:
        # From the red cells outwards: `IN (red cells)` makes PostgreSQL redo the red
        # cells' anti-join for every run.
        first = runs.filter(pytorch_sha=OuterRef("pytorch_sha")).order_by("created_at")
        commits = (
            red_cells(runs)
            .values("pytorch_sha")
            .annotate(first=Subquery(first.values("created_at")[:1]))
            .distinct()
        )
    else:
        # Walked from the newest run back, a run is kept when no earlier run of its commit
        # matches (one index probe each), so a page reads its own commits' runs; grouping
        # every run by commit read them all.
        earlier = runs.filter(
            Q(created_at__lt=OuterRef("created_at"))
            | Q(created_at=OuterRef("created_at"), pk__lt=OuterRef("pk")),
            pytorch_sha=OuterRef("pytorch_sha"),
        )
        commits = (
            runs.exclude(Exists(earlier)).values("pytorch_sha").annotate(first=F("created_at"))
        )
    return commits.order_by("-first", "pytorch_sha")


def _attempts(runs: QuerySet[Run], shas: list[str]) -> list[Attempt]:
    """The runs of the commits `shas`, oldest first, as `Attempt` rows."""
    flaky = Failure.objects.filter(run=OuterRef("pk"), verdict=Failure.Verdict.FLAKY)
    found = (
        runs.filter(pytorch_sha__in=shas)
        .annotate(
            cell_job=HUD_JOB,
            backend_slug=F("backend__slug"),
            queued=ExpressionWrapper(F("started_at") - F("created_at"), DurationField()),
            ran=ExpressionWrapper(F("finished_at") - F("started_at"), DurationField()),
            red_changes=Case(When(status__in=RED, then="changed_since_green")),
            # A probe of the (run, verdict, id) index a passed run.
            flaky=Case(When(status=Run.Status.PASSED, then=Exists(flaky)), default=False),
        )
        .order_by("created_at", "pk")
        .values_list(*ATTEMPT_COLUMNS)
    )
    return [Attempt(*values) for values in found]


def _mark(commits: Any) -> None:
    """Each cell's letter and its newest attempt's test counts (stored once a run finished,
    else counted in one query for all)."""
    cells = [cell for commit in commits for cell in commit.cells.values()]
    counts = counts_by_run([cell.run for cell in cells])
    for cell in cells:
        run = cell.run
        cell.counts = counts.get(run.pk, {})
        total = sum(cell.counts.values())
        red_before = any(
            a.status in (Run.Status.FAILED, Run.Status.TIMED_OUT) for a in cell.attempts
        )
        if not run.is_finished:
            cell.letter = "?"
        elif run.status == Run.Status.PASSED and (run.flaky or red_before):
            cell.letter = "F"
        elif run.status == Run.Status.FAILED and total == 0:
            cell.letter = "S"
        else:
            cell.letter = LETTERS.get(run.status, "X")


def counts_by_run(runs: list[Attempt]) -> dict[int, dict[str, int]]:
    """Per run, its tests passed, failed and skipped, each test counted once at its final
    outcome (`runs.models.results.final_counts`: stored for a finished run)."""
    counted = final_counts([run for run in runs if run.test_summary is None])
    found = {}
    for run in runs:
        outcomes = run.test_summary if run.test_summary is not None else counted[run.pk]
        if outcomes:
            total = summary(outcomes)
            found[run.pk] = {key: total[key] for key in ("passed", "failed", "skipped")}
    return found


def _measure(job: Job, cell: Cell) -> None:
    run = cell.run
    if run.is_finished:
        job.finished += 1
        job.passed += run.status == Run.Status.PASSED
    for attempt in cell.attempts:
        if attempt.queued is not None:
            job.queue.append(attempt.queued.total_seconds())
        if attempt.ran is not None:
            job.execution.append(attempt.ran.total_seconds())


def _payload_text(*keys: str) -> KeyTextTransform:
    """The text at `keys` in a trigger's dispatch payload (NULL when absent)."""
    value: Any = "dispatch__payload"
    for key in keys[:-1]:
        value = KeyTransform(key, value)
    return KeyTextTransform(keys[-1], value)


# What a trigger's dispatch payload says of its commit, read by the database (the
# payload itself, a whole GitHub event, stays there).
FACTS = {
    "repository": _payload_text("repository", "full_name"),
    "pr_title": _payload_text("pull_request", "title"),
    "pr_author": _payload_text("pull_request", "user", "login"),
    "pr_merged_at": _payload_text("pull_request", "merged_at"),
    "pr_updated_at": _payload_text("pull_request", "updated_at"),
    "push_message": _payload_text("head_commit", "message"),
    "push_author": _payload_text("head_commit", "author", "username"),
    "push_author_name": _payload_text("head_commit", "author", "name"),
    "push_time": _payload_text("head_commit", "timestamp"),
}


def _add_facts(rows: dict[str, Commit]) -> None:
    """Fill each commit's PR, title, author and time from its triggers, dispatches first."""
    triggers = (
        Trigger.objects.filter(pytorch_sha__in=list(rows))
        .order_by(F("dispatch_id").asc(nulls_last=True), "created_at")
        .values(
            "pytorch_sha", "kind", "ref", "created_at", "requested_by__username",
            "dispatch__pr_number", "dispatch__event_type", **FACTS,
        )
    )  # fmt: skip
    for row in triggers:
        facts: dict[str, Any] = dict(row)
        commit = rows[facts["pytorch_sha"]]
        repository = facts["repository"] or ""
        if REPOSITORY_RE.match(repository) and commit.repository == DEFAULT_REPOSITORY:
            commit.repository = repository
        commit.pr_number = commit.pr_number or facts["dispatch__pr_number"]
        message = (facts["push_message"] or "").strip().splitlines()
        title = facts["pr_title"] or (message[0] if message else "")
        commit.title = commit.title or title
        author = facts["pr_author"] or facts["push_author"] or facts["push_author_name"]
        commit.author = commit.author or author or facts["requested_by__username"] or ""
        if commit.when is None:
            commit.when, commit.when_label = _when(facts)
        kind = facts["ref"] if facts["kind"] == Trigger.Kind.RELEASE else facts["kind"]
        if facts["kind"] != Trigger.Kind.DISPATCH and kind and kind not in commit.kinds:
            commit.kinds.append(kind)


def _when(facts: dict[str, Any]) -> tuple[datetime | None, str]:
    """The commit's time as the event tells it, else when crcr was asked to build it."""
    for key, label in (
        ("pr_merged_at", "PR merged"),
        ("pr_updated_at", "PR updated"),
        ("push_time", "committed"),
    ):
        try:
            when = parse_datetime(facts[key] or "")
        except ValueError:
            when = None
        if when is not None:
            return when, label
    return facts["created_at"], "crcr asked to build it"
