"""Pages of the selection pipeline: a run's live status, the operators and "enable an operator".

Mounted by `selection.urls` (namespace `selection`), like the other pages of the app.
"""

from typing import Any
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST
from django_htmx.http import HttpResponseStopPolling

from crcr_site.lib import enqueue
from crcr_site.lib.access import reviewer_required
from crcr_site.lib.htmx import HtmxHttpRequest
from runs.models import Backend
from selection import enabling, operators, pipeline
from selection.capabilities import known_for_backend
from selection.forms_pipeline import EnableOperatorForm, OperatorFilterForm
from selection.models import OpUsage, SelectionRun

OPERATORS_PER_PAGE = 50


@login_required
def selectionrun_detail(request: HtmxHttpRequest, uuid: str) -> HttpResponse:
    run = get_object_or_404(SelectionRun.objects.select_related("backend"), uuid=uuid)
    # Enabling an operator is work of the Operators page; the other runs feed the queue.
    nav = "operators" if run.kind == SelectionRun.Kind.ENABLE_OP else "review"
    context = {"run": run, "nav": nav, "files": run.chunks.per_file()}
    if request.htmx:
        response = render(request, "selection/selectionrun_detail.html#status", context)
        # Once the run has ended the page stops polling (htmx's 286).
        return HttpResponseStopPolling(response.content) if run.is_finished else response
    return render(request, "selection/selectionrun_detail.html", context)


@require_POST
@reviewer_required
def operator_enable(request: HtmxHttpRequest) -> HttpResponse:
    """Start enabling an operator; its row on the operators page shows the run in place
    (the row itself for htmx, else the page searched for the operator)."""
    from selection.tasks import enable_operator

    form = EnableOperatorForm(request.POST)
    if not form.is_valid():
        return _refused(form)
    backend = get_object_or_404(Backend, slug=form.cleaned_data["backend"])
    op = form.cleaned_data["op"]
    run = pipeline.start_run(backend, SelectionRun.Kind.ENABLE_OP, op, user=request.user)
    enqueue.after_commit(enable_operator, run.pk)
    if request.htmx:
        return _operator_row(request, backend, op)
    return redirect(_searched(backend, op))


@login_required
def operator_row(request: HtmxHttpRequest) -> HttpResponse:
    """One operator's row, as its enable run stands now (polled while the run works)."""
    form = EnableOperatorForm(request.GET)
    if not form.is_valid():
        return _refused(form)
    backend = get_object_or_404(Backend, slug=form.cleaned_data["backend"])
    if not request.htmx:
        return redirect(_searched(backend, form.cleaned_data["op"]))
    return _operator_row(request, backend, form.cleaned_data["op"])


def _refused(form: EnableOperatorForm) -> HttpResponse:
    """What is wrong with the operator or backend asked for, in words (shown inline)."""
    said = [str(error) for errors in form.errors.values() for error in errors]
    return HttpResponse(" ".join(said), status=400, content_type="text/plain")


def _searched(backend: Backend, op: str) -> str:
    """The operators page searched for one operator, at its row."""
    query = urlencode({"q": op, "backend": backend.slug})
    return f"{reverse('selection:operator_list')}?{query}#op-{op}"


def _operator_row(request: HtmxHttpRequest, backend: Backend, op: str) -> HttpResponse:
    capabilities = _capabilities(backend)
    rows = [row for row in operators.packets(op, "", capabilities) if row["operator"] == op]
    if not rows:
        return HttpResponse(f"no test in the operator index calls {op}", status=404)
    context = {"backend": backend, "op": _described(rows, backend, capabilities)[0]}
    return render(request, "selection/operator_list.html#operator-row", context)


def _capabilities(backend: Backend | None) -> Any:
    if backend is None:
        return None
    return known_for_backend(pipeline.current_config(backend), backend.device_module)


def _described(rows: Any, backend: Backend | None, capabilities: Any) -> list[operators.Operator]:
    """The rows' operators, each with its newest enable run on the backend."""
    described = [operators.describe(row, capabilities) for row in rows]
    if backend is not None:
        runs = enabling.latest_runs(backend, [op.name for op in described])
        for op in described:
            op.enabling = runs.get(op.name)
    return described


@login_required
def operator_list(request: HtmxHttpRequest) -> HttpResponse:
    form = OperatorFilterForm(request.GET)
    chosen = form.cleaned_data if form.is_valid() else {}
    backend = chosen.get("backend") or Backend.objects.order_by("slug").first()
    capabilities = _capabilities(backend)
    rows = operators.packets(chosen.get("q", ""), chosen.get("show", ""), capabilities)
    page = Paginator(rows, OPERATORS_PER_PAGE).get_page(request.GET.get("page"))
    context = {
        "form": form,
        "backend": backend,
        "capabilities": capabilities,
        "page": page,
        "operators": _described(page, backend, capabilities),
        "index_empty": not OpUsage.objects.exists(),
        "nav": "operators",
    }
    if request.htmx:
        return render(request, "selection/operator_list.html#operators", context)
    return render(request, "selection/operator_list.html", context)
