"""Nightly-only participation: a backend that takes nightly and release dispatches only.
The intake records any other dispatch as rejected, with the reason, and starts nothing;
the HUD shows the backend as nightly-only, with its nightly commits alone."""

import hashlib
import hmac
import json
import re

import pytest
from django.core.management import call_command

from runs import dispatch as intake
from runs import hud as summaries
from runs import triggers
from runs.models import Backend, Dispatch, Run, Trigger
from tests.dispatches import pr_dispatch, push_dispatch
from tests.factories import make_backend, make_config, make_user
from tests.runs.test_hud import acme, hud, plant, pull_request, sha
from tests.runs.test_intake_http import verdict_of

SOURCE = "5" * 40
NIGHTLY_MESSAGE = f"2026-12-06 nightly release ({SOURCE})"


def nightly_dispatch(message: str = NIGHTLY_MESSAGE) -> dict:
    body = push_dispatch(ref="refs/heads/nightly")
    body["payload"]["head_commit"]["message"] = message
    return body


@pytest.fixture
def nightly_backend(backend) -> Backend:
    backend.participation = Backend.Participation.NIGHTLY
    backend.save()
    return backend


def test_a_pull_request_is_recorded_refused_with_its_reason_and_starts_nothing(
    http, nightly_backend, celery_worker
):
    body = pr_dispatch(labels=("Merged",))
    status, answer = http.post("/api/dispatches/", body)
    # 200, not 202: nothing was queued; not a 4xx, which would fail the forwarding workflow.
    assert status == 200
    assert answer["verdict"] == "rejected" and answer["runs"] == []
    assert "takes nightly and release dispatches only" in answer["verdict_reason"]
    assert "a pull request is not run" in answer["verdict_reason"]
    dispatch = Dispatch.objects.get(delivery_id=body["delivery_id"])
    assert dispatch.verdict == "rejected" and dispatch.pr_number == 4242
    assert not Trigger.objects.exists()
    # A redelivery finds the same record, refused as before.
    again_status, again = http.post("/api/dispatches/", body)
    assert (again_status, again["uuid"], again["verdict"]) == (200, answer["uuid"], "rejected")


def test_a_push_to_main_is_refused_and_a_nightly_is_taken_and_built_from_its_source(
    http, nightly_backend, upstream, celery_worker
):
    status, answer = http.post("/api/dispatches/", push_dispatch(ref="refs/heads/main"))
    assert (status, answer["verdict"]) == (200, "rejected")
    assert "a push to refs/heads/main is not run" in answer["verdict_reason"]

    body = nightly_dispatch()
    status, answer = http.post("/api/dispatches/", body)
    assert (status, answer["verdict"]) == (202, "pending")
    dispatch = verdict_of(body["delivery_id"])
    assert dispatch.verdict == "accepted", dispatch.verdict_reason
    assert Run.objects.get(trigger__dispatch=dispatch).pytorch_sha == SOURCE
    # The same nightly once more, from the schedule, then from a second dispatch: built once.
    upstream.nightly(SOURCE)
    assert triggers.start_nightly(nightly_backend).dispatch == dispatch
    again = nightly_dispatch()
    assert http.post("/api/dispatches/", again)[0] == 202
    assert verdict_of(again["delivery_id"]).verdict == "recorded"
    assert Run.objects.filter(backend=nightly_backend).count() == 1


def test_a_nightly_naming_no_source_commit_is_rejected_with_the_reason(
    http, nightly_backend, celery_worker
):
    body = nightly_dispatch(message="nightly release")
    assert http.post("/api/dispatches/", body)[0] == 202
    dispatch = verdict_of(body["delivery_id"])
    assert dispatch.verdict == "rejected"
    assert "names no source commit" in dispatch.verdict_reason


def test_a_backend_taking_every_dispatch_still_queues_a_pull_request(http, backend):
    status, answer = http.post("/api/dispatches/", pr_dispatch())
    assert (status, answer["verdict"]) == (202, "pending")


def test_a_signed_webhook_of_a_pull_request_is_refused_the_same_way(client, nightly_backend):
    nightly_backend.webhook_secret = "s3cret"
    nightly_backend.save()
    raw = json.dumps(pr_dispatch()["payload"]).encode()
    signature = hmac.new(b"s3cret", raw, hashlib.sha256).hexdigest()
    response = client.post(
        "/api/webhooks/github/acme/", data=raw, content_type="application/json",
        HTTP_X_GITHUB_EVENT="pull_request", HTTP_X_GITHUB_DELIVERY="delivery-pr",
        HTTP_X_HUB_SIGNATURE_256=f"sha256={signature}",
    )  # fmt: skip
    assert response.status_code == 200
    assert response.json()["verdict"] == "rejected"
    assert Dispatch.objects.get().verdict == "rejected"


def test_the_dispatch_list_shows_a_refused_dispatch_with_its_reason(client, nightly_backend):
    body = pr_dispatch()
    refused = intake.receive(nightly_backend, body, json.dumps(body).encode(), "crcr").dispatch
    client.force_login(make_user("vera"))
    page = client.get("/dispatches/").content.decode()
    assert "rejected" in page and refused.verdict_reason in page


@pytest.mark.django_db
def test_the_hud_shows_a_nightly_only_backend_with_its_nightly_commits_alone(client):
    everything = acme()
    nightly = make_backend("nightlies", participation=Backend.Participation.NIGHTLY)
    make_config(nightly)
    # A pull request's runs, of both backends (the nightly-only one's from before it was).
    for backend in (everything, nightly):
        dispatch = pull_request(backend, 77, at=1)
        trigger = Trigger.objects.create(
            backend=backend, kind="dispatch", pytorch_sha=sha(1), dispatch=dispatch
        )
        plant(backend, at=1, trigger=trigger)
    plant(nightly, at=2)  # a nightly of the nightly-only backend alone
    page = hud(client)
    header = page.split("<tbody>")[0]
    assert re.search(r"nightlies <small [^>]*>nightly only</small></span>", header)
    assert "acme</span></th>" in header  # the other backend is not marked
    rows = {
        row.split('data-sha="')[1][:40]: row
        for row in page.split("<tr class=")[1:]
        if 'data-sha="' in row
    }
    assert set(rows) == {sha(1), sha(2)}
    # The pull request's commit keeps acme's cell; the nightly-only backend has none there.
    assert rows[sha(1)].count('class="cell cell-O') == 1
    assert rows[sha(2)].count('class="cell cell-O') == 1
    # The summaries under the grid (trends, red jobs) read the same runs.
    assert [run.trigger_kind for run in summaries.newest_finished("nightlies")] == ["nightly"]
    assert len(summaries.newest_finished("acme")) == 1


def test_add_backend_makes_a_nightly_only_backend(db, tmp_path):
    config = tmp_path / "cfg.yaml"
    config.write_text("test_suite_config:\n  files: []\n")
    call_command(
        "add_backend", "spyre", "--name", "Spyre", "--repository", "ibm/spyre",
        "--device-module", "crcr_reuse.reference_device", "--config", str(config),
        "--participation", "nightly",
    )  # fmt: skip
    assert Backend.objects.get(slug="spyre").nightly_only


def test_the_onboarding_page_offers_nightly_only_participation(client, db):
    from tests.selection.test_onboarding import CRCR, FORM, upload

    client.force_login(make_user("ada", role="admin"))
    assert "nightly and release dispatches only" in client.get("/backends/new/").content.decode()
    form = FORM | {"participation": "nightly", "config": upload(CRCR), "config_format": "crcr"}
    assert client.post("/backends/new/", form).status_code == 201
    assert Backend.objects.get(slug="spyre").nightly_only
