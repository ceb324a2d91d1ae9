"""The callback schema, its caps, token providers and send() over real loopback HTTP."""

import json
import socket
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from runs.relay import delivery, protocol

SHA = "a" * 40
DISPATCH = {
    "event_type": "pull_request",
    "delivery_id": "d-1",
    "payload": {"action": "closed", "pull_request": {"number": 7, "head": {"sha": SHA}}},
}
JOB = {
    "name": "crcr",
    "url": "https://github.com/acme/backend/actions/runs/123",
    "run_id": 123,
    "run_attempt": 1,
    "job_name": "report",
    "check_run_id": "456",
    "started_at": datetime(2026, 5, 4, 20, 48, 28, tzinfo=UTC),
}


def completed(**overrides: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "status": "completed",
        "conclusion": "success",
        "completed_at": "2026-05-04T21:23:45Z",
        "test_results": {"passed": 40, "failed": 0, "skipped": 2, "total": 42},
        "artifact_url": "https://crcr.example/runs/1/",
    }
    return protocol.build_callback(DISPATCH, **{**JOB, **fields, **overrides})


class Scripted:
    """A loopback HTTP server answering each request with the next scripted reply."""

    def __init__(self, replies: list[tuple[int, dict[str, str], bytes]]) -> None:
        self.replies, self.requests = list(replies), []
        scripted = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                scripted.requests.append((self.command, self.path, dict(self.headers), body))
                status, headers, data = scripted.replies.pop(0)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _serve

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def scripted() -> Iterator[Any]:
    servers: list[Scripted] = []

    def start(*replies: tuple[int, dict[str, str], bytes]) -> Scripted:
        servers.append(Scripted(list(replies)))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


class Fixed:
    def token(self) -> str:
        return "s3cret"


# --- the body -----------------------------------------------------------------------------


def test_a_completed_callback_has_exactly_the_schema_fields():
    body = completed()

    assert set(body) == {"event_type", "delivery_id", "payload", "workflow"}
    assert body["payload"] == DISPATCH["payload"]
    assert body["workflow"] == {
        "schema_version": "1",
        "status": "completed",
        "conclusion": "success",
        "name": "crcr",
        "url": "https://github.com/acme/backend/actions/runs/123",
        "run_id": "123",
        "run_attempt": "1",
        "job_name": "report",
        "check_run_id": "456",
        "started_at": "2026-05-04T20:48:28Z",
        "completed_at": "2026-05-04T21:23:45Z",
        "test_results": {"passed": 40, "failed": 0, "skipped": 2, "total": 42},
        "artifact_url": "https://crcr.example/runs/1/",
    }
    assert protocol.validate_callback(body) == []


def test_an_in_progress_callback_has_a_null_conclusion_and_no_completion_time():
    body = protocol.build_callback(DISPATCH, status="in_progress", **JOB)

    assert body["workflow"]["conclusion"] is None
    assert body["workflow"]["completed_at"] is None
    assert protocol.validate_callback(body) == []


def test_an_in_progress_callback_refuses_a_conclusion():
    with pytest.raises(ValueError, match="no conclusion"):
        protocol.build_callback(DISPATCH, status="in_progress", conclusion="success", **JOB)


def test_a_run_that_collected_no_tests_is_a_failure():
    nothing = {"passed": 0, "failed": 0, "skipped": 0, "total": 0}

    assert completed(test_results=nothing)["workflow"]["conclusion"] == "failure"
    assert completed(test_results=None)["workflow"]["conclusion"] == "failure"


def test_success_is_downgraded_when_a_test_failed_and_derived_when_not_given():
    failing = {"passed": 41, "failed": 1, "skipped": 0}

    assert completed(test_results=failing)["workflow"]["conclusion"] == "failure"
    assert completed(test_results=failing)["workflow"]["test_results"]["total"] == 42
    assert completed(conclusion=None)["workflow"]["conclusion"] == "success"
    assert completed(conclusion="cancelled")["workflow"]["conclusion"] == "cancelled"


def test_an_unknown_conclusion_is_refused():
    with pytest.raises(ValueError, match="conclusion must be one of"):
        completed(conclusion="neutral")


def test_failed_tests_are_capped_to_a_thousand_entries():
    failures = [{"name": f"test_{i}", "classname": "TestOps", "message": "x"} for i in range(1001)]

    details = completed(failed_tests_detail=failures)["workflow"]["failed_tests_detail"]

    assert len(details) == 1000
    assert details[-1]["name"] == "test_999"
    assert set(details[0]) == {"name", "classname", "message", "stacktrace", "duration"}


def test_a_long_message_keeps_its_start_within_one_kilobyte():
    message = "AssertionError: tensors differ " + "é" * 2000
    failure = {"name": "test_add", "message": message}

    kept = completed(failed_tests_detail=[failure])["workflow"]["failed_tests_detail"][0]

    assert len(kept["message"].encode()) <= 1024
    assert kept["message"].startswith("AssertionError: tensors differ")


def test_a_long_stacktrace_keeps_its_end_within_four_kilobytes():
    frames = "".join(f'  File "test_ops.py", line {i}, in f{i}\n' for i in range(500))
    trace = "Traceback (most recent call last):\n" + frames + "RuntimeError: device lost ✗"
    failure = {"name": "test_add", "stacktrace": trace, "duration": 1.23456}

    kept = completed(failed_tests_detail=[failure])["workflow"]["failed_tests_detail"][0]

    assert len(kept["stacktrace"].encode()) <= 4096
    assert kept["stacktrace"].endswith("RuntimeError: device lost ✗")
    assert kept["stacktrace"].startswith(protocol.ELLIPSIS)
    assert kept["duration"] == 1.235


def test_the_body_stays_under_two_megabytes_by_dropping_trailing_failures():
    big = {"name": "t", "message": "m" * 1024, "stacktrace": "s" * 4096}

    body = completed(failed_tests_detail=[{**big, "name": f"t{i}"} for i in range(1000)])

    assert len(json.dumps(body).encode()) <= protocol.MAX_BODY_BYTES
    assert 300 < len(body["workflow"]["failed_tests_detail"]) < 1000
    assert body["workflow"]["failed_tests_detail"][0]["name"] == "t0"


def test_a_triage_score_becomes_the_relays_confidence_label():
    verdict = {"category": "upstream", "confidence": 0.87, "summary": "aten::add changed"}

    sent = completed(triage_verdict=verdict)["workflow"]["triage_verdict"]

    assert sent == {
        "schema_version": 1,
        "category": "upstream",
        "confidence": "high",
        "confidence_score": 0.87,
        "summary": "aten::add changed",
    }
    with pytest.raises(ValueError, match="category"):
        completed(triage_verdict={**verdict, "category": "cosmic rays"})


def test_a_nightly_self_report_uses_the_pytorch_sha_as_its_delivery():
    payload = protocol.nightly_payload(SHA)

    body = protocol.build_callback(
        payload,
        **{**JOB, "status": "completed"},
        test_results={"passed": 1, "failed": 0, "skipped": 0},
    )

    assert payload == {
        "event_type": "nightly",
        "delivery_id": SHA,
        "payload": {"repository": {"full_name": "pytorch/pytorch"}, "head_sha": SHA},
    }
    assert protocol.validate_callback(body) == []
    with pytest.raises(ValueError, match="40-hex"):
        protocol.nightly_payload("main")


def test_validation_names_each_bad_field():
    body = completed()
    body["workflow"]["run_id"] = "run-123"
    del body["workflow"]["job_name"]
    body["workflow"]["test_results"]["failed"] = -1

    problems = protocol.validate_callback(body)

    assert "workflow.run_id: must be a string of digits" in problems
    assert "workflow.job_name: must be a non-empty string" in problems
    assert any(p.startswith("workflow.test_results") for p in problems)
    assert protocol.validate_callback([]) == ["body: must be a JSON object"]


def test_validation_refuses_a_nightly_in_progress():
    body = protocol.build_callback(protocol.nightly_payload(SHA), status="in_progress", **JOB)

    assert protocol.validate_callback(body) == [
        "workflow.status: a nightly self-report sends only `completed`"
    ]


# --- tokens -------------------------------------------------------------------------------


def test_a_static_token_is_read_from_its_secret_file(tmp_path):
    secret = tmp_path / "relay-token"
    secret.write_text("s3cret\n")

    assert delivery.StaticTokenProvider(secret).token() == "s3cret"
    assert isinstance(delivery.provider_from_spec(f"file:{secret}"), delivery.StaticTokenProvider)
    with pytest.raises(delivery.TokenError, match="cannot read"):
        delivery.StaticTokenProvider(tmp_path / "missing").token()
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(delivery.TokenError, match="is empty"):
        delivery.StaticTokenProvider(tmp_path / "empty").token()


def test_an_oidc_token_is_requested_for_the_relays_audience(scripted):
    actions = scripted((200, {"Content-Type": "application/json"}, b'{"value": "eyJ.oidc.jwt"}'))
    environ = {
        "ACTIONS_ID_TOKEN_REQUEST_URL": f"{actions.url}/token?api-version=2.0",
        "ACTIONS_ID_TOKEN_REQUEST_TOKEN": "runtime-token",
    }

    token = delivery.GitHubOIDCTokenProvider(environ=environ).token()

    method, path, headers, _ = actions.requests[0]
    assert token == "eyJ.oidc.jwt"
    assert method == "GET"
    assert parse_qs(urlsplit(path).query) == {
        "api-version": ["2.0"],
        "audience": ["pytorch-cross-repo-ci-relay"],
    }
    assert headers["Authorization"] == "Bearer runtime-token"


def test_an_oidc_token_outside_github_actions_is_a_clear_error():
    with pytest.raises(delivery.TokenError, match="id-token: write"):
        delivery.GitHubOIDCTokenProvider(environ={}).token()


def test_token_specs_name_a_provider():
    assert isinstance(delivery.provider_from_spec("oidc"), delivery.GitHubOIDCTokenProvider)
    assert delivery.provider_from_spec("none").token() is None
    with pytest.raises(ValueError, match="token spec"):
        delivery.provider_from_spec("vault:relay")


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("ghp_pastedTheTokenItself", "a token itself does not go here"),
        ("file:", "needs the path"),
        ("file: /etc/crcr/relay-token", "without spaces"),
    ],
)
def test_a_malformed_token_spec_is_explained_without_quoting_it(spec, problem):
    with pytest.raises(delivery.TokenSpecError, match=problem) as raised:
        delivery.provider_from_spec(spec)
    assert not raised.value.retryable  # a configuration error: only a person can fix it
    quoted = spec.removeprefix("file:").strip()
    assert not quoted or quoted not in str(raised.value)


def test_a_backends_token_file_must_be_named_by_an_absolute_path():
    assert delivery.check_token_spec("file:relay-token") is None  # the bridge's own files
    assert "absolute" in (delivery.check_token_spec("file:relay-token", absolute=True) or "")
    assert delivery.check_token_spec("file:/etc/crcr/relay-token", absolute=True) is None


# --- sending ------------------------------------------------------------------------------


def test_a_200_is_delivered_and_carries_the_bearer_token_and_json(scripted):
    relay = scripted((200, {}, b'{"ok": true, "status": "completed"}'))

    answer = delivery.send(relay.url + "/github/callback", completed(), Fixed())

    _, path, headers, data = relay.requests[0]
    assert (answer.status, answer.ok, answer.retryable) == (200, True, False)
    assert path == "/github/callback"
    assert headers["Authorization"] == "Bearer s3cret"
    assert headers["Content-Type"] == "application/json"
    assert json.loads(data) == completed()


@pytest.mark.parametrize("status", [400, 401, 403])
def test_a_client_error_is_final(scripted, status):
    relay = scripted((status, {}, b'{"detail": "callback rejected"}'))

    answer = delivery.send(relay.url, completed(), Fixed())

    assert (answer.status, answer.retryable, answer.detail) == (status, False, "callback rejected")
    assert delivery.settle(answer, after_ambiguous=False) == "refused"


def test_a_429_is_retried_after_the_time_the_relay_names(scripted):
    relay = scripted((429, {"Retry-After": "7"}, b'{"detail": "rate limit exceeded"}'))

    answer = delivery.send(relay.url, completed(), Fixed())

    assert (answer.status, answer.retryable, answer.retry_after) == (429, True, 7.0)
    assert not answer.ambiguous


def test_a_503_is_retried(scripted):
    relay = scripted((503, {}, b'{"detail": "redis temporary outage"}'))

    answer = delivery.send(relay.url, completed(), Fixed())

    assert (answer.status, answer.retryable, answer.ambiguous) == (503, True, True)


def test_a_refused_connection_is_retried():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    answer = delivery.send(f"http://127.0.0.1:{port}/github/callback", completed(), Fixed())

    assert (answer.status, answer.retryable, answer.ambiguous) == (None, True, True)
    assert answer.text.startswith("network error")


def test_retry_after_may_be_an_http_date():
    now = datetime(2026, 5, 4, 12, 0, 0, tzinfo=UTC)

    assert delivery.parse_retry_after("Mon, 04 May 2026 12:00:30 GMT", now=now) == 30.0
    assert delivery.parse_retry_after("soon") is None


def test_a_retry_after_is_honoured_up_to_an_hour():
    now = datetime(2026, 5, 4, 12, 0, 0, tzinfo=UTC)

    assert delivery.parse_retry_after("3599") == 3599.0
    assert delivery.parse_retry_after(str(10**9)) == 3600.0
    assert delivery.parse_retry_after("9" * 400) == 3600.0
    assert delivery.parse_retry_after("Tue, 04 May 2027 12:00:00 GMT", now=now) == 3600.0
    assert delivery.parse_retry_after("-5") is None  # garbled: the caller backs off
    assert delivery.parse_retry_after("\u0663") is None  # a digit, but not an ASCII one


def test_backoff_is_exponential_with_full_jitter_and_a_cap():
    assert [delivery.backoff(n, jitter=lambda: 1.0) for n in range(4)] == [2, 4, 8, 16]
    assert delivery.backoff(3, jitter=lambda: 0.0) == 0
    assert delivery.backoff(40, jitter=lambda: 1.0) == 600


def test_a_repeat_refused_after_a_lost_answer_counts_as_delivered():
    repeat = delivery.Answer(
        400, '{"detail": "callback rejected: invalid state transition"}', False
    )

    assert delivery.settle(repeat, after_ambiguous=True) == "delivered"
    assert delivery.settle(repeat, after_ambiguous=False) == "refused"
