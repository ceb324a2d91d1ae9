"""The run page's shard table and failure groups: their rows as HTML, joined in Python as
the config page's lines are (through the template, the 50 shards and 40 failures of a run
of 100,000 results were most of its page's time, bench/pages_at_scale.py), and kept in
the cache once the run finished. Every text is escaped here (`html.escape`, as Django's
`escape` does)."""

from collections.abc import Iterable
from html import escape
from typing import Any
from urllib.parse import urlencode

from django.core.cache import cache
from django.template.defaultfilters import floatformat
from django.urls import reverse
from django.utils.safestring import SafeString, mark_safe

from runs import charts
from runs.excerpts import clip
from runs.models import Failure, Run, Shard

SHARD_STATUSES = dict(Shard.Status.choices)
KEPT = 24 * 3600  # seconds a finished run's parts stay in the cache
FORMAT = 2  # of the kept parts' HTML: bumped when it changes


def progress(run: Run) -> dict[str, Any]:
    """The run's shard count, shard rows and their chart, and its failure groups (each its
    category, verdict, size, how many are listed and the list).

    Once the run finished and stored its summaries (`runs.results.finish_if_done`) they
    never change: its shards are done, its failures classified. The parts are then kept
    in the cache (keyed by the run and when it finished), as the config page keeps a
    version's diff: a view reads the run and no shard, failure or result.
    """
    ended = run.finished_at if run.is_finished and run.failure_summary is not None else None
    key = f"run-progress:{FORMAT}:{run.pk}:{ended.timestamp()}" if ended else ""
    if key and (kept := cache.get(key)) is not None:
        return dict(kept)
    shards = list(run.shards.listed())  # without each shard's list of test ids
    parts = {
        "shard_count": len(shards),
        # What the shard rows add up to while the run goes on: its tests, and how many the
        # running shards have run (their results are stored when each ends; the ended
        # shards' are counted from their results).
        "tests_planned": sum(shard.test_count for shard in shards),
        "tests_running": sum(s.tests_done for s in shards if s.status == Shard.Status.RUNNING),
        "shard_rows": shard_rows(shards, logs_of(run)),
        "chart": charts.shard_durations([shard.chart_bar() for shard in shards]),
        "failure_groups": [
            {
                "category": group["category"], "verdict": group["verdict"],
                "count": group["count"], "more": group["more"],
                "shown": len(group["failures"]), "listed": failure_items(group["failures"], logs_of(run)),
            }
            for group in run.failure_groups()
        ],
    }  # fmt: skip
    if key:
        cache.set(key, parts, timeout=KEPT)
    return parts


def logs_of(run: Run) -> str:
    """The URL of the run's log pages (`/runs/<uuid>/log/`): a failed test's log is at
    `?test=<id>`, a shard's output at `shard-<index>/`. They are reproducibility's pages,
    reached by name: runs never imports that app."""
    return reverse("reproducibility:test_log", args=[run.uuid])


def shard_rows(shards: Iterable[Shard], logs: str) -> SafeString:
    """A row a shard: index (a link to its output), tests, estimated and actual seconds,
    status (with its progress while running, its error), attempts and worker. Shards come
    from `Shard.objects.listed()` (`test_count` without the list of ids)."""
    return mark_safe("".join(_shard(shard, logs) for shard in shards))  # escaped in _shard


def _shard(shard: Any, logs: str) -> str:
    actual = shard.actual_seconds
    status = escape(SHARD_STATUSES.get(shard.status, shard.status))
    if shard.status == Shard.Status.RUNNING:
        status += (
            f" · {shard.tests_done} of {shard.test_count} tests"
            f'<progress value="{shard.tests_done}" max="{shard.test_count}"></progress>'
        )
    if shard.error:
        status += _error(shard.error)
    return (
        f'<tr><td><a href="{logs}shard-{shard.index}/" title="shard {shard.index}\'s output">'
        f"{shard.index}</a></td><td>{shard.test_count}</td>"
        f"<td>{floatformat(shard.estimated_seconds, 0)} s</td>"
        f"<td>{f'{floatformat(actual, 0)} s' if actual is not None else '—'}</td>"
        f"<td>{status}</td><td>{shard.attempts}</td><td>{escape(shard.worker)}</td></tr>"
    )


def _error(error: str) -> str:
    """A shard's error: its first line, and the rest (a test process's last output, its
    stacks) folded below it."""
    first, _, rest = error.strip().partition("\n")
    shown = f": {escape(clip(first, 200))}"
    if not rest.strip() and len(first) <= 200:
        return shown
    return (
        f'<details class="shard-error"><summary>{shown}</summary>'
        f'<pre class="log">{escape(error)}</pre></details>'
    )


def failure_items(failures: Iterable[Failure], logs: str) -> SafeString:
    """A list item a failure: its test (a link to its log), its operator, its error line and
    its verdict's reason."""
    return mark_safe("".join(_failure(failure, logs) for failure in failures))  # escaped below


def _failure(failure: Failure, logs: str) -> str:
    op = f" · op <code>{escape(failure.op_name)}</code>" if failure.op_name else ""
    node_id = failure.result.node_id
    return (
        f'<li><a href="{logs}?{escape(urlencode({"test": node_id}))}" title="its log">'
        f"<code>{escape(node_id)}</code></a>{op}<br>"
        f'<span class="muted">{escape(clip(failure.first_line, 300))}</span><br>'
        f"<small>{escape(failure.verdict_reason)}</small></li>"
    )
