"""The outbox against the relay simulator over HTTP, delivered by a real worker."""

import uuid

import pytest
from crcr_reuse.outcomes import TestRecord

from reproducibility.models import Rerun
from runs import results, shard_worker
from runs.models import Dispatch, RelayCallback, Run, Shard, TestResult, Trigger
from runs.relay import outbox
from runs.relay.simulator import RelaySimulator
from tests.dispatches import pr_dispatch
from tests.factories import make_user
from tests.runs.relay_runs import REPO, dispatched_run, relay_backend
from tests.waiting import wait_for


@pytest.fixture
def simulator(tmp_path):
    with RelaySimulator(token="s3cret", allowlist={REPO: "L2"}, strict=True) as sim:
        yield sim


@pytest.fixture
def relayed_backend(simulator, tmp_path, transactional_db):
    return relay_backend(simulator, tmp_path)


@pytest.fixture
def per_job_backend(simulator, tmp_path, transactional_db):
    return relay_backend(simulator, tmp_path, relay_mode="per_job")


def finished_run(backend, simulator, shards: int = 2) -> Run:
    """A dispatched run whose shards ran (results written directly), then finished."""
    run = dispatched_run(backend, simulator)
    for index in range(shards):
        shard = Shard.objects.create(run=run, index=index, test_ids=[], status="running")
        outbox.job_started(run, shard)
        for number, outcome in enumerate(["passed", "passed", "failed", "skipped"]):
            TestResult.objects.create(
                shard=shard, run=run, node_id=f"test/t.py::T::test_{index}_{number}",
                file_path="test/t.py", class_name="T", test_name=f"test_{number}",
                outcome=outcome, message="AssertionError: Tensor-likes are not close!",
            )  # fmt: skip
        Shard.objects.filter(pk=shard.pk).update(status="done")
    results.finish_if_done(run.pk)
    run.refresh_from_db()
    return run


def delivered(run: Run) -> bool:
    callbacks = list(run.callbacks.all())
    return bool(callbacks) and all(c.status in ("delivered", "rejected") for c in callbacks)


def jobs_in(simulator) -> dict[str, list[str]]:
    jobs: dict[str, list[str]] = {}
    for key, status, _ in simulator.accepted:
        jobs.setdefault(key.job_name, []).append(status)
    return jobs


@pytest.mark.parametrize("mode", ["per_job", "aggregate"])
def test_each_job_gets_one_in_progress_then_one_completed(
    mode, relayed_backend, simulator, celery_worker
):
    relayed_backend.relay_mode = mode
    relayed_backend.save()
    run = finished_run(relayed_backend, simulator)
    wait_for(lambda: delivered(run), what="every callback delivered")
    expected = ["acme / shard 0", "acme / shard 1"] if mode == "per_job" else ["acme"]
    assert jobs_in(simulator) == {job: ["in_progress", "completed"] for job in expected}
    completed = [body for _, status, body in simulator.accepted if status == "completed"]
    # The HUD's log link (`artifact_url`): the run's failure log, or the shard's output.
    if mode == "aggregate":
        assert completed[0]["workflow"]["test_results"] == run.test_counts()
        assert completed[0]["workflow"]["artifact_url"] == run.log_url()
        assert run.log_url().endswith(f"/runs/{run.uuid}/log/")
    else:
        for body in completed:
            index = int(body["workflow"]["job_name"].rsplit(" ", 1)[1])
            assert body["workflow"]["test_results"] == run.shards.get(index=index).test_counts()
            assert body["workflow"]["artifact_url"] == run.log_url(index)
            assert run.log_url(index).endswith(f"/runs/{run.uuid}/log/shard-{index}/")
    assert all(body["workflow"]["conclusion"] == "failure" for body in completed)
    assert all(body["delivery_id"] == run.trigger.dispatch.delivery_id for body in completed)


def shard_ran(run: Run, index: int, outcomes: list[str]) -> Shard:
    """A shard whose worker stored its results, as `shard_worker.execute` does."""
    shard = Shard.objects.get(run=run, index=index)
    records = [
        TestRecord(
            node_id=f"test/t.py::T::test_{index}_{number}",
            outcome=outcome,
            message="AssertionError: Tensor-likes are not close!" if outcome == "failed" else "",
        )
        for number, outcome in enumerate(outcomes)
    ]
    shard_worker.store(shard, records)
    return shard


def completed_of(simulator) -> dict[str, dict]:
    """What the HUD got for each finished job: its `completed` body's workflow."""
    return {
        key.job_name: body["workflow"]
        for key, status, body in simulator.accepted
        if status == "completed"
    }


def test_in_per_job_mode_a_shard_is_completed_at_the_hud_when_it_ends_not_with_the_run(
    per_job_backend, simulator, celery_worker
):
    run = dispatched_run(per_job_backend, simulator)
    for index in range(3):
        shard = Shard.objects.create(run=run, index=index, test_ids=[], status="running")
        outbox.job_started(run, shard)

    shard_ran(run, 0, ["passed", "failed", "skipped"])  # a new test failing: a regression
    shard_worker.fail(run.shards.get(index=2).pk, "artifact check failed: hash mismatch")
    wait_for(lambda: delivered(run), what="the ended shards' callbacks")

    # Shard 1 still runs: the HUD shows shards 0 and 2 finished, with their own results.
    assert jobs_in(simulator) == {
        "acme / shard 0": ["in_progress", "completed"],
        "acme / shard 1": ["in_progress"],
        "acme / shard 2": ["in_progress", "completed"],
    }
    assert Run.objects.get(pk=run.pk).status == Run.Status.RUNNING
    first = completed_of(simulator)
    assert first["acme / shard 0"]["conclusion"] == "failure"
    assert first["acme / shard 0"]["test_results"] == {
        "passed": 1, "failed": 1, "skipped": 1, "total": 3,
    }  # fmt: skip
    assert [t["name"] for t in first["acme / shard 0"]["failed_tests_detail"]] == ["test_0_1"]
    assert first["acme / shard 2"]["conclusion"] == "cancelled"  # infrastructure, not red

    shard_ran(run, 1, ["passed", "passed"])
    results.finish_if_done(run.pk)
    wait_for(lambda: delivered(run), what="the last shard's callbacks")

    assert Run.objects.get(pk=run.pk).status == Run.Status.FAILED  # shard 0's regression
    assert jobs_in(simulator) == {
        f"acme / shard {index}": ["in_progress", "completed"] for index in range(3)
    }
    assert run.callbacks.filter(transition="completed").count() == 3
    last = completed_of(simulator)["acme / shard 1"]
    assert last["conclusion"] == "success"  # its own tests passed, though the run is red
    assert last["test_results"] == {"passed": 2, "failed": 0, "skipped": 0, "total": 2}


def test_a_relay_down_for_a_while_delays_callbacks_and_drops_none(
    relayed_backend, simulator, celery_worker, settings
):
    # Twenty seconds of 503s (a relay redeploy: several retries, backing off from 2 s
    # with jitter), then rate limiting; delivery comes up to a minute after. A 429 holds
    # the repository back for a whole rate window: a minute scaled down to 5 s here.
    settings.CRCR_RELAY_RATE_WINDOW_SECONDS = 5
    simulator.fail_for(20, status=503)
    simulator.fail_next(2, status=429)
    run = finished_run(relayed_backend, simulator, shards=1)
    wait_for(lambda: delivered(run), timeout=400, what="delivery after the outage")
    assert jobs_in(simulator) == {"acme": ["in_progress", "completed"]}
    assert max(c.attempts for c in run.callbacks.all()) > 1
    assert set(run.callbacks.values_list("status", flat=True)) == {"delivered"}
    completed = [body for _, status, body in simulator.accepted if status == "completed"]
    assert completed[0]["workflow"]["test_results"] == {
        "passed": 2, "failed": 1, "skipped": 1, "total": 4,
    }  # fmt: skip


def test_a_refused_callback_is_final_and_shown_on_the_run_page(
    relayed_backend, simulator, celery_worker, client
):
    simulator.fail_next(1, status=400)
    run = finished_run(relayed_backend, simulator, shards=1)
    wait_for(lambda: delivered(run), what="the refusal")
    refused = run.callbacks.get(transition="in_progress")
    assert refused.status == RelayCallback.Status.REJECTED and refused.attempts == 1
    assert refused.last_status_code == 400
    client.force_login(make_user("vera"))
    page = client.get(f"/runs/{run.uuid}/").content.decode()
    assert "rejected (final)" in page and "400" in page


def manual_run(backend, sha: str, job_name: str = "acme") -> Run:
    trigger = Trigger.objects.create(backend=backend, kind="manual", pytorch_sha=sha)
    return Run.objects.create(
        trigger=trigger, backend=backend, job_name=job_name, backend_version="1",
        pytorch_sha=sha, test_suite_sha=sha, status="passed",
        config_version=backend.config_versions.get(),
    )  # fmt: skip


def test_a_manual_run_self_reports_as_periodic_and_a_bundle_rerun_reports_nothing(
    relayed_backend, simulator
):
    person = manual_run(relayed_backend, "b" * 40)
    outbox.job_started(person)
    outbox.run_finished(person)
    [callback] = person.callbacks.all()
    body = callback.body
    assert (callback.transition, body["event_type"], body["delivery_id"]) == (
        "completed", "periodic", "b" * 40,
    )  # fmt: skip
    assert body["payload"]["head_sha"] == "b" * 40
    assert body["workflow"]["artifact_url"] == person.page_url()

    original = manual_run(relayed_backend, "f" * 40)
    reproduction = manual_run(relayed_backend, "f" * 40, job_name="acme (re-run)")
    Rerun.objects.create(original=original, run=reproduction)
    outbox.run_finished(reproduction)
    assert not reproduction.callbacks.exists()


def test_a_nightly_run_self_reports_one_completed(relayed_backend, simulator, celery_worker):
    trigger = Trigger.objects.create(
        backend=relayed_backend, kind="nightly", pytorch_sha="c" * 40, ref="nightly"
    )
    run = Run.objects.create(
        trigger=trigger, backend=relayed_backend, job_name="acme", backend_version="1",
        pytorch_sha="c" * 40, test_suite_sha="c" * 40, status="running",
        config_version=relayed_backend.config_versions.get(),
    )  # fmt: skip
    outbox.job_started(run)
    shard = Shard.objects.create(run=run, index=0, status="done")
    TestResult.objects.create(
        shard=shard, run=run, node_id="test/t.py::T::test_a", file_path="test/t.py",
        test_name="test_a", outcome="passed",
    )  # fmt: skip
    results.finish_if_done(run.pk)
    wait_for(lambda: delivered(run), what="the self-report")
    assert [(k.delivery_id, s) for k, s, _ in simulator.accepted] == [("c" * 40, "completed")]
    body = simulator.accepted[0].body
    assert body["event_type"] == "nightly" and body["workflow"]["conclusion"] == "success"


def test_a_run_that_ended_before_it_started_still_announces_its_job(
    relayed_backend, simulator, celery_worker
):
    body = pr_dispatch(delivery_id=str(uuid.uuid4()))
    simulator.dispatch(body["delivery_id"], REPO, body["payload"])
    dispatch = Dispatch.objects.create(
        backend=relayed_backend, delivery_id=body["delivery_id"], event_type="pull_request",
        raw_body="{}", payload=body["payload"], verdict="accepted",
    )  # fmt: skip
    trigger = Trigger.objects.create(
        backend=relayed_backend, kind="dispatch", dispatch=dispatch, pytorch_sha="e" * 40
    )
    run = Run.objects.create(
        trigger=trigger, backend=relayed_backend, job_name="acme", backend_version="1",
        pytorch_sha="e" * 40, test_suite_sha="e" * 40, status="error",
        config_version=relayed_backend.config_versions.get(), error="collection failed",
    )  # fmt: skip
    outbox.run_finished(run)  # as planning does when collection fails
    wait_for(lambda: delivered(run), what="both callbacks")
    assert jobs_in(simulator) == {"acme": ["in_progress", "completed"]}
    assert simulator.accepted[1].body["workflow"]["conclusion"] == "cancelled"
