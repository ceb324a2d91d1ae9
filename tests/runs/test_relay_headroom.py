"""The HUD's 2 MB limit applies to the relay's forward, which wraps crcr's body: a body is
trimmed so that its forward fits, with a margin, and no byte earlier."""

import json
from datetime import UTC, datetime
from typing import Any

from runs.relay import protocol

DISPATCH = {
    "event_type": "pull_request",
    "delivery_id": "d-1",
    "payload": {"action": "closed", "pull_request": {"number": 7, "head": {"sha": "a" * 40}}},
}
JOB = {
    "status": "completed",
    "name": "crcr",
    "url": "https://github.com/acme/backend/actions/runs/123",
    "run_id": 123,
    "run_attempt": 1,
    "job_name": "report",
    "check_run_id": "456",
    "started_at": datetime(2026, 5, 4, 20, 48, 28, tzinfo=UTC),
    "completed_at": "2026-05-04T21:23:45Z",
    "conclusion": "failure",
    "test_results": {"passed": 40, "failed": 700, "skipped": 2, "total": 742},
    "artifact_url": "https://crcr.example/runs/1/",
}
LIMIT = protocol.MAX_FORWARD_BYTES  # the HUD's 2 MiB less the stated margin


def failure(index: int, stacktrace: int = 2000) -> dict[str, Any]:
    """One failed test as `build_callback` keeps it (already within every cap)."""
    return {
        "name": f"test_op_{index:04d}",
        "classname": "TestOps",
        "message": "AssertionError: Tensor-likes are not close! " + "m" * 900,
        "stacktrace": "s" * stacktrace,
        "duration": 1.5,
    }


def details_forwarding(size: int) -> list[dict[str, Any]]:
    """Failure details that make a body's relay forward exactly `size` bytes: full entries,
    then one whose ASCII stacktrace takes up the rest."""
    body = protocol.build_callback(DISPATCH, **JOB, failed_tests_detail=[failure(0, 0)])
    bare = protocol.forwarded_size(body)  # one entry, empty stacktrace
    step = len(json.dumps(failure(0)).encode()) + len(", ")
    full = (size - bare) // step
    details = [failure(index) for index in range(full)] + [failure(full, 0)]
    details[-1]["stacktrace"] = "s" * (size - bare - full * step)
    assert len(details[-1]["stacktrace"]) <= protocol.MAX_STACKTRACE_BYTES
    return details


def relay_forward_bytes(sent: bytes, repo: str, **metrics: float | None) -> bytes:
    """What the relay POSTs to the HUD after parsing what crcr sent (utils/hud.py)."""
    ci_metrics = {"queue_time": None, "execution_time": None, **metrics}
    forward = protocol.relay_forward(json.loads(sent), verified_repo=repo, ci_metrics=ci_metrics)
    return json.dumps(forward).encode("utf-8")


def test_the_forward_is_the_body_plus_the_measured_wrapper():
    body = protocol.build_callback(
        DISPATCH, **JOB, failed_tests_detail=[{"name": "tëst_✗", "message": "é" * 2000}]
    )
    sent = json.dumps(body).encode()  # as `delivery.send` posts it

    longest = relay_forward_bytes(
        sent, protocol.LONGEST_REPOSITORY, queue_time=9999999.999, execution_time=9999999.999
    )
    usual = relay_forward_bytes(sent, "acme/torch-acme", execution_time=21599.999)
    nightly = relay_forward_bytes(sent, "acme/torch-acme")  # no timings on that path

    assert protocol.RELAY_WRAPPER_BYTES == 316
    assert len(longest) == protocol.forwarded_size(body) == len(sent) + 316
    assert len(nightly) == len(sent) + 177 and len(usual) == len(sent) + 182


def test_a_body_whose_forward_is_exactly_the_limit_is_sent_untrimmed():
    details = details_forwarding(LIMIT)

    body = protocol.build_callback(DISPATCH, **JOB, failed_tests_detail=details)

    assert body["workflow"]["failed_tests_detail"] == details
    assert protocol.forwarded_size(body) == LIMIT
    assert protocol.validate_callback(body) == []
    # Even for GitHub's longest repository name and timings, the HUD takes it.
    sent = json.dumps(body).encode()
    longest = relay_forward_bytes(
        sent, protocol.LONGEST_REPOSITORY, queue_time=9999999.999, execution_time=9999999.999
    )
    assert len(longest) == protocol.MAX_BODY_BYTES - protocol.WRAPPER_MARGIN_BYTES


def test_one_byte_more_is_trimmed_first_and_then_fits():
    details = details_forwarding(LIMIT + 1)

    body = protocol.build_callback(DISPATCH, **JOB, failed_tests_detail=details)

    # The last failure is dropped, and no more: the forward is one byte too big without it.
    assert body["workflow"]["failed_tests_detail"] == details[:-1]
    assert protocol.forwarded_size(body) <= LIMIT
    assert protocol.validate_callback(body) == []
    assert body["workflow"]["test_results"]["failed"] == 700  # the counts stay whole


def test_a_body_trimmed_only_to_the_bare_two_megabytes_is_trimmed_further():
    # What `_fit` used to send: 40 bytes under 2 MiB, answered 413 once the relay wrapped it.
    details = details_forwarding(protocol.MAX_BODY_BYTES - 40 + protocol.RELAY_WRAPPER_BYTES)
    body = protocol.build_callback(DISPATCH, **JOB, failed_tests_detail=details)

    sent = json.dumps(body).encode()
    assert len(body["workflow"]["failed_tests_detail"]) < len(details)
    assert len(relay_forward_bytes(sent, "acme/torch-acme")) <= protocol.MAX_BODY_BYTES


def test_validation_measures_the_forward_not_the_body():
    body = protocol.build_callback(DISPATCH, **JOB, failed_tests_detail=[failure(0)])
    body["workflow"]["failed_tests_detail"] = details_forwarding(LIMIT + 1)  # built untrimmed

    assert protocol.validate_callback(body) == [
        f"body: larger than {LIMIT - protocol.RELAY_WRAPPER_BYTES} bytes, the HUD's "
        f"{protocol.MAX_BODY_BYTES} less the relay's wrapper and a margin"
    ]
