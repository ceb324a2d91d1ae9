"""The relay simulator enforces the relay's rules over real loopback HTTP."""

import base64
import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from django.core.management import call_command
from hypothesis import given, settings
from hypothesis import strategies as st

from runs.relay import delivery, protocol
from runs.relay.simulator import JobKey, RelaySimulator

REPO = "acme/backend"
SHA = "b" * 40
PAYLOAD = {"action": "closed", "pull_request": {"number": 7, "head": {"sha": SHA}}}


class Bearer:
    def __init__(self, value: str) -> None:
        self.value = value

    def token(self) -> str:
        return self.value


@pytest.fixture
def relay() -> Iterator[RelaySimulator]:
    allowlist = {REPO: "L2", "acme/notify-only": "L1"}
    tokens = {"l1-token": "acme/notify-only", "other-token": "acme/other"}
    with RelaySimulator(token="s3cret", allowlist=allowlist, tokens=tokens) as simulator:
        yield simulator


def callback(client_payload: dict[str, Any], status: str = "in_progress", **overrides: Any):
    fields: dict[str, Any] = {
        "status": status,
        "name": "crcr",
        "url": "https://github.com/acme/backend/actions/runs/1",
        "run_id": "1",
        "run_attempt": "1",
        "job_name": "report",
        "check_run_id": "11",
        "started_at": datetime(2026, 5, 4, tzinfo=UTC),
    }
    if status == "completed":
        fields["test_results"] = {"passed": 3, "failed": 0, "skipped": 1, "total": 4}
    return protocol.build_callback(client_payload, **{**fields, **overrides})


def post(relay: RelaySimulator, body: Any, token: str = "s3cret") -> delivery.Answer:
    return delivery.send(relay.url, body, Bearer(token))


def test_in_progress_then_completed_is_accepted_in_order(relay):
    dispatched = relay.dispatch("d-1", REPO, PAYLOAD)

    first = post(relay, callback(dispatched))
    second = post(relay, callback(dispatched, "completed"))

    key = JobKey("d-1", REPO, "1", "1", "report")
    assert (first.status, first.json()) == (200, {"ok": True, "status": "in_progress"})
    assert (second.status, second.json()) == (200, {"ok": True, "status": "completed"})
    assert [(entry.key, entry.status) for entry in relay.accepted] == [
        (key, "in_progress"),
        (key, "completed"),
    ]
    assert relay.accepted[1].body["workflow"]["test_results"]["total"] == 4
    assert relay.refused == []


def test_a_repeated_transition_is_refused_as_a_duplicate(relay):
    dispatched = relay.dispatch("d-1", REPO, PAYLOAD)
    post(relay, callback(dispatched))

    again = post(relay, callback(dispatched))

    assert again.status == 400
    assert again.json()["reason"] == "duplicate"
    assert again.refuses_transition
    assert len(relay.accepted) == 1


def test_completed_before_in_progress_is_refused_as_out_of_order(relay):
    dispatched = relay.dispatch("d-1", REPO, PAYLOAD)

    answer = post(relay, callback(dispatched, "completed"))

    assert (answer.status, answer.json()["reason"]) == (400, "out_of_order")
    assert answer.detail == (
        "callback rejected: invalid state transition "
        "delivery_id=d-1 repo=acme/backend status=completed"
    )
    assert answer.refuses_transition
    assert relay.accepted == []


def test_in_progress_after_completed_is_refused_as_out_of_order(relay):
    dispatched = relay.dispatch("d-1", REPO, PAYLOAD)
    post(relay, callback(dispatched))
    post(relay, callback(dispatched, "completed"))

    answer = post(relay, callback(dispatched))

    assert (answer.status, answer.json()["reason"]) == (400, "out_of_order")


def test_a_trailing_slash_on_the_relay_url_is_dropped_as_the_action_does(relay):
    dispatched = relay.dispatch("d-1", REPO, PAYLOAD)

    answer = delivery.send(relay.url + "/", callback(dispatched), Bearer("s3cret"))

    assert answer.status == 200


def test_a_callback_for_an_unknown_delivery_is_refused(relay):
    never_dispatched = {"event_type": "pull_request", "delivery_id": "d-404", "payload": PAYLOAD}

    answer = post(relay, callback(never_dispatched))

    assert answer.status == 400
    assert answer.detail == "callback rejected: no matching dispatch record"
    assert relay.refused[0].reason == "unknown_delivery"


def test_a_delivery_dispatched_to_another_repository_is_unknown_to_this_one(relay):
    dispatched = relay.dispatch("d-1", "acme/notify-only", PAYLOAD)
    relay.allowlist["acme/other"] = "L2"

    answer = post(relay, callback(dispatched), token="other-token")

    assert (answer.status, answer.json()["reason"]) == (400, "unknown_delivery")


def test_a_bad_token_is_unauthorised(relay):
    dispatched = relay.dispatch("d-1", REPO, PAYLOAD)

    answer = post(relay, callback(dispatched), token="wrong")
    anonymous = delivery.send(relay.url, callback(dispatched), delivery.NoTokenProvider())

    assert (answer.status, anonymous.status) == (401, 401)
    assert relay.accepted == []


def test_a_repository_below_l2_is_ignored_with_200(relay):
    dispatched = relay.dispatch("d-1", "acme/notify-only", PAYLOAD)

    answer = post(relay, callback(dispatched), token="l1-token")

    assert (answer.status, answer.json()) == (200, {"ok": True, "status": "ignored"})
    assert answer.ignored
    assert relay.accepted == []
    assert [repo for repo, _ in relay.ignored] == ["acme/notify-only"]


def test_too_many_requests_are_rate_limited_with_no_retry_after_as_the_relay_does():
    with RelaySimulator(token="s3cret", allowlist={REPO: "L2"}, rate_limit=2) as relay:
        dispatched = relay.dispatch("d-1", REPO, PAYLOAD)
        answers = [post(relay, callback(dispatched, job_name=f"job-{i}")) for i in range(3)]

    assert [answer.status for answer in answers] == [200, 200, 429]
    assert answers[2].retryable
    assert answers[2].retry_after is None
    assert answers[2].detail == f"rate limit exceeded for {REPO}"
    assert len(relay.accepted) == 2


def test_a_test_may_ask_the_rate_limit_for_a_retry_after():
    with RelaySimulator(
        token="s3cret", allowlist={REPO: "L2"}, rate_limit=1, rate_limit_retry_after="7"
    ) as relay:
        dispatched = relay.dispatch("d-1", REPO, PAYLOAD)
        answers = [post(relay, callback(dispatched, job_name=f"job-{i}")) for i in range(2)]

    assert [(answer.status, answer.retry_after) for answer in answers] == [(200, None), (429, 7.0)]


def test_refused_requests_count_against_the_rate_limit_too():
    with RelaySimulator(token="s3cret", allowlist={REPO: "L2"}, rate_limit=2) as relay:
        never_dispatched = {"event_type": "push", "delivery_id": "d-404", "payload": PAYLOAD}
        answers = [post(relay, callback(never_dispatched)) for _ in range(3)]

    assert [answer.status for answer in answers] == [400, 400, 429]


def test_the_rate_limit_window_slides_on_the_simulator_s_clock():
    now = [1_000.0]
    with RelaySimulator(
        token="s3cret", allowlist={REPO: "L2"}, rate_limit=1, clock=lambda: now[0]
    ) as relay:
        dispatched = relay.dispatch("d-1", REPO, PAYLOAD)
        first = post(relay, callback(dispatched))
        relay.advance(59.9)
        limited = post(relay, callback(dispatched, "completed"))
        relay.advance(0.2)
        still_limited = post(relay, callback(dispatched, "completed"))  # the 429 counted too
        relay.advance(60)
        later = post(relay, callback(dispatched, "completed"))

    statuses = [first.status, limited.status, still_limited.status, later.status]
    assert statuses == [200, 429, 429, 200]


def test_a_failing_relay_answers_503_then_recovers(relay):
    dispatched = relay.dispatch("d-1", REPO, PAYLOAD)
    relay.fail_for(0.3)

    down = post(relay, callback(dispatched))
    time.sleep(0.35)
    up = post(relay, callback(dispatched))

    assert (down.status, down.retryable) == (503, True)
    assert up.status == 200
    assert [entry.status for entry in relay.accepted] == ["in_progress"]


def test_fail_next_answers_the_next_callbacks_with_the_given_status(relay):
    dispatched = relay.dispatch("d-1", REPO, PAYLOAD)
    relay.fail_next(2, status=429)
    relay.fail_next(1, status=429, retry_after="1")

    answers = [post(relay, callback(dispatched)) for _ in range(4)]

    assert [answer.status for answer in answers] == [429, 429, 429, 200]
    assert [answer.retry_after for answer in answers[:3]] == [None, None, 1.0]


def test_strict_mode_refuses_what_crcr_s_own_schema_refuses_naming_the_field():
    with RelaySimulator(token="s3cret", allowlist={REPO: "L2"}, strict=True) as relay:
        dispatched = relay.dispatch("d-1", REPO, PAYLOAD)
        body = callback(dispatched)
        body["workflow"]["run_attempt"] = 1  # a number, not the string the schema wants

        answer = post(relay, body)

    assert answer.status == 400
    assert answer.json()["problems"] == ["workflow.run_attempt: must be a string of digits"]
    assert "workflow.run_attempt" in answer.detail
    assert relay.accepted == []


def test_by_default_it_takes_what_the_relay_takes_not_what_crcr_would_send(relay):
    dispatched = relay.dispatch("d-1", REPO, PAYLOAD)
    body = callback(dispatched)
    body["workflow"].update(run_attempt=1, run_id=1, schema_version=None, url=None)

    answer = post(relay, body)

    assert answer.status == 200
    assert relay.states() == {JobKey("d-1", REPO, "1", "1", "report"): "IN_PROGRESS"}


@pytest.mark.parametrize(
    "change, status, detail",
    [
        ({"run_id": "run-1"}, 500, "Internal server error"),
        ({"run_attempt": "first"}, 500, "Internal server error"),
        ({"run_id": None}, 400, "callback body missing required field: int() argument"),
        ({"name": ...}, 400, "callback body missing required field: 'name'"),
        ({"status": ...}, 400, "callback body missing required field: 'status'"),
        ({"status": "queued"}, 400, "unknown callback status: 'queued'"),
        ({"run_id": "0"}, 400, "callback rejected: invalid state transition"),
    ],
)
def test_it_parses_a_body_as_the_relay_does(relay, change, status, detail):
    dispatched = relay.dispatch("d-1", REPO, PAYLOAD)
    body = callback(dispatched)
    for key, value in change.items():
        if value is ...:
            del body["workflow"][key]
        else:
            body["workflow"][key] = value

    answer = post(relay, body)

    assert answer.status == status
    assert answer.detail.startswith(detail)
    assert relay.accepted == []


def test_a_bare_token_without_bearer_is_accepted_as_the_relay_accepts_it(relay):
    dispatched = relay.dispatch("d-1", REPO, PAYLOAD)
    request = urllib.request.Request(
        relay.url, data=json.dumps(callback(dispatched)).encode(), method="POST"
    )
    request.add_header("Authorization", "s3cret")

    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.status == 200


def test_malformed_json_is_refused(relay):
    request = urllib.request.Request(relay.url, data=b"{not json", method="POST")
    request.add_header("Authorization", "Bearer s3cret")

    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=5)

    assert refused.value.code == 400
    assert json.loads(refused.value.read())["detail"] == "Invalid JSON body"


def test_a_nightly_self_report_needs_no_dispatch_but_only_completed(relay):
    nightly = protocol.nightly_payload(SHA)

    started = post(relay, callback(nightly))
    finished = post(relay, callback(nightly, "completed"))

    assert started.status == 400
    assert started.detail == (
        "nightly/periodic callbacks must have status 'completed', got 'in_progress'"
    )
    assert finished.status == 200
    assert [(entry.key.delivery_id, entry.status) for entry in relay.accepted] == [
        (SHA, "completed")
    ]


def test_the_hud_keeps_one_row_per_job_and_check_run_that_a_resend_updates(relay):
    nightly = protocol.nightly_payload(SHA)
    dispatched = relay.dispatch("d-1", REPO, PAYLOAD)

    post(relay, callback(nightly, "completed"))
    post(relay, callback(nightly, "completed", conclusion="failure"))  # the relay takes it again
    post(relay, callback(dispatched))
    post(relay, callback(dispatched, "completed", started_at=None))
    post(relay, callback(dispatched, run_attempt="2", check_run_id="12"))  # a re-run's job

    rows = relay.hud_table.rows()
    assert sorted(rows) == [
        f"{REPO}/{SHA}/crcr/report/11", f"{REPO}/d-1/crcr/report/11", f"{REPO}/d-1/crcr/report/12",
    ]  # fmt: skip
    assert rows[f"{REPO}/{SHA}/crcr/report/11"]["conclusion"] == "failure"  # the last write
    first = rows[f"{REPO}/d-1/crcr/report/11"]
    assert first["status"] == "completed" and first["started_at"] == "2026-05-04T00:00:00Z"
    assert rows[f"{REPO}/d-1/crcr/report/12"]["status"] == "in_progress"


def test_jobs_and_attempts_of_one_delivery_have_their_own_state(relay):
    dispatched = relay.dispatch("d-1", REPO, PAYLOAD)

    answers = [
        post(relay, callback(dispatched, job_name="shard-1")),
        post(relay, callback(dispatched, job_name="shard-2")),
        post(relay, callback(dispatched, job_name="shard-1", run_attempt="2")),
    ]

    assert [answer.status for answer in answers] == [200, 200, 200]
    assert len(set(relay.states())) == 3


def test_a_lost_answer_makes_the_retry_a_duplicate_that_counts_as_delivered(relay):
    dispatched = relay.dispatch("d-1", REPO, PAYLOAD)
    relay.lose_answers(1)

    lost = post(relay, callback(dispatched))
    retry = post(relay, callback(dispatched))

    assert lost.status == 502
    assert retry.status == 400
    assert delivery.settle(retry, after_ambiguous=lost.ambiguous) == "delivered"
    assert [entry.status for entry in relay.accepted] == ["in_progress"]


def test_an_unsigned_oidc_token_proves_its_repository_claim_in_dry_runs():
    claims = {"aud": protocol.AUDIENCE, "repository": REPO, "exp": time.time() + 300}
    encoded = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
    jwt = f"eyJhbGciOiJub25lIn0.{encoded}.sig"
    with RelaySimulator(allowlist={REPO: "L2"}, accept_unsigned_oidc=True) as relay:
        dispatched = relay.dispatch("d-1", REPO, PAYLOAD)
        answer = post(relay, callback(dispatched), token=jwt)
        wrong_audience = jwt.replace(encoded, encoded[:-2] + "xx")
        refused = post(relay, callback(dispatched, job_name="other"), token=wrong_audience)

    assert answer.status == 200
    assert refused.status == 401


def test_the_admin_endpoint_registers_a_dispatch_and_shows_the_log(relay):
    spec = {"delivery_id": "d-9", "repo": REPO, "payload": PAYLOAD}
    request = urllib.request.Request(
        relay.base_url + "/_simulator/dispatches", data=json.dumps(spec).encode(), method="POST"
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        client_payload = json.loads(response.read())
    post(relay, callback(client_payload))

    with urllib.request.urlopen(relay.base_url + "/_simulator/log", timeout=5) as response:
        log = json.loads(response.read())

    assert client_payload["event_type"] == "pull_request"
    assert log["accepted"][0]["status"] == "in_progress"
    assert log["accepted"][0]["key"]["delivery_id"] == "d-9"


# --- the HUD behind the relay: after the state write --------------------------------------


def forward_size(body: dict[str, Any], execution_time: float | None) -> int:
    """The bytes the relay POSTs to the HUD for a `completed` body (utils/hud.py:37-42)."""
    envelope = {
        "trusted": {
            "ci_metrics": {"queue_time": None, "execution_time": execution_time},
            "verified_repo": REPO,
            "downstream_repo_level": "L2",
        },
        "untrusted": {"callback_payload": body},
    }
    return len(json.dumps(envelope).encode())


def padded_to(client_payload: dict[str, Any], job: str, size: int) -> dict[str, Any]:
    """A `completed` body whose forward to the HUD is exactly `size` bytes."""
    body = callback(client_payload, "completed", job_name=job)
    body["workflow"]["padding"] = ""  # the relay ignores keys it does not know
    body["workflow"]["padding"] = "x" * (size - forward_size(body, 0.0))
    return body


def test_a_forward_over_the_huds_limit_is_recorded_then_answered_413():
    with RelaySimulator(token="s3cret", allowlist={REPO: "L2"}, clock=lambda: 5_000.0) as relay:
        dispatched = relay.dispatch("d-1", REPO, PAYLOAD)
        for job in ("exact", "over"):
            assert post(relay, callback(dispatched, job_name=job)).status == 200
        exact = post(relay, padded_to(dispatched, "exact", 2 * 1024 * 1024))
        over = post(relay, padded_to(dispatched, "over", 2 * 1024 * 1024 + 1))
        resent = post(relay, callback(dispatched, "completed", job_name="over"))  # trimmed

    assert exact.status == 200
    assert (over.status, over.detail) == (413, "HUD rejected callback: HTTP 413: Payload Too Large")
    assert relay.states()[JobKey("d-1", REPO, "1", "1", "over")] == "COMPLETED"
    assert resent.refuses_transition  # no resend can land: the job is lost to the HUD
    assert delivery.settle(resent, after_ambiguous=False) == "refused"


def test_the_hud_refuses_a_job_without_job_name_or_check_run_id_after_the_state_moved(relay):
    dispatched = relay.dispatch("d-1", REPO, PAYLOAD)
    body = callback(dispatched)
    del body["workflow"]["check_run_id"]

    answer = post(relay, body)

    assert (answer.status, answer.detail) == (400, "HUD rejected callback: HTTP 400: Bad Request")
    assert list(relay.states().values()) == ["IN_PROGRESS"]
    assert post(relay, callback(dispatched)).refuses_transition


def test_without_a_hud_the_relay_forwards_nothing_and_checks_nothing_more():
    with RelaySimulator(token="s3cret", allowlist={REPO: "L2"}, hud=False) as relay:
        dispatched = relay.dispatch("d-1", REPO, PAYLOAD)
        body = callback(dispatched)
        del body["workflow"]["check_run_id"]

        assert post(relay, body).status == 200


@pytest.mark.parametrize(
    "faults, status",
    [([500], 200), ([None, 503, 502], 200), ([500] * 4, 500), ([None] * 4, 500), ([422], 422)],
)
def test_the_relay_retries_a_failing_hud_three_times_and_answers_a_4xx_itself(
    relay, faults, status
):
    dispatched = relay.dispatch("d-1", REPO, PAYLOAD)
    for fault in faults:
        relay.fail_hud(1, fault)

    answer = post(relay, callback(dispatched))

    assert answer.status == status
    assert [entry.status for entry in relay.accepted] == ["in_progress"]  # recorded either way
    assert len(relay.lost_answers) == (1 if status == 500 else 0)


def test_the_management_command_serves_the_simulator(tmp_path, capsys):
    (tmp_path / "token").write_text("s3cret\n")
    options = {"port": 0, "allow": [f"{REPO}=L2"], "token_file": str(tmp_path / "token")}
    thread = threading.Thread(
        target=call_command, args=["relay_simulator"], kwargs={**options, "serve_for": 0.3}
    )

    thread.start()
    thread.join(timeout=10)

    output = capsys.readouterr().out
    assert "POST callbacks to http://127.0.0.1:" in output
    assert "stopped: 0 accepted, 0 refused" in output


def test_the_management_command_can_be_strict(tmp_path, capsys):
    (tmp_path / "token").write_text("s3cret\n")
    options = {"port": 0, "allow": [f"{REPO}=L2"], "token_file": str(tmp_path / "token")}
    thread = threading.Thread(
        target=call_command,
        args=["relay_simulator"],
        kwargs={**options, "strict": True, "serve_for": 0.3},
    )

    thread.start()
    thread.join(timeout=10)

    assert "relay simulator (strict: crcr's own validation too)" in capsys.readouterr().out


# --- bar 4: a correct sender never trips the state machine --------------------------------


class Sender:
    """One HUD job's outbox: in_progress until delivered, then completed; retries only on
    retryable answers; never resends after a success or a final refusal."""

    def __init__(self, relay: RelaySimulator, client_payload: dict[str, Any], job: str) -> None:
        self.relay, self.job = relay, job
        self.bodies = [callback(client_payload, job_name=job)]
        self.completed_body = callback(client_payload, "completed", job_name=job)
        self.after_ambiguous = False
        self.refused: list[delivery.Answer] = []

    def worker_finished(self) -> None:
        if self.completed_body is not None:
            self.bodies.append(self.completed_body)
            self.completed_body = None

    @property
    def idle(self) -> bool:
        return not self.bodies or bool(self.refused)

    def step(self) -> None:
        if self.idle:
            return
        answer = post(self.relay, self.bodies[0])
        outcome = delivery.settle(answer, after_ambiguous=self.after_ambiguous)
        if outcome == "retry":
            self.after_ambiguous = self.after_ambiguous or answer.ambiguous
            return
        self.after_ambiguous = False
        if outcome == "refused":
            self.refused.append(answer)
            return
        self.bodies.pop(0)


JOBS = 3
EVENTS = st.one_of(
    st.tuples(st.just("send"), st.integers(0, JOBS - 1)),
    st.tuples(st.just("finish"), st.integers(0, JOBS - 1)),
    st.tuples(st.just("fail"), st.integers(1, 3), st.sampled_from([429, 500, 502, 503])),
    st.tuples(st.just("lose"), st.integers(1, 2), st.sampled_from([500, 502, 504])),
)


@settings(max_examples=50, deadline=None, database=None)
@given(events=st.lists(EVENTS, max_size=30))
def test_a_correct_sender_never_violates_the_state_machine_whatever_the_interleaving(events):
    with RelaySimulator(token="s3cret", allowlist={REPO: "L2"}) as relay:
        dispatched = relay.dispatch("d-1", REPO, PAYLOAD)
        senders = [Sender(relay, dispatched, f"shard-{i}") for i in range(JOBS)]
        for event in events:
            if event[0] == "send":
                senders[event[1]].step()
            elif event[0] == "finish":
                senders[event[1]].worker_finished()
            elif event[0] == "fail":
                relay.fail_next(event[1], status=event[2])
            else:
                relay.lose_answers(event[1], status=event[2])
        for sender in senders:  # every worker ends; every outbox drains
            sender.worker_finished()
            for _ in range(50):
                sender.step()
        accepted, refused, lost = relay.accepted, relay.refused, relay.lost_answers

    assert all(not sender.refused and not sender.bodies for sender in senders)
    for sender in senders:
        sent = [entry.status for entry in accepted if entry.key.job_name == sender.job]
        assert sent == ["in_progress", "completed"]
    landed = {(entry.key, entry.status) for entry in lost}
    for refusal in refused:
        # The only refusals are injected faults, or the retry of a transition that had
        # landed while its answer was lost: never a sender's own duplicate or misorder.
        assert refusal.reason in ("injected_failure", "duplicate")
        if refusal.reason == "duplicate":
            assert (refusal.key, refusal.body["workflow"]["status"]) in landed
