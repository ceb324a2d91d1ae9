"""CRCR relay callbacks, schema version "1": building callback bodies and validating them.

Imports nothing from Django: the bridge (`python -m runs.relay.bridge`) runs this module on a
GitHub Actions runner with only the standard library, and the relay simulator, crcr's
outbox and users' own scripts share it. Sending a body is `runs.relay.delivery`'s job.
Where each rule comes from is in `runs/relay/README.md`.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Literal

from runs import excerpts

SCHEMA_VERSION = "1"
AUDIENCE = "pytorch-cross-repo-ci-relay"
CALLBACK_PATH = "/github/callback"
STATUSES = ("in_progress", "completed")
CONCLUSIONS = ("success", "failure", "cancelled", "timed_out")
SELF_REPORT_EVENT_TYPES = ("nightly", "periodic")
TRIAGE_CATEGORIES = ("upstream", "backend", "infra", "flake", "unknown")
TRIAGE_CONFIDENCES = ("high", "medium", "low")
TEST_COUNTS = ("passed", "failed", "skipped", "total")

MAX_FAILED_TESTS = 1000
MAX_MESSAGE_BYTES = 1024
MAX_STACKTRACE_BYTES = 4096
MAX_NAME_BYTES = 1024
MAX_TRIAGE_SUMMARY = 1000
# `environment`: the HUD's column holds a JSON object of short facts, {"sdk": "<version>",
# "device": "<hardware>", ...} (clickhouse_db_schema/default.crcr_workflow_job/schema.sql).
MAX_ENVIRONMENT_KEYS = 16
MAX_ENVIRONMENT_VALUE_BYTES = 256
# The HUD's body parser refuses more than 2 MB, and the relay passes that 413 back. The limit
# applies to the relay's forward, which wraps crcr's body: see `relay_forward` below.
MAX_BODY_BYTES = 2 * 1024 * 1024
# Room kept on top of the measured wrapper (`RELAY_WRAPPER_BYTES`) for keys a later relay may
# add to its trusted block; a body whose forward would pass MAX_FORWARD_BYTES is trimmed.
WRAPPER_MARGIN_BYTES = 1024
MAX_FORWARD_BYTES = MAX_BODY_BYTES - WRAPPER_MARGIN_BYTES
ELLIPSIS = excerpts.ELLIPSIS

_SHA = re.compile(r"^[0-9a-f]{40}$")
_DIGITS = re.compile(r"^[0-9]+$")
_FACT = re.compile(r"^[a-z][a-z0-9_]{0,31}$")

Status = Literal["in_progress", "completed"]


# --- bodies -------------------------------------------------------------------------------


def iso8601(value: datetime | str | None) -> str | None:
    """A timestamp as ISO 8601 UTC (`2026-05-04T20:48:28Z`); naive datetimes are taken as UTC."""
    if value is None:
        return None
    if isinstance(value, str):
        _parse_iso(value)  # raises ValueError on a malformed string
        return value
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def conclusion_for(test_results: Mapping[str, int] | None) -> str:
    """`success` only when tests ran and none failed: a run that collected nothing failed."""
    if test_results and test_results.get("total", 0) > 0 and test_results.get("failed", 0) == 0:
        return "success"
    return "failure"


def build_callback(
    client_payload: Mapping[str, Any],
    *,
    status: Status,
    name: str,
    url: str,
    run_id: str | int,
    run_attempt: str | int,
    job_name: str,
    check_run_id: str | int,
    started_at: datetime | str,
    conclusion: str | None = None,
    completed_at: datetime | str | None = None,
    test_results: Mapping[str, int] | None = None,
    artifact_url: str | None = None,
    failed_tests_detail: list[Mapping[str, Any]] | None = None,
    triage_verdict: Mapping[str, Any] | None = None,
    environment: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The body of one callback: the dispatch's client_payload echoed, plus `workflow`.

    Steps: echo `event_type`, `delivery_id` and `payload`; fix the conclusion (null while in
    progress; `success` downgraded to `failure` unless tests ran and none failed; derived
    from the counts when not given); cap failure details (1000 entries, message 1 KB from its
    start, stacktrace 4 KB from its end); keep the environment's non-empty facts, each cut to
    256 bytes; drop trailing details until the relay's forward
    of the body fits in the HUD's 2 MB with a margin (`MAX_FORWARD_BYTES`).
    """
    if status not in STATUSES:
        raise ValueError(f"status must be one of {', '.join(STATUSES)}, not {status!r}")
    results = _test_results(test_results) if test_results is not None else None
    if status == "in_progress":
        if conclusion is not None:
            raise ValueError("an in_progress callback has no conclusion")
        completed_at = None
    else:
        if conclusion is None:
            conclusion = conclusion_for(results)
        if conclusion not in CONCLUSIONS:
            raise ValueError(f"conclusion must be one of {', '.join(CONCLUSIONS)}")
        if conclusion == "success":
            conclusion = conclusion_for(results)
        completed_at = completed_at or datetime.now(UTC)
    workflow: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "status": status,
        "conclusion": conclusion,
        "name": name,
        "url": url,
        "run_id": str(run_id),
        "run_attempt": str(run_attempt),
        "job_name": job_name,
        "check_run_id": str(check_run_id),
        "started_at": iso8601(started_at),
        "completed_at": iso8601(completed_at),
        "test_results": results,
        "artifact_url": artifact_url,
    }
    if failed_tests_detail is not None:
        workflow["failed_tests_detail"] = [
            _failed_test(entry) for entry in failed_tests_detail[:MAX_FAILED_TESTS]
        ]
    if triage_verdict is not None:
        workflow["triage_verdict"] = _triage_verdict(triage_verdict)
    if environment:
        workflow["environment"] = _environment(environment)
    body = {
        "event_type": client_payload["event_type"],
        "delivery_id": client_payload["delivery_id"],
        "payload": client_payload["payload"],
        "workflow": workflow,
    }
    _fit(body)
    return body


def nightly_payload(
    pytorch_sha: str,
    *,
    event_type: str = "nightly",
    upstream_repo: str = "pytorch/pytorch",
    ref: str | None = None,
) -> dict[str, Any]:
    """The client_payload of a self-reported nightly or release run: no dispatch exists.

    The relay takes `delivery_id` = the PyTorch SHA and the HUD reads `payload.head_sha`.
    """
    if not _SHA.match(pytorch_sha):
        raise ValueError("a nightly self-report needs the 40-hex PyTorch SHA it tested")
    if event_type not in SELF_REPORT_EVENT_TYPES:
        raise ValueError(f"event_type must be one of {', '.join(SELF_REPORT_EVENT_TYPES)}")
    payload: dict[str, Any] = {"repository": {"full_name": upstream_repo}, "head_sha": pytorch_sha}
    if ref:
        payload["ref"] = ref
    return {"event_type": event_type, "delivery_id": pytorch_sha, "payload": payload}


def _test_results(results: Mapping[str, int]) -> dict[str, int]:
    counts = {key: results.get(key) for key in ("passed", "failed", "skipped")}
    counts["total"] = results.get("total")
    if counts["total"] is None:
        counts["total"] = sum(int(counts[key] or 0) for key in ("passed", "failed", "skipped"))
    for key, value in counts.items():
        if not _count(value):
            raise ValueError(f"test_results.{key} must be a non-negative integer")
    return {key: int(value) for key, value in counts.items() if value is not None}


def _failed_test(entry: Mapping[str, Any]) -> dict[str, Any]:
    if not entry.get("name"):
        raise ValueError("each failed test needs a name")
    duration = entry.get("duration")
    return {
        "name": keep_start(str(entry["name"]), MAX_NAME_BYTES),
        "classname": keep_start(str(entry.get("classname") or ""), MAX_NAME_BYTES),
        "message": keep_start(str(entry.get("message") or ""), MAX_MESSAGE_BYTES),
        "stacktrace": keep_end(str(entry.get("stacktrace") or ""), MAX_STACKTRACE_BYTES),
        "duration": None if duration is None else round(float(duration), 3),
    }


def _environment(facts: Mapping[str, str]) -> dict[str, str]:
    """The SDK and device versions a job ran with: short named facts, empty ones left out."""
    if any(not isinstance(key, str) or not _FACT.match(key) for key in facts):
        raise ValueError("environment keys are lower-case names such as sdk, device, torch")
    kept = {
        key: keep_start(str(value), MAX_ENVIRONMENT_VALUE_BYTES)
        for key, value in facts.items()
        if value
    }
    if len(kept) > MAX_ENVIRONMENT_KEYS:
        raise ValueError(f"an environment holds at most {MAX_ENVIRONMENT_KEYS} facts")
    return kept


def _triage_verdict(verdict: Mapping[str, Any]) -> dict[str, Any]:
    """The relay's triage shape: schema_version 1, category, a confidence label, summary.

    crcr scores confidence from 0 to 1; the relay wants high/medium/low, so the score is
    mapped to a label and kept beside it as `confidence_score` (the relay ignores unknown keys).
    """
    category = verdict.get("category")
    if category not in TRIAGE_CATEGORIES:
        raise ValueError(f"triage category must be one of {', '.join(TRIAGE_CATEGORIES)}")
    confidence = verdict.get("confidence")
    score: float | None = None
    if isinstance(confidence, int | float) and not isinstance(confidence, bool):
        if not 0 <= confidence <= 1:
            raise ValueError("triage confidence must lie between 0 and 1")
        score = float(confidence)
        confidence = "high" if score >= 0.8 else "medium" if score >= 0.5 else "low"
    if confidence not in TRIAGE_CONFIDENCES:
        raise ValueError("triage confidence must be a number from 0 to 1 or high/medium/low")
    summary = str(verdict.get("summary") or "").strip()
    if not summary:
        raise ValueError("a triage verdict needs a summary")
    out: dict[str, Any] = {
        "schema_version": 1,
        "category": category,
        "confidence": confidence,
        "summary": summary[:MAX_TRIAGE_SUMMARY],
    }
    if score is not None:
        out["confidence_score"] = round(score, 3)
    for key in ("suspected_upstream", "evidence", "reproduced_on_retry", "analyzer", "analyzed_at"):
        if verdict.get(key) is not None:
            out[key] = verdict[key]
    return out


def _fit(body: dict[str, Any]) -> None:
    """Drop failure details from the end until the relay's forward of the body fits the HUD."""
    details = body["workflow"].get("failed_tests_detail")
    if not details or forwarded_size(body) <= MAX_FORWARD_BYTES:
        return
    body["workflow"]["failed_tests_detail"] = []
    room = MAX_FORWARD_BYTES - forwarded_size(body)
    keep = 0
    for entry in details:
        room -= _size(entry) + 2  # the ", " separating list items
        if room < 0:
            break
        keep += 1
    while True:
        body["workflow"]["failed_tests_detail"] = details[:keep]
        if keep == 0 or forwarded_size(body) <= MAX_FORWARD_BYTES:
            return
        keep -= 1


def _size(value: Any) -> int:
    return len(json.dumps(value).encode())


def keep_start(text: str, max_bytes: int) -> str:
    """`text` cut to `max_bytes` of UTF-8, keeping its start and marking the cut (at a word's
    end: `runs.excerpts`)."""
    return excerpts.clip(text, max_bytes, encoded=True)


def keep_end(text: str, max_bytes: int) -> str:
    """`text` cut to `max_bytes` of UTF-8, keeping its end: a traceback ends with the error."""
    return excerpts.clip_start(text, max_bytes, encoded=True)


# --- the relay's forward to the HUD ---------------------------------------------------------
# Read in pytorch/test-infra at 61a77570f4, aws/lambda/cross_repo_ci_relay/. The relay parses
# crcr's body and forwards it to the HUD inside its own envelope: `_build_trusted`
# (callback/callback_handler.py lines 28-40) beside `{"callback_payload": body}` (lines
# 425-430; nightly: 278-281), POSTed as `json.dumps(...)` with the default separators
# (", ", ": ") and ensure_ascii (utils/hud.py lines 37-42), as crcr's own `json.dumps` sends
# the body. A body parsed and dumped again by Python is the same bytes, so the forward is the
# body plus a constant. The HUD refuses a forward over "2mb" = 2 MiB with 413
# (torchci/pages/api/crcr/results.ts lines 10-16; lib/crcr/crcrUtils.ts lines 4 and 89-93 check
# a compact re-serialisation, never longer). The relay has written COMPLETED to Redis by then,
# so a callback answered 413 can never be sent again.
#
# Measured: 177 bytes for a 15-character repository before any timing is known; 316 bytes
# (RELAY_WRAPPER_BYTES) for GitHub's longest repository name and both timings at their
# longest; plus WRAPPER_MARGIN_BYTES (1024) kept free: 1340 bytes of headroom in all.
LONGEST_REPOSITORY = "o" * 39 + "/" + "r" * 100  # GitHub: owner <= 39, name <= 100 characters
# Seconds rounded to the millisecond (`_safe_delta`, lines 43-54): 11 characters last ~115
# days, far past the 3 days the relay keeps a dispatch's state.
LONGEST_TIMING = 9_999_999.999


def relay_forward(
    body: Mapping[str, Any],
    *,
    verified_repo: str,
    level: str = "L4",
    ci_metrics: Mapping[str, float | None] | None = None,
) -> dict[str, Any]:
    """What the relay POSTs to the HUD for a callback `body`: its trusted block, then the body."""
    trusted = {
        "ci_metrics": dict(ci_metrics or {"queue_time": None, "execution_time": None}),
        "verified_repo": verified_repo,
        "downstream_repo_level": level,
    }
    return {"trusted": trusted, "untrusted": {"callback_payload": body}}


RELAY_WRAPPER_BYTES = _size(
    relay_forward(
        {},
        verified_repo=LONGEST_REPOSITORY,
        ci_metrics={"queue_time": LONGEST_TIMING, "execution_time": LONGEST_TIMING},
    )
) - _size({})


def forwarded_size(body: Mapping[str, Any]) -> int:
    """Bytes of the relay's forward of `body` to the HUD, for any repository and timing."""
    return _size(body) + RELAY_WRAPPER_BYTES


# --- validation ---------------------------------------------------------------------------


def validate_callback(body: Any) -> list[str]:
    """Every problem with a callback body, each naming its field; empty when it is valid."""
    if not isinstance(body, dict):
        return ["body: must be a JSON object"]
    problems = [
        f"{key}: must be a non-empty string"
        for key in ("event_type", "delivery_id")
        if not _text(body.get(key))
    ]
    if not isinstance(body.get("payload"), dict):
        problems.append("payload: must be an object (the dispatch's payload, echoed)")
    workflow = body.get("workflow")
    if not isinstance(workflow, dict):
        return [*problems, "workflow: must be an object"]
    problems += _workflow_problems(workflow)
    if body.get("event_type") in SELF_REPORT_EVENT_TYPES:
        if workflow.get("status") != "completed":
            problems.append("workflow.status: a nightly self-report sends only `completed`")
        if not _SHA.match(str(body.get("delivery_id"))):
            problems.append("delivery_id: a nightly self-report uses the 40-hex PyTorch SHA")
    if not problems and forwarded_size(body) > MAX_FORWARD_BYTES:
        problems.append(
            f"body: larger than {MAX_FORWARD_BYTES - RELAY_WRAPPER_BYTES} bytes, the HUD's "
            f"{MAX_BODY_BYTES} less the relay's wrapper and a margin"
        )
    return problems


def _workflow_problems(wf: dict[str, Any]) -> list[str]:
    problems = []
    if wf.get("schema_version") != SCHEMA_VERSION:
        problems.append(f'workflow.schema_version: must be "{SCHEMA_VERSION}"')
    status = wf.get("status")
    if status not in STATUSES:
        problems.append(f"workflow.status: must be one of {', '.join(STATUSES)}")
    if status == "in_progress" and wf.get("conclusion") is not None:
        problems.append("workflow.conclusion: must be null while in progress")
    if status == "completed" and wf.get("conclusion") not in CONCLUSIONS:
        problems.append(f"workflow.conclusion: must be one of {', '.join(CONCLUSIONS)}")
    for key in ("name", "url", "job_name", "check_run_id"):
        if not _text(wf.get(key)):
            problems.append(f"workflow.{key}: must be a non-empty string")
    for key in ("run_id", "run_attempt"):
        if not isinstance(wf.get(key), str) or not _DIGITS.match(wf[key]):
            problems.append(f"workflow.{key}: must be a string of digits")
    if not _timestamp(wf.get("started_at")):
        problems.append("workflow.started_at: must be an ISO 8601 timestamp")
    if status == "completed" and not _timestamp(wf.get("completed_at")):
        problems.append("workflow.completed_at: must be an ISO 8601 timestamp")
    if status == "in_progress" and wf.get("completed_at") is not None:
        problems.append("workflow.completed_at: must be null while in progress")
    results = wf.get("test_results")
    if results is not None and not (
        isinstance(results, dict) and all(_count(results.get(key)) for key in TEST_COUNTS)
    ):
        problems.append(
            "workflow.test_results: must hold non-negative integers " + ", ".join(TEST_COUNTS)
        )
    elif wf.get("conclusion") == "success" and conclusion_for(results) != "success":
        problems.append(
            "workflow.conclusion: success needs test_results with total > 0 and failed == 0"
        )
    artifact_url = wf.get("artifact_url")
    if artifact_url is not None and not _http_url(artifact_url):
        problems.append("workflow.artifact_url: must be an http(s) URL or null")
    problems += _details_problems(wf.get("failed_tests_detail"))
    problems += _triage_problems(wf.get("triage_verdict"))
    return problems + _environment_problems(wf.get("environment"))


def _environment_problems(facts: Any) -> list[str]:
    if facts is None:
        return []
    if not isinstance(facts, dict) or len(facts) > MAX_ENVIRONMENT_KEYS:
        return [f"workflow.environment: must be an object of at most {MAX_ENVIRONMENT_KEYS} facts"]
    return [
        f"workflow.environment.{key}: must be a string of 1 to {MAX_ENVIRONMENT_VALUE_BYTES} bytes"
        for key, value in facts.items()
        if not _FACT.match(key)
        or not _text(value)
        or len(value.encode()) > MAX_ENVIRONMENT_VALUE_BYTES
    ]


def _details_problems(details: Any) -> list[str]:
    if details is None:
        return []
    if not isinstance(details, list):
        return ["workflow.failed_tests_detail: must be a list"]
    problems = []
    if len(details) > MAX_FAILED_TESTS:
        problems.append(f"workflow.failed_tests_detail: at most {MAX_FAILED_TESTS} entries")
    for index, entry in enumerate(details):
        where = f"workflow.failed_tests_detail[{index}]"
        if not isinstance(entry, dict) or not _text(entry.get("name")):
            problems.append(f"{where}.name: must be a non-empty string")
            continue
        for key, limit in (("message", MAX_MESSAGE_BYTES), ("stacktrace", MAX_STACKTRACE_BYTES)):
            if len(str(entry.get(key) or "").encode()) > limit:
                problems.append(f"{where}.{key}: longer than {limit} bytes")
        duration = entry.get("duration")
        if duration is not None and (not isinstance(duration, int | float) or duration < 0):
            problems.append(f"{where}.duration: must be a non-negative number or null")
    return problems


def _triage_problems(verdict: Any) -> list[str]:
    if verdict is None:
        return []
    if not isinstance(verdict, dict):
        return ["workflow.triage_verdict: must be an object"]
    problems = []
    if verdict.get("category") not in TRIAGE_CATEGORIES:
        problems.append(f"workflow.triage_verdict.category: one of {', '.join(TRIAGE_CATEGORIES)}")
    if verdict.get("confidence") not in TRIAGE_CONFIDENCES:
        problems.append("workflow.triage_verdict.confidence: one of high, medium, low")
    summary = verdict.get("summary")
    if not isinstance(summary, str) or not summary.strip() or len(summary) > MAX_TRIAGE_SUMMARY:
        problems.append(f"workflow.triage_verdict.summary: 1 to {MAX_TRIAGE_SUMMARY} characters")
    return problems


def _text(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _http_url(value: Any) -> bool:
    parts = urllib.parse.urlsplit(value) if isinstance(value, str) else None
    return bool(parts and parts.scheme in ("http", "https") and parts.netloc)


def _parse_iso(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _timestamp(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        _parse_iso(value)
    except ValueError:
        return False
    return True
