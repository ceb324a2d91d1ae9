"""The page of config work done on a worker (`selection.submissions`): its steps while it
runs, then its outcome: the onboarding page's, or the config PR it opened or rebased."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django_htmx.http import HttpResponseClientRefresh

from crcr_site.lib.access import can_review
from crcr_site.lib.htmx import HtmxHttpRequest
from selection.models import ConfigSubmission
from selection.views import onboarding

Kind = ConfigSubmission.Kind
DONE = {Kind.OPEN_PR: "Config PR opened.", Kind.REBASE_PR: "Rebased; approve the new diff again."}


@login_required
def configsubmission_detail(request: HtmxHttpRequest, uuid: str) -> HttpResponse:
    submission = get_object_or_404(
        ConfigSubmission.objects.defer("text").select_related("result__backend", "change"),
        uuid=uuid,
    )
    if submission.kind == Kind.ONBOARD:
        onboarding.admin_only(request)
    elif not can_review(request.user):
        raise PermissionDenied("Only a reviewer may open or rebase a config PR.")
    if submission.is_finished and request.htmx:
        return HttpResponseClientRefresh()  # the outcome is a whole page: load it
    if submission.is_finished and submission.kind == Kind.ONBOARD:
        return onboarding.outcome(request, submission)
    if submission.is_finished and submission.change is not None:
        messages.success(request, f"{DONE[Kind(submission.kind)]} {submission.report}".strip())
        return redirect("selection:configchange_detail", uuid=submission.change.uuid)
    template = "selection/configsubmission_detail.html"
    context = {
        "submission": submission,
        "nav": "onboard" if submission.kind == Kind.ONBOARD else "config",
    }
    return render(request, f"{template}#status" if request.htmx else template, context)
