"""Config PR pages: the list, a change's diff and its approve / merge / rebase actions,
and a merged version's YAML and patch downloads. The rules live in `configprs`."""

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import Max
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.text import capfirst
from django.views.decorators.http import require_http_methods, require_POST

from crcr_site.lib.access import reviewer_required
from runs.models import Backend
from selection import configdiff, configprs, submissions
from selection.forms import (
    ConfigApprovalForm,
    ConfigCommentForm,
    ConfigRevisionForm,
    OpenChangeForm,
)
from selection.models import ConfigChange, ConfigSubmission, ConfigVersion
from selection.views.configpage import diff_view

OPEN_FROM_THE_QUEUE = (
    "A config PR is opened from the review queue: approve proposals, then press "
    "“Open a config PR for …” above the queue; it gathers the backend's approved proposals."
)


@login_required
def configchange_list(request: HttpRequest) -> HttpResponse:
    changes = ConfigChange.objects.select_related("backend", "base", "author", "merged_version")
    backends = Backend.objects.annotate(latest=Max("config_versions__number")).order_by("slug")
    context = {
        "changes": changes[:100],
        "ready": configprs.ready(),
        "backends": backends,
        "nav": "config",
    }
    return render(request, "selection/configchange_list.html", context)


@require_http_methods(["GET", "POST"])
@reviewer_required
def configchange_create(request: HttpRequest) -> HttpResponse:
    if request.method == "GET":
        # A followed or typed address: say where a config PR is opened instead of a blank 405.
        messages.info(request, OPEN_FROM_THE_QUEUE)
        return redirect("selection:proposal_list")
    form = OpenChangeForm(request.POST)
    if not form.is_valid():
        return HttpResponseBadRequest(form.errors.as_text())
    backend = get_object_or_404(Backend, slug=form.cleaned_data["backend"])
    if submissions.latest_is_large(backend):
        work = submissions.start(
            ConfigSubmission.Kind.OPEN_PR, {"backend": backend.slug}, request.user
        )
        return redirect("selection:configsubmission_detail", uuid=work.uuid)
    try:
        change = configprs.open_change(backend, request.user)
    except configprs.ChangeError as error:
        return HttpResponseBadRequest(str(error))
    if change is None:
        messages.info(request, f"{backend.name} has no approved proposals outside a config PR.")
        return redirect("selection:configchange_list")
    return redirect("selection:configchange_detail", uuid=change.uuid)


@login_required
def configchange_detail(
    request: HttpRequest,
    uuid: str,
    comment_form: ConfigCommentForm | None = None,
    status: int = 200,
) -> HttpResponse:
    """The config PR's page; `comment_form` is a refused comment, shown with its error next
    to the box and the text kept."""
    change = get_object_or_404(
        ConfigChange.objects.select_related("backend", "base", "author", "merged_version"),
        uuid=uuid,
    )
    context = {
        "comment_form": comment_form or ConfigCommentForm(),
        "change": change,
        "revision": change.revision,  # the forms carry it: an action names the diff shown
        "hunks": configdiff.hunks(change.base.yaml_text, change.proposed_text),
        "view": diff_view(request),
        "diff_url": reverse("selection:configchange_detail", args=[change.uuid]),
        "old_name": f"v{change.base.number}",
        "new_name": "this PR",
        "proposals": change.proposals.select_related("reviewer"),
        "conflicts": configprs.conflicts(change),
        "approvals": change.approvals.select_related("reviewer"),
        "comments": change.comments.select_related("author"),
        "approval_refused": configprs.may_approve(change, request.user),
        "merge_refused": configprs.may_merge(change, request.user),
        "self_approval_allowed": not settings.CRCR_FORBID_SELF_APPROVAL,
        "stale": configprs.is_stale(change),
        "nav": "config",
    }
    return render(request, "selection/configchange_detail.html", context, status=status)


def _act(request: HttpRequest, uuid: str) -> tuple[ConfigChange, HttpResponse]:
    change = get_object_or_404(ConfigChange.objects.select_related("backend", "base"), uuid=uuid)
    return change, redirect("selection:configchange_detail", uuid=change.uuid)


@require_POST
@reviewer_required
def configchange_approve(request: HttpRequest, uuid: str) -> HttpResponse:
    change, back = _act(request, uuid)
    form = ConfigApprovalForm(request.POST)
    if not form.is_valid():
        return HttpResponseBadRequest(form.errors.as_text())
    try:
        configprs.approve(
            change, request.user, form.cleaned_data["revision"], form.cleaned_data["comment"]
        )
    except configprs.AlreadyApproved as error:
        messages.info(request, f"{capfirst(str(error))}: nothing changed.")
    except configprs.ChangeError as error:
        messages.error(request, f"Not approved: {error}.")
    else:
        messages.success(request, "Approved.")
    return back


@require_POST
@reviewer_required
def configchange_comment(request: HttpRequest, uuid: str) -> HttpResponse:
    change, back = _act(request, uuid)
    form = ConfigCommentForm(request.POST)
    if not form.is_valid():  # the page again, the error by the box, the text kept
        return configchange_detail(request, uuid, comment_form=form, status=400)
    change.comments.create(author=request.user, body=form.cleaned_data["body"])  # type: ignore[misc]
    return back


@require_POST
@reviewer_required
def configchange_merge(request: HttpRequest, uuid: str) -> HttpResponse:
    change, back = _act(request, uuid)
    form = ConfigRevisionForm(request.POST)
    if not form.is_valid():
        return HttpResponseBadRequest(form.errors.as_text())
    try:
        version = configprs.merge(change, request.user, form.cleaned_data["revision"])
    except configprs.ChangeError as error:
        messages.error(request, f"Not merged: {error}.")
        return back
    messages.success(request, f"Merged as {change.backend.name} config v{version.number}.")
    return back


@require_POST
@reviewer_required
def configchange_rebase(request: HttpRequest, uuid: str) -> HttpResponse:
    change, back = _act(request, uuid)
    if submissions.latest_is_large(change.backend):
        data = {"backend": change.backend.slug, "change": str(change.uuid)}
        work = submissions.start(ConfigSubmission.Kind.REBASE_PR, data, request.user)
        return redirect("selection:configsubmission_detail", uuid=work.uuid)
    try:
        conflicts = configprs.rebase(change, request.user)
    except configprs.ChangeError as error:
        messages.error(request, f"Not rebased: {error}.")
        return back
    note = f" {len(conflicts)} conflict(s): see below." if conflicts else ""
    messages.success(request, f"Rebased; approve the new diff again.{note}")
    return back


@login_required
def configversion_yaml(request: HttpRequest, uuid: str) -> HttpResponse:
    version = get_object_or_404(ConfigVersion, uuid=uuid)
    response = HttpResponse(version.yaml_text, content_type="application/yaml; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{configprs.FILE_NAME}"'
    return response


@login_required
def configversion_patch(request: HttpRequest, uuid: str) -> HttpResponse:
    version = get_object_or_404(
        ConfigVersion.objects.select_related("backend", "parent", "created_by"), uuid=uuid
    )
    response = HttpResponse(configprs.patch(version), content_type="text/x-patch; charset=utf-8")
    name = f"crcr-config-v{version.number}.patch"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response
