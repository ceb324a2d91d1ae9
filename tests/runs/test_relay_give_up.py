"""Retrying a callback has bounds: a Retry-After of at most an hour, and a deadline past
which the relay has forgotten the job, so the callback is given up with the reason."""

import logging
from datetime import timedelta

import pytest
from django.utils import timezone

from runs.models import RelayCallback
from runs.relay import outbox
from runs.relay.simulator import RelaySimulator
from tests.factories import make_backend, make_config
from tests.runs.relay_runs import REPO, dispatched_run, in_progress, make_due

S = RelayCallback.Status


@pytest.fixture
def simulator():
    with RelaySimulator(token="s3cret", allowlist={REPO: "L2"}, strict=True) as sim:
        yield sim


@pytest.fixture
def backend(db, simulator, tmp_path, settings):
    # These tests call `deliver` themselves: a retry leaves no countdown task on the broker.
    settings.CELERY_TASK_ALWAYS_EAGER = True
    token = tmp_path / "relay-token"
    token.write_text("s3cret\n")
    backend = make_backend("acme", relay_url=simulator.url, relay_token=f"file:{token}")
    make_config(backend)
    return backend


def written_ago(callback: RelayCallback, hours: float) -> RelayCallback:
    RelayCallback.objects.filter(pk=callback.pk).update(
        created_at=timezone.now() - timedelta(hours=hours)
    )
    callback.refresh_from_db()
    return callback


@pytest.mark.parametrize("retry_after", [str(10**9), "Fri, 31 Dec 9999 23:59:59 GMT"])
def test_a_retry_after_of_years_waits_an_hour(backend, simulator, retry_after):
    simulator.fail_next(1, status=429, retry_after=retry_after)
    callback = in_progress(dispatched_run(backend, simulator))

    outbox.deliver(callback.pk)

    callback.refresh_from_db()
    assert (callback.status, callback.attempts, callback.last_status_code) == (S.PENDING, 1, 429)
    wait = callback.next_attempt_at - timezone.now()
    assert timedelta(minutes=59) < wait <= timedelta(hours=1)


def test_a_garbled_retry_after_backs_off_instead(backend, simulator):
    simulator.fail_next(1, status=429, retry_after="in a while")
    callback = in_progress(dispatched_run(backend, simulator))

    outbox.deliver(callback.pk)

    callback.refresh_from_db()
    assert callback.status == S.PENDING
    assert callback.next_attempt_at - timezone.now() <= timedelta(seconds=4)  # backoff(1)


def test_a_callback_past_the_deadline_is_given_up_with_the_reason_a_younger_one_retried(
    backend, simulator, caplog
):
    simulator.fail_for(600, status=503)  # the relay is down
    old = written_ago(in_progress(dispatched_run(backend, simulator)), hours=73)
    young = written_ago(in_progress(dispatched_run(backend, simulator)), hours=47)

    outbox.deliver(old.pk)
    outbox.deliver(young.pk)

    old.refresh_from_db()
    assert old.status == S.REJECTED and old.attempts == 1
    assert old.last_response.startswith("gave up after 1 attempt(s) over 73 hours")
    assert "the relay forgets a job's dispatch 3 days after it" in old.last_response
    assert "Last answer: 503" in old.last_response
    given_up = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(given_up) == 1 and str(old.uuid) in given_up[0]
    young.refresh_from_db()
    assert (young.status, young.attempts, young.last_status_code) == (S.PENDING, 1, 503)

    simulator.fail_for(0)  # back after two days down: the younger one still goes out
    make_due(young)
    outbox.deliver(young.pk)
    young.refresh_from_db()
    assert young.status == S.DELIVERED
    assert [key.delivery_id for key, _, _ in simulator.accepted] == [young.delivery_id]


def test_the_deadline_is_a_setting(backend, simulator, settings):
    settings.CRCR_RELAY_GIVE_UP_HOURS = 6
    simulator.fail_for(600, status=503)
    callback = written_ago(in_progress(dispatched_run(backend, simulator)), hours=7)

    outbox.deliver(callback.pk)

    callback.refresh_from_db()
    assert callback.status == S.REJECTED and "CRCR_RELAY_GIVE_UP_HOURS=6" in callback.last_response
