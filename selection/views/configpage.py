"""A backend's config page: the current (or any) version's YAML, the versions, and blame.
The history is read in `confighistory`, diffs laid out in `configdiff`."""

import html
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.cache import cache
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils.safestring import mark_safe

from runs.models import Backend
from selection import configdescriptions, configdiff, confighistory
from selection.forms import ConfigViewForm
from selection.models import ConfigVersion

LINES_SHOWN = 1000  # of a version's text per page: a 10,000-entry config has 30,000 lines


def diff_view(request: HttpRequest) -> str:
    """`split` or `unified` (the default), from `?view=`; anything else reads as unified."""
    form = ConfigViewForm(request.GET)
    return "split" if form.is_valid() and form.cleaned_data["view"] == "split" else "unified"


def line_window(request: HttpRequest, version: ConfigVersion) -> dict[str, Any]:
    """The `LINES_SHOWN` lines from `?start=` (else the first) of the version's text,
    numbered, with links to the windows before and after it."""
    form = ConfigViewForm(request.GET)
    start = (form.cleaned_data["start"] if form.is_valid() else None) or 1
    # A version's text never changes: its line count and each window's rows are kept in
    # the cache under its hash. Reading a 10,000-entry config's 1.3 MB text and splitting
    # it took 5 ms of a 14 ms page (bench/pages_at_scale.py); it is read on a miss only.
    count_key = f"configlines:{version.sha256}"
    lines: list[str] = []  # the text's lines, split once, when a miss needs them
    line_count = cache.get(count_key)
    if line_count is None:
        lines = version.yaml_text.splitlines()
        line_count = len(lines)
        cache.set(count_key, line_count, timeout=None)
    start = min(start, max(1, line_count - LINES_SHOWN + 1))
    end = min(line_count, start + LINES_SHOWN - 1)
    rows_key = f"{count_key}:{start}:{LINES_SHOWN}"
    rows = cache.get(rows_key)
    if rows is None:
        window = (lines or version.yaml_text.splitlines())[start - 1 : end]
        rows = _rows(window, start, configdescriptions.of_version(version, version.yaml_text))
        cache.set(rows_key, rows, timeout=None)
    query = request.GET.copy()

    def link(first: int) -> str:
        query["start"] = str(first)
        return f"?{query.urlencode()}"

    return {
        "rows": mark_safe(rows),  # every text in it is escaped above
        "line_count": line_count,
        "lines_from": start,
        "window_end": end,
        "previous_lines": link(max(1, start - LINES_SHOWN)) if start > 1 else "",
        "next_lines": link(start + LINES_SHOWN) if end < line_count else "",
    }


def _rows(window: list[str], start: int, described: list[configdescriptions.Described]) -> str:
    """The window's rows, every text escaped: a line holding a description is marked, and
    an item whose description is on a later line has it beside its first line."""
    notes = configdescriptions.notes_by_line(described)
    marked = {d.description_line for d in described}
    mark = ' class="described"'
    # The rows in one join: through the template, 1,000 rows were 90 % of the page.
    return "".join(
        f'<tr id="L{n}"{mark if n in marked else ""}>'
        f'<td class="num"><a href="#L{n}">{n}</a></td>'
        f'<td class="src">{html.escape(text)}{_notes(notes.get(n, ()))}</td></tr>'
        for n, text in enumerate(window, start=start)
    )


def _notes(notes: Any) -> str:
    return "".join(
        f'<span class="note" title="description of {html.escape(d.label)} (line '
        f'{d.description_line})">{html.escape(d.text)}</span>'
        for d in notes
    )


def hunks(parent: ConfigVersion | None, version: ConfigVersion) -> list[configdiff.Hunk]:
    """The version's diff from its parent; versions never change, so it is kept in the
    cache (a 10,000-entry config's diff takes 50–100 ms to compute, and reading the
    parent's 1.3 MB text another 10)."""
    key = f"configdiff:{parent.sha256 if parent else ''}:{version.sha256}"
    found = cache.get(key)
    if found is None:
        found = configdiff.hunks(parent.yaml_text if parent else "", version.yaml_text)
        cache.set(key, found, timeout=None)
    return found


def _page(request: HttpRequest, backend: Backend, number: int | None) -> HttpResponse:
    versions = list(confighistory.versions(backend))
    context = {"backend": backend, "versions": versions, "nav": "config"}
    if not versions:
        return render(request, "selection/backendconfig_detail.html", context)
    listed = versions[0] if number is None else next(
        (v for v in versions if v.number == number), None
    )  # fmt: skip
    if listed is None:
        raise Http404(f"{backend.name} has no config v{number}")
    # The texts are read only when the cache lacks what the page shows of them.
    version = (
        ConfigVersion.objects.select_related("parent")
        .defer("yaml_text", "parent__yaml_text")
        .get(pk=listed.pk)
    )
    context |= line_window(request, version) | {
        "version": version,
        "latest": versions[0],
        "change": getattr(listed, "merged_from", None),  # None: not merged from a config PR
        "hunks": hunks(version.parent, version),
        "view": diff_view(request),
        "diff_url": reverse("selection:configversion_detail", args=[backend.slug, version.number]),
        "old_name": f"v{version.parent.number}" if version.parent else "nothing",
        "new_name": f"v{version.number}",
    }
    return render(request, "selection/backendconfig_detail.html", context)


@login_required
def backendconfig_detail(request: HttpRequest, slug: str) -> HttpResponse:
    """The backend's latest config, or the version `?v=N` names."""
    backend = get_object_or_404(Backend, slug=slug)
    form = ConfigViewForm(request.GET)
    if not form.is_valid():
        return HttpResponseBadRequest(form.errors.as_text())
    return _page(request, backend, form.cleaned_data["v"])


@login_required
def configversion_detail(request: HttpRequest, slug: str, number: int) -> HttpResponse:
    return _page(request, get_object_or_404(Backend, slug=slug), number)


@login_required
def configversion_blame(request: HttpRequest, slug: str, number: int) -> HttpResponse:
    version = get_object_or_404(
        ConfigVersion.objects.select_related("backend"), backend__slug=slug, number=number
    )
    context = {
        "backend": version.backend,
        "version": version,
        "lines": confighistory.blame(version),
        "nav": "config",
    }
    return render(request, "selection/configversion_blame.html", context)
