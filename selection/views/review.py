"""The review queue: filter, sort and page proposals; approve, reject or edit them inline.

Config PR pages are in `selection/views/configprs.py`.
"""

from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from crcr_site.lib.access import reviewer_required
from crcr_site.lib.htmx import HtmxHttpRequest
from crcr_site.lib.paging import page_of
from selection import configdescriptions, configprs, evidence, review
from selection.forms import ProposalEditForm, QueueFilterForm, ReviewForm
from selection.models import Proposal, ProposalEvent, SelectionRun

PAGE_SIZE = 25
# Built once (never evaluated here, only cloned): building the rows' subqueries on every
# page cost more than running them (bench/pages.py).
ROWS = Proposal.objects.select_related("reviewer", "config_change")
LOADED = review.with_last_edit(
    ROWS.only(  # what a row shows: not the texts of its config PR
        "uuid", "backend", "file_path", "class_name", "test_name", "mode", "edits", "reason",
        "evidence", "stage", "status", "reviewed_at", "reviewer__username", "config_change__uuid",
    )
)  # fmt: skip


@login_required
def proposal_list(request: HtmxHttpRequest) -> HttpResponse:
    form = QueueFilterForm(request.GET)
    valid = form.is_valid()
    proposals = form.filter(ROWS.all()) if valid else ROWS.none()
    page = page_of(proposals, request.GET.get("page"), PAGE_SIZE, load=LOADED.all())
    configdescriptions.attach(page.object_list)  # what the config says of the ops it touches
    context = {
        "form": form,
        "page": page,
        "from_run": _run_filtered(form) if valid else None,
        "filters": _filters(request.GET),
        "ready": configprs.ready(),
        "nav": "review",
    }
    template = "selection/proposal_list.html" + ("#queue" if request.htmx else "")
    return render(request, template, context, status=200 if valid else 400)


def _run_filtered(form: QueueFilterForm) -> SelectionRun | None:
    """The selection run whose proposals the queue is filtered to, named above it."""
    uuid = form.cleaned_data.get("run")
    return (
        SelectionRun.objects.select_related("backend").filter(uuid=uuid).first() if uuid else None
    )


def _filters(data: QueryDict) -> str:
    """The query string of the current filters, without the page number."""
    query = data.copy()
    query.pop("page", None)
    return query.urlencode()


def _row(request: HtmxHttpRequest, proposal: Proposal) -> HttpResponse:
    """The queue's row of a proposal, read again with who last edited it."""
    row = LOADED.get(pk=proposal.pk)
    configdescriptions.attach([row])
    return render(request, "selection/proposal_list.html#row", {"proposal": row})


@login_required
def proposal_detail(
    request: HtmxHttpRequest, uuid: str, error: str = "", status: int = 200
) -> HttpResponse:
    """The proposal's page: its decision, the actions a reviewer may take, its evidence in
    sections, and its history; `error` is a refused action's reason, shown by its buttons."""
    rows = review.with_last_edit(Proposal.objects.select_related("backend", "reviewer"))
    proposal = get_object_or_404(rows, uuid=uuid)
    if request.htmx:  # "cancel" of an inline edit: the row again
        return _row(request, proposal)
    context = {
        "proposal": proposal,
        "events": proposal.events.select_related("actor"),
        "sections": evidence.sections(proposal),
        "reviewable": proposal.status != Proposal.Status.MERGED and not proposal.config_change_id,
        "error": error,
        "nav": "review",
    }
    return render(request, "selection/proposal_detail.html", context, status=status)


@require_POST
@reviewer_required
def proposal_review(request: HtmxHttpRequest, uuid: str) -> HttpResponse:
    proposal = get_object_or_404(Proposal.objects.select_related("backend"), uuid=uuid)
    form = ReviewForm(request.POST)
    if not form.is_valid():
        return HttpResponseBadRequest(form.errors.as_text())
    approve, back = form.cleaned_data["decision"] == "approve", form.cleaned_data["back"]
    try:
        review.decide(proposal, request.user, approve=approve)
    except review.ReviewError as error:
        if back == "proposal" and not request.htmx:  # the page again, the reason by the buttons
            return proposal_detail(request, uuid, error=str(error), status=409)
        return HttpResponse(str(error), status=409, content_type="text/plain")
    if request.htmx:
        return _row(request, proposal)
    if back == "proposal":
        messages.success(request, "Approved." if approve else "Rejected.")
        return redirect("selection:proposal_detail", uuid=proposal.uuid)
    return redirect("selection:proposal_list")


@reviewer_required
def proposal_edit(request: HtmxHttpRequest, uuid: str) -> HttpResponse:
    proposal = get_object_or_404(Proposal.objects.select_related("backend"), uuid=uuid)
    if request.method != "POST":
        form = ProposalEditForm(initial={"mode": proposal.mode, "reason": proposal.reason})
        return _edit_form(request, proposal, form)
    form = ProposalEditForm(request.POST)
    if not form.is_valid():
        return _edit_form(request, proposal, form, status=400)
    try:
        review.edit(proposal, request.user, **form.cleaned_data)
    except review.ReviewError as error:
        form.add_error(None, str(error))
        return _edit_form(request, proposal, form, status=409)
    if request.htmx:
        return _row(request, proposal)
    return redirect("selection:proposal_detail", uuid=proposal.uuid)


def _edit_form(
    request: HtmxHttpRequest, proposal: Proposal, form: ProposalEditForm, status: int = 200
) -> HttpResponse:
    """The edit form, in the queue's row (htmx) or on a page, with its errors next to the
    fields; a refused edit answers 400/409 with the form, which the page swaps in."""
    context = {"proposal": proposal, "edit_form": form, "nav": "review"}
    template = (
        "selection/proposal_list.html#edit-row" if request.htmx else "selection/proposal_edit.html"
    )
    return render(request, template, context, status=status)


@require_POST
@reviewer_required
def proposal_bulk(request: HttpRequest) -> HttpResponse:
    """Approve or reject every proposal the posted filters match, on every page."""
    form, decision = QueueFilterForm(request.POST), ReviewForm(request.POST)
    if not (form.is_valid() and decision.is_valid()):
        return HttpResponseBadRequest(form.errors.as_text() + decision.errors.as_text())
    approve = decision.cleaned_data["decision"] == "approve"
    matching = form.filter(Proposal.objects.all())
    if request.POST.get("confirmed") != "yes":
        return _confirm_bulk(request, form, matching, approve)
    count = review.decide_all(matching, request.user, approve)
    verb = "approved" if approve else "rejected"
    messages.success(request, f"{count} proposal{'s' if count != 1 else ''} {verb}.")
    query = {k: v for k, v in form.cleaned_data.items() if v}
    return redirect(reverse("selection:proposal_list") + "?" + urlencode(query))


def _confirm_bulk(
    request: HttpRequest, form: QueueFilterForm, matching: Any, approve: bool
) -> HttpResponse:
    """Say what a bulk decision will do before doing it: how many proposals change, which
    filters chose them, and the ones a person edited by hand (listed, so none is decided
    unseen); the same POST with `confirmed=yes` does it."""
    status = Proposal.Status.APPROVED if approve else Proposal.Status.REJECTED
    reviewable = review.reviewable(matching)
    changing = reviewable.exclude(status=status)
    edited = changing.filter(events__action=ProposalEvent.Action.EDITED).distinct()
    # The queue's button counted every match: the page says how many of them change and
    # why the others do not, so its numbers and the button's agree.
    matched, count = matching.count(), changing.count()
    fixed = matched - reviewable.count()
    context = {
        "decision": "approve" if approve else "reject",
        "count": count,
        "matched": matched,
        "others": matched - count,
        "decided_already": matched - fixed - count,
        "fixed": fixed,
        "filters": {k: v for k, v in form.cleaned_data.items() if v},
        "edited": edited.order_by("file_path", "test_name")[:50],
        "edited_count": edited.count(),
        "nav": "review",
    }
    return render(request, "selection/proposal_bulk_confirm.html", context)
