"""Reporters' claims on the outbox: a GitHub Actions job sends what crcr's workers cannot.

PyTorch's relay accepts only an OIDC token that a GitHub Actions job mints, so for a
backend whose `relay_sender` is `actions` a scheduled workflow (`python -m
runs.relay.reporter`, crcr-report.yml) drains the outbox through crcr's API. What it finds
there are self-reports, one `completed` per nightly, release or manual run: a dispatched run
is the bridge job's to report (crcr-bridge.yml) and queues nothing. The outbox stays the one
record: the reporter claims due rows on a lease, sends them and writes each answer back.
1. `claim`: rows whose lease ran out are due again; the due rows are taken in the outbox's
   order and by its rules (`RelayCallbackQuerySet.due`, `outbox.take`), each one's HUD job
   identity is fixed (`_fix_identity`), each takes a send from the repository's callback
   budget (`pacing.turn`; the first it has none for waits for its turn, and the claim ends
   there, saying when the first row waiting gets its turn), and all go out on one lease;
2. `settle_reported`: the relay's answer is settled exactly as the relay worker settles
   its own (`outbox.settle_answer`), but only while the lease is the reporter's (the lease
   id and the API token that claimed it, its holder: no other token answers it); a reporter
   that died lost its lease, and the next claim resends the row as an ambiguous retry
   under the same identity: a repeat the relay refuses then means the lost send had landed,
   and a self-report (the relay keeps no state for one) it takes again as the same HUD job.
"""

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from runs.models import ApiToken, Backend, RelayCallback
from runs.relay import delivery, outbox, pacing

S, T = RelayCallback.Status, RelayCallback.Transition
# How long one claim holds its rows (CRCR_RELAY_LEASE_SECONDS): a batch of sends and
# write-backs fits well inside it; a reporter killed meanwhile delays its rows this long.
LEASE_SECONDS = 300


@dataclass(frozen=True)
class Reporter:
    """The GitHub Actions run that claims callbacks: the HUD job identity it reports under."""

    run_id: str
    run_attempt: str
    url: str
    workflow: str

    def __str__(self) -> str:
        return f"actions run {self.run_id} attempt {self.run_attempt}"


@dataclass(frozen=True)
class Claim:
    lease: str
    lease_until: datetime
    callbacks: list[RelayCallback]
    # Seconds until the first of the backend's rows waiting for the budget gets its turn.
    next_turn_in: float | None = None


def lease_seconds() -> int:
    return int(getattr(settings, "CRCR_RELAY_LEASE_SECONDS", LEASE_SECONDS))


def claim(
    backend: Backend, reporter: Reporter, limit: int, holder: ApiToken | None = None
) -> Claim:
    """Hand a reporter up to `limit` of the backend's due rows, on one lease held by the
    API token `holder`.

    Steps: rows whose lease ran out are pending again; walk the due rows in order; take
    each with the relay worker's conditional update (another reporter may have it); a
    `completed` whose in_progress was refused is refused here, one whose in_progress is
    not delivered yet waits; fix the row's HUD job identity, or give the row back when
    this reporter's run cannot carry its job.
    """
    RelayCallback.objects.release_expired_leases()
    lease = f"{reporter} #{secrets.token_hex(6)}"
    length = timedelta(seconds=lease_seconds())
    due = RelayCallback.objects.due().filter(run__backend=backend)
    claimed: list[RelayCallback] = []
    for callback_id in list(due.values_list("pk", flat=True)[: limit * 4]):
        # A row is taken and its identity fixed together, or not at all.
        with transaction.atomic():
            callback = outbox.take(callback_id, lease, length, holder)
            if callback is None:
                continue  # another reporter (or the relay worker) got there first
            if callback.transition == T.COMPLETED and not outbox.in_progress_landed(callback):
                continue
            if not _fix_identity(callback, reporter):
                _give_back(callback)
                continue
            turn = pacing.turn(callback.run.backend.repository)
            if turn.wait:  # the repository's budget is spent for now: so is every later row's
                outbox.wait_turn(callback, turn.wait)
                break
        claimed.append(callback)
        if len(claimed) == limit:
            break
    # The lease's end as the database wrote it (each row's, to the same instant or so).
    until = min((c.lease_until for c in claimed if c.lease_until), default=None)
    return Claim(lease, until or timezone.now() + length, claimed, _next_turn_in(backend))


def _next_turn_in(backend: Backend) -> float | None:
    """Seconds until the first of the backend's rows waiting for the budget gets its turn."""
    waiting = RelayCallback.objects.filter(
        run__backend=backend, status=S.PENDING, turn_at__isnull=False
    )
    first = waiting.order_by("turn_at").values_list("turn_at", flat=True).first()
    return None if first is None else max(0.5, (first - timezone.now()).total_seconds())


def _fix_identity(callback: RelayCallback, reporter: Reporter) -> bool:
    """Fix the Actions run a HUD job is reported under, once for all of its rows.

    A self-report is one row; a job that has another (one queued as an in_progress and
    completed pair before dispatched runs went to the bridge) keeps the identity that row
    got, perhaps from an earlier reporter run; a job already sent without one (by crcr's
    relay worker, before the backend changed senders) keeps its body's own; else it takes
    this reporter's run.
    False when this reporter's run already carries another job of the same name for the
    same delivery: the relay would take both for one job, so the row waits for the next run.
    """
    if callback.adopt_job_identity():
        return True
    job = callback.job()
    if callback.attempts > 1 or job.exclude(pk=callback.pk).filter(attempts__gt=0).exists():
        return True
    taken = RelayCallback.objects.filter(
        delivery_id=callback.delivery_id,
        job_name=callback.job_name,
        reported_run_id=reporter.run_id,
        reported_run_attempt=reporter.run_attempt,
    )
    if taken.exists():
        return False
    job.filter(reported_run_id="").update(
        reported_run_id=reporter.run_id,
        reported_run_attempt=reporter.run_attempt,
        reported_url=reporter.url,
        workflow_name=reporter.workflow,
    )
    callback.refresh_from_db(fields=list(RelayCallback.IDENTITY))
    return True


def _give_back(callback: RelayCallback) -> None:
    """Put a claimed row back untried: the attempt is not counted, its last answer is kept
    (whether an earlier try may have landed)."""
    RelayCallback.objects.filter(
        pk=callback.pk, status=S.SENDING, claimed_by=callback.claimed_by
    ).update(status=S.PENDING, attempts=F("attempts") - 1)


def settle_reported(
    uuid: str, lease: str, answer: delivery.Answer | None, holder: ApiToken | None = None
) -> RelayCallback | None:
    """A reporter's write-back for a row it claimed: the relay's answer, or None for a row
    it gives back unsent. None when the lease is no longer the reporter's, or `holder` (the
    API token answering) is not the token that claimed it."""
    with transaction.atomic():
        # Concurrency guard: the row lock keeps the lease's expiry and another claim off the
        # row while the answer is applied. A lease already taken back is not this reporter's
        # to settle: the row's next try settles it (as an ambiguous retry).
        callback = (
            RelayCallback.objects.select_for_update(of=("self",))
            .select_related("run__backend")
            .filter(uuid=uuid, status=S.SENDING, claimed_by=lease, lease_holder=holder)
            .first()
        )
        if callback is None:
            return None
        if answer is None:
            _give_back(callback)
            callback.refresh_from_db()
            return callback
        return outbox.settle_answer(callback, answer)
