"""Deadlines: no HUD job stays in_progress at the relay until the relay's sweeper closes it.

A HUD job whose in_progress landed CRCR_RELAY_IN_PROGRESS_DEADLINE_MINUTES ago and whose
completed is not written yet gets a `timed_out` completed (the relay worker's beat pass,
`outbox.due`, runs `time_out_overdue_jobs` first), before the relay's 6-hour sweeper closes
the job and refuses its completed. The run's own result for that job is then not sent
(the relay takes one completed per job), and its row says why (`note_result_not_sent`).
"""

import logging
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Exists, F, OuterRef, Value
from django.db.models.functions import Concat
from django.utils import timezone

from runs.models import RelayCallback
from runs.relay import protocol

logger = logging.getLogger(__name__)

T, S = RelayCallback.Transition, RelayCallback.Status
# The relay's sweeper reports a job still in_progress this long after its in_progress as
# timed_out, records it COMPLETED and so refuses the job's own completed (pytorch/test-infra
# 61a77570f4, cross_repo_ci_relay/utils/config.py lines 158-162 ZOMBIE_TIMEOUT_SECONDS,
# utils/redis_helper.py lines 530-531, callback/cleanup_handler.py lines 180-190).
RELAY_SWEEP = timedelta(seconds=21600)
# Marks a completed written at the deadline (its triage verdict's `analyzer`).
DEADLINE_ANALYZER = "crcr in-progress deadline"
RESULT_NOT_SENT = "the run's own result was not sent"


def time_out_overdue_jobs() -> list[int]:
    """Report `timed_out` for each HUD job left in_progress at the relay past crcr's deadline.

    Steps: find the in_progress rows delivered more than CRCR_RELAY_IN_PROGRESS_DEADLINE_MINUTES
    ago, but less than the relay's 6-hour sweep (after it the relay has closed the job itself
    and would refuse a completed), whose job has no completed row yet; write that completed,
    due at once: the in_progress body's job, conclusion `timed_out`, the counts so far and the
    run's page. Returns the ids of the rows written.
    """
    now = timezone.now()
    deadline = timedelta(minutes=settings.CRCR_RELAY_IN_PROGRESS_DEADLINE_MINUTES)
    completed = RelayCallback.objects.filter(
        delivery_id=OuterRef("delivery_id"),
        job_name=OuterRef("job_name"),
        hud_run_id=OuterRef("hud_run_id"),
        hud_run_attempt=OuterRef("hud_run_attempt"),
        transition=T.COMPLETED,
    )
    overdue = (
        RelayCallback.objects.filter(
            transition=T.IN_PROGRESS,
            status=S.DELIVERED,
            delivered_at__lte=now - deadline,
            delivered_at__gt=now - RELAY_SWEEP,
        )
        .exclude(Exists(completed))
        .select_related("run", "shard")
    )
    written = []
    for started in overdue:
        # Concurrency guard: the job identity is unique per transition, so of this pass and
        # the run's end (`run_finished`) only the first writes the job's completed.
        callback, created = RelayCallback.objects.get_or_create(
            delivery_id=started.delivery_id,
            job_name=started.job_name,
            hud_run_id=started.hud_run_id,
            hud_run_attempt=started.hud_run_attempt,
            transition=T.COMPLETED,
            defaults={
                "run": started.run,
                "shard": started.shard,
                "workflow_name": started.workflow_name,
                "body": _body(started, now),
            },
        )
        if created:
            logger.warning(
                "HUD job %r of run %s still in progress %s minutes after its in_progress "
                "landed: reported timed_out (CRCR_RELAY_IN_PROGRESS_DEADLINE_MINUTES)",
                started.job_name, started.run.uuid, int(deadline.total_seconds() // 60),
            )  # fmt: skip
            written.append(callback.pk)
    return written


def _body(started: RelayCallback, now: datetime) -> dict[str, Any]:
    """The job's completed at its deadline, from the in_progress body the relay took (so the
    same job identity): `timed_out`, the counts so far, the run's page."""
    run, shard, workflow = started.run, started.shard, started.body["workflow"]
    counts = shard.test_counts() if shard else run.test_counts()
    minutes = settings.CRCR_RELAY_IN_PROGRESS_DEADLINE_MINUTES
    job = ("name", "url", "run_id", "run_attempt", "job_name", "check_run_id", "started_at")
    return protocol.build_callback(
        {key: started.body[key] for key in ("event_type", "delivery_id", "payload")},
        status="completed",
        conclusion="timed_out",
        completed_at=now,
        test_results=counts,
        artifact_url=run.page_url(),
        triage_verdict={
            "category": "unknown",
            "confidence": "low",
            "analyzer": DEADLINE_ANALYZER,
            "summary": (
                f"Still running {minutes} minutes after it started, crcr's deadline (the relay "
                f"times a job out at 6 hours): {counts['total']} test(s) reported so far. The "
                "final result is on crcr's run page."
            ),
        },
        **{key: workflow[key] for key in job},
    )


def sent_at_deadline(callback: RelayCallback) -> bool:
    verdict = callback.body.get("workflow", {}).get("triage_verdict") or {}
    return verdict.get("analyzer") == DEADLINE_ANALYZER


def note_result_not_sent(callback: RelayCallback, body: dict[str, Any]) -> None:
    """The run ended after its job was reported `timed_out` at the deadline: the relay takes
    one completed per job and would refuse this one, so it stays here; the row says why."""
    workflow = body["workflow"]
    counts = workflow.get("test_results") or {}
    note = (
        f"{RESULT_NOT_SENT} ({workflow['conclusion']}: {counts.get('passed', 0)} passed, "
        f"{counts.get('failed', 0)} failed, {counts.get('skipped', 0)} skipped): it came after "
        f"this job was reported timed_out at the {settings.CRCR_RELAY_IN_PROGRESS_DEADLINE_MINUTES}"
        "-minute deadline, and the relay takes one completed per job."
    )
    # Concurrency guard: appended in the database, once (a repeated finish finds it there).
    # A send of this row still in flight writes its answer over it; the row's body still
    # says what the HUD got.
    RelayCallback.objects.filter(pk=callback.pk).exclude(
        last_response__contains=RESULT_NOT_SENT
    ).update(last_response=Concat(F("last_response"), Value("\n" + note)))
    logger.info("relay callback %s: %s", callback.uuid, note)
