"""One callback budget per repository, shared by every sender: the relay worker, a GitHub
Actions reporter's claims and a bridge's turns (runs/relay/pacing.py). A 429 or a
Retry-After holds the whole repository back; a callback past the budget waits, shown so."""

from typing import Any

import pytest
from playwright.sync_api import expect

from runs.models import Backend, RelayBudget
from runs.relay import actions, claims, delivery, pacing, protocol
from runs.relay.simulator import RelaySimulator
from tests.factories import make_backend, make_config, make_token, make_user
from tests.runs.relay_runs import REPO
from tests.runs.reporter_runs import reporting_backend, self_reported_run
from tests.selection.test_review_browser import sign_in

pytestmark = pytest.mark.django_db
RELAY = "https://relay.example/github/callback"
REPORTER = {
    "run_id": "9001",
    "run_attempt": "1",
    "url": "https://github.com/acme/torch-acme/actions/runs/9001",
    "workflow": "crcr report",
}


@pytest.fixture
def budget(settings):
    """Three sends a minute for the repository, whoever sends them."""
    settings.CRCR_RELAY_CALLBACKS_PER_MINUTE = 3
    settings.CRCR_RELAY_RATE_WINDOW_SECONDS = 60


@pytest.fixture
def machine(client):
    backends: list[Backend] = []

    def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
        if not backends:
            backends.extend(Backend.objects.all())
            key = make_token(make_user("actions", role="machine"), *backends)
            client.defaults["HTTP_AUTHORIZATION"] = f"Token {key}"
        response = client.post(path, body, content_type="application/json")
        assert response.status_code == 200, response.content
        return response.json()

    return post


def test_a_bridge_and_a_reporter_of_one_repository_share_its_budget(budget, machine, client):
    reporting = reporting_backend(RELAY)
    bridged = make_backend("acme-gpu", repository=REPO, relay_url=RELAY, relay_sender="actions")
    make_config(bridged)
    nightlies = [self_reported_run(reporting, "nightly", sha * 40, ref="nightly") for sha in "cd"]

    # The other backend's bridge sends two callbacks of the same repository first.
    turns = [machine("/api/relay/turn/?backend=acme-gpu", {})["wait"] for _ in range(2)]
    assert turns == [0, 0]

    # The reporter gets the one send left; the other nightly waits for its turn.
    claim = machine("/api/relay/claim/?backend=acme", {"reporter": REPORTER, "limit": 10})
    assert [c["run"] for c in claim["callbacks"]] == [str(nightlies[0].uuid)]
    assert 0 < claim["next_turn_in"] <= 60 * 1.25
    waiting = nightlies[1].callbacks.get()
    assert waiting.status == "pending" and waiting.attempts == 0 and waiting.turn_at
    assert machine("/api/relay/turn/?backend=acme-gpu", {})["wait"] > 0

    client.force_login(make_user("vera"))
    page = client.get(f"/runs/{nightlies[1].uuid}/").content.decode()
    assert "waiting for its turn in the callback budget" in page
    assert "waiting for its turn" not in client.get(f"/runs/{nightlies[0].uuid}/").content.decode()


@pytest.mark.parametrize(
    ("answer", "at_least"),
    [({"status": 429}, 60), ({"status": 429, "retry_after": "200"}, 200),
     ({"status": 503, "retry_after": "120"}, 120)],
)  # fmt: skip
def test_a_429_or_a_retry_after_holds_back_every_sender_of_the_repository(
    budget, machine, answer, at_least
):
    make_backend("acme", relay_url=RELAY, relay_sender="actions")
    assert machine("/api/relay/turn/?backend=acme", {})["wait"] == 0
    # The relay's own 429 names no time: nothing goes until a whole window has passed.
    assert machine("/api/relay/turn/?backend=acme", answer)["wait"] >= at_least - 1
    assert machine("/api/relay/turn/?backend=acme", {})["wait"] >= at_least - 1


def test_a_bridge_honours_retry_after_and_tells_crcr_about_the_429(tmp_path):
    token = tmp_path / "relay-token"
    token.write_text("s3cret")
    told: list[delivery.Answer | None] = []
    slept: list[float] = []

    def turn(last: delivery.Answer | None) -> float:
        told.append(last)
        return 0.0

    with RelaySimulator(token="s3cret", allowlist={REPO: "L2"}, auto_dispatch=True) as relay:
        relay.fail_next(1, status=429, retry_after="7")
        body = protocol.build_callback(
            protocol.nightly_payload("c" * 40), status="completed", name="crcr",
            url="https://github.com/acme/torch-acme/actions/runs/1", run_id=1, run_attempt=1,
            job_name="report", check_run_id=1, started_at="2026-12-06T00:00:00Z",
            conclusion="success", test_results={"passed": 1, "failed": 0, "skipped": 0},
        )  # fmt: skip
        sent = actions.deliver(
            relay.url, body, delivery.StaticTokenProvider(token), sleep=slept.append,
            note=lambda _: None, turn=turn,
        )  # fmt: skip
    assert sent.outcome == "delivered" and sent.attempts == 2
    assert slept and slept[0] >= 7
    assert told[0] is None and told[1] is not None and told[1].status == 429


@pytest.mark.parametrize(
    ("body", "named"),
    [({"status": "soon"}, "status"), ({"status": 42}, "status"),
     ({"status": 429, "retry_after": "x" * 201}, "retry_after")],
)  # fmt: skip
def test_a_turn_asked_with_a_garbled_answer_is_refused_naming_the_field(
    budget, client, body, named
):
    make_backend("acme", relay_url=RELAY, relay_sender="actions")
    key = make_token(make_user("actions", role="machine"), *Backend.objects.all())
    response = client.post(
        "/api/relay/turn/?backend=acme", body, content_type="application/json",
        HTTP_AUTHORIZATION=f"Token {key}",
    )  # fmt: skip
    assert response.status_code == 400 and named in response.json()
    assert not RelayBudget.objects.exists()  # nothing counted, nothing held back


@pytest.mark.django_db(transaction=True)
def test_in_chromium_the_run_page_shows_a_callback_waiting_for_its_turn(budget, page):
    nightly = self_reported_run(reporting_backend(RELAY), "nightly", "c" * 40, ref="nightly")
    for _ in range(3):  # other senders of the repository spent its budget
        pacing.turn(REPO)
    claim = claims.claim(Backend.objects.get(), claims.Reporter(**REPORTER), limit=10)
    assert claim.callbacks == [] and claim.next_turn_in
    make_user("vera")
    sign_in(page, "vera")

    page.goto(f"/runs/{nightly.uuid}/")

    expect(page.locator(".callback-turn")).to_contain_text(
        "waiting for its turn in the callback budget"
    )
    expect(page.locator("td.callback-pending")).to_contain_text("pending")
