"""A relay token that cannot be had: refused where it is entered, held at delivery, its
detail shown to reviewers and admins but not to every viewer."""

import logging
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from runs.models import Backend, RelayCallback
from runs.relay import outbox
from runs.relay.simulator import RelaySimulator
from tests.factories import PASSWORD, make_backend, make_config, make_user
from tests.runs.relay_runs import REPO, dispatched_run, in_progress, make_due

# What every signed-in viewer reads about such a callback (the detail is for reviewers).
MISCONFIGURED = "relay authentication is misconfigured for this backend — an admin must fix it"


@pytest.fixture
def simulator():
    with RelaySimulator(token="s3cret", allowlist={REPO: "L2"}, strict=True) as sim:
        yield sim


@pytest.fixture(autouse=True)
def no_countdown_tasks(settings):
    # These tests call `deliver` themselves: a retry leaves no countdown task on the broker.
    settings.CELERY_TASK_ALWAYS_EAGER = True


def backend_with_token(spec: str, simulator: RelaySimulator) -> Backend:
    backend = make_backend("acme", relay_url=simulator.url, relay_token=spec)
    make_config(backend)
    return backend


def errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize("trouble", ["missing file", "empty file", "token pasted as the spec"])
def test_an_unusable_token_holds_the_callback_says_so_once_and_sends_it_once_fixed(
    trouble, db, tmp_path, simulator, caplog
):
    token = tmp_path / "relay-token"
    if trouble == "empty file":
        token.write_text("\n")
    spec = "s3cret" if trouble == "token pasted as the spec" else f"file:{token}"
    run = dispatched_run(backend_with_token(spec, simulator), simulator)
    callback = in_progress(run)

    outbox.deliver(callback.pk)
    callback.refresh_from_db()
    assert callback.status == RelayCallback.Status.PENDING
    assert callback.last_response.startswith(MISCONFIGURED)
    assert callback.attempts == 0  # nothing went to the relay
    assert callback.next_attempt_at > timezone.now() + timedelta(minutes=14)
    assert not simulator.accepted and not simulator.refused
    assert len(errors(caplog)) == 1 and "relay token" in errors(caplog)[0]

    make_due(callback)  # the beat looks again: same trouble, nothing sent, no new ERROR
    outbox.deliver(callback.pk)
    callback.refresh_from_db()
    assert callback.status == RelayCallback.Status.PENDING
    assert callback.last_response.startswith(MISCONFIGURED)
    assert not simulator.accepted and len(errors(caplog)) == 1

    token.write_text("s3cret\n")  # an admin fixes it
    Backend.objects.filter(pk=run.backend_id).update(relay_token=f"file:{token}")
    make_due(callback)
    outbox.deliver(callback.pk)
    callback.refresh_from_db()
    assert callback.status == RelayCallback.Status.DELIVERED and callback.attempts == 1
    assert [status for _, status, _ in simulator.accepted] == ["in_progress"]


def test_a_viewer_reads_that_an_admin_must_fix_it_and_a_reviewer_or_admin_reads_why(
    db, tmp_path, simulator, client
):
    token = tmp_path / "relay-token"  # never written
    run = dispatched_run(backend_with_token(f"file:{token}", simulator), simulator)
    outbox.deliver(in_progress(run).pk)

    client.force_login(make_user("vera", role="viewer"))
    page = client.get(f"/runs/{run.uuid}/").content.decode()
    assert MISCONFIGURED in page and "(held)" in page
    assert str(tmp_path) not in page and "No such file" not in page
    partial = client.get(f"/runs/{run.uuid}/", HTTP_HX_REQUEST="true").content.decode()
    assert MISCONFIGURED in partial and str(tmp_path) not in partial

    for name, role in (("rita", "reviewer"), ("ada", "admin")):
        client.force_login(make_user(name, role=role))
        page = client.get(f"/runs/{run.uuid}/").content.decode()
        assert MISCONFIGURED in page and str(token) in page and "No such file" in page


def admin_form(**fields: str) -> dict[str, str]:
    now = timezone.now()
    return {
        "slug": "acme", "name": "Acme", "device_module": "acme_torch",
        "repository": "acme/torch-acme", "version": "1.0", "extra_versions": "[]",
        "extension_points": "[]", "gate_policy": "{}", "participation": "all",
        "relay_mode": "aggregate",
        "relay_url": "https://relay.example/github/callback", "relay_token": "none",
        "created_at_0": now.strftime("%Y-%m-%d"), "created_at_1": now.strftime("%H:%M:%S"),
    } | fields  # fmt: skip


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("s3cret", "a token itself does not go here"),
        ("file:relay-token", "absolute path"),
        ("vault:relay", "token spec must be"),
    ],
)
def test_the_backend_admin_refuses_a_malformed_relay_token(db, client, spec, problem):
    client.force_login(get_user_model().objects.create_superuser("ada", password=PASSWORD))

    response = client.post("/admin/runs/backend/add/", admin_form(relay_token=spec))

    assert response.status_code == 200 and not Backend.objects.exists()
    errors = response.context["adminform"].form.errors
    assert list(errors) == ["relay_token"] and problem in errors["relay_token"][0]
    assert spec not in errors["relay_token"][0]


def test_the_backend_admin_takes_a_well_formed_relay_token(db, client, settings, tmp_path):
    client.force_login(get_user_model().objects.create_superuser("ada", password=PASSWORD))
    settings.CRCR_RELAY_URL_ALLOWLIST = ["relay.example"]
    spec = f"file:{tmp_path / 'relay-token'}"  # in the secrets folder (tests/conftest.py)

    response = client.post("/admin/runs/backend/add/", admin_form(relay_token=spec))

    assert response.status_code == 302
    assert Backend.objects.get().relay_token == spec
