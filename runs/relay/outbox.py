"""The HUD relay outbox: one row per CRCR callback, delivered in order, at most once.

Rows are written with the transition that causes them (a run or shard starting,
a run finishing) and delivered by a task on the `relay` queue:
1. claim the row (pending and due) with a conditional update;
2. a `completed` waits until its job's `in_progress` is delivered;
3. send; a 2xx delivers, 429/5xx/no answer retry with backoff and jitter, any
   other answer is final and shown on the run page. A transition refused as a
   repeat right after a lost answer means that answer had landed: delivered.
Modes: per job (each shard is a HUD job) or aggregate (one job per run).
Nightly and release runs self-report one `completed`; manual runs report nothing.
"""

from datetime import timedelta
from functools import partial
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from runs.models import Backend, Failure, RelayCallback, Run, Shard, Trigger
from runs.relay import delivery, protocol

WORKFLOW = "crcr"
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
    return None


def _self_reported(run: Run) -> bool:
    return run.trigger.dispatch_id is None


def _enabled(run: Run) -> bool:
    return bool(run.backend.relay_url) and client_payload(run) is not None


def _job_name(run: Run, shard: Shard | None) -> str:
    return f"{run.job_name} / shard {shard.index}" if shard else run.job_name


def _queue(run: Run, transition: str, shard: Shard | None, body: dict[str, Any]) -> None:
    payload = client_payload(run) or {}
    callback, created = RelayCallback.objects.get_or_create(
        delivery_id=payload.get("delivery_id", ""),
        job_name=_job_name(run, shard),
        hud_run_id=str(run.pk),
        hud_run_attempt=str(run.run_attempt),
        transition=transition,
        defaults={"run": run, "shard": shard, "workflow_name": WORKFLOW, "body": body},
    )
    if created:
        from runs.tasks import deliver_callback

        transaction.on_commit(partial(deliver_callback.delay, callback.pk))


def _body(run: Run, shard: Shard | None, status: str, **extra: Any) -> dict[str, Any]:
    return protocol.build_callback(
        client_payload(run) or {},
        status=status,  # type: ignore[arg-type]
        name=WORKFLOW,
        url=run.page_url(),
        run_id=run.pk,
        run_attempt=run.run_attempt,
        job_name=_job_name(run, shard),
        check_run_id=shard.pk if shard else run.pk,
        started_at=(shard.started_at if shard else run.started_at) or timezone.now(),
        artifact_url=run.page_url(),
        **extra,
    )


def job_started(run: Run, shard: Shard | None = None) -> None:
    """A HUD job began: the run (aggregate mode) or one shard (per-job mode)."""
    if not _enabled(run) or _self_reported(run):
        return
    per_job = run.backend.relay_mode == Backend.RelayMode.PER_JOB
    if per_job == (shard is not None):
        _queue(run, T.IN_PROGRESS, shard, _body(run, shard, "in_progress"))


def run_finished(run: Run) -> None:
    """The run ended: `completed` for its job, or for each shard's job. A job that never
    announced itself (the run ended before it started) gets its in_progress first."""
    if not _enabled(run):
        return
    shards = list(run.shards.all())
    if _self_reported(run):
        _queue(run, T.COMPLETED, None, _completed_body(run, None))
    elif run.backend.relay_mode == Backend.RelayMode.PER_JOB and shards:
        for shard in shards:
            _queue(run, T.IN_PROGRESS, shard, _body(run, shard, "in_progress"))
            _queue(run, T.COMPLETED, shard, _completed_body(run, shard))
    else:
        _queue(run, T.IN_PROGRESS, None, _body(run, None, "in_progress"))
        _queue(run, T.COMPLETED, None, _completed_body(run, None))


def _completed_body(run: Run, shard: Shard | None) -> dict[str, Any]:
    counts = shard.test_counts() if shard else run.test_counts()
    failures = Failure.objects.filter(run=run).select_related("result")
    if shard is not None:
        failures = failures.filter(result__shard=shard)
    conclusion = CONCLUSIONS.get(run.status, "failure")
    if shard is not None and run.status == Run.Status.FAILED:
        regressions = failures.filter(verdict=Failure.Verdict.REGRESSION).exists()
        conclusion = "failure" if regressions or counts["failed"] else "success"
    return _body(
        run,
        shard,
        "completed",
        conclusion=conclusion,
        completed_at=run.finished_at or timezone.now(),
        test_results=counts,
        failed_tests_detail=[_detail(failure) for failure in failures[:1000]],
        triage_verdict=_triage(run, list(failures)),
    )


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
    """Send one due row; returns it, or None when another sender holds it."""
    now = timezone.now()
    # Concurrency guard: one sender moves the row to `sending` at a time; the
    # claim time goes in next_attempt_at, so a sender that died is noticed.
    if not RelayCallback.objects.filter(
        pk=callback_id, status=S.PENDING, next_attempt_at__lte=now
    ).update(status=S.SENDING, attempts=F("attempts") + 1, next_attempt_at=now):
        return None
    callback = RelayCallback.objects.select_related("run__backend").get(pk=callback_id)
    if callback.transition == T.COMPLETED:
        before = _in_progress_status(callback)
        if before == S.REJECTED:
            # The relay would refuse a completed whose in_progress never landed.
            callback.status, callback.last_response = S.REJECTED, "not sent: in_progress refused"
            callback.save(update_fields=["status", "last_response"])
            return callback
        if before not in (None, S.DELIVERED):
            _release(callback, delay=2, count_attempt=False)
            return callback
    backend = callback.run.backend
    try:
        provider = delivery.provider_from_spec(backend.relay_token)
        answer = delivery.send(backend.relay_url, callback.body, provider)
    except delivery.TokenError as error:
        answer = delivery.Answer(None, str(error), error.retryable, None)
    # The previous attempt's answer was lost: it may have landed.
    previous = callback.last_status_code
    ambiguous = callback.attempts > 1 and (previous is None or previous >= 500)
    outcome = delivery.settle(answer, after_ambiguous=ambiguous)
    callback.last_status_code, callback.last_response = answer.status, answer.text[:4000]
    if outcome == "retry":
        delay = answer.retry_after or delivery.backoff(callback.attempts)
        _release(callback, delay=delay)
    else:
        callback.status = S.DELIVERED if outcome == "delivered" else S.REJECTED
        callback.delivered_at = timezone.now() if outcome == "delivered" else None
        callback.save(update_fields=["status", "delivered_at", "last_status_code", "last_response"])
    return callback


def _in_progress_status(callback: RelayCallback) -> str | None:
    """The state of the same job's in_progress row (None for a self-report)."""
    return (
        RelayCallback.objects.filter(
            delivery_id=callback.delivery_id,
            job_name=callback.job_name,
            hud_run_id=callback.hud_run_id,
            hud_run_attempt=callback.hud_run_attempt,
            transition=T.IN_PROGRESS,
        )
        .values_list("status", flat=True)
        .first()
    )


def _release(callback: RelayCallback, delay: float, count_attempt: bool = True) -> None:
    from runs.tasks import deliver_callback

    callback.status = S.PENDING
    callback.next_attempt_at = timezone.now() + timedelta(seconds=delay)
    if not count_attempt:
        callback.attempts -= 1
    callback.save(
        update_fields=[
            "status", "next_attempt_at", "attempts", "last_status_code", "last_response"
        ]
    )  # fmt: skip
    if not settings.CELERY_TASK_ALWAYS_EAGER:  # eagerly, a countdown would spin at once
        deliver_callback.apply_async((callback.pk,), countdown=delay)


def due() -> list[int]:
    """Rows to (re)send now; a row stuck in `sending` (its sender died) is pending again."""
    now = timezone.now()
    RelayCallback.objects.filter(
        status=S.SENDING, next_attempt_at__lte=now - timedelta(minutes=5)
    ).update(status=S.PENDING, last_status_code=None)
    return list(
        RelayCallback.objects.filter(status=S.PENDING, next_attempt_at__lte=now).values_list(
            "pk", flat=True
        )
    )
