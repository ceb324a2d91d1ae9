"""A HUD row's commit: what crcr knows of it from its triggers, and its cells.

The facts are read by the database from each trigger's dispatch payload (the payload
itself, a whole GitHub event, stays there): one query for a page's commits."""

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db.models import F
from django.db.models.fields.json import KeyTextTransform, KeyTransform
from django.utils.dateparse import parse_datetime

from runs.combinations import RERUN_SUFFIX
from runs.models import Trigger

if TYPE_CHECKING:
    from runs.hud_grid import Shown

DEFAULT_REPOSITORY = "pytorch/pytorch"
REPOSITORY_RE = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")


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
    cells: dict[str, "Shown"] = field(default_factory=dict)  # by HUD job
    row: list["Shown | None"] = field(default_factory=list)  # in column order

    @property
    def commit_url(self) -> str:
        return f"https://github.com/{self.repository}/commit/{self.sha}"

    @property
    def pr_url(self) -> str:
        return f"https://github.com/{self.repository}/pull/{self.pr_number}"

    @property
    def red(self) -> bool:
        return any(cell.red for cell in self.cells.values())


# What the cache keeps of a settled commit besides its cells.
CACHED_FACTS = ("repository", "pr_number", "title", "author", "when", "when_label", "kinds")


def _payload_text(*keys: str) -> KeyTextTransform:
    """The text at `keys` in a trigger's dispatch payload (NULL when absent)."""
    value: Any = "dispatch__payload"
    for key in keys[:-1]:
        value = KeyTransform(key, value)
    return KeyTextTransform(keys[-1], value)


# What a trigger's dispatch payload says of its commit.
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


# Built once (its JSON paths cost more to build than to run), filtered per page.
# Without the triggers of bundles' re-runs: a reproduction is no new build of the commit.
_TRIGGER_FACTS = Trigger.objects.exclude(runs__job_name__endswith=RERUN_SUFFIX).order_by(
    F("dispatch_id").asc(nulls_last=True), "created_at"
).values(
    "pytorch_sha", "kind", "ref", "created_at", "requested_by__username",
    "dispatch__pr_number", "dispatch__event_type", **FACTS,
)  # fmt: skip


def add_facts(rows: dict[str, Commit]) -> None:
    """Fill each commit's PR, title, author and time from its triggers, dispatches first."""
    triggers = _TRIGGER_FACTS.filter(pytorch_sha__in=list(rows))
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
