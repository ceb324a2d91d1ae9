"""The HUD grid's rows as HTML, joined in Python as the config page's lines are: through
the template, the 1,000 cells of a page of 50 commits x 20 jobs were most of the page's
time (bench/pages_at_scale.py). Every text is escaped here (`html.escape`, as Django's
`escape` does, less a SafeString a call)."""

from datetime import datetime
from html import escape

from django.core.cache import cache
from django.template.defaultfilters import floatformat
from django.utils import timezone
from django.utils.dates import MONTHS_3
from django.utils.safestring import SafeString, mark_safe
from django.utils.text import Truncator

from runs.hud_commits import Commit
from runs.hud_grid import CELLS_KEPT_SECONDS, Grid

# After a nightly-only backend's name: it takes nightly and release dispatches alone, so
# its columns hold no pull request's run.
NIGHTLY_ONLY = (
    ' <small class="nightly-only" title="takes nightly and release dispatches only: '
    'no pull request is run for it">nightly only</small>'
)


def table(grid: Grid) -> tuple[SafeString, SafeString, SafeString]:
    """The grid's header, rows and footer: as kept when the grid was found in the cache,
    else written and, when every commit on the page is settled, kept (a settled page's
    1,000 cells unpickled and written again were most of a view, bench/pages_at_scale.py)."""
    if grid.table is not None:
        found_head, found_rows, found_foot = grid.table
        return mark_safe(found_head), mark_safe(found_rows), mark_safe(found_foot)
    shown = head(grid), rows(grid.commits), foot(grid)
    if grid.table_key:
        cache.set(grid.table_key, tuple(str(part) for part in shown), CELLS_KEPT_SECONDS)
    return shown


def rows(commits: list[Commit]) -> SafeString:
    """The commits' rows of the grid's table."""
    return mark_safe("".join(_row(commit) for commit in commits))  # escaped below


def head(grid: Grid) -> SafeString:
    """The header's two rows: the backends over their jobs, then each job's label."""
    backends = "".join(
        f'<th colspan="{size}" class="backend" scope="colgroup"><span>{escape(name)}'
        f"{NIGHTLY_ONLY if name in grid.nightly_only else ''}</span></th>"
        for name, size in grid.groups
    )
    jobs = "".join(
        f'<th class="job" scope="col" title="{escape(job.name)}">'
        f"{escape(Truncator(job.label).chars(18))}</th>"
        for job in grid.jobs
    )
    return mark_safe(
        f'<tr><th rowspan="2" class="commit" scope="col">Commit</th>{backends}</tr>'
        f'<tr class="jobs">{jobs}</tr>'
    )


def foot(grid: Grid) -> SafeString:
    """The footer's rows: per job, its green cells and its median queue and execution."""
    green = "".join(
        f'<td title="{job.passed} of the {job.finished} finished runs of {escape(job.name)} on '
        f'this page passed">{f"{job.passed}/{job.finished}" if job.finished else "—"}</td>'
        for job in grid.jobs
    )
    queue = "".join(f"<td>{_seconds(job.median_queue)}</td>" for job in grid.jobs)
    execution = "".join(f"<td>{_seconds(job.median_execution)}</td>" for job in grid.jobs)
    return mark_safe(
        '<tr><th scope="row" class="commit" title="Of the finished cells of this page (each '
        "cell's newest attempt), how many passed\">green runs (this page)</th>"
        f"{green}</tr>"
        '<tr><th scope="row" class="commit" title="From a run\'s creation to its start, every '
        f'attempt on this page">median queue</th>{queue}</tr>'
        '<tr><th scope="row" class="commit" title="From a run\'s start to its end, every '
        f'attempt on this page">median execution</th>{execution}</tr>'
    )


def _seconds(value: float | None) -> str:
    return "—" if value is None else f"{floatformat(value, 0)} s"


def _row(commit: Commit) -> str:
    """A commit's row: its facts, then a cell a job, each a link to the cell's newest
    attempt with its letter, its attempts and tests in the link's title."""
    red = " red-row" if commit.red else ""
    title = escape(commit.title)
    if commit.pr_number:
        named = title if commit.title else f"pull request #{commit.pr_number}"
        headline = (
            f'<a class="pr" href="{escape(commit.pr_url)}" title="{named}">'
            f"#{commit.pr_number}{f' {title}' if commit.title else ''}</a>"
        )
    else:
        headline = f'<span class="title" title="{title}">{title}</span>' if commit.title else ""
    meta = f'<span class="author">{escape(commit.author)}</span>' if commit.author else ""
    if commit.when:
        meta += _time(commit.when, commit.when_label)
    meta += "".join(f' <span class="kind">{escape(kind)}</span>' for kind in commit.kinds)
    cells = "".join(cell.html if cell else '<td class="cell"></td>' for cell in commit.row)
    sha = escape(commit.sha)
    return (
        f'<tr class="hud-row{red}" tabindex="-1" data-sha="{sha}"><th class="commit" scope="row">'
        f'<div class="line"><a class="sha" href="{escape(commit.commit_url)}" '
        f'title="commit {sha} on GitHub"><code>{sha[:7]}</code></a> {headline} '
        f'<span class="meta">{meta}</span></div></th>{cells}</tr>'
    )


def _time(when: datetime, label: str) -> str:
    """`<time>` as `|date:"c"`, `|date:"Y-m-d H:i e"` and `|date:"M j H:i"` wrote it: in
    the current time zone when the value knows its own."""
    if timezone.is_aware(when):
        when = timezone.localtime(when)
    zone = (when.tzname() or "") if when.tzinfo else ""
    return (
        f' <time datetime="{when.isoformat()}" title="{escape(label)}: '
        f'{when:%Y-%m-%d %H:%M} {escape(zone)}">'
        f"{MONTHS_3[when.month].title()} {when.day} {when:%H:%M}</time>"
    )
