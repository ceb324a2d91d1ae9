"""A run's later attempts (an upstream "re-run failed jobs"), through the machine API."""

import uuid

import pytest
from django.test import override_settings

from runs import attempts
from runs.models import Run, Shard, TestResult, Trigger
from tests.factories import make_backend, make_config, make_token, make_user
from tests.runs.relay_runs import make_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def finished(db) -> Run:
    """A failed run of four shards: a regression, a flaky pass, a lost shard, a green one."""
    backend = make_backend("acme")
    make_config(backend)
    run = make_run(
        backend, Trigger.objects.create(backend=backend, kind="manual", pytorch_sha="a" * 40)
    )
    outcomes = {0: ["failed"], 1: ["failed", "passed"], 2: [], 3: ["passed"]}
    for index, tries in outcomes.items():
        status = Shard.Status.ERROR if index == 2 else Shard.Status.DONE
        shard = Shard.objects.create(
            run=run, index=index, test_ids=[f"t.py::T::test_{index}"], status=status
        )
        for number, outcome in enumerate(tries, start=1):
            TestResult.objects.create(
                shard=shard, run=run, node_id=f"t.py::T::test_{index}", file_path="t.py",
                test_name=f"test_{index}", outcome=outcome, attempt=number,
            )  # fmt: skip
    Run.objects.filter(pk=run.pk).update(status=Run.Status.FAILED)
    run.refresh_from_db()
    return run


def ask(client, run: Run, number, role: str = "machine"):
    key = make_token(make_user(f"{role}-{uuid.uuid4().hex[:8]}", role=role), run.backend)
    return client.post(
        f"/api/runs/{run.uuid}/attempts/", {"run_attempt": number},
        content_type="application/json", HTTP_AUTHORIZATION=f"Token {key}",
    )  # fmt: skip


@override_settings(CELERY_TASK_ALWAYS_EAGER=False)
def test_an_attempt_reruns_only_the_failed_shards_once_however_often_it_is_asked(
    client, finished, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks():  # planning is a worker's: not run here
        made = ask(client, finished, 2)
        again = ask(client, finished, 2)
    assert made.status_code == 201 and again.status_code == 200
    assert made.json()["uuid"] == again.json()["uuid"]
    assert made.json()["run_attempt"] == 2 and made.json()["attempt_of"] == str(finished.uuid)
    second = Run.objects.get(uuid=made.json()["uuid"])
    assert second.hud_run_id == finished.pk and second.status == Run.Status.QUEUED
    # The regression and the lost shard; not the flaky test that passed on retry, nor the green.
    copies = attempts.shards_to_rerun(second)
    assert [(s.index, s.test_ids) for s in copies] == [
        (0, ["t.py::T::test_0"]),
        (2, ["t.py::T::test_2"]),
    ]
    assert finished.shards.count() == 4  # attempt 1 keeps its shards and results


def test_a_passed_or_running_run_is_followed_as_it_is(client, finished):
    Run.objects.filter(pk=finished.pk).update(status=Run.Status.PASSED)
    answer = ask(client, finished, 2)
    assert answer.status_code == 200 and answer.json()["uuid"] == str(finished.uuid)
    Run.objects.filter(pk=finished.pk).update(status=Run.Status.RUNNING)
    assert ask(client, finished, 3).json()["uuid"] == str(finished.uuid)
    assert not finished.attempts.exists()


def test_attempt_three_reruns_what_failed_in_attempt_two(
    finished, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks():
        second = attempts.start(finished, 2).run
    shard = Shard.objects.create(run=second, index=2, test_ids=["t.py::T::test_2"], status="done")
    TestResult.objects.create(
        shard=shard, run=second, node_id="t.py::T::test_2", file_path="t.py", test_name="test_2",
        outcome="failed",
    )  # fmt: skip
    Shard.objects.create(run=second, index=0, test_ids=["t.py::T::test_0"], status="done")
    Run.objects.filter(pk=second.pk).update(status=Run.Status.FAILED)
    with django_capture_on_commit_callbacks():
        third = attempts.start(second, 3)  # named by a later attempt: the same first run
    assert third.created and third.run.retry_of == finished
    assert [s.index for s in attempts.shards_to_rerun(third.run)] == [2]


def test_only_machines_ask_and_attempt_one_is_refused_by_name(client, finished):
    assert ask(client, finished, 2, role="viewer").status_code == 403
    refused = ask(client, finished, 1)
    assert refused.status_code == 400 and "run_attempt" in refused.json()
    assert not finished.attempts.exists()
