"""The HUD grid: upstream commits as rows, newest first and a page at a time; jobs as
columns grouped by backend; one coloured letter a cell.

Every run of a job at a commit is an attempt of that job's cell (a "re-run failed jobs"
attempt, a manual trigger at the same SHA): the cell shows the newest. A bundle's re-run
is no attempt and no verdict of its own: it checks whether one attempt's outcome
reproduces, and the cell says so beside its letter (`Reproduction`).
A page costs the same few queries whatever is stored:
1. the runs' state (`state`), from indexes: it changes when a run is added, finishes or
   is deleted;
2. the page's commits (the SHAs of the runs that match the filters, by first run, newest
   first, one more than a page to know whether another follows) and what each commit's
   runs are (`_settled_keys`), both kept in Django's cache while the state is the same;
3. a commit whose runs have all finished is settled, and nothing of its row changes
   until a run is added to it: its cells, as HTML, and its facts are kept in the cache
   under what its runs are. For the others, their runs (each with whether it was flaky),
   the test counts of those that did not store theirs when they finished, and their
   triggers' facts (read from the dispatch payload in the database).
A finished run changes no more: its status, tests and failures are stored when it
finishes (`runs.results.finish_if_done`), in one transaction.
"""

import hashlib
import time
from dataclasses import dataclass, field
from html import escape
from statistics import median
from typing import Any, NamedTuple, TypeVar

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
    Subquery,
    Value,
    When,
)
from django.db.models.functions import Replace
from django.urls import reverse

from runs.combinations import RERUN_SUFFIX
from runs.hud_cells import (
    ATTEMPT_COLUMNS,
    RED,
    Attempt,
    Cell,
    Reproduction,
)
from runs.hud_commits import CACHED_FACTS, Commit, add_facts
from runs.models import Backend, Failure, Run, TestResult
from runs.models.results import final_counts, summary

PER_PAGE = 50
# A settled commit's cells in the cache: their format (bumped when the HTML changes), and
# how long they stay when no page asks for them.
CELLS_FORMAT = 3
CELLS_KEPT_SECONDS = 24 * 3600

# The HUD job of a run: a bundle's re-run is filed under its job (the filter and the
# runs' state find it), though it is never one of its cell's attempts (`UPSTREAM`).
HUD_JOB = Replace(F("job_name"), Value(RERUN_SUFFIX), Value(""))
# The runs that give a cell its verdict: all but bundles' re-runs (reproducibility.rerun
# names each "<job> (re-run)"), which check a verdict and never replace it.
UPSTREAM = ~Q(job_name__endswith=RERUN_SUFFIX)

# DESIGN §6: O success, X failure, F passed after a retry, C cancelled, T timed out,
# S nothing ran, ? running. The letter stays next to the colour for colour-blind readers.
LETTERS: dict[str, str] = {
    Run.Status.PASSED: "O",
    Run.Status.FAILED: "X",
    Run.Status.CANCELLED: "C",
    Run.Status.ERROR: "C",
    Run.Status.TIMED_OUT: "T",
}


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
class Grid:
    commits: list[Commit]
    jobs: list[Job]
    page: int
    has_next: bool
    state: str  # of the runs it was read in (`state`)
    # Where the page's table, as `hud_rows.table` writes it, is kept once every commit on
    # the page is settled (then nothing on it changes without changing `state`), and
    # that table when it was found there (`commits` and `jobs` are then left empty).
    table_key: str = ""
    table: tuple[str, str, str] | None = None
    nightly_only: list[str] = field(default_factory=list)  # backends' slugs

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


def nightly_only() -> list[str]:
    """The slugs of the backends that take nightly and release dispatches only."""
    backends = Backend.objects.filter(participation=Backend.Participation.NIGHTLY)
    return list(backends.order_by("slug").values_list("slug", flat=True))


Runs = TypeVar("Runs", bound=QuerySet[Any, Any])


def shown(runs: Runs, hidden_for: list[str]) -> Runs:
    """`runs` less the pull requests' runs of the nightly-only backends `hidden_for` (made
    before they became nightly-only: they take no pull request since), so the HUD and its
    summaries show those backends' nightly and release commits alone."""
    if not hidden_for:
        return runs  # no join where no backend is nightly-only (bench/pages_at_scale.py)
    return runs.exclude(backend__slug__in=hidden_for, trigger__dispatch__event_type="pull_request")


def matching_runs(job: str = "", hidden_for: list[str] | None = None) -> QuerySet[Run]:
    runs = Run.objects.alias(hud_job=HUD_JOB)
    return shown(runs.filter(hud_job__icontains=job) if job else runs, hidden_for or [])


def red_cells(runs: QuerySet[Run]) -> QuerySet[Run]:
    """Runs that are the newest attempt of their cell and red (failed with tests, or timed
    out). A bundle's re-run is no attempt: it neither hides a red cell nor is one."""
    # By job_name, not HUD_JOB, so that the run_job_newest index finds later attempts.
    same_job = Q(job_name=OuterRef("hud_job"))
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
    return runs.filter(UPSTREAM).filter(red).exclude(Exists(newer))


def build(job: str = "", failures_only: bool = False, page: int = 1) -> Grid:
    """The page's commits, newest first, and their cells, under the filters."""
    hidden_for = nightly_only()
    runs = matching_runs(job, hidden_for)
    now = state(job, hidden_for)
    listed = f"hud-page:{CELLS_FORMAT}:{now}:{failures_only}:{page}"
    if (found := cache.get(listed)) is None:
        start = (page - 1) * PER_PAGE
        chosen = _commits(runs, failures_only)[start : start + PER_PAGE + 1]
        shas = [row["pytorch_sha"] for row in chosen]
        found = (shas, _settled_keys(runs, shas[:PER_PAGE], job))
        cache.set(listed, found, CELLS_KEPT_SECONDS)
    shas, keys = found
    table_key = f"{listed}:table" if all(sha in keys for sha in shas[:PER_PAGE]) else ""
    if table_key and (table := cache.get(table_key)) is not None:
        return Grid([], [], page, len(shas) > PER_PAGE, now, table_key, table, hidden_for)
    rows = {sha: Commit(sha) for sha in shas[:PER_PAGE]}
    kept = cache.get_many(list(keys.values())) if keys else {}
    made = {}
    for sha, commit in rows.items():
        if (entry := kept.get(keys.get(sha, ""))) is not None:
            commit.cells, facts = entry
            for name, value in zip(CACHED_FACTS, facts, strict=True):
                setattr(commit, name, value)
        else:
            made[sha] = commit
    for sha, cells in _cells(job, list(made), hidden_for).items():
        made[sha].cells = cells
    add_facts(made)
    settled = {
        keys[sha]: (commit.cells, tuple(getattr(commit, name) for name in CACHED_FACTS))
        for sha, commit in made.items()
        if sha in keys
    }
    cache.set_many(settled, CELLS_KEPT_SECONDS)
    jobs: dict[str, Job] = {}
    for commit in rows.values():
        for name, cell in commit.cells.items():
            _measure(jobs.setdefault(name, Job(name, cell.backend)), cell)
    ordered = sorted(jobs.values(), key=lambda j: (j.backend, j.name != j.backend, j.name))
    for commit in rows.values():
        commit.row = [commit.cells.get(j.name) for j in ordered]
    return Grid(
        list(rows.values()), ordered, page, len(shas) > PER_PAGE, now, table_key,
        nightly_only=hidden_for,
    )  # fmt: skip


GENERATION = "hud-generation"


def state(job: str = "", hidden_for: list[str] | None = None) -> str:
    """The state of the runs whose HUD job contains `job`, read from indexes: the runs not
    finished (how many, the last), the last run, the last end, and the cache's generation,
    bumped when a run is deleted (`forget_runs`). A run that finishes changes the first
    and ends last; a run added is the last run. (A run made by a transaction that took its
    id before another's and committed after it, and made finished, would be missed:
    crcr makes a run queued and finishes it later.)"""
    runs = matching_runs(job, hidden_for).order_by()
    unfinished = runs.exclude(status__in=Run.FINISHED).aggregate(n=Count("pk"), last=Max("pk"))
    every = runs.aggregate(last=Max("pk"), ended=Max("finished_at"))
    # The filter and the nightly-only backends chose the runs: a backend turned nightly-only
    # changes what is shown.
    chosen = hashlib.sha256(f"{job}:{','.join(hidden_for or [])}".encode()).hexdigest()[:16]
    facts = [cache.get(GENERATION, 0), chosen, *unfinished.values(), *every.values()]
    return ":".join(str(fact).replace(" ", "T") for fact in facts)


def forget_runs(**_: Any) -> None:
    """A run was deleted: no page kept before is the HUD's any more."""
    cache.set(GENERATION, time.time_ns(), None)


def _settled_keys(runs: QuerySet[Run], shas: list[str], job: str) -> dict[str, str]:
    """The cache key of each settled commit's cells (every run of it finished): what its
    runs are (how many, the last id, the newest creation and end), which changes when a
    run is added or removed, and the filter that chose them. A finished run changes no
    more: its status, tests and failures were stored when it finished (`finish_if_done`)."""
    found = (
        runs.filter(pytorch_sha__in=shas)
        .order_by()
        .values("pytorch_sha")
        .annotate(
            n=Count("pk"), done=Count("pk", filter=Q(status__in=Run.FINISHED)), last=Max("pk"),
            made=Max("created_at"), ended=Max("finished_at"),
        )
        .values_list("pytorch_sha", "n", "done", "last", "made", "ended")
    )  # fmt: skip
    chosen = hashlib.sha256(job.encode()).hexdigest()[:16]
    return {
        sha: f"hud-cells:{CELLS_FORMAT}:{chosen}:{sha}:{n}:{last}:{made}:{ended}".replace(" ", "T")
        for sha, n, done, last, made, ended in found
        if n == done
    }


def _cells(job: str, shas: list[str], hidden_for: list[str]) -> dict[str, dict[str, "Shown"]]:
    """The cells of the commits `shas` as shown, by commit and HUD job (containing `job`)."""
    cells: dict[str, dict[str, Cell]] = {}
    for run in _attempts(job, shas, hidden_for):
        cells.setdefault(run.pytorch_sha, {}).setdefault(run.cell_job, Cell([])).attempts.append(
            run
        )
    every = [cell for by_job in cells.values() for cell in by_job.values()]
    _mark(every)
    _reproduce(every)
    # One reverse() for the page: a run's URL differs from another's by its UUID alone.
    run_url = reverse("runs:run_detail", args=[_ANY_UUID]).split(_ANY_UUID)
    rerun_url = reverse("reproducibility:rerun_detail", args=[_ANY_UUID]).split(_ANY_UUID)
    # The run's log: reproducibility's page (its first failure's trace, else its shards'
    # outputs), reached by name.
    log_url = reverse("reproducibility:test_log", args=[_ANY_UUID]).split(_ANY_UUID)
    return {
        sha: {name: _show(cell, run_url, rerun_url, log_url) for name, cell in by_job.items()}
        for sha, by_job in cells.items()
    }


def _reproduce(cells: list[Cell]) -> None:
    """Each cell's newest re-run from a bundle of one of its attempts (one query for the
    page; through the `rerun_origin` relation reproducibility gives a run, read by name:
    runs never imports it)."""
    attempts = {attempt.pk: (cell, attempt) for cell in cells for attempt in cell.attempts}
    if not attempts:
        return
    reruns = (
        Run.objects.filter(rerun_origin__original_id__in=list(attempts))
        .order_by("created_at", "pk")
        .values_list("rerun_origin__original_id", "rerun_origin__uuid", "status")
    )
    for original, uuid, status in reruns:
        cell, attempt = attempts[original]
        cell.reproduction = Reproduction(original, attempt.status, uuid, status)


def _commits(runs: QuerySet[Run], failures_only: bool) -> QuerySet[Any, Any]:
    """The commits of `runs` (`pytorch_sha`), by their first run, newest first."""
    runs = runs.filter(UPSTREAM)
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


def _attempt_rows() -> QuerySet[Run, tuple[Any, ...]]:
    flaky = Failure.objects.filter(run=OuterRef("pk"), verdict=Failure.Verdict.FLAKY)
    return (
        matching_runs()
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


# Built once, filtered per page: building its annotations cost more than running it
# (a page with a running commit, bench/pages_at_scale.py).
_ATTEMPT_ROWS = _attempt_rows()


def _attempts(job: str, shas: list[str], hidden_for: list[str]) -> list[Attempt]:
    """The runs of the commits `shas` whose HUD job contains `job`, oldest first, as
    `Attempt` rows (less the pull requests' runs of the nightly-only backends)."""
    found = shown(_ATTEMPT_ROWS, hidden_for).filter(UPSTREAM, pytorch_sha__in=shas)
    if job:
        found = found.filter(Q(cell_job__icontains=job))
    return [Attempt(*values) for values in found]


def _mark(cells: list[Cell]) -> None:
    """Each cell's letter and its newest attempt's test counts (stored once a run finished,
    else counted in one query for all)."""
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


_ANY_UUID = "00000000-0000-0000-0000-000000000000"


class Shown(NamedTuple):
    """A cell as the page shows it and its column's footer counts it: what the cache keeps
    (a tuple: 1,000 of them a page, unpickled)."""

    backend: str
    html: str  # the <td>: a link to the newest attempt with its letter, and its details
    red: bool
    finished: bool
    passed: bool
    queue: list[float]  # every attempt's seconds queued, and run
    execution: list[float]


def _show(cell: Cell, run_url: list[str], rerun_url: list[str], log_url: list[str]) -> Shown:
    run = cell.run
    retried = " retried" if len(cell.attempts) > 1 else ""
    link = f"{run_url[0]}{run.uuid}{run_url[1]}"
    tip = "<br>".join(escape(line) for line in cell.details)
    # The log: the run's first failure's trace (a red run), else its shards' outputs.
    tip += f'<br><a class="log" href="{log_url[0]}{run.uuid}{log_url[1]}">log</a>'
    repro = ""
    if made := cell.reproduction:
        verdict = made.verdict.replace(" ", "-")
        repro = f" repro-{verdict}"
        tip += f' · <a href="{rerun_url[0]}{made.uuid}{rerun_url[1]}">the re-run</a>'
    html = (
        f'<td class="cell cell-{cell.letter} tone-{cell.tone}{retried}{repro}"><a '
        f'href="{link}" aria-describedby="tip-{run.uuid}">{cell.letter}</a>'
        f'<span class="hud-tip" role="tooltip" id="tip-{run.uuid}">{tip}</span></td>'
    )
    return Shown(
        run.backend, html, cell.tone == "red", run.is_finished, run.status == Run.Status.PASSED,
        [a.queued.total_seconds() for a in cell.attempts if a.queued is not None],
        [a.ran.total_seconds() for a in cell.attempts if a.ran is not None],
    )  # fmt: skip


def _measure(job: Job, cell: Shown) -> None:
    job.finished += cell.finished
    job.passed += cell.finished and cell.passed
    job.queue.extend(cell.queue)
    job.execution.extend(cell.execution)
