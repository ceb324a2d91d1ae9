"""Reviewing proposals: approve, reject or edit one, or a whole filtered set at once.

Every action is a conditional update that skips proposals already merged into a
config or gathered into a config PR (their decision is fixed there), and leaves
a `ProposalEvent` naming who did what and when.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import OuterRef, QuerySet, Subquery
from django.utils import timezone

from selection.models import Proposal, ProposalEvent


class ReviewError(Exception):
    """The proposal cannot take this action any more; the message says why."""


def reviewable(proposals: QuerySet[Proposal]) -> QuerySet[Proposal]:
    """The proposals a reviewer may still change: not merged, not in a config PR."""
    return proposals.exclude(status=Proposal.Status.MERGED).filter(config_change__isnull=True)


def with_last_edit(proposals: QuerySet[Proposal]) -> QuerySet[Proposal]:
    """The proposals with who last edited each by hand and when (`edited_by`, `edited_at`;
    None for the pipeline's own proposal): one subquery per row, on the events' proposal key."""
    edits = ProposalEvent.objects.filter(
        proposal=OuterRef("pk"), action=ProposalEvent.Action.EDITED
    ).order_by("-at", "-pk")
    return proposals.annotate(
        edited_at=Subquery(edits.values("at")[:1]),
        edited_by=Subquery(edits.values("actor__username")[:1]),
    )


def _refusal(proposal: Proposal) -> ReviewError:
    proposal.refresh_from_db()
    if proposal.status == Proposal.Status.MERGED:
        return ReviewError("this proposal is already merged into the config")
    return ReviewError("this proposal is part of a config PR; its decision is fixed there")


def decide(proposal: Proposal, user: Any, approve: bool) -> Proposal:
    """Approve or reject one proposal and record it."""
    status = Proposal.Status.APPROVED if approve else Proposal.Status.REJECTED
    now = timezone.now()
    with transaction.atomic():
        # Conditional update: a config PR or a merge that took the proposal first wins.
        changed = reviewable(Proposal.objects.filter(pk=proposal.pk)).update(
            status=status, reviewer=user, reviewed_at=now
        )
        if not changed:
            raise _refusal(proposal)
        ProposalEvent.objects.create(
            proposal=proposal,
            actor=user,
            action=status,
            old={"status": proposal.status},
            new={"status": status},
            at=now,
        )
    proposal.status, proposal.reviewer, proposal.reviewed_at = status, user, now
    return proposal


def edit(proposal: Proposal, user: Any, mode: str, reason: str) -> Proposal:
    """Change a proposal's mode and reason; an edited proposal waits for review again."""
    now = timezone.now()
    old = {"mode": proposal.mode, "reason": proposal.reason, "status": proposal.status}
    new = {"mode": mode, "reason": reason, "status": Proposal.Status.PENDING}
    # Edits only make sense when they drop: a skip has nothing to edit.
    edits = proposal.edits if mode != Proposal.Mode.SKIP else {}
    with transaction.atomic():
        # Conditional update, as in decide().
        changed = reviewable(Proposal.objects.filter(pk=proposal.pk)).update(
            mode=mode, reason=reason, edits=edits, status=Proposal.Status.PENDING,
            reviewer=user, reviewed_at=now,
        )  # fmt: skip
        if not changed:
            raise _refusal(proposal)
        ProposalEvent.objects.create(
            proposal=proposal, actor=user, action=ProposalEvent.Action.EDITED, old=old, new=new,
            at=now,
        )  # fmt: skip
    proposal.mode, proposal.reason, proposal.edits = mode, reason, edits
    proposal.status, proposal.reviewer, proposal.reviewed_at = new["status"], user, now
    return proposal


@transaction.atomic
def decide_all(proposals: QuerySet[Proposal], user: Any, approve: bool) -> int:
    """Approve or reject every reviewable proposal of a filtered set; returns how many changed.

    1. lock the set's reviewable rows (a concurrent config PR waits, then sees them);
    2. update them in one statement;
    3. record one event per changed proposal in one insert.
    """
    status = Proposal.Status.APPROVED if approve else Proposal.Status.REJECTED
    now = timezone.now()
    rows = list(
        reviewable(proposals)
        .exclude(status=status)
        .order_by()
        .select_for_update(of=("self",))
        .values_list("pk", "status")
    )
    if not rows:
        return 0
    ids = [pk for pk, _ in rows]
    Proposal.objects.filter(pk__in=ids).update(status=status, reviewer=user, reviewed_at=now)
    ProposalEvent.objects.bulk_create(
        ProposalEvent(
            proposal_id=pk, actor=user, action=status, old={"status": old}, new={"status": status},
            bulk=True, at=now,
        )
        for pk, old in rows
    )  # fmt: skip
    return len(rows)
