"""A HUD cell as a person reads it: its attempts, its letter's tone, the lines of its
details (job, status, attempt, queue time, duration, tests), and a bundle's re-run of it
(`Reproduction`). The grid (`hud_grid`) reads the attempts and builds the cells."""

from dataclasses import dataclass, field
from datetime import timedelta
from uuid import UUID

from runs.models import Run
from runs.models.runs import attribution

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
    reproduction: "Reproduction | None" = None

    @property
    def run(self) -> Attempt:
        return self.attempts[-1]

    @property
    def tone(self) -> str:
        return TONES.get(self.letter, "grey")

    @property
    def details(self) -> list[str]:
        """The lines of its details (on hover and on focus): job, status, attribution and
        attempt; queue time and duration; tests passed of the total; earlier attempts; a
        bundle's re-run of it, reproduced or not."""
        run, total = self.run, len(self.attempts)
        lines = [_describe(run, f"attempt {total} of {total}"), _timing(run)]
        if counts := self.counts:
            lines.append(
                f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} "
                f"skipped: {counts['passed']} of {sum(counts.values())} tests passed"
            )
        for number in range(total - 1, 0, -1):
            lines.append(_describe(self.attempts[number - 1], f"attempt {number}"))
        if self.reproduction is not None:
            lines.append(self.reproduction.describe(self.attempts))
        return lines


@dataclass(slots=True)
class Reproduction:
    """The newest re-run from a bundle of one of a cell's attempts: whether it ended as
    that attempt did (reproduced), did not, or is still running."""

    original: int  # the attempt's pk
    original_status: str
    uuid: UUID  # the Rerun's, for its comparison page
    status: str  # the re-run's

    @property
    def verdict(self) -> str:
        if self.status not in Run.FINISHED:
            return "reproducing"
        return "reproduced" if self.status == self.original_status else "not reproduced"

    def describe(self, attempts: list[Attempt]) -> str:
        number = next(n for n, a in enumerate(attempts, 1) if a.pk == self.original)
        ended = STATUS_LABELS.get(self.status, self.status)
        how = "still running" if self.verdict == "reproducing" else f"it {ended}"
        return f"re-run from its bundle (attempt {number}): {self.verdict}, {how}"


def _timing(run: Attempt) -> str:
    queued = "not started" if run.queued is None else f"queued {duration_text(run.queued)}"
    if run.ran is not None:
        return f"{queued} · ran {duration_text(run.ran)}"
    return queued if run.queued is None else f"{queued} · still running"


def duration_text(value: timedelta) -> str:
    """A duration as a person reads it: 45 s, 3 min 05 s, 2 h 04 min."""
    seconds = max(0, round(value.total_seconds()))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


STATUS_LABELS = dict(Run.Status.choices)


def _describe(run: Attempt, attempt: str) -> str:
    text = f"{run.job_name}: {STATUS_LABELS.get(run.status, run.status)}"
    if attribution := run.attribution():
        text += f" · {attribution}"
    return f"{text} · {attempt}"
