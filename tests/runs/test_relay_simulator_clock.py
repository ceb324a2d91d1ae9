"""The relay's memory runs on a clock the tests control: a 3-day state TTL and a sweeper that
times out a job left in_progress for 6 hours (pytorch/test-infra at 61a77570f4:
utils/config.py CRCR_STATUS_TTL and ZOMBIE_TIMEOUT_SECONDS, callback/cleanup_handler.py)."""

import json
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from runs.relay import delivery, protocol
from runs.relay.simulator import JobKey, RelaySimulator

REPO = "acme/backend"
PAYLOAD = {"action": "closed", "pull_request": {"number": 7, "head": {"sha": "b" * 40}}}
DAYS_3, HOURS_6 = 3 * 24 * 3600, 6 * 3600


class Bearer:
    def token(self) -> str:
        return "s3cret"


class Clock:
    def __init__(self) -> None:
        self.now = 1_750_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def relay() -> Iterator[RelaySimulator]:
    with RelaySimulator(token="s3cret", allowlist={REPO: "L2"}, clock=Clock()) as simulator:
        yield simulator


def callback(client_payload: dict[str, Any], status: str = "in_progress", job: str = "report"):
    fields: dict[str, Any] = {
        "status": status,
        "name": "crcr",
        "url": "https://github.com/acme/backend/actions/runs/1",
        "run_id": "1",
        "run_attempt": "1",
        "job_name": job,
        "check_run_id": "11",
        "started_at": datetime(2026, 5, 4, tzinfo=UTC),
    }
    if status == "completed":
        fields["test_results"] = {"passed": 3, "failed": 0, "skipped": 1, "total": 4}
    return protocol.build_callback(client_payload, **fields)


def post(relay: RelaySimulator, body: Any) -> delivery.Answer:
    return delivery.send(relay.url, body, Bearer())


def test_a_dispatch_is_forgotten_after_three_days(relay):
    dispatched = relay.dispatch("d-1", REPO, PAYLOAD)
    relay.advance(DAYS_3 - 1)
    assert post(relay, callback(dispatched, job="early")).status == 200

    relay.advance(1)
    late = post(relay, callback(dispatched, job="late"))
    finished = post(relay, callback(dispatched, "completed", job="early"))

    assert (late.status, late.detail) == (400, "callback rejected: no matching dispatch record")
    assert (finished.status, finished.json()["reason"]) == (400, "unknown_delivery")
    assert relay.dispatch("d-1", REPO, PAYLOAD)  # the webhook side may record it afresh


def test_a_job_in_progress_for_six_hours_is_swept_and_its_completed_refused(relay):
    dispatched = relay.dispatch("d-1", REPO, PAYLOAD)
    for job in ("quick", "slow"):
        assert post(relay, callback(dispatched, job=job)).status == 200
    relay.advance(HOURS_6 - 1)
    quick = post(relay, callback(dispatched, "completed", job="quick"))

    relay.advance(1)
    slow = post(relay, callback(dispatched, "completed", job="slow"))

    assert quick.status == 200
    assert slow.refuses_transition and slow.json()["reason"] == "duplicate"
    [swept] = relay.swept
    assert swept.key == JobKey("d-1", REPO, "1", "1", "slow")
    assert swept.body["workflow"]["status"] == "completed"
    assert swept.body["workflow"]["conclusion"] == "timed_out"
    assert relay.states()[swept.key] == "COMPLETED"


def test_a_late_completed_lands_while_the_sweeper_has_not_run():
    clock = Clock()
    with RelaySimulator(
        token="s3cret", allowlist={REPO: "L2"}, clock=clock, auto_sweep=False
    ) as relay:
        dispatched = relay.dispatch("d-1", REPO, PAYLOAD)
        post(relay, callback(dispatched, job="a"))
        post(relay, callback(dispatched, job="b"))
        clock.now += HOURS_6 + 60
        landed = post(relay, callback(dispatched, "completed", job="a"))
        swept = relay.sweep()

    assert landed.status == 200
    assert swept == [JobKey("d-1", REPO, "1", "1", "b")]


@pytest.mark.parametrize("job", ["shard:1", "build:x"])
def test_a_job_named_with_a_colon_is_never_swept_as_in_the_relay(relay, job):
    # The sweeper splits its tracker's member on ":" (utils/redis_helper.py:483-506).
    dispatched = relay.dispatch("d-1", REPO, PAYLOAD)
    post(relay, callback(dispatched, job=job))

    relay.advance(HOURS_6 * 2)
    finished = post(relay, callback(dispatched, "completed", job=job))

    assert relay.swept == []
    assert finished.status == 200


def test_a_job_named_like_a_number_is_misparsed_into_the_same_key_and_swept(relay):
    dispatched = relay.dispatch("d-1", REPO, PAYLOAD)
    post(relay, callback(dispatched, job="3"))

    relay.advance(HOURS_6)

    assert [entry.key.job_name for entry in relay.swept] == ["3"]


def test_a_relay_failing_for_a_while_recovers_on_its_clock(relay):
    dispatched = relay.dispatch("d-1", REPO, PAYLOAD)
    relay.fail_for(600, status=503)

    down = post(relay, callback(dispatched))
    relay.advance(600)
    up = post(relay, callback(dispatched))

    assert (down.status, down.retry_after, up.status) == (503, None, 200)


def test_the_admin_endpoint_moves_the_clock(relay):
    dispatched = relay.dispatch("d-1", REPO, PAYLOAD)
    post(relay, callback(dispatched))
    before = relay.now()
    request = urllib.request.Request(
        relay.base_url + "/_simulator/advance",
        data=json.dumps({"seconds": HOURS_6}).encode(),
        method="POST",
    )

    with urllib.request.urlopen(request, timeout=5) as response:
        answer = json.loads(response.read())
    with urllib.request.urlopen(relay.base_url + "/_simulator/log", timeout=5) as response:
        log = json.loads(response.read())

    assert answer["now"] == before + HOURS_6
    assert [entry["job_name"] for entry in log["swept"]] == ["report"]
