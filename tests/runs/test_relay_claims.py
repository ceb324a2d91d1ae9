"""The reporter API: claims on the outbox with a lease, answers settled by the outbox's rules,
a HUD job's identity fixed at its first claim, and who may send a backend's callbacks."""

import importlib
from datetime import timedelta
from typing import Any

import pytest
from django.apps import apps
from django.contrib.auth import get_user_model
from django.utils import timezone

from runs import results
from runs.models import Backend, RelayCallback
from runs.relay import outbox
from tests.factories import PASSWORD, make_backend, make_config, make_token, make_user
from tests.runs.reporter_runs import (
    dispatched_run,
    finish_shard,
    one_job_started,
    reporting_backend,
    self_reported_run,
    start_shard,
)

pytestmark = pytest.mark.django_db
relay_reporter = importlib.import_module("runs.migrations.0014_relay_reporter")

RELAY = "https://relay.example/github/callback"
DUPLICATE = '{"detail": "callback rejected: invalid state transition (IN_PROGRESS -> IN_PROGRESS)"}'


def reporter(run_id: str = "9001", attempt: str = "1") -> dict[str, str]:
    return {
        "run_id": run_id,
        "run_attempt": attempt,
        "url": f"https://github.com/acme/torch-acme/actions/runs/{run_id}",
        "workflow": "crcr report",
    }


class Api:
    """crcr's reporter API through the test client, as a machine token."""

    def __init__(self, client: Any, token: str) -> None:
        self.client, self.auth = client, f"Token {token}"

    def post(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        response = self.client.post(
            path, body, content_type="application/json", HTTP_AUTHORIZATION=self.auth
        )
        return response.status_code, response.json()

    def claim(self, run_id: str = "9001", limit: int = 10) -> dict[str, Any]:
        status, body = self.post(
            "/api/relay/claim/?backend=acme", {"reporter": reporter(run_id), "limit": limit}
        )
        assert status == 200, body
        return body

    def answer(self, claim: dict[str, Any], index: int = 0, **answer: Any) -> dict[str, Any]:
        callback = claim["callbacks"][index]
        status, body = self.post(callback["answer_url"], {"lease": claim["lease"]["id"], **answer})
        return {"http": status, **body}


@pytest.fixture
def api(client) -> Api:
    return Api(client, make_token(make_user("reporter", role="machine")))


def jobs(claim: dict[str, Any]) -> list[tuple[str, str]]:
    return [(c["job_name"], c["transition"]) for c in claim["callbacks"]]


def per_job_run_finished(backend: Backend, shards: int = 2):
    run = dispatched_run(backend, None)
    for index in range(shards):
        finish_shard(start_shard(run, index))
    results.finish_if_done(run.pk)
    return run


def test_claims_go_in_the_outboxs_order_and_never_hand_one_callback_to_two_reporters(api):
    per_job_run_finished(reporting_backend(RELAY))

    first = api.claim("9001", limit=1)
    second = api.claim("9002")

    assert jobs(first) == [("acme / shard 0", "in_progress")]
    # A completed waits until its job's in_progress has landed.
    assert jobs(second) == [("acme / shard 1", "in_progress")]
    assert api.claim("9003")["callbacks"] == []
    assert api.answer(first, status=200, text='{"ok": true}')["status"] == "delivered"
    assert jobs(api.claim("9003")) == [("acme / shard 0", "completed")]


def test_a_job_keeps_the_identity_of_the_actions_run_that_first_claimed_it(api):
    run = one_job_started(reporting_backend(RELAY))
    started = api.claim("9001")
    api.answer(started, status=200, text='{"ok": true}')
    finish_shard(run.shards.get())
    results.finish_if_done(run.pk)  # the completed is written after the in_progress went out

    completed = api.claim("9002")  # a later reporter run sends it

    bodies = [started["callbacks"][0]["body"], completed["callbacks"][0]["body"]]
    for body in bodies:
        workflow = body["workflow"]
        assert (workflow["run_id"], workflow["run_attempt"]) == ("9001", "1")
        assert workflow["url"] == "https://github.com/acme/torch-acme/actions/runs/9001"
        assert workflow["name"] == "crcr report" and workflow["job_name"] == "acme / shard 0"
        assert workflow["artifact_url"] == run.page_url()
    assert [b["workflow"]["status"] for b in bodies] == ["in_progress", "completed"]


def test_in_aggregate_mode_the_bridge_reports_dispatched_runs_and_the_reporter_the_rest(api):
    backend = reporting_backend(RELAY, mode="aggregate")
    run = dispatched_run(backend, None)
    finish_shard(start_shard(run, 0))
    results.finish_if_done(run.pk)
    nightly = self_reported_run(backend, "nightly", "c" * 40, ref="nightly")

    claim = api.claim()

    assert not run.callbacks.exists()  # crcr-bridge.yml's job is this run's HUD job
    assert [c["run"] for c in claim["callbacks"]] == [str(nightly.uuid)]


def test_two_jobs_one_actions_run_could_not_tell_apart_go_out_in_two_runs(api):
    backend = reporting_backend(RELAY)
    self_reported_run(backend, "nightly", "c" * 40, ref="nightly")
    self_reported_run(backend, "release", "c" * 40, ref="release/2.14")  # the same SHA

    first, second = api.claim("9001"), api.claim("9002")

    assert len(first["callbacks"]) == 1 and len(second["callbacks"]) == 1
    assert [c.attempts for c in RelayCallback.objects.order_by("created_at")] == [1, 1]
    run_ids = {claim["callbacks"][0]["body"]["workflow"]["run_id"] for claim in (first, second)}
    assert run_ids == {"9001", "9002"}


@pytest.mark.parametrize(
    ("answer", "state"),
    [
        ({"status": 200, "text": '{"ok": true, "status": "in_progress"}'}, "delivered"),
        ({"status": 400, "text": DUPLICATE}, "rejected"),  # no earlier attempt: final
        ({"status": 401, "text": '{"detail": "Invalid authorization token"}'}, "rejected"),
        ({"status": 503, "text": "down"}, "pending"),
        ({"status": None, "text": "network error: timed out"}, "pending"),
    ],
)
def test_an_answer_written_back_is_settled_as_the_relay_worker_settles_its_own(api, answer, state):
    one_job_started(reporting_backend(RELAY))
    claim = api.claim()

    written = api.answer(claim, **answer)

    assert written["http"] == 200 and written["status"] == state
    callback = RelayCallback.objects.get(uuid=claim["callbacks"][0]["uuid"])
    assert callback.last_status_code == answer["status"] and callback.attempts == 1
    if state == "pending":
        assert callback.next_attempt_at > timezone.now() - timedelta(seconds=1)


def test_a_repeat_refused_after_a_lost_answer_means_the_first_send_landed(api):
    one_job_started(reporting_backend(RELAY))
    lost = api.claim("9001")
    api.answer(lost, status=502, text="bad gateway")
    RelayCallback.objects.update(next_attempt_at=timezone.now())

    again = api.claim("9002")

    assert again["callbacks"][0]["body"]["workflow"]["run_id"] == "9001"
    assert api.answer(again, status=400, text=DUPLICATE)["status"] == "delivered"


def test_a_retry_after_is_honoured(api):
    one_job_started(reporting_backend(RELAY))
    claim = api.claim()

    api.answer(claim, status=429, text='{"detail": "rate limit"}', retry_after="120")

    wait = RelayCallback.objects.get().next_attempt_at - timezone.now()
    assert timedelta(seconds=110) < wait <= timedelta(seconds=120)
    assert api.claim()["callbacks"] == []


def test_a_lease_that_ran_out_is_claimed_again_and_its_late_answer_is_refused(api):
    one_job_started(reporting_backend(RELAY))
    dead = api.claim("9001")
    assert api.claim("9002")["callbacks"] == []  # leased
    RelayCallback.objects.update(lease_until=timezone.now() - timedelta(seconds=1))

    resumed = api.claim("9002")
    late = api.answer(dead, status=200, text="{}")

    assert late["http"] == 409 and late["lease_lost"] is True
    callback = RelayCallback.objects.get()
    assert callback.status == "sending" and callback.attempts == 2
    assert callback.last_status_code is None  # the dead reporter's send may have landed
    assert resumed["callbacks"][0]["body"]["workflow"]["run_id"] == "9001"
    assert api.answer(resumed, status=400, text=DUPLICATE)["status"] == "delivered"


def test_a_callback_given_back_unsent_costs_no_attempt(api):
    one_job_started(reporting_backend(RELAY))
    claim = api.claim()

    written = api.answer(claim, sent=False)

    assert written["status"] == "pending" and written["attempts"] == 0
    assert len(api.claim()["callbacks"]) == 1


def test_the_relay_worker_never_sends_a_reporters_callbacks(api):
    run = one_job_started(reporting_backend(RELAY))
    callback = run.callbacks.get()

    assert outbox.due() == []  # the beat's pass
    assert outbox.deliver(callback.pk) is None
    callback.refresh_from_db()
    assert (callback.status, callback.attempts) == ("pending", 0)


def test_a_worker_backend_cannot_be_claimed_and_only_a_machine_claims(client, api):
    make_config(make_backend("acme", relay_url=RELAY, relay_token="file:/etc/crcr/relay-token"))
    viewer = Api(client, make_token(make_user("vera")))

    status, body = api.post("/api/relay/claim/?backend=acme", {"reporter": reporter()})
    refused, _ = viewer.post("/api/relay/claim/?backend=acme", {"reporter": reporter()})

    assert status == 409 and "relay worker" in body["error"]
    assert refused == 403


def backend_form(**fields: str) -> dict[str, str]:
    now = timezone.now()
    return {
        "slug": "acme", "name": "Acme", "device_module": "acme_torch",
        "repository": "acme/torch-acme", "version": "1.0", "extra_versions": "[]",
        "extension_points": "[]", "gate_policy": "{}", "relay_mode": "aggregate",
        "relay_url": RELAY, "relay_token": "none", "relay_sender": "actions",
        "created_at_0": now.strftime("%Y-%m-%d"), "created_at_1": now.strftime("%H:%M:%S"),
    } | fields  # fmt: skip


@pytest.mark.parametrize(
    ("fields", "field", "problem"),
    [
        ({"relay_sender": "worker", "relay_token": "oidc"}, "relay_sender", "cannot mint"),
        ({"relay_token": "file:/etc/crcr/relay-token"}, "relay_token", "no relay credential"),
    ],
)
def test_the_backend_settings_refuse_a_credential_in_the_wrong_place(
    client, fields, field, problem
):
    client.force_login(get_user_model().objects.create_superuser("ada", password=PASSWORD))

    response = client.post("/admin/runs/backend/add/", backend_form(**fields))

    assert response.status_code == 200 and not Backend.objects.exists()
    errors = response.context["adminform"].form.errors
    assert list(errors) == [field] and problem in errors[field][0]


def test_the_backend_settings_say_who_sends_and_why(client):
    client.force_login(get_user_model().objects.create_superuser("ada", password=PASSWORD))

    response = client.post("/admin/runs/backend/add/", backend_form())
    backend = Backend.objects.get()
    page = client.get(f"/admin/runs/backend/{backend.pk}/change/").content.decode()

    assert response.status_code == 302 and backend.relay_sender == "actions"
    assert "only for relays that accept a static token" in page
    assert "crcr-report.yml" in page and "OIDC token" in page


def test_the_run_page_says_who_sends_and_under_which_actions_run(client, api):
    run = one_job_started(reporting_backend(RELAY))
    api.claim("9001")
    client.force_login(make_user("vera"))

    page = client.get(f"/runs/{run.uuid}/").content.decode()

    assert "GitHub Actions reporter" in page and "crcr holds no relay credential" in page
    assert 'href="https://github.com/acme/torch-acme/actions/runs/9001"' in page
    assert "by actions run 9001 attempt 1" in page


def test_the_migration_hands_a_backend_set_to_oidc_to_a_reporter():
    oidc = make_backend("acme", relay_url=RELAY, relay_token="oidc")
    static = make_backend("beta", relay_url=RELAY, relay_token="file:/etc/crcr/relay-token")

    relay_reporter.senders(apps, None)

    oidc.refresh_from_db()
    static.refresh_from_db()
    assert (oidc.relay_sender, oidc.relay_token) == ("actions", "oidc")
    assert static.relay_sender == "worker"


def test_a_row_claimed_before_leases_existed_is_still_taken_back_after_5_minutes():
    backend = make_backend("acme", relay_url=RELAY, relay_token="file:/etc/crcr/relay-token")
    make_config(backend)
    callback = one_job_started(backend).callbacks.get()
    stuck = timezone.now() - timedelta(minutes=6)
    RelayCallback.objects.update(status="sending", attempts=1, next_attempt_at=stuck)

    assert outbox.due() == [callback.pk]
    callback.refresh_from_db()
    assert callback.status == "pending" and callback.last_status_code is None
