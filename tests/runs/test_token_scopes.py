"""A machine token acts only for the backends it is scoped to: on every machine endpoint of
runs a token of another backend gets 403 and changes nothing, and a claimed callback's
answer is taken only from the token whose claim holds the lease."""

from typing import Any

import pytest
from django.contrib.auth import get_user_model

from runs.models import Backend, Dispatch, RelayCallback, Run, Trigger
from tests.dispatches import pr_dispatch
from tests.factories import PASSWORD, make_backend, make_config, make_token, make_user
from tests.runs.relay_runs import make_run
from tests.runs.reporter_runs import self_reported_run

pytestmark = pytest.mark.django_db

RELAY = "https://relay.example/github/callback"
REPORTER = {"run_id": "9001", "run_attempt": "1", "url": "https://github.com/x", "workflow": "w"}


def reporting(slug: str) -> Backend:
    """A backend whose HUD callbacks a GitHub Actions reporter claims from crcr."""
    backend = make_backend(slug, relay_url=RELAY, relay_token="none", relay_sender="actions")
    make_config(backend)
    return backend


@pytest.fixture
def acme() -> Backend:
    return reporting("acme")


@pytest.fixture
def beta() -> Backend:
    return reporting("beta")


@pytest.fixture
def acme_token(acme) -> str:
    """The acme team's machine token (the forwarder, the bridge, the reporter)."""
    return make_token(make_user("acme-ci", role="machine"), acme)


def call(client, method: str, path: str, key: str, body: Any = None) -> Any:
    send = getattr(client, method)
    if method == "get":
        return send(path, HTTP_AUTHORIZATION=f"Token {key}")
    return send(
        path, body or {}, content_type="application/json", HTTP_AUTHORIZATION=f"Token {key}"
    )


def failed_run(backend: Backend) -> Run:
    trigger = Trigger.objects.create(backend=backend, kind="manual", pytorch_sha="a" * 40)
    run = make_run(backend, trigger)
    Run.objects.filter(pk=run.pk).update(status=Run.Status.FAILED)
    return run


def claim(client, key: str, slug: str = "acme") -> Any:
    return call(client, "post", f"/api/relay/claim/?backend={slug}", key, {"reporter": REPORTER})


def test_a_dispatch_for_another_backend_is_refused_and_not_stored(client, acme_token, beta):
    response = call(client, "post", "/api/dispatches/?backend=beta", acme_token, pr_dispatch())

    assert response.status_code == 403 and "'beta'" in response.json()["detail"]
    assert not Dispatch.objects.exists()


def test_a_dispatch_for_its_own_backend_is_accepted(client, acme_token, beta, upstream):
    response = call(client, "post", "/api/dispatches/?backend=acme", acme_token, pr_dispatch())

    assert response.status_code == 202
    assert Dispatch.objects.get().backend.slug == "acme"


def test_another_backends_dispatch_is_not_shown(client, acme_token, beta):
    dispatch = Dispatch.objects.create(
        backend=beta, delivery_id="d-1", event_type="pull_request", raw_body="{}", payload={}
    )
    response = call(client, "get", f"/api/dispatches/{dispatch.uuid}/", acme_token)

    assert response.status_code == 403 and "delivery_id" not in response.json()


def test_an_attempt_of_another_backends_run_is_refused_and_starts_nothing(client, acme_token, beta):
    run = failed_run(beta)

    response = call(
        client, "post", f"/api/runs/{run.uuid}/attempts/", acme_token, {"run_attempt": 2}
    )

    assert response.status_code == 403
    assert Run.objects.count() == 1 and not run.attempts.exists()


def test_another_backends_run_is_neither_shown_nor_listed(client, acme, acme_token, beta):
    theirs, ours = failed_run(beta), failed_run(acme)

    assert call(client, "get", f"/api/runs/{theirs.uuid}/", acme_token).status_code == 403
    assert call(client, "get", f"/api/runs/{ours.uuid}/", acme_token).status_code == 200
    listed = call(client, "get", "/api/runs/", acme_token).json()["results"]
    assert [run["uuid"] for run in listed] == [str(ours.uuid)]


def test_another_backends_callbacks_cannot_be_claimed(client, acme_token, beta):
    callback = self_reported_run(beta, "nightly", "c" * 40, ref="nightly").callbacks.get()

    response = claim(client, acme_token, "beta")

    assert response.status_code == 403 and "callbacks" not in response.json()
    callback.refresh_from_db()
    assert (callback.status, callback.attempts, callback.claimed_by) == ("pending", 0, "")


def test_another_backends_claimed_callback_cannot_be_answered(client, acme_token, beta):
    """Even holding the lease id (leaked, guessed), acme cannot mark beta's HUD job sent."""
    self_reported_run(beta, "nightly", "c" * 40, ref="nightly")
    beta_token = make_token(make_user("beta-ci", role="machine"), beta)
    held = claim(client, beta_token, "beta").json()
    answer = {"lease": held["lease"]["id"], "sent": True, "status": 200, "text": "{}"}

    response = call(client, "post", held["callbacks"][0]["answer_url"], acme_token, answer)

    assert response.status_code == 403
    callback = RelayCallback.objects.get()
    assert (callback.status, callback.last_status_code) == ("sending", None)
    assert (
        call(client, "post", held["callbacks"][0]["answer_url"], beta_token, answer).json()[
            "status"
        ]
        == "delivered"
    )


def test_only_the_token_that_claimed_a_callback_answers_it(client, acme, acme_token):
    """Two tokens of one team: the second cannot settle what the first one holds."""
    self_reported_run(acme, "nightly", "c" * 40, ref="nightly")
    other = make_token(make_user("acme-other", role="machine"), acme)
    held = claim(client, acme_token).json()
    url = held["callbacks"][0]["answer_url"]
    answer = {"lease": held["lease"]["id"], "sent": True, "status": 200, "text": "{}"}

    refused = call(client, "post", url, other, answer)

    assert refused.status_code == 403 and "held by another token" in refused.json()["error"]
    assert RelayCallback.objects.get().status == "sending"
    assert call(client, "post", url, acme_token, answer).json()["status"] == "delivered"


def test_a_token_without_a_backend_acts_for_none(client, acme):
    key = make_token(make_user("unscoped", role="machine"))
    self_reported_run(acme, "nightly", "c" * 40, ref="nightly")

    assert claim(client, key).status_code == 403
    assert call(client, "get", "/api/runs/", key).json()["results"] == []
    assert call(client, "get", "/api/whoami/", key).json()["backends"] == []


def test_whoami_names_the_backends_a_token_acts_for(client, acme, beta):
    both = make_token(make_user("shared-ci", role="machine"), acme, beta)
    admin = make_token(get_user_model().objects.create_superuser("ada", password=PASSWORD))

    assert call(client, "get", "/api/whoami/", both).json()["backends"] == ["acme", "beta"]
    # A superuser's token acts for every backend, as its user administers them all.
    assert call(client, "get", "/api/whoami/", admin).json()["backends"] == ["acme", "beta"]
    assert claim(client, admin, "beta").status_code == 200
