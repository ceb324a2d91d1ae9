"""The HUD relay outbox: one row per CRCR callback, delivered in order, at most once.

Rows are written with the transition that causes them (a run or shard starting, a
shard ending, a run finishing) and delivered by a task on the `relay` queue:
1. claim the row (pending and due) with a conditional update;
2. a `completed` waits until its job's `in_progress` is delivered;
3. take a send from the repository's callback budget (`pacing`), else wait for its
   turn, unsent and shown so on the run page;
   send; a 2xx delivers, 429/5xx/no answer retry with backoff and jitter (or
   the relay's Retry-After, at most an hour; a 429 or a Retry-After also holds the
   whole repository back), any other answer is final and shown on the run page. A
   transition refused as a repeat right after a lost answer means that answer had
   landed: delivered;
4. no usable relay token (a token file missing, unreadable or empty, a malformed
   spec) is a configuration error: nothing is sent, the row is held and checked
   again every quarter of an hour, an ERROR is logged once, and viewers read that
   an admin must fix it (reviewers and admins read the detail);
5. a row still undelivered CRCR_RELAY_GIVE_UP_HOURS after it was written is
   given up (rejected, with the reason): by then the relay has forgotten the
   dispatch (its state lives 3 days) and would refuse it;
6. a HUD job left in_progress past crcr's deadline is reported `timed_out` first
   (`runs.relay.deadlines`), before the relay's 6-hour sweeper closes it.
Modes: per job (each shard is a HUD job, completed when the shard ends, done or in error,
with its own counts and verdicts; the run's end writes any a shard's end did not) or
aggregate (one job per run, completed when the run ends).
Senders: crcr's relay worker (relays that accept a static token), or for PyTorch's relay
GitHub Actions: a dispatched run is then the bridge job's to report (crcr-bridge.yml, in
either mode) and nothing is queued for it; self-reports are claimed on a lease by the
reporter (crcr-report.yml, `runs.relay.claims`).
Nightly and release runs self-report one `completed` (event_type `nightly`), manual runs one
(event_type `periodic`); a bundle's re-run reports nothing.
"""

import logging
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db.models import F, QuerySet
from django.db.models.functions import Now
from django.utils import timezone

from crcr_site.lib import enqueue
from runs.models import ApiToken, Backend, Failure, RelayCallback, Run, Shard, Trigger
from runs.relay import deadlines, delivery, pacing, policy, protocol

logger = logging.getLogger(__name__)

WORKFLOW = "crcr"
# The relay worker holds a row this long while sending it; one held longer lost its sender.
WORKER_LEASE = timedelta(minutes=5)
# A row held for want of a relay token is looked at again this often: nothing goes to the
# relay meanwhile, and the token is read afresh, so a fixed file is picked up unprompted.
HOLD_SECONDS = 15 * 60
T, S = RelayCallback.Transition, RelayCallback.Status
CONCLUSIONS: dict[str, str] = {
    Run.Status.PASSED: "success",
    Run.Status.FAILED: "failure",
    Run.Status.TIMED_OUT: "timed_out",
    Run.Status.CANCELLED: "cancelled",
    Run.Status.ERROR: "cancelled",  # infrastructure: never red, never green
}
TRIAGE = {"regression": "backend", "flaky": "flake", "infra": "infra", "known": "unknown"}


def client_payload(run: Run) -> dict[str, Any] | None:
    trigger = run.trigger
    if trigger.dispatch is not None:
        dispatch = trigger.dispatch
        return {
            "event_type": dispatch.event_type,
            "delivery_id": dispatch.delivery_id,
            "payload": dispatch.payload,
        }
    if trigger.kind in (Trigger.Kind.NIGHTLY, Trigger.Kind.RELEASE):
        return protocol.nightly_payload(run.pytorch_sha, ref=trigger.ref or None)
    if trigger.kind == Trigger.Kind.MANUAL and not _reproduction(run):
        # A person's run of a PyTorch commit: the relay's other self-report kind.
        return protocol.nightly_payload(
            run.pytorch_sha, event_type="periodic", ref=trigger.ref or None
        )
    return None


def _reproduction(run: Run) -> bool:
    """A bundle's re-run checks crcr's own reproducibility: nothing for the HUD."""
    return Run.objects.filter(pk=run.pk, rerun_origin__isnull=False).exists()


def _self_reported(run: Run) -> bool:
    return run.trigger.dispatch_id is None


def _enabled(run: Run) -> bool:
    backend = run.backend
    # A dispatched run reported from GitHub Actions: the bridge job (crcr-bridge.yml) sends
    # its HUD jobs' callbacks itself (the run's, or each shard's in per-job mode).
    bridged = backend.relay_sender == Backend.RelaySender.ACTIONS and not _self_reported(run)
    return bool(backend.relay_url) and client_payload(run) is not None and not bridged


def _job_name(run: Run, shard: Shard | None) -> str:
    return f"{run.job_name} / shard {shard.index}" if shard else run.job_name


def _queue(run: Run, transition: str, shard: Shard | None, body: dict[str, Any]) -> None:
    payload = client_payload(run) or {}
    callback, created = RelayCallback.objects.get_or_create(
        delivery_id=payload.get("delivery_id", ""),
        job_name=_job_name(run, shard),
        hud_run_id=str(run.hud_run_id),
        hud_run_attempt=str(run.run_attempt),
        transition=transition,
        defaults={"run": run, "shard": shard, "workflow_name": WORKFLOW, "body": body},
    )
    if created:
        from runs.tasks import deliver_callback

        if run.backend.relay_sender == Backend.RelaySender.WORKER:  # else a reporter claims it
            enqueue.after_commit(deliver_callback, callback.pk)
    elif transition == T.COMPLETED and deadlines.sent_at_deadline(callback):
        deadlines.note_result_not_sent(callback, body)


def _body(run: Run, shard: Shard | None, status: str, **extra: Any) -> dict[str, Any]:
    extra.setdefault("artifact_url", run.page_url())
    return protocol.build_callback(
        client_payload(run) or {},
        status=status,  # type: ignore[arg-type]
        name=WORKFLOW,
        url=run.page_url(),
        run_id=run.hud_run_id,
        run_attempt=run.run_attempt,
        job_name=_job_name(run, shard),
        check_run_id=shard.pk if shard else run.pk,
        started_at=(shard.started_at if shard else run.started_at) or timezone.now(),
        **extra,
    )


def _per_job(run: Run) -> bool:
    return run.backend.relay_mode == Backend.RelayMode.PER_JOB


def job_started(run: Run, shard: Shard | None = None) -> None:
    """A HUD job began: the run (aggregate mode) or one shard (per-job mode)."""
    if not _enabled(run) or _self_reported(run):
        return
    if _per_job(run) == (shard is not None):
        _queue(run, T.IN_PROGRESS, shard, _body(run, shard, "in_progress"))


def shard_finished(shard: Shard) -> None:
    """A shard ended, done or in error: in per-job mode its HUD job's `completed` now, with
    its own counts, failures and conclusion, rather than when the whole run ends (the
    relay's sweeper would time the job out meanwhile). Called in the transaction that
    ends the shard, after its failures are classified."""
    run = shard.run
    if _enabled(run) and not _self_reported(run) and _per_job(run):
        _job_finished(run, shard)


def run_finished(run: Run) -> None:
    """The run ended: `completed` for its job, or for each shard's job that has none yet
    (in per-job mode a shard's end writes its own: `shard_finished`). A job that never
    announced itself (the run ended before it started) gets its in_progress first."""
    if not _enabled(run):
        return
    shards = list(run.shards.all())
    if _self_reported(run):
        _queue(run, T.COMPLETED, None, _completed_body(run, None))
    elif _per_job(run) and shards:
        for shard in shards:
            _job_finished(run, shard)
    else:
        _job_finished(run, None)


def _job_finished(run: Run, shard: Shard | None) -> None:
    """Queue a HUD job's in_progress (when it never announced itself), then its completed."""
    # Concurrency guard: a row is unique per job identity and transition (`_queue`'s
    # get_or_create), so of a shard's end, the run's end and the deadline pass only the
    # first writes a job's completed; the others find it (one written at the deadline
    # then notes the result it could not send, once).
    _queue(run, T.IN_PROGRESS, shard, _body(run, shard, "in_progress"))
    _queue(run, T.COMPLETED, shard, _completed_body(run, shard))


# What a bridge copies from crcr's `completed` of a HUD job (the rest is its own identity).
RESULT_FIELDS = (
    "conclusion", "completed_at", "test_results", "failed_tests_detail", "triage_verdict",
    "artifact_url", "environment",
)  # fmt: skip


def hud_jobs(run: Run) -> list[dict[str, Any]]:
    """The HUD jobs of a run as a GitHub Actions bridge reports them, in crcr's words.

    One job for the run (aggregate mode, or a run that ended before it had shards), else
    one per shard (none while the run is planned). Each says its shard (None: the run), its state (`waiting` for a shard
    not started yet, `running`, `finished`), when it started, and once finished the
    fields of the `completed` crcr would send itself (`RESULT_FIELDS`): one conclusion
    rule, one set of counts, failure details and triage verdict, whoever sends.
    """
    shards = list(run.shards.order_by("index")) if _per_job(run) else []
    if _per_job(run) and not shards and not run.is_finished:
        return []  # planning: no shard to report yet
    if not shards:
        return [_hud_job(run, None, run.is_finished, run.started_at)]
    return [
        _hud_job(
            run,
            shard,
            run.is_finished or shard.status in (Shard.Status.DONE, Shard.Status.ERROR),
            shard.started_at,
        )
        for shard in shards
    ]


def _hud_job(run: Run, shard: Shard | None, finished: bool, started: Any) -> dict[str, Any]:
    state = "finished" if finished else "running" if started or shard is None else "waiting"
    result = None
    if finished:
        workflow = _completed_body(run, shard)["workflow"]
        result = {key: workflow.get(key) for key in RESULT_FIELDS}
    started_at = protocol.iso8601(started) if started else None
    return {
        "shard": shard.index if shard else None,
        "state": state,
        "started_at": started_at,
        "result": result,
    }


def _completed_body(run: Run, shard: Shard | None) -> dict[str, Any]:
    counts = shard.test_counts() if shard else run.test_counts()
    failures = Failure.objects.filter(run=run).select_related("result")
    if shard is None:
        conclusion, ended = CONCLUSIONS.get(run.status, "failure"), run.finished_at
    else:
        failures = failures.filter(result__shard=shard)
        conclusion, ended = _shard_conclusion(run, shard, counts, failures), shard.finished_at
    return _body(
        run,
        shard,
        "completed",
        conclusion=conclusion,
        completed_at=ended or timezone.now(),
        test_results=counts,
        artifact_url=_log_url(run, shard, failures),
        failed_tests_detail=[_detail(failure) for failure in failures[:1000]],
        triage_verdict=_triage(run, list(failures)),
        environment=_environment(run, shard),
    )


def _log_url(run: Run, shard: Shard | None, failures: QuerySet[Failure]) -> str:
    """`artifact_url`: a shard's output, else the first failure's log, else the run page."""
    if shard is not None:
        return run.log_url(shard.index)
    return run.log_url() if failures.exists() else run.page_url()


def _environment(run: Run, shard: Shard | None) -> dict[str, str] | None:
    """The SDK and device versions of a HUD job: its shard's, or the run's first recorded
    (a run's shards test one combination; only their hosts differ)."""
    shards = Shard.objects.filter(pk=shard.pk) if shard else run.shards.order_by("index")
    return shards.exclude(environment={}).values_list("environment", flat=True).first()


def _shard_conclusion(
    run: Run, shard: Shard, counts: dict[str, int], failures: QuerySet[Failure]
) -> str:
    """A shard's own conclusion: lost to infrastructure, `cancelled` (never red, never green,
    as a run in error); done, `failure` with a regression or with no test at all (as a run
    with none), else `success`. A shard the run ended around takes the run's conclusion."""
    if shard.status == Shard.Status.ERROR:
        return CONCLUSIONS[Run.Status.ERROR]
    if shard.status != Shard.Status.DONE:
        return CONCLUSIONS.get(run.status, "failure")
    regressed = failures.filter(verdict=Failure.Verdict.REGRESSION).exists()
    return "failure" if regressed or counts["total"] == 0 else "success"


def _detail(failure: Failure) -> dict[str, Any]:
    result = failure.result
    return {
        "name": result.node_id.rsplit("::", 1)[-1],
        "classname": result.class_name,
        "message": failure.first_line or failure.get_category_display(),
        "stacktrace": result.message,
        "duration": result.duration,
    }


def _triage(run: Run, failures: list[Failure]) -> dict[str, Any] | None:
    if not failures:
        return None
    regressions = [f for f in failures if f.verdict == Failure.Verdict.REGRESSION]
    if regressions and run.only_upstream_changed():
        category, summary = "upstream", "only PyTorch changed since the last green run"
    else:
        worst = regressions[0] if regressions else failures[0]
        category = TRIAGE[worst.verdict]
        summary = f"{len(regressions)} regression(s) of {len(failures)} failure(s)"
    return {"category": category, "confidence": 0.7, "summary": summary}


def deliver(callback_id: int) -> RelayCallback | None:
    """Send one due row from the relay worker; returns it, or None when another sender
    holds it or the backend's callbacks are sent by a GitHub Actions reporter."""
    sender = RelayCallback.objects.filter(pk=callback_id).values_list(
        "run__backend__relay_sender", flat=True
    )
    if sender.first() != Backend.RelaySender.WORKER:
        return None  # workers hold no relay credential for it: a reporter claims it
    callback = take(callback_id, "relay worker", WORKER_LEASE)
    if callback is None:
        return None
    if callback.transition == T.COMPLETED and not in_progress_landed(callback):
        return callback
    callback.adopt_job_identity()  # sent by a reporter before the backend changed senders
    backend = callback.run.backend
    refused = policy.url_problem(backend.relay_url)
    if refused:  # stored past the checks (or the allow-list changed since): nothing goes
        return _hold(callback, f"relay_url: {refused}")
    try:
        provider = policy.provider(backend.relay_token)
        turn = pacing.turn(backend.repository)
        if turn.wait:
            return wait_turn(callback, turn.wait)
        answer = delivery.send(backend.relay_url, callback.outgoing_body(), provider)
        pacing.answered(backend.repository, turn)
    except delivery.TokenError as error:
        if not error.retryable:
            return _hold(callback, str(error))
        answer = delivery.Answer(None, str(error), True, None)
    return settle_answer(callback, answer)


def take(
    callback_id: int, by: str, lease: timedelta, holder: ApiToken | None = None
) -> RelayCallback | None:
    """Claim one due row for a sender for `lease`; None when it is not there to take.
    `holder`: the API token of a reporter's claim, the only one that may answer it."""
    # Concurrency guard: one sender moves the row to `sending` at a time; past its lease
    # the row is pending again (`release_expired_leases`): its sender died. The lease
    # runs on the database's clock (`Now()`), as its expiry is judged: not the host's.
    if not RelayCallback.objects.filter(
        pk=callback_id, status=S.PENDING, next_attempt_at__lte=Now()
    ).update(
        status=S.SENDING, attempts=F("attempts") + 1, next_attempt_at=Now(),
        claimed_by=by, lease_until=Now() + lease, lease_holder=holder, turn_at=None,
    ):  # fmt: skip
        return None
    return RelayCallback.objects.select_related("run__backend").get(pk=callback_id)


def settle_answer(callback: RelayCallback, answer: delivery.Answer) -> RelayCallback:
    """What the relay's answer means for the row that was sent, whoever sent it (the relay
    worker, or a reporter writing the answer back): delivered, refused for good, or
    retried later. A repeat refused right after a lost answer means that answer landed."""
    # The previous attempt's answer was lost: it may have landed.
    previous = callback.last_status_code
    ambiguous = callback.attempts > 1 and (previous is None or previous >= 500)
    outcome = delivery.settle(answer, after_ambiguous=ambiguous)
    callback.last_status_code, callback.last_response = answer.status, answer.text[:4000]
    callback.turn_at = None
    # A 429 or a Retry-After holds back every callback of the repository, not only this one.
    pacing.hold_back(callback.run.backend.repository, answer)
    if outcome == "retry":
        _later(callback, delay=answer.retry_after or delivery.backoff(callback.attempts))
    else:
        callback.status = S.DELIVERED if outcome == "delivered" else S.REJECTED
        callback.delivered_at = timezone.now() if outcome == "delivered" else None
        callback.save(
            update_fields=[
                "status", "delivered_at", "last_status_code", "last_response", "turn_at"
            ]
        )  # fmt: skip
    return callback


def wait_turn(callback: RelayCallback, wait: float) -> RelayCallback:
    """The repository's callback budget has no send for a claimed row now (`pacing.turn`):
    put it back, unsent and its attempt not counted, for its turn in `wait` seconds."""
    callback.attempts -= 1
    callback.turn_at = timezone.now() + timedelta(seconds=wait)
    _later(callback, delay=wait)
    return callback


def in_progress_landed(callback: RelayCallback) -> bool:
    """Whether a claimed `completed` may go: its job's in_progress was delivered (or it is
    a self-report, which has none). If not, the row is settled or put back here."""
    before = (
        RelayCallback.objects.filter(
            delivery_id=callback.delivery_id,
            job_name=callback.job_name,
            hud_run_id=callback.hud_run_id,
            hud_run_attempt=callback.hud_run_attempt,
            transition=T.IN_PROGRESS,
        )
        .values("status", "next_attempt_at")
        .first()
    )
    if before is None or before["status"] == S.DELIVERED:
        return True
    if before["status"] == S.REJECTED:
        # The relay would refuse a completed whose in_progress never landed.
        callback.status, callback.last_response = S.REJECTED, "not sent: in_progress refused"
        callback.save(update_fields=["status", "last_response"])
        return False
    callback.attempts -= 1  # nothing was sent
    # Look again just after the in_progress's own next try, not every few seconds.
    wait = (before["next_attempt_at"] - timezone.now()).total_seconds() + 1
    _later(callback, delay=max(2.0, wait))
    return False


def _hold(callback: RelayCallback, problem: str) -> RelayCallback:
    """No token could be had for a reason only a person can fix: keep the row, say so once.

    Nothing was sent: the attempt is not counted, and the last status code (whether an
    earlier attempt may have landed) is kept. The ERROR goes out when the row is first
    held; later looks that find the same trouble stay quiet.
    """
    if not callback.auth_misconfigured:
        logger.error(
            "relay callback %s (%s of run %s) held: backend %r has no usable relay token or "
            "URL (relay_token, relay_url in its profile): %s",
            callback.uuid, callback.transition, callback.run.uuid,
            callback.run.backend.slug, problem,
        )  # fmt: skip
    callback.attempts -= 1
    callback.last_response = f"{RelayCallback.AUTH_MISCONFIGURED}\n{problem}"[:4000]
    _later(callback, delay=HOLD_SECONDS)
    return callback


def _later(callback: RelayCallback, delay: float) -> None:
    """Put the row back for another try in `delay` seconds, or give it up when it has
    outlived the relay's memory of its job (CRCR_RELAY_GIVE_UP_HOURS)."""
    age = timezone.now() - callback.created_at
    if age > timedelta(hours=settings.CRCR_RELAY_GIVE_UP_HOURS):
        _give_up(callback, age)
    else:
        _release(callback, delay)


def _give_up(callback: RelayCallback, age: timedelta) -> None:
    """Reject a row the relay would no longer take, saying why in plain words."""
    if callback.auth_misconfigured:
        last = RelayCallback.AUTH_MISCONFIGURED
    elif callback.last_response:
        last = f"{callback.last_status_code or 'no answer'}: {callback.last_response[:300]}"
    else:
        last = "none, it was never sent"
    callback.status = S.REJECTED
    callback.last_response = (
        f"gave up after {callback.attempts} attempt(s) over {age.total_seconds() / 3600:.0f} "
        f"hours (CRCR_RELAY_GIVE_UP_HOURS={settings.CRCR_RELAY_GIVE_UP_HOURS}): the relay "
        "forgets a job's dispatch 3 days after it and would refuse this callback now. "
        f"Last answer: {last}"
    )
    callback.save(update_fields=["status", "attempts", "last_status_code", "last_response"])
    logger.error(
        "relay callback %s (%s of run %s) given up: %s",
        callback.uuid, callback.transition, callback.run.uuid, callback.last_response,
    )  # fmt: skip


def _release(callback: RelayCallback, delay: float) -> None:
    from runs.tasks import deliver_callback

    callback.status = S.PENDING
    callback.next_attempt_at = timezone.now() + timedelta(seconds=delay)
    callback.save(
        update_fields=[
            "status", "next_attempt_at", "attempts", "last_status_code", "last_response",
            "turn_at",
        ]
    )  # fmt: skip
    # Eagerly, a countdown would spin at once; a reporter's row waits for its next claim.
    worker = callback.run.backend.relay_sender == Backend.RelaySender.WORKER
    if worker and not settings.CELERY_TASK_ALWAYS_EAGER:
        deliver_callback.apply_async((callback.pk,), countdown=delay)


def due() -> list[int]:
    """Rows the relay worker should (re)send now; a row whose sender died is pending again.
    The deadline pass runs first, so the completed rows it writes go out on this beat.
    A backend whose callbacks a GitHub Actions reporter sends has none here (`claims`)."""
    deadlines.time_out_overdue_jobs()
    RelayCallback.objects.release_expired_leases()
    worker = RelayCallback.objects.due().filter(
        run__backend__relay_sender=Backend.RelaySender.WORKER
    )
    return list(worker.values_list("pk", flat=True))
