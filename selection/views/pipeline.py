"""Pages of the selection pipeline: a run's live status, the operators and "enable an operator".

Mounted by `selection.urls` (namespace `selection`), like the other pages of the app.
"""

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST
from django_htmx.http import HttpResponseStopPolling

from crcr_site.lib import enqueue
from crcr_site.lib.access import reviewer_required
from crcr_site.lib.htmx import HtmxHttpRequest
from runs.models import Backend
from selection import operators, pipeline
from selection.capabilities import known_for_backend
from selection.forms_pipeline import EnableOperatorForm, OperatorFilterForm
from selection.models import OpUsage, SelectionRun

OPERATORS_PER_PAGE = 50


@login_required
def selectionrun_detail(request: HtmxHttpRequest, uuid: str) -> HttpResponse:
    run = get_object_or_404(SelectionRun.objects.select_related("backend"), uuid=uuid)
    # Enabling an operator is work of the Operators page; the other runs feed the queue.
    nav = "operators" if run.kind == SelectionRun.Kind.ENABLE_OP else "review"
    context = {"run": run, "nav": nav}
    if request.htmx:
        response = render(request, "selection/selectionrun_detail.html#status", context)
        # Once the run has ended the page stops polling (htmx's 286).
        return HttpResponseStopPolling(response.content) if run.is_finished else response
    return render(request, "selection/selectionrun_detail.html", context)


@require_POST
@reviewer_required
def operator_enable(request: HtmxHttpRequest) -> HttpResponse:
    from selection.tasks import enable_operator

    form = EnableOperatorForm(request.POST)
    if not form.is_valid():
        return HttpResponse(form.errors.as_text(), status=400)
    backend = get_object_or_404(Backend, slug=form.cleaned_data["backend"])
    run = pipeline.start_run(
        backend, SelectionRun.Kind.ENABLE_OP, form.cleaned_data["op"], user=request.user
    )
    enqueue.after_commit(enable_operator, run.pk)
    return redirect("selection:selectionrun_detail", uuid=run.uuid)


@login_required
def operator_list(request: HtmxHttpRequest) -> HttpResponse:
    form = OperatorFilterForm(request.GET)
    chosen = form.cleaned_data if form.is_valid() else {}
    backend = chosen.get("backend") or Backend.objects.order_by("slug").first()
    capabilities = (
        known_for_backend(pipeline.current_config(backend), backend.device_module)
        if backend
        else None
    )
    rows = operators.packets(chosen.get("q", ""), chosen.get("show", ""), capabilities)
    page = Paginator(rows, OPERATORS_PER_PAGE).get_page(request.GET.get("page"))
    context = {
        "form": form,
        "backend": backend,
        "capabilities": capabilities,
        "page": page,
        "operators": [operators.describe(row, capabilities) for row in page],
        "index_empty": not OpUsage.objects.exists(),
        "nav": "operators",
    }
    if request.htmx:
        return render(request, "selection/operator_list.html#operators", context)
    return render(request, "selection/operator_list.html", context)
