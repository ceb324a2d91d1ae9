"""No HUD job stays in_progress at the relay past crcr's deadline: the relay's sweeper would
time it out at 6 hours and then refuse the job's own completed, so crcr reports `timed_out`
first (CRCR_RELAY_IN_PROGRESS_DEADLINE_MINUTES) and keeps the run's later result on the row."""

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from runs import results, tasks
from runs.models import RelayCallback, Run, Shard, TestResult
from runs.relay import deadlines, outbox
from runs.relay.simulator import RelaySimulator
from tests.runs.relay_runs import REPO, dispatched_run, in_progress, relay_backend
from tests.waiting import wait_for

S, T = RelayCallback.Status, RelayCallback.Transition


@pytest.fixture
def simulator():
    with RelaySimulator(token="s3cret", allowlist={REPO: "L2"}) as sim:
        yield sim


@pytest.fixture
def backend(db, simulator, tmp_path, settings):
    # These tests call `deliver` themselves: a retry leaves no countdown task on the broker.
    settings.CELERY_TASK_ALWAYS_EAGER = True
    return relay_backend(simulator, tmp_path)


def add_results(run: Run, shard: Shard, outcomes: list[str], first: int = 0) -> None:
    for number, outcome in enumerate(outcomes, start=first):
        TestResult.objects.create(
            shard=shard, run=run, node_id=f"test/t.py::T::test_{shard.index}_{number}",
            file_path="test/t.py", class_name="T", test_name=f"test_{number}",
            outcome=outcome, message="AssertionError: Tensor-likes are not close!",
        )  # fmt: skip


def landed_ago(callback: RelayCallback, minutes: float) -> RelayCallback:
    """Deliver an in_progress to the simulator, then date its landing `minutes` back."""
    outbox.deliver(callback.pk)
    callback.refresh_from_db()
    assert callback.status == S.DELIVERED
    RelayCallback.objects.filter(pk=callback.pk).update(
        delivered_at=timezone.now() - timedelta(minutes=minutes)
    )
    return callback


def completed_rows(run: Run) -> list[RelayCallback]:
    return list(run.callbacks.filter(transition=T.COMPLETED))


def test_a_job_in_progress_past_the_deadline_is_reported_timed_out_by_the_beat(
    simulator, tmp_path, transactional_db, celery_worker
):
    backend = relay_backend(simulator, tmp_path)
    run = dispatched_run(backend, simulator)
    shard = Shard.objects.create(run=run, index=0, test_ids=[], status="running")
    add_results(run, shard, ["passed", "passed", "failed"])
    started = wait_for(
        lambda: run.callbacks.filter(transition=T.IN_PROGRESS, status=S.DELIVERED).first(),
        what="the in_progress delivered",
    )
    RelayCallback.objects.filter(pk=started.pk).update(
        delivered_at=timezone.now() - timedelta(minutes=301)
    )

    written = tasks.deliver_due_callbacks()  # the beat

    timed_out = run.callbacks.get(transition=T.COMPLETED)
    assert written == [timed_out.pk]
    wait_for(
        lambda: RelayCallback.objects.filter(pk=timed_out.pk, status=S.DELIVERED).exists(),
        what="the timed_out completed delivered",
    )
    assert [status for _, status, _ in simulator.accepted] == ["in_progress", "completed"]
    body = simulator.accepted[1].body
    workflow, first = body["workflow"], simulator.accepted[0].body["workflow"]
    assert workflow["conclusion"] == "timed_out"
    assert workflow["test_results"] == {"passed": 2, "failed": 1, "skipped": 0, "total": 3}
    assert workflow["artifact_url"] == run.page_url()
    for key in ("run_id", "run_attempt", "job_name", "check_run_id", "started_at"):
        assert workflow[key] == first[key]  # the same HUD job the relay has in progress
    assert "300 minutes" in workflow["triage_verdict"]["summary"]


def test_the_real_completion_after_the_deadline_sends_nothing_and_says_why(backend, simulator):
    run = dispatched_run(backend, simulator)
    shard = Shard.objects.create(run=run, index=0, test_ids=[], status="running")
    add_results(run, shard, ["passed"])
    landed_ago(in_progress(run), minutes=301)
    [timed_out] = deadlines.time_out_overdue_jobs()
    outbox.deliver(timed_out)

    add_results(run, shard, ["failed", "skipped"], first=1)  # the run goes on, then ends
    Shard.objects.filter(pk=shard.pk).update(status="done")
    results.finish_if_done(run.pk)
    assert outbox.due() == []  # nothing left to send, and no new deadline row either

    [row] = completed_rows(run)
    assert row.pk == timed_out and row.status == S.DELIVERED
    assert row.body["workflow"]["conclusion"] == "timed_out"  # what the HUD got
    assert [status for _, status, _ in simulator.accepted] == ["in_progress", "completed"]
    assert simulator.accepted[1].body["workflow"]["test_results"]["total"] == 1
    assert (
        "the run's own result was not sent (failure: 1 passed, 1 failed, 1 skipped): it came "
        "after this job was reported timed_out at the 300-minute deadline, and the relay "
        "takes one completed per job."
    ) in row.last_response
    outbox.run_finished(Run.objects.get(pk=run.pk))  # a repeated finish notes it once
    row.refresh_from_db()
    assert row.last_response.count("was not sent") == 1


def test_a_job_in_progress_for_less_than_the_deadline_is_left_alone(backend, simulator):
    run = dispatched_run(backend, simulator)
    landed_ago(in_progress(run), minutes=200)

    assert deadlines.time_out_overdue_jobs() == []
    assert outbox.due() == []

    assert completed_rows(run) == []
    assert [status for _, status, _ in simulator.accepted] == ["in_progress"]


def test_a_job_the_relay_has_swept_already_gets_nothing(backend, simulator):
    # Past 6 hours the relay has reported the job timed_out itself and would refuse more.
    run = dispatched_run(backend, simulator)
    landed_ago(in_progress(run), minutes=361)

    assert deadlines.time_out_overdue_jobs() == []
    assert completed_rows(run) == []


def test_a_job_whose_completed_is_written_is_not_timed_out(backend, simulator):
    # The run ended in time; its completed waits (here: it is never handed to `deliver`).
    run = dispatched_run(backend, simulator)
    landed_ago(in_progress(run), minutes=301)
    shard = Shard.objects.create(run=run, index=0, test_ids=[], status="done")
    add_results(run, shard, ["passed"])
    results.finish_if_done(run.pk)

    assert deadlines.time_out_overdue_jobs() == []
    [row] = completed_rows(run)
    assert row.body["workflow"]["conclusion"] == "success"


def test_the_deadline_is_a_setting(backend, simulator, settings):
    settings.CRCR_RELAY_IN_PROGRESS_DEADLINE_MINUTES = 120
    early = dispatched_run(backend, simulator)
    landed_ago(in_progress(early), minutes=200)

    [timed_out] = deadlines.time_out_overdue_jobs()

    assert completed_rows(early)[0].pk == timed_out
    assert "120 minutes" in completed_rows(early)[0].body["workflow"]["triage_verdict"]["summary"]
    settings.CRCR_RELAY_IN_PROGRESS_DEADLINE_MINUTES = 330
    later = dispatched_run(backend, simulator)
    landed_ago(in_progress(later), minutes=301)
    assert deadlines.time_out_overdue_jobs() == []


def test_in_per_job_mode_each_shard_job_has_its_own_deadline(backend, simulator):
    backend.relay_mode = "per_job"
    backend.save()
    run = dispatched_run(backend, simulator)
    shards = [
        Shard.objects.create(run=run, index=index, test_ids=[], status="running")
        for index in range(2)
    ]
    for shard in shards:
        outbox.job_started(run, shard)
        add_results(run, shard, ["passed", "failed"][: shard.index + 1])
    landed_ago(run.callbacks.get(transition=T.IN_PROGRESS, shard=shards[0]), minutes=301)
    landed_ago(run.callbacks.get(transition=T.IN_PROGRESS, shard=shards[1]), minutes=30)

    for callback_id in outbox.due():
        outbox.deliver(callback_id)

    [row] = completed_rows(run)
    assert (row.shard, row.status) == (shards[0], S.DELIVERED)
    workflow = simulator.accepted[-1].body["workflow"]
    assert (workflow["job_name"], workflow["conclusion"]) == ("acme / shard 0", "timed_out")
    assert workflow["test_results"] == {"passed": 1, "failed": 0, "skipped": 0, "total": 1}


@pytest.mark.parametrize("minutes", ["360", "0", "five hours"])
def test_a_deadline_not_under_the_relays_six_hours_stops_start_up(minutes):
    clean = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DEBUG")}
    completed = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=Path(__file__).resolve().parents[2],
        env=clean | {"CRCR_RELAY_IN_PROGRESS_DEADLINE_MINUTES": minutes},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode != 0
    assert "CRCR_RELAY_IN_PROGRESS_DEADLINE_MINUTES" in completed.stderr
    assert "Traceback" not in completed.stderr
