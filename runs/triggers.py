"""Triggers: what asks for a build (dispatch, nightly, release, manual) and its runs."""

from typing import Any

from crcr_reuse.labels import parse_selection
from django.db import transaction
from django.db.models import Q

from runs import combinations
from runs.models import Backend, Dispatch, Trigger
from runs.models.intake import NIGHTLY_REF
from runs.upstream import SHA_RE, Resolver, UpstreamError, get_resolver, nightly_source_sha

RELEASE_PREFIX = "release/"


class TriggerError(ValueError):
    """A trigger request that names something crcr cannot build."""


@transaction.atomic
def start(
    backend: Backend,
    kind: str,
    sha: str,
    ref: str = "",
    dispatch: Dispatch | None = None,
    user: Any = None,
    labels: str = "",
) -> Trigger:
    """Record the trigger and create its runs (one per combination) in one transaction.
    ``labels``: the label selection its runs' tests are chosen by (empty: all)."""
    trigger = Trigger.objects.create(
        backend=backend, kind=kind, pytorch_sha=sha, ref=ref, dispatch=dispatch,
        requested_by=user, labels=labels,
    )  # fmt: skip
    combinations.create_runs(trigger)
    return trigger


def start_nightly(backend: Backend, resolver: Resolver | None = None) -> Trigger:
    """Build the source commit of PyTorch's nightly; the same nightly is built once."""
    sha = nightly_source_sha(resolver or get_resolver())
    return nightly_built(backend, sha) or start(backend, Trigger.Kind.NIGHTLY, sha, ref="nightly")


def nightly_built(backend: Backend, sha: str) -> Trigger | None:
    """The trigger that built this nightly source commit already: the schedule's, or a
    nightly dispatch's (a nightly-only backend's)."""
    nightly = Q(kind=Trigger.Kind.NIGHTLY) | Q(dispatch__base_ref=NIGHTLY_REF)
    return Trigger.objects.filter(nightly, backend=backend, pytorch_sha=sha).first()


def start_release(
    backend: Backend,
    branch: str,
    user: Any = None,
    resolver: Resolver | None = None,
    labels: str = "",
) -> Trigger:
    if not branch.startswith(RELEASE_PREFIX):
        raise TriggerError(f"{branch!r} is not a release branch (release/X.Y)")
    try:
        sha = (resolver or get_resolver()).branch_head(branch)
    except UpstreamError as error:
        raise TriggerError(str(error)) from None
    return start(backend, Trigger.Kind.RELEASE, sha, ref=branch, user=user, labels=labels)


def start_manual(backend: Backend, sha: str, user: Any = None, labels: str = "") -> Trigger:
    if not SHA_RE.match(sha):
        raise TriggerError(f"{sha!r} is not a 40-hex commit SHA")
    return start(backend, Trigger.Kind.MANUAL, sha, user=user, labels=labels)


def label_selection(text: str) -> str:
    """A trigger's labels as stored ("smoke,core"); TriggerError names a bad one."""
    try:
        return ",".join(parse_selection([text]))
    except ValueError as error:
        raise TriggerError(str(error)) from None
