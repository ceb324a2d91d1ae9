"""Pages of the selection pipeline: a run's live status, and the "enable an operator" action.

Wire them with `path("", include("selection.pipeline_urls"))` (namespace `pipeline`).
"""

from functools import partial

from django.contrib.auth.decorators import login_required
from django.db import transaction
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST
from django_htmx.http import HttpResponseStopPolling

from crcr_site.lib.access import reviewer_required
from crcr_site.lib.htmx import HtmxHttpRequest
from runs.models import Backend
from selection import pipeline
from selection.forms_pipeline import EnableOperatorForm
from selection.models import SelectionRun


@login_required
def selectionrun_detail(request: HtmxHttpRequest, uuid: str) -> HttpResponse:
    run = get_object_or_404(SelectionRun.objects.select_related("backend"), uuid=uuid)
    context = {"run": run, "nav": "review"}
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
    transaction.on_commit(partial(enable_operator.delay, run.pk))
    return redirect("pipeline:selectionrun_detail", uuid=run.uuid)
