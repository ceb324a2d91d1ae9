from django.contrib.auth.decorators import login_required
from django.db.models import Count
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from crcr_site.lib.access import reviewer_required
from selection.forms import ReviewForm
from selection.models import ConfigChange, OpUsage, Proposal


@login_required
def proposal_list(request: HttpRequest) -> HttpResponse:
    proposals = Proposal.objects.order_by("status", "file_path", "class_name", "test_name")[:100]
    return render(
        request, "selection/proposal_list.html", {"proposals": proposals, "nav": "review"}
    )


@require_POST
@reviewer_required
def proposal_review(request: HttpRequest, uuid: str) -> HttpResponse:
    proposal = get_object_or_404(Proposal, uuid=uuid)
    form = ReviewForm(request.POST)
    if not form.is_valid():
        return HttpResponseBadRequest(form.errors.as_text())
    proposal.review(request.user, approve=form.cleaned_data["decision"] == "approve")
    return redirect("selection:proposal_list")


@login_required
def configchange_list(request: HttpRequest) -> HttpResponse:
    changes = ConfigChange.objects.select_related("backend", "base").order_by("-created_at")[:100]
    return render(
        request, "selection/configchange_list.html", {"changes": changes, "nav": "config"}
    )


@login_required
def operator_list(request: HttpRequest) -> HttpResponse:
    operators = (
        OpUsage.objects.filter(is_helper=False)
        .values("op")
        .annotate(tests=Count("id"))
        .order_by("op")[:500]
    )
    return render(
        request, "selection/operator_list.html", {"operators": operators, "nav": "operators"}
    )
