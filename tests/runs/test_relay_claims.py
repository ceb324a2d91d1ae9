"""The reporter API: claims on the outbox with a lease, answers settled by the outbox's rules,
a HUD job's identity fixed at its first claim, and who may send a backend's callbacks. With
GitHub Actions as the sender the outbox holds only self-reports (nightly, release and manual
runs); a dispatched run is the bridge job's to report."""

import importlib
from datetime import timedelta
from typing import Any

import pytest
from django.apps import apps
from django.contrib.auth import get_user_model
from django.utils import timezone

from runs import results
from runs.models import Backend, RelayCallback, Run
from runs.relay import outbox
from tests.factories import PASSWORD, make_backend, make_config, make_token, make_user
from tests.runs.relay_runs import dispatched_run
from tests.runs.reporter_runs import (
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
    """crcr's reporter API through the test client, as a token of `user` acting for the
    backends named `scope`, issued when first used (each test makes its backend first)."""

    def __init__(self, client: Any, user: Any, scope: tuple[str, ...] = ("acme",)) -> None:
        self.client, self.user, self.scope, self.auth = client, user, scope, ""

    def post(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if not self.auth:
            key = make_token(self.user, *Backend.objects.filter(slug__in=self.scope))
            self.auth = f"Token {key}"
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
    return Api(client, make_user("reporter", role="machine"))


def runs(claim: dict[str, Any]) -> list[str]:
    return [c["run"] for c in claim["callbacks"]]


def nightly_run(backend: Backend) -> Run:
    """A finished nightly run: its one `completed` self-report is due."""
    return self_reported_run(backend, "nightly", "c" * 40, ref="nightly")


def dispatched_run_finished(backend: Backend, shards: int = 2) -> Run:
    run = dispatched_run(backend)
    for index in range(shards):
        finish_shard(start_shard(run, index))
    results.finish_if_done(run.pk)
    run.refresh_from_db()
    return run


def test_claims_go_in_the_outboxs_order_and_never_hand_one_callback_to_two_reporters(api):
    backend = reporting_backend(RELAY)
    nightly = self_reported_run(backend, "nightly", "c" * 40, ref="nightly")
    release = self_reported_run(backend, "release", "d" * 40, ref="release/2.14")
    manual = self_reported_run(backend, "manual", "e" * 40)

    first = api.claim("9001", limit=1)
    second = api.claim("9002")

    assert runs(first) == [str(nightly.uuid)]
    assert runs(second) == [str(release.uuid), str(manual.uuid)]
    assert api.claim("9003")["callbacks"] == []
    assert api.answer(first, status=200, text='{"ok": true}')["status"] == "delivered"
    assert api.claim("9003")["callbacks"] == []  # a delivered row is never handed out again


@pytest.mark.parametrize("mode", ["per_job", "aggregate"])
def test_with_actions_the_bridge_reports_dispatched_runs_and_the_reporter_self_reports(api, mode):
    backend = reporting_backend(RELAY, mode=mode)
    run = dispatched_run_finished(backend)
    nightly = self_reported_run(backend, "nightly", "c" * 40, ref="nightly")
    manual = self_reported_run(backend, "manual", "e" * 40)

    claim = api.claim()

    assert run.is_finished and run.shards.count() == 2
    assert not run.callbacks.exists()  # crcr-bridge.yml's job reports it, in either mode
    assert runs(claim) == [str(nightly.uuid), str(manual.uuid)]
    assert [c["body"]["event_type"] for c in claim["callbacks"]] == ["nightly", "periodic"]
    assert api.claim()["callbacks"] == []


def test_a_self_report_goes_out_as_a_job_of_the_actions_run_that_claimed_it(api):
    run = self_reported_run(reporting_backend(RELAY), "release", "d" * 40, ref="release/2.14")

    claimed = api.claim("9001")["callbacks"]

    assert [(c["job_name"], c["transition"]) for c in claimed] == [("acme", "completed")]
    workflow = claimed[0]["body"]["workflow"]
    assert (workflow["run_id"], workflow["run_attempt"]) == ("9001", "1")
    assert workflow["url"] == "https://github.com/acme/torch-acme/actions/runs/9001"
    assert workflow["name"] == "crcr report" and workflow["job_name"] == "acme"
    assert workflow["artifact_url"] == run.page_url()
    assert (workflow["status"], workflow["conclusion"]) == ("completed", "success")


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
    nightly_run(reporting_backend(RELAY))
    claim = api.claim()

    written = api.answer(claim, **answer)

    assert written["http"] == 200 and written["status"] == state
    callback = RelayCallback.objects.get(uuid=claim["callbacks"][0]["uuid"])
    assert callback.last_status_code == answer["status"] and callback.attempts == 1
    if state == "pending":
        assert callback.next_attempt_at > timezone.now() - timedelta(seconds=1)


def test_a_repeat_refused_after_a_lost_answer_means_the_first_send_landed(api):
    nightly_run(reporting_backend(RELAY))
    lost = api.claim("9001")
    api.answer(lost, status=502, text="bad gateway")
    RelayCallback.objects.update(next_attempt_at=timezone.now())

    again = api.claim("9002")

    assert again["callbacks"][0]["body"]["workflow"]["run_id"] == "9001"
    # The relay takes a self-report's repeat again; it refuses a dispatched job's (rows queued
    # before the bridge reported dispatched runs still drain here): either way, delivered.
    assert api.answer(again, status=400, text=DUPLICATE)["status"] == "delivered"


def test_a_retry_after_is_honoured(api):
    nightly_run(reporting_backend(RELAY))
    claim = api.claim()

    api.answer(claim, status=429, text='{"detail": "rate limit"}', retry_after="120")

    wait = RelayCallback.objects.get().next_attempt_at - timezone.now()
    assert timedelta(seconds=110) < wait <= timedelta(seconds=120)
    assert api.claim()["callbacks"] == []


def test_a_lease_that_ran_out_is_claimed_again_and_its_late_answer_is_refused(api):
    nightly_run(reporting_backend(RELAY))
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
    assert api.answer(resumed, status=200, text='{"ok": true}')["status"] == "delivered"


def test_a_callback_given_back_unsent_costs_no_attempt(api):
    nightly_run(reporting_backend(RELAY))
    claim = api.claim()

    written = api.answer(claim, sent=False)

    assert written["status"] == "pending" and written["attempts"] == 0
    assert len(api.claim()["callbacks"]) == 1


def test_the_relay_worker_never_sends_a_reporters_callbacks(api):
    run = nightly_run(reporting_backend(RELAY))
    callback = run.callbacks.get()

    assert outbox.due() == []  # the beat's pass
    assert outbox.deliver(callback.pk) is None
    callback.refresh_from_db()
    assert (callback.status, callback.attempts) == ("pending", 0)


def test_a_worker_backend_cannot_be_claimed_and_only_a_machine_claims(client, api):
    make_config(make_backend("acme", relay_url=RELAY, relay_token="file:/etc/crcr/relay-token"))
    viewer = Api(client, make_user("vera"))

    status, body = api.post("/api/relay/claim/?backend=acme", {"reporter": reporter()})
    refused, _ = viewer.post("/api/relay/claim/?backend=acme", {"reporter": reporter()})

    assert status == 409 and "relay worker" in body["error"]
    assert refused == 403


def backend_form(**fields: str) -> dict[str, str]:
    now = timezone.now()
    return {
        "slug": "acme", "name": "Acme", "device_module": "acme_torch",
        "repository": "acme/torch-acme", "version": "1.0", "extra_versions": "[]",
        "extension_points": "[]", "gate_policy": "{}", "participation": "all",
        "relay_mode": "aggregate",
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
    assert "crcr-bridge.yml" in page and "crcr-report.yml" in page and "OIDC token" in page


def test_the_run_page_says_who_sends_and_under_which_actions_run(client, api):
    run = nightly_run(reporting_backend(RELAY))
    api.claim("9001")
    client.force_login(make_user("vera"))

    page = client.get(f"/runs/{run.uuid}/").content.decode()

    assert "GitHub Actions reporter" in page and "crcr holds no relay credential" in page
    assert 'href="https://github.com/acme/torch-acme/actions/runs/9001"' in page
    assert "by actions run 9001 attempt 1" in page


def test_the_run_page_of_a_dispatched_run_names_the_bridge_job_as_its_sender(client):
    run = dispatched_run_finished(reporting_backend(RELAY))
    client.force_login(make_user("vera"))

    page = client.get(f"/runs/{run.uuid}/").content.decode()

    assert "bridge job (<code>crcr-bridge.yml</code>)" in page
    assert "GitHub Actions reporter" not in page and "crcr holds no relay credential" in page
    assert "No callbacks: the bridge job reports this run." in page


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
