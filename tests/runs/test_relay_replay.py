"""The simulator answers the relay's own test cases as the relay does.

Each row is one case of pytorch/test-infra's tests at 61a77570f4
(`aws/lambda/cross_repo_ci_relay/tests/`), re-written here from reading them: the body the
test hands the relay, the state its mocks stand for (a dispatch record, an earlier
in_progress), and the status it asserts (a returned result is the Lambda's 200). The relay's
callback tests mock `forward_to_hud`, so those rows run with `hud=False`, a relay without
HUD_API_URL; the HUD's own rows and the composite action's bodies run against the HUD model.
Left out, because they test a mock rather than a body: test_callback_handler.py's
test_redis_error_fetching_workflow_record_proceeds (a Redis read failure) and
test_callback_handler_lambda.py's test_happy_path_forwards_body_and_verified_repo and
test_hud_error_from_handler_is_forwarded (`handle` itself mocked).
"""

import json
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

import pytest

from runs.relay.protocol import CALLBACK_PATH
from runs.relay.relay_rules import ZOMBIE_TIMEOUT
from runs.relay.simulator import RelaySimulator

REPO, TOKEN = "org/repo", "tok"
DELIVERY = "del-123"
SHA = "8d1c4a0f3b2e5d6c7a8b9c0d1e2f3a4b5c6d7e8f"
HANDLER = "test_callback_handler.py"
CHECK_RUNS = f"{HANDLER}::TestCallbackCheckRunUpdate"
NIGHTLY = f"{HANDLER}::TestNightlyCallback"
LAMBDA = "test_callback_handler_lambda.py::TestCallbackLambdaHandler"
STATES = "test_redis_helper.py::TestCallbackStateMachine"
KEYS = "test_redis_helper.py::TestInProgressTracker"
RATE = "test_redis_helper.py::TestRateLimit"
HUD = "test_hud.py::TestForwardToHud"
JWT = "test_jwt_helper.py::TestVerifyGitHubOIDC"


def pr_payload(labels: tuple[str, ...] = ()) -> dict[str, Any]:
    """The upstream webhook the relay's tests echo: PR 42 at head abc123."""
    return {
        "pull_request": {
            "number": 42,
            "head": {"sha": "abc123"},
            "labels": [{"name": label} for label in labels],
        },
        "repository": {"full_name": "pytorch/pytorch"},
    }


def handler_body(
    status: str = "completed",
    *,
    run_id: Any = 99999,
    run_attempt: Any = 1,
    job_name: str | None = None,
    labels: tuple[str, ...] = (),
) -> dict[str, Any]:
    """test_callback_handler.py's body: integers for run_id and run_attempt, no job_name
    unless given, no check_run_id, no schema_version, no timestamps."""
    workflow: dict[str, Any] = {
        "status": status,
        "conclusion": "success" if status == "completed" else None,
        "name": "CI",
        "url": "http://ci.example.com/run/1",
        "workflow_name": "default",
        "run_id": run_id,
        "run_attempt": run_attempt,
    }
    if job_name is not None:
        workflow["job_name"] = job_name
    return {
        "event_type": "pull_request",
        "delivery_id": DELIVERY,
        "payload": pr_payload(labels),
        "workflow": workflow,
    }


def nightly_body(event_type: str = "nightly", status: str = "completed") -> dict[str, Any]:
    """TestNightlyCallback's body: a bare self-report, no dispatch, strings for the ids."""
    return {
        "event_type": event_type,
        "delivery_id": "abc123def456",
        "payload": {},
        "workflow": {
            "status": status,
            "conclusion": "success",
            "name": "CRCR Nightly CI",
            "url": "https://github.com/org/repo/actions/runs/12345",
            "run_id": "12345",
            "run_attempt": "1",
            "job_name": "nightly-build",
            "check_run_id": "67890",
        },
    }


def action_body(status: str, **workflow: Any) -> dict[str, Any]:
    """What the official composite action sends (.github/actions/cross-repo-ci-relay-callback/
    report_callback.py:39-120): the client_payload echoed, ids as strings, `started_at` only
    while in progress, `check_run_id` from job.check_run_id."""
    fields = {
        "schema_version": "1",
        "status": status,
        "conclusion": None if status == "in_progress" else "success",
        "name": "Downstream CI",
        "url": "https://github.com/org/repo/actions/runs/777",
        "run_attempt": "1",
        "job_name": "test",
        "check_run_id": "5550001",
        "run_id": "777",
        "started_at": "2026-08-21T10:00:00.123456Z" if status == "in_progress" else None,
        "completed_at": None if status == "in_progress" else "2026-08-21T11:00:00.654321Z",
    }
    return {"event_type": "pull_request", "delivery_id": DELIVERY, "payload": pr_payload(),
            "workflow": {**fields, **workflow}}  # fmt: skip


def action_nightly_body() -> dict[str, Any]:
    """The action in nightly mode (delivery-id = the SHA, event-type nightly): the payload
    built from scratch, both timestamps set, check_run_id falling back to run_id-run_attempt."""
    body = action_body("completed", conclusion="failure", check_run_id="778-1", run_id="778")
    body["workflow"]["started_at"] = "2026-08-21T03:00:00Z"
    body["workflow"]["test_results"] = {"passed": 900, "failed": 3, "skipped": 40}
    return {**body, "event_type": "nightly", "delivery_id": SHA,
            "payload": {"repository": {"full_name": "pytorch/pytorch"}, "head_sha": SHA}}  # fmt: skip


def cleanup_body(status: str = "in_progress") -> dict[str, Any]:
    """test_cleanup_handler.py's `_callback_body` ("matching the downstream composite
    action"): strings for the ids, a job_name and a check_run_id."""
    return action_body(status, name="CI", run_id="99999", job_name="my-job", check_run_id="cr-456")


def started(body: dict[str, Any]) -> dict[str, Any]:
    """The same job's in_progress, which a `completed` row's test takes as already recorded."""
    workflow = {**body["workflow"], "status": "in_progress", "conclusion": None}
    return {**body, "workflow": workflow}


@dataclass(frozen=True)
class Case:
    source: str  # test file::class::test, under aws/lambda/cross_repo_ci_relay/tests/
    body: Any = None
    expect: int = 200
    before: tuple[Any, ...] = ()  # sent first, each answered 200: the state the mocks imply
    dispatched: bool = True
    level: str | None = "L2"
    hud: bool = False
    hud_faults: tuple[int | None, ...] = ()
    rate_limit: int = 100
    request: dict[str, Any] = field(default_factory=dict)  # raw, authorization, method, path


def completed_row(source: str, body: dict[str, Any], **rest: Any) -> Case:
    return Case(source, body, before=(started(body),), **rest)


CASES = [
    # test_callback_handler.py::TestCallbackHandler
    Case(f"{HANDLER}::TestCallbackHandler::test_verified_repo_not_in_l2_returns_ignored",
         handler_body(), dispatched=False, level=None),
    completed_row(f"{HANDLER}::TestCallbackHandler::test_body_is_passed_to_hud_unchanged",
                  handler_body()),
    Case(f"{HANDLER}::TestCallbackHandler::test_queue_time_calculated_from_state_records",
         handler_body("in_progress")),
    completed_row(f"{HANDLER}::TestCallbackHandler::test_execution_time_calculated_from_state_records",
                  handler_body()),
    completed_row(f"{HANDLER}::TestCallbackHandler::test_hud_4xx_propagates", handler_body(),
                  expect=422, hud=True, hud_faults=(422,)),
    Case(f"{HANDLER}::TestCallbackHandler::test_missing_delivery_id_returns_400",
         {k: v for k, v in handler_body().items() if k != "delivery_id"}, expect=400),
    Case(f"{HANDLER}::TestCallbackHandler::test_missing_workflow_status_returns_400",
         {**handler_body(), "workflow": {k: v for k, v in handler_body()["workflow"].items()
                                         if k != "status"}}, expect=400),
    Case(f"{HANDLER}::TestCallbackHandler::test_rate_limit_exceeded_returns_429",
         handler_body(), expect=429, before=(started(handler_body()),), rate_limit=1),
    Case(f"{HANDLER}::TestCallbackHandler::test_redis_error_fetching_dispatch_record_rejected",
         handler_body(), expect=400, dispatched=False),
    Case(f"{HANDLER}::TestCallbackHandler::test_job_name_passed_to_redis_state_calls",
         handler_body("in_progress", job_name="build")),
    # test_callback_handler.py::TestCallbackCheckRunUpdate (L4 unless the test says otherwise)
    completed_row(f"{CHECK_RUNS}::test_completed_callback_creates_check_run", handler_body(),
                  level="L4"),
    completed_row(f"{CHECK_RUNS}::test_check_run_name_is_scoped_by_job_name",
                  handler_body(job_name="ec05-multi-job-a"), level="L4"),
    completed_row(f"{CHECK_RUNS}::test_check_run_external_id_is_run_id",
                  handler_body(job_name="build"), level="L4"),
    Case(f"{CHECK_RUNS}::test_in_progress_callback_creates_check_run",
         handler_body("in_progress"), level="L4"),
    # a prior job of the PR completed; the reopened PR's new workflow run starts
    Case(f"{CHECK_RUNS}::test_reopen_in_progress_creates_new_check_run",
         handler_body("in_progress", run_id=100000), level="L4",
         before=(handler_body("in_progress"), handler_body())),
    Case(f"{CHECK_RUNS}::test_l3_with_matching_label_creates_check_run",
         handler_body("in_progress", labels=("ciflow/crcr/device1",)), level="L3"),
    Case(f"{CHECK_RUNS}::test_l3_passes_body_labels_to_needs_check_run",
         handler_body("in_progress", labels=("ciflow/crcr/device1", "other")), level="L3"),
    Case(f"{CHECK_RUNS}::test_l3_without_label_does_not_create_check_run",
         handler_body("in_progress"), level="L3"),
    Case(f"{CHECK_RUNS}::test_l3_check_run_wanted_flag_creates_check_run",
         handler_body("in_progress"), level="L3"),
    completed_row(f"{CHECK_RUNS}::test_l2_completed_does_not_create_check_run", handler_body()),
    completed_row(f"{CHECK_RUNS}::test_check_run_update_failure_does_not_break_response",
                  handler_body(), level="L4"),
    # test_callback_handler.py::TestNightlyCallback: no dispatch, no state
    Case(f"{NIGHTLY}::test_nightly_callback_forwards_to_hud", nightly_body(), dispatched=False),
    Case(f"{NIGHTLY}::test_nightly_callback_skips_redis", nightly_body(), dispatched=False,
         before=(nightly_body(),)),
    Case(f"{NIGHTLY}::test_nightly_callback_has_no_timing_metrics", nightly_body(),
         dispatched=False),
    Case(f"{NIGHTLY}::test_periodic_callback_also_works", nightly_body("periodic"),
         dispatched=False),
    Case(f"{NIGHTLY}::test_nightly_rejects_in_progress_status",
         nightly_body(status="in_progress"), expect=400, dispatched=False),
    Case(f"{NIGHTLY}::test_nightly_not_in_allowlist_is_ignored", nightly_body(),
         dispatched=False, level=None),
    Case(f"{NIGHTLY}::test_nightly_rate_limited", nightly_body(), expect=429, dispatched=False,
         before=(nightly_body(),), rate_limit=1),
    Case(f"{NIGHTLY}::test_nightly_missing_delivery_id_returns_400",
         {k: v for k, v in nightly_body().items() if k != "delivery_id"}, expect=400,
         dispatched=False),
    Case(f"{NIGHTLY}::test_nightly_failure_conclusion_forwards",
         {**nightly_body(), "workflow": {**nightly_body()["workflow"], "conclusion": "failure"}},
         dispatched=False),
    # test_callback_handler_lambda.py: routing, JSON and the token, before the handler
    Case(f"{LAMBDA}::test_route_validation (path)", handler_body(), expect=404,
         request={"path": "/other"}),
    Case(f"{LAMBDA}::test_route_validation (method)", handler_body(), expect=405,
         request={"method": "GET"}),
    Case(f"{LAMBDA}::test_invalid_json_body_returns_400", expect=400,
         request={"raw": b"not-json"}),
    Case(f"{LAMBDA}::test_missing_authorization_header_returns_401", handler_body(),
         expect=401, request={"authorization": None}),
    Case(f"{LAMBDA}::test_oidc_failure_returns_401 (and {JWT}::test_wrong_audience_raises_401)",
         handler_body(), expect=401, request={"authorization": "Bearer token.with.wrong.aud"}),
    # its `handle` raised Exception("boom"); a run_id that is no integer does so for real
    Case(f"{LAMBDA}::test_unhandled_exception_returns_500",
         handler_body("in_progress", run_id="run-99999"), expect=500),
    # test_redis_helper.py: the state machine, keys and the rate limit, through a request
    Case(f"{STATES}::test_invalid_state_transitions_rejected (IN_PROGRESS again)",
         handler_body("in_progress", run_id=12345), expect=400,
         before=(handler_body("in_progress", run_id=12345),)),
    Case(f"{STATES}::test_invalid_state_transitions_rejected (COMPLETED first)",
         handler_body(run_id=12345), expect=400),
    Case(f"{STATES}::test_invalid_state_transitions_rejected (COMPLETED again)",
         handler_body(run_id=12345), expect=400,
         before=(handler_body("in_progress", run_id=12345), handler_body(run_id=12345))),
    completed_row(f"{STATES}::test_set_completed_from_in_progress_accepts",
                  handler_body(run_id=12345)),
    Case(f"{STATES}::test_set_in_progress_accepts_first_callback", handler_body("in_progress")),
    Case(f"{STATES}::test_set_non_dispatched_state_with_reserved_run_id_rejected (IN_PROGRESS)",
         handler_body("in_progress", run_id=0, run_attempt=0), expect=400),
    Case(f"{STATES}::test_set_non_dispatched_state_with_reserved_run_id_rejected (COMPLETED)",
         handler_body(run_id=0, run_attempt=0), expect=400),
    Case(f"{KEYS}::test_state_key_unique_per_job_name",
         handler_body("in_progress", run_id=100, job_name="job-b"),
         before=(handler_body("in_progress", run_id=100, job_name="job-a"),)),
    Case(f"{KEYS}::test_state_key_without_job_name_backward_compat",
         handler_body("in_progress", run_id=100)),
    Case(f"{RATE}::test_check_rate_limit_allowed", handler_body("in_progress"), rate_limit=20,
         before=tuple(handler_body("in_progress", job_name=f"j{i}") for i in range(10))),
    Case(f"{RATE}::test_check_rate_limit_exceeded", handler_body("in_progress"), expect=429,
         rate_limit=20,
         before=tuple(handler_body("in_progress", job_name=f"j{i}") for i in range(20))),
    # test_hud.py: the forward (the relay retries a 5xx or silence 3 times in production)
    Case(f"{HUD}::test_empty_url_skips_request", handler_body("in_progress"), hud=False),
    Case(f"{HUD}::test_hud_payload_has_three_top_level_fields", cleanup_body(), hud=True),
    Case(f"{HUD}::test_4xx_propagates_with_huds_status", cleanup_body(), expect=422, hud=True,
         hud_faults=(422,)),
    Case(f"{HUD}::test_retries_exhausted (HTTP 500)", cleanup_body(), expect=500, hud=True,
         hud_faults=(500,) * 4),
    Case(f"{HUD}::test_retries_exhausted (URLError)", cleanup_body(), expect=500, hud=True,
         hud_faults=(None,) * 4),
    Case(f"{HUD}::test_5xx_succeeds_on_retry", cleanup_body(), hud=True, hud_faults=(500,)),
    # test_jwt_helper.py: what the Authorization header may hold
    Case(f"{JWT}::test_bearer_prefix_stripped", handler_body("in_progress"),
         request={"authorization": f"Bearer {TOKEN}"}),
    Case(f"{JWT}::test_valid_github_token_returns_claims (no Bearer)",
         handler_body("in_progress"), request={"authorization": TOKEN}),
    Case(f"{JWT}::test_empty_token_raises_401", handler_body("in_progress"), expect=401,
         request={"authorization": "Bearer "}),
    # the composite action's bodies, against the HUD model as production runs them
    Case("test_cleanup_handler.py::_callback_body (the action's in_progress)", cleanup_body(),
         hud=True),
    Case("report_callback.py in_progress", action_body("in_progress"), hud=True),
    completed_row("report_callback.py completed: started_at null, test_results without total",
                  action_body("completed", test_results={"passed": 10, "failed": 0,
                                                         "skipped": 2}), hud=True),
    Case("report_callback.py nightly (delivery-id = SHA, event-type nightly)",
         action_nightly_body(), dispatched=False, hud=True),
]  # fmt: skip


def send(relay: RelaySimulator, body: Any = None, **request: Any) -> tuple[int, dict[str, Any]]:
    raw = request.get("raw", json.dumps(body).encode())
    path, method = request.get("path", CALLBACK_PATH), request.get("method", "POST")
    http = urllib.request.Request(relay.base_url + path, data=raw, method=method)
    authorization = request.get("authorization", f"Bearer {TOKEN}")
    if authorization is not None:
        http.add_header("Authorization", authorization)
    try:
        with urllib.request.urlopen(http, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def replay(case: Case) -> tuple[int, dict[str, Any]]:
    allowlist = {REPO: case.level} if case.level else {}
    # The steps before stand for what the test's mocks hold, so no HUD judges them.
    with RelaySimulator(
        allowlist=allowlist, tokens={TOKEN: REPO}, hud=False, rate_limit=case.rate_limit
    ) as relay:
        if case.dispatched:
            relay.dispatch(DELIVERY, REPO, pr_payload())
        for earlier in case.before:
            assert send(relay, earlier)[0] == 200, earlier
        relay.hud = case.hud
        for status in case.hud_faults:
            relay.fail_hud(1, status)
        return send(relay, case.body, **case.request)


@pytest.mark.parametrize("case", CASES, ids=[case.source for case in CASES])
def test_the_simulator_answers_the_relays_own_test_cases_as_the_relay_does(case):
    status, answer = replay(case)

    assert (status // 100, status) == (case.expect // 100, case.expect), answer


def test_the_table_replays_every_body_test_of_the_callback_handler():
    # 31 tests in test_callback_handler.py, one left out (see the module's docstring).
    assert len([case for case in CASES if case.source.startswith(HANDLER + "::")]) == 30
    assert len(CASES) == 60


def test_strict_mode_refuses_the_official_action_s_completed_body_the_relay_takes():
    body = action_body("completed", test_results={"passed": 10, "failed": 0, "skipped": 2})
    with RelaySimulator(allowlist={REPO: "L2"}, tokens={TOKEN: REPO}, strict=True) as relay:
        relay.dispatch(DELIVERY, REPO, pr_payload())
        assert send(relay, started(body))[0] == 400  # crcr wants started_at on every body
        status, answer = send(relay, body)

    assert status == 400
    assert any("test_results" in problem for problem in answer["problems"])
    assert any("started_at" in problem for problem in answer["problems"])


@pytest.mark.parametrize(
    "source, body",
    [
        ("test_cleanup_handler.py::TestCleanupHandler::test_cleans_single_zombie", cleanup_body()),
        (
            "test_cleanup_handler.py::TestBuildTimeoutPayload::test_minimal_body",
            {
                **cleanup_body(),
                "event_type": "push",
                "payload": {"pull_request": None, "repository": {"full_name": "pytorch/pytorch"}},
            },
        ),
    ],  # fmt: skip
)
def test_the_sweeper_times_out_a_job_as_the_relays_cleanup_tests_expect(source, body):
    now = [1_700_000_000.0]
    with RelaySimulator(
        allowlist={REPO: "L2"}, tokens={TOKEN: REPO}, clock=lambda: now[0]
    ) as relay:
        relay.dispatch(DELIVERY, REPO, pr_payload())
        assert send(relay, body)[0] == 200
        relay.advance(ZOMBIE_TIMEOUT)
        late = send(relay, {**body, "workflow": {**body["workflow"], "status": "completed"}})

    [swept] = relay.swept
    assert swept.body["workflow"]["status"] == "completed"
    assert swept.body["workflow"]["conclusion"] == "timed_out"
    assert swept.body["workflow"]["completed_at"] == "2023-11-15T04:13:20Z"
    assert swept.body["workflow"]["check_run_id"] == "cr-456"  # the rest as it was stored
    assert late[0] == 400 and "invalid state transition" in late[1]["detail"]
