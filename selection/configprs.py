"""Config PRs: approved proposals become a reviewed diff of the YAML config, then a version.

- `open_change()` gathers a backend's approved proposals that no change holds yet
  into a `ConfigChange` against the backend's latest `ConfigVersion`: the
  proposed text is `configwriter.apply(base, decisions)`, reasons as comments.
- `approve()` records a reviewer's approval of the revision they saw
  (`ConfigChange.revision`, the hash of the diff on the page); with
  `CRCR_FORBID_SELF_APPROVAL` (the default) the author may never approve their
  own change, nor may whoever approved any of its proposals approve or merge it:
  two people see every config change, its content included (a one-person team
  turns the setting off, and the page says so).
- `merge()` turns a change approved at its current revision into version base+1,
  only while its base is still the backend's latest version; otherwise the change
  is marked `needs_rebase` and nothing is applied.
- Both take the revision the caller saw and refuse, recording nothing, when the
  change moved on since (a rebase, an edit): nobody approves or merges unread text.
- `rebase()` regenerates the proposed text on the latest version from the
  change's proposals; approvals are dropped (they approved another text) and
  `conflicts()` names tests whose entry in the new base differs from the proposal.
- `unified_diff()` and `patch()` render a change or a merged version as text.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from email.utils import format_datetime
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import OuterRef, QuerySet, Subquery
from django.utils import timezone

from crcr_site.lib.access import can_review
from runs.models import Backend
from selection import configwriter
from selection.models import (
    ConfigApproval,
    ConfigChange,
    ConfigVersion,
    Proposal,
    ProposalEvent,
)
from selection.proposals import explicit_entries

FILE_NAME = "crcr-config.yaml"
EMPTY_CONFIG = "test_suite_config:\n  files: []\n"


class ChangeError(Exception):
    """The change cannot take this action; the message says why and what to do."""


class AlreadyApproved(ChangeError):
    """The reviewer approved this revision already: a second Approve changes nothing."""


class NeedsRebase(ChangeError):
    """The backend got a newer config version since the change was opened."""


@dataclass(frozen=True)
class Conflict:
    """A proposal whose test already has a different explicit entry in the change's base."""

    proposal: Proposal
    mode: str
    edits: dict[str, Any]


def latest_version(backend: Backend) -> ConfigVersion | None:
    return ConfigVersion.objects.filter(backend=backend).order_by("-number").first()


def decisions_of(proposals: Any) -> list[configwriter.Decision]:
    return [
        configwriter.Decision(
            p.file_path, p.class_name, p.test_name, mode=p.mode, reason=p.reason, edits=p.edits
        )
        for p in proposals
    ]


def _proposed_text(base: ConfigVersion, proposals: list[Proposal]) -> str:
    try:
        return configwriter.apply(base.yaml_text, decisions_of(proposals))
    except configwriter.ConfigWriteError as error:
        raise ChangeError(
            f"the decisions cannot be written into v{base.number}: {error}"
        ) from error


@transaction.atomic
def open_change(backend: Backend, author: Any) -> ConfigChange | None:
    """A config PR of the backend's approved proposals not yet in a change; None if there are none."""
    # Lock the backend row: two reviewers opening changes at once get one each, not overlapping.
    Backend.objects.select_for_update().get(pk=backend.pk)
    proposals = list(
        Proposal.objects.filter(
            backend=backend, status=Proposal.Status.APPROVED, config_change__isnull=True
        ).order_by("file_path", "class_name", "test_name")
    )
    if not proposals:
        return None
    base = latest_version(backend)
    if base is None:  # a backend without a config yet starts from the empty one
        base = ConfigVersion.objects.create(
            backend=backend, number=1, yaml_text=EMPTY_CONFIG,
            sha256=ConfigVersion.hash_text(EMPTY_CONFIG), message="empty config",
        )  # fmt: skip
    count = len(proposals)
    change = ConfigChange.objects.create(
        backend=backend,
        title=f"{count} approved decision{'s' if count != 1 else ''} for {backend.name}",
        base=base,
        proposed_text=_proposed_text(base, proposals),
        author=author,
    )
    # Conditional: a proposal re-reviewed meanwhile stays out (the text would not match it).
    taken = Proposal.objects.filter(
        pk__in=[p.pk for p in proposals],
        status=Proposal.Status.APPROVED,
        config_change__isnull=True,
    ).update(config_change=change)
    if taken != count:
        raise ChangeError("proposals changed while the config PR was being opened; try again")
    return change


def _waiting_backends() -> QuerySet[Backend]:
    waiting = Proposal.objects.filter(
        backend=OuterRef("pk"), status=Proposal.Status.APPROVED, config_change__isnull=True
    )
    # A correlated LIMIT 1 per backend stops at the first row of the (backend, status,
    # file) index however long the queue is (EXISTS would let the planner scan every
    # proposal). Ordered by the index's next column, so the index is the only cheap plan:
    # unordered, PostgreSQL may prefer a sequential scan that reads the whole table for a
    # backend with nothing approved (6 ms at 20,000 proposals, bench/pages.py).
    first = Subquery(waiting.order_by("file_path").values("pk")[:1])
    backends = Backend.objects.alias(first=first).filter(first__isnull=False)
    return backends.only("slug", "name").order_by("slug")


# Built once: building it (a subquery resolved against its outer query) cost twice what
# running it does, on every page of the queue (bench/pages.py).
_WAITING = _waiting_backends()


def ready() -> list[Backend]:
    """Backends with approved proposals that wait for a config PR."""
    return list(_WAITING.all())


def is_stale(change: ConfigChange) -> bool:
    """An open change whose base is no longer the backend's latest version."""
    if change.status not in (ConfigChange.Status.OPEN, ConfigChange.Status.NEEDS_REBASE):
        return False
    latest = latest_version(change.backend)
    return latest is not None and latest.pk != change.base_id


def content_reviewers(change: ConfigChange) -> set[int]:
    """Ids of whoever approved a proposal the change holds: they decided its content, so
    the change itself needs someone else (its reviewer now, or any earlier approver)."""
    proposals = change.proposals.all()
    approvers = set(proposals.exclude(reviewer=None).values_list("reviewer_id", flat=True))
    events = ProposalEvent.objects.filter(
        proposal__in=proposals, action=ProposalEvent.Action.APPROVED, actor__isnull=False
    )
    return approvers | set(events.values_list("actor_id", flat=True))


def _second_person(change: ConfigChange, user: Any, action: str) -> str | None:
    """Why the user may not `action` the change under the two-person rule, if they may not."""
    if not settings.CRCR_FORBID_SELF_APPROVAL:
        return None
    if action == "approve" and change.author_id == user.pk:
        return "you opened this config PR: another reviewer must approve it"
    if user.pk in content_reviewers(change):
        return (
            f"you approved proposals in this config PR: a reviewer who approved none of "
            f"them must {action} it"
        )
    return None


def _counted_approvals(change: ConfigChange, revision: str) -> QuerySet[ConfigApproval]:
    """Approvals of `revision` that count: not by one who approved a proposal in it."""
    approvals = change.approvals.filter(revision=revision)
    if settings.CRCR_FORBID_SELF_APPROVAL:
        approvals = approvals.exclude(reviewer_id__in=content_reviewers(change))
    return approvals


def may_approve(change: ConfigChange, user: Any) -> str | None:
    """None when the user may approve the change, else why not."""
    if change.status != ConfigChange.Status.OPEN:
        return f"this config PR is {change.get_status_display()}"
    if not can_review(user):
        return "approving needs the reviewer role"
    return _own_approval(change, user) or _second_person(change, user, "approve")


def _own_approval(change: ConfigChange, user: Any) -> str | None:
    """When the user approved the change's current revision already, when and how."""
    approval = change.approvals.filter(reviewer_id=user.pk, revision=change.revision).first()
    if approval is None:
        return None
    when = timezone.localtime(approval.created_at)
    said = f", saying “{approval.comment}”" if approval.comment else ""
    return f"you approved this revision on {when:%Y-%m-%d %H:%M}{said}"


def may_merge(change: ConfigChange, user: Any) -> str | None:
    """None when the user may merge the change now, else why not (shown in place of Merge)."""
    if not can_review(user):
        return "merging needs the reviewer role"
    if change.status != ConfigChange.Status.OPEN:
        return f"this config PR is {change.get_status_display()}"
    refusal = _second_person(change, user, "merge")
    if refusal:
        return refusal
    if not _counted_approvals(change, change.revision).exists():
        return "it can be merged once another reviewer approved this revision"
    return None


def _check_revision(change: ConfigChange, revision: str, action: str) -> None:
    """Refuse an action taken on a revision of the change that is no longer its current one."""
    current = change.revision
    if revision != current:
        raise ChangeError(
            f"this config PR changed since you loaded it (you saw revision {revision[:12]}, "
            f"it is now {current[:12]}): read the new diff and {action} again"
        )


def approve(change: ConfigChange, user: Any, revision: str, comment: str = "") -> ConfigApproval:
    """Record the user's approval of `revision`, which must be the change's current one."""
    change = ConfigChange.objects.select_related("base").get(pk=change.pk)
    _check_revision(change, revision, "approve")
    earlier = _own_approval(change, user)
    if earlier:
        raise AlreadyApproved(earlier)
    refusal = may_approve(change, user)
    if refusal:
        raise ChangeError(refusal)
    # No lock: a rebase landing between the check and the write leaves an approval of
    # the old revision, which merge() does not count.
    approval, _ = ConfigApproval.objects.update_or_create(
        change=change,
        reviewer=user,
        defaults={"revision": revision, "comment": comment, "created_at": timezone.now()},
    )
    return approval


def merge(change: ConfigChange, user: Any, revision: str) -> ConfigVersion:
    """The change as the backend's next version, or NeedsRebase when its base is stale.

    1. lock the backend row: merges, rebases and new changes for one backend run one
       at a time, so the change read next cannot move before the merge commits;
    2. refuse a change that is not open, that is no longer at the `revision` the
       caller saw, or that has no approval of that revision by a reviewer who approved
       none of its proposals; refuse a merger who approved one (the two-person rule);
    3. compare the base with the latest version; stale -> `needs_rebase`, nothing applied;
    4. create version base+1 (unique per backend: a racing merge cannot reuse the number),
       mark the change merged and its proposals merged.
    """
    try:
        with transaction.atomic():
            Backend.objects.select_for_update().get(pk=change.backend_id)
            change = ConfigChange.objects.select_related("base").get(pk=change.pk)
            if change.status == ConfigChange.Status.NEEDS_REBASE:
                raise NeedsRebase("the config changed since this PR was opened: rebase it")
            if change.status != ConfigChange.Status.OPEN:
                raise ChangeError(f"this config PR is {change.get_status_display()}")
            _check_revision(change, revision, "merge")
            refusal = _second_person(change, user, "merge")
            if refusal:
                raise ChangeError(refusal)
            if not _counted_approvals(change, revision).exists():
                raise ChangeError(
                    "this config PR needs a reviewer's approval of this revision "
                    "before it is merged"
                )
            latest = latest_version(change.backend)
            if latest is not None and latest.pk != change.base_id:
                raise NeedsRebase(
                    f"v{latest.number} was merged since this PR was opened on "
                    f"v{change.base.number}: rebase it, check the diff again and have it approved"
                )
            return _merge_into_next(change, user)
    except NeedsRebase:
        # Conditional update, after the merge's rollback: only an open change becomes stale.
        ConfigChange.objects.filter(pk=change.pk, status=ConfigChange.Status.OPEN).update(
            status=ConfigChange.Status.NEEDS_REBASE
        )
        raise


def _merge_into_next(change: ConfigChange, user: Any) -> ConfigVersion:
    now = timezone.now()
    try:
        with transaction.atomic():
            version = ConfigVersion.objects.create(
                backend=change.backend, number=change.base.number + 1, parent=change.base,
                yaml_text=change.proposed_text, sha256=ConfigVersion.hash_text(change.proposed_text),
                message=change.title, created_by=user, created_at=now,
            )  # fmt: skip
    except IntegrityError as error:  # the backend lock makes this rare; the constraint decides
        raise NeedsRebase("another config PR was merged first: rebase this one") from error
    # Conditional update: a change merged twice at once is merged once.
    if not ConfigChange.objects.filter(pk=change.pk, status=ConfigChange.Status.OPEN).update(
        status=ConfigChange.Status.MERGED, merged_version=version, merged_at=now
    ):
        raise ChangeError("this config PR was merged or closed meanwhile")
    change.proposals.update(status=Proposal.Status.MERGED)
    return version


@transaction.atomic
def rebase(change: ConfigChange, user: Any) -> list[Conflict]:
    """Regenerate the change on the backend's latest version; returns its conflicts."""
    Backend.objects.select_for_update().get(pk=change.backend_id)
    change = ConfigChange.objects.get(pk=change.pk)
    if change.status not in (ConfigChange.Status.OPEN, ConfigChange.Status.NEEDS_REBASE):
        raise ChangeError(f"this config PR is {change.get_status_display()}")
    latest = latest_version(change.backend)
    if latest is None or latest.pk == change.base_id:
        raise ChangeError("this config PR is already on the latest config version")
    proposals = list(change.proposals.order_by("file_path", "class_name", "test_name"))
    change.base = latest
    change.proposed_text = _proposed_text(latest, proposals)
    change.status = ConfigChange.Status.OPEN
    change.save(update_fields=["base", "proposed_text", "status"])
    # The approvals were for the old text.
    change.approvals.all().delete()
    return conflicts(change)


def conflicts(change: ConfigChange) -> list[Conflict]:
    """Proposals whose test has another explicit entry in the base: merging replaces it."""
    written = explicit_entries(change.base.yaml_text)
    out = []
    for proposal in change.proposals.order_by("file_path", "class_name", "test_name"):
        name = (
            f"{proposal.class_name}::{proposal.test_name}"
            if proposal.class_name
            else proposal.test_name
        )
        entry = written.get((proposal.file_path, name))
        if entry is not None and (entry[0], entry[1] or {}) != (
            proposal.mode,
            proposal.edits or {},
        ):
            out.append(Conflict(proposal, entry[0], entry[1]))
    return out


def unified_diff(old: str, new: str, old_name: str, new_name: str) -> list[str]:
    """diff -u lines, each ending in a newline; a last line without one is marked as git does."""
    lines = list(
        difflib.unified_diff(
            old.splitlines(keepends=True), new.splitlines(keepends=True), old_name, new_name
        )
    )
    return [
        line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines
    ]


def patch(version: ConfigVersion) -> str:
    """The version as a git-format patch against its parent's file (`git am` / `git apply`)."""
    parent_text = version.parent.yaml_text if version.parent else ""
    old_name = f"a/{FILE_NAME}" if version.parent else "/dev/null"
    body = unified_diff(parent_text, version.yaml_text, old_name, f"b/{FILE_NAME}")
    added = sum(1 for line in body[2:] if line.startswith("+"))
    removed = sum(1 for line in body[2:] if line.startswith("-"))
    author = version.created_by
    name = (author.get_full_name() or author.username) if author else "crcr"
    email = author.email if author and author.email else "crcr@localhost"
    subject = version.message or f"config v{version.number}"
    header = [
        f"From {version.sha256[:40]} Mon Sep 17 00:00:00 2001\n",
        f"From: {name} <{email}>\n",
        f"Date: {format_datetime(version.created_at)}\n",
        f"Subject: [PATCH] {version.backend.name} config v{version.number}: {subject}\n",
        "\n",
        "---\n",
        f" {FILE_NAME} | {added + removed} {'+' * added}{'-' * removed}\n",
        f" 1 file changed, {added} insertions(+), {removed} deletions(-)\n",
        "\n",
        f"diff --git a/{FILE_NAME} b/{FILE_NAME}\n",
    ]
    if version.parent is None:
        header.append("new file mode 100644\n")
    return "".join(header + body) + "-- \ncrcr\n"
