import re

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django_htmx.http import HttpResponseStopPolling

from crcr_site.lib.access import reviewer_required
from crcr_site.lib.htmx import HtmxHttpRequest
from runs import gate, hud_cells, hud_grid, hud_rows, metrics, readiness, run_rows, triggers
from runs import hud as summaries
from runs.forms import HudFilterForm, SummaryForm, TriggerForm, WindowForm
from runs.models import Dispatch, Run
from runs.upstream import UpstreamError


@login_required
def hud(request: HttpRequest) -> HttpResponse:
    """Upstream commits × jobs, a page of commits at a time, under the GET filters."""
    form = HudFilterForm(request.GET)
    filters = form.filters()
    grid = hud_grid.build(**filters)
    head, rows, foot = hud_rows.table(grid)
    context = {
        "form": form,
        "grid": grid,
        "head": head,
        "rows": rows,
        "foot": foot,
        "legend": hud_cells.LEGEND,
        "filtered": bool(filters["job"] or filters["failures_only"]),
        "previous_page": _page_link(request, grid.page - 1) if grid.page > 1 else "",
        "next_page": _page_link(request, grid.page + 1) if grid.has_next else "",
        "section": summaries.section(filters["job"], grid.state),  # red jobs and trends
        # Not cached with the section: its windows slide with the clock, not with the runs.
        "readiness": readiness.rows(),
        "thresholds": readiness.thresholds(),
        "nav": "hud",
    }
    if not rows and grid.page == 1 and not context["filtered"]:
        context["no_runs"] = not Run.objects.exists()
    return render(request, "runs/hud.html", context)


@login_required
def summary(request: HttpRequest) -> HttpResponse:
    """Per backend and job, its pull requests' or nightlies' jobs in a window; L3 readiness."""
    form = SummaryForm(request.GET)
    event, days = form.choice()
    context = {
        "form": form,
        "event": event,
        "days": days,
        "rows": metrics.kept("summary", metrics.summary, event, days),
        "tabs": [(key, label, _link(request, event=key)) for key, label in metrics.EVENTS.items()],
        "windows": [(each, _link(request, days=str(each))) for each in metrics.SUMMARY_DAYS],
        "readiness": readiness.rows(),
        "thresholds": readiness.thresholds(),
        "nav": "summary",
    }
    return render(request, "runs/summary.html", context)


@login_required
def metrics_page(request: HttpRequest) -> HttpResponse:
    """Pass rate, failures and jobs a day, pull requests against nightlies, as charts."""
    form = WindowForm(request.GET)
    days, backend = form.choice()
    per_event = metrics.kept("daily", metrics.daily, days, backend)
    totals = [(metrics.EVENTS[event], metrics.total(found)) for event, found in per_event.items()]
    context = {
        "form": form,
        "days": days,
        "no_jobs": not any(total.total for _, total in totals),
        "charts": metrics.charts_of(per_event),
        "totals": totals,
        "nav": "metrics",
    }
    return render(request, "runs/metrics.html", context)


def _link(request: HttpRequest, **changes: str) -> str:
    """The query string with `changes` made, keeping the rest."""
    query = request.GET.copy()
    for key, value in changes.items():
        query[key] = value
    return f"?{query.urlencode()}"


def _page_link(request: HttpRequest, page: int) -> str:
    """The query string of another page, keeping the filters."""
    query = request.GET.copy()
    query["page"] = str(page)
    return f"?{query.urlencode()}"


@login_required
def run_list(request: HtmxHttpRequest) -> HttpResponse:
    runs = list(Run.objects.select_related("trigger", "backend").order_by("-created_at")[:100])
    busy = any(not run.is_finished for run in runs)
    context = {"runs": runs, "runs_busy": busy, "nav": "runs"}
    if request.htmx:
        response = render(request, "runs/run_list.html#runs", context)
        # Once every listed run has ended the page stops polling (htmx's 286).
        return response if busy else HttpResponseStopPolling(response.content)
    return render(request, "runs/run_list.html", context)


@login_required
def run_detail(request: HtmxHttpRequest, uuid: str) -> HttpResponse:
    related = Run.objects.select_related(
        "trigger__dispatch", "backend", "config_version", "retry_of"
    )
    # Without what the page never shows: a config's text (1.3 MB at 10,000 entries) and
    # the dispatch's GitHub event.
    large = (
        "config_version__yaml_text",
        "trigger__dispatch__payload",
        "trigger__dispatch__raw_body",
    )
    run = get_object_or_404(related.defer(*large), uuid=uuid)
    context = {
        "run": run,
        **run_rows.progress(run),  # the shards, their chart and the failure groups
        "artifacts": run.artifacts.all(),
        "attempts": run.attempts.order_by("run_attempt"),
        "counts": run.test_counts(),
        "unexpected": run.unexpected_passes(),
        "callbacks": run.callbacks.order_by("job_name", "created_at"),
        "nav": "runs",
    }
    if request.htmx:
        response = render(request, "runs/run_detail.html#progress", context)
        # Once the run has ended the page stops polling (htmx's 286).
        return HttpResponseStopPolling(response.content) if run.is_finished else response
    context["trend"] = summaries.job_trend(run)
    return render(request, "runs/run_detail.html", context)


@login_required
def dispatch_list(request: HttpRequest) -> HttpResponse:
    dispatches = Dispatch.objects.select_related("backend").order_by("-received_at")[:200]
    context = {"dispatches": dispatches, "nav": "dispatches"}
    return render(request, "runs/dispatch_list.html", context)


@login_required
def dispatch_detail(request: HttpRequest, uuid: str) -> HttpResponse:
    dispatch = get_object_or_404(Dispatch.objects.select_related("backend"), uuid=uuid)
    trigger = getattr(dispatch, "trigger", None)
    context = {
        "dispatch": dispatch,
        "runs": trigger.runs.all() if trigger else [],
        "policy": gate.describe(gate.Policy.for_backend(dispatch.backend)),
        "nav": "dispatches",
    }
    return render(request, "runs/dispatch_detail.html", context)


@login_required
def dispatch_payload(request: HttpRequest, uuid: str) -> HttpResponse:
    """The dispatch's body exactly as it was received, as a file."""
    dispatch = get_object_or_404(Dispatch, uuid=uuid)
    response = HttpResponse(dispatch.raw_body, content_type="application/json")
    name = re.sub(r"[^\w.-]", "_", dispatch.delivery_id)
    response["Content-Disposition"] = f'attachment; filename="dispatch-{name}.json"'
    return response


@reviewer_required
def trigger_create(request: HttpRequest) -> HttpResponse:
    """Start a release or manual run (reviewers only)."""
    form = TriggerForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        backend, target = form.cleaned_data["backend"], form.cleaned_data["target"]
        labels = form.cleaned_data["labels"]
        try:
            if form.cleaned_data["kind"] == "release":
                trigger = triggers.start_release(backend, target, user=request.user, labels=labels)
            else:
                trigger = triggers.start_manual(backend, target, user=request.user, labels=labels)
        except (triggers.TriggerError, UpstreamError) as error:
            form.add_error("target", str(error))
        else:
            count = trigger.runs.count()
            messages.success(request, f"Started {count} run(s) at {trigger.pytorch_sha[:12]}.")
            return redirect("runs:run_list")
    return render(request, "runs/trigger_form.html", {"form": form, "nav": "runs"})
