"""The real relay's rules, as `RelaySimulator` applies them: parsing, keys, transitions, the HUD.

Read from pytorch/test-infra at 61a77570f4. Paths are under `aws/lambda/cross_repo_ci_relay/`
unless they start with `torchci/`; each function names the code it copies, with lines.
Nothing here holds state: the simulator owns its records and calls these with them.
"""

from __future__ import annotations

import base64
import binascii
import copy
import json
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, NamedTuple

from runs.relay.protocol import AUDIENCE

LEVELS = ("L1", "L2", "L3", "L4")  # utils/allowlist.py:30-34
DISPATCHED, IN_PROGRESS, COMPLETED = "DISPATCHED", "IN_PROGRESS", "COMPLETED"
NIGHTLY_EVENT_TYPES = frozenset({"nightly", "periodic"})  # callback/callback_handler.py:25
STATE_TTL = 259_200  # CRCR_STATUS_TTL, utils/config.py:137-143
ZOMBIE_TIMEOUT = 21_600  # ZOMBIE_TIMEOUT_SECONDS, utils/config.py:158-162
RATE_LIMIT_PER_MIN = 100  # RATE_LIMIT_PER_MIN, utils/config.py:156
HUD_MAX_RETRIES = 3  # HUD_MAX_RETRIES, utils/config.py:145-152
HUD_MAX_BYTES = 2 * 1024 * 1024  # torchci/pages/api/crcr/results.ts:10-16, bodyParser "2mb"
# Node's reason phrases, which the relay quotes in "HUD rejected callback: HTTP <code>: ...".
HUD_PHRASES = {400: "Bad Request", 413: "Payload Too Large"}


class JobKey(NamedTuple):
    """One HUD job as the relay's state machine keys it (run_id and run_attempt as integers,
    written back as text; no job_name: "")."""

    delivery_id: str
    repo: str
    run_id: str
    run_attempt: str
    job_name: str


class Accepted(NamedTuple):
    """A transition the relay recorded (or a nightly report it took)."""

    key: JobKey
    status: str
    body: dict[str, Any]


@dataclass(frozen=True)
class Refused:
    """An answer other than 200, and why (`reason`: the simulator's own word)."""

    status: int
    reason: str
    detail: str
    repo: str | None = None
    key: JobKey | None = None
    body: Any = None


class Reject(Exception):
    """An answer other than 200, raised from inside the relay's steps as its HTTPException is."""

    def __init__(self, status: int, reason: str, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.status, self.reason, self.detail = status, reason, detail
        self.key: JobKey | None = extra.get("key")
        self.headers: dict[str, str] = extra.get("headers") or {}
        self.problems: list[str] | None = extra.get("problems")


@dataclass
class Record:
    """One Redis state key: its state, when it was written and when it expires."""

    state: str
    timestamp: float
    expires: float
    key: JobKey | None = None
    body: Any = None  # an in_progress body: what the sweeper reports as timed out
    level: str = "L2"


class Fields(NamedTuple):
    """What `_parse_callback_body` takes from a body (callback/callback_handler.py:82-104)."""

    delivery_id: Any
    status: Any
    run_id: int
    run_attempt: int
    name: Any
    job_name: Any

    def key(self, repo: str) -> JobKey:
        job = str(self.job_name) if self.job_name else ""
        return JobKey(str(self.delivery_id), repo, str(self.run_id), str(self.run_attempt), job)


def allowlist_level(level: str) -> str:
    level = str(level).upper()
    if level not in LEVELS:
        raise ValueError(f"allowlist levels are {', '.join(LEVELS)}, not {level!r}")
    return level


def parse_json(raw: bytes) -> Any:
    """The Lambda's parse (callback/lambda_function.py:47, 60-66), before authentication."""
    try:
        return json.loads(raw) if raw else {}
    except json.JSONDecodeError:
        raise Reject(400, "invalid_json", "Invalid JSON body") from None
    except ValueError:  # not UTF-8: the Lambda's catch-all
        raise Reject(500, "internal_error", "Internal server error") from None


def bearer_token(headers: Mapping[str, str]) -> str:
    """The token verify_oidc_token checks (utils/jwt_helper.py:208-221): "Bearer " optional."""
    authorization = next((v for k, v in headers.items() if k.lower() == "authorization"), "")
    if not authorization:
        raise Reject(401, "unauthorized", "Missing authorization token")
    if authorization.lower().startswith("bearer "):
        return authorization[7:].strip()
    return authorization


def parse_fields(body: dict[str, Any]) -> Fields:
    """_parse_callback_body: a missing or mistyped field is 400, but int("abc") raises
    ValueError, which only the Lambda's catch-all answers: 500."""
    try:
        workflow = body["workflow"]
        return Fields(
            body["delivery_id"],
            workflow["status"],
            int(workflow["run_id"]),
            int(workflow.get("run_attempt", 1)),
            workflow["name"],
            workflow.get("job_name"),
        )
    except (KeyError, TypeError) as error:
        detail = f"callback body missing required field: {error}"
        raise Reject(400, "invalid_body", detail) from None
    except (ValueError, OverflowError):
        raise Reject(500, "internal_error", "Internal server error") from None


def state_key(
    delivery_id: Any, repo: str, run_id: int, run_attempt: int, job_name: Any = None
) -> str:
    """_state_key, which is also _in_progress_member (utils/redis_helper.py:295-312, 469-480)."""
    key = f"{delivery_id}:{repo}:{run_id}:{run_attempt}"
    return f"{key}:{job_name}" if job_name else key


def parse_member(member: str) -> tuple[str, str, int, int, str | None] | None:
    """_parse_in_progress_member (utils/redis_helper.py:483-506): a last part that is no
    integer is the job name, so a job whose name holds ":" is dropped, never swept."""
    parts = member.split(":")
    if len(parts) < 4:
        return None
    job_name = None
    try:
        int(parts[-1])
    except ValueError:
        job_name, parts = parts[-1], parts[:-1]
    try:
        run_attempt, run_id = int(parts[-1]), int(parts[-2])
    except ValueError:
        return None
    return parts[0], ":".join(parts[1:-2]), run_id, run_attempt, job_name


def refusal(run_id: int, current: Record | None, target: str) -> str | None:
    """Why set_callback_state refuses a transition (utils/redis_helper.py:378-445), or None."""
    if current is not None and (target == IN_PROGRESS or current.state != IN_PROGRESS):
        return "duplicate" if current.state == target else "out_of_order"
    if current is None and target == COMPLETED:
        return "out_of_order"
    if run_id == 0:  # reserved for dispatch records (utils/misc.py:30-35)
        return "reserved_run_id"
    return None


def delta(start: float | None, end: float | None) -> float | None:
    """_safe_delta (callback/callback_handler.py:43-54): its digits count in the forward."""
    if start is None or end is None:
        return None
    seconds = round(end - start, 3)
    return 0 if seconds < 0 else seconds


def trusted(
    repo: str, level: str, queue_time: float | None, execution_time: float | None
) -> dict[str, Any]:
    """_build_trusted (callback/callback_handler.py:28-40)."""
    metrics = {"queue_time": queue_time, "execution_time": execution_time}
    return {"ci_metrics": metrics, "verified_repo": repo, "downstream_repo_level": level}


def forward_bytes(trusted: dict[str, Any], body: Any) -> bytes:
    """What forward_to_hud POSTs (utils/hud.py:37-42): json.dumps' defaults, ensure_ascii."""
    return json.dumps({"trusted": trusted, "untrusted": {"callback_payload": body}}).encode()


def hud_status(data: bytes, body: dict[str, Any]) -> int:
    """What the HUD answers a forward (torchci/pages/api/crcr/results.ts:10-46,
    torchci/lib/crcr/crcrUtils.ts:89-111): 413 over 2 MiB, 400 without job_name (falsy in
    JavaScript) or check_run_id (null or missing), else 200."""
    if len(data) > HUD_MAX_BYTES:
        return 413
    workflow = body["workflow"]
    job_name = workflow.get("job_name")
    js_falsy = job_name in (None, "", 0) or job_name is False or job_name != job_name  # NaN
    return 400 if js_falsy or workflow.get("check_run_id") is None else 200


def hud_key(repo: str, body: dict[str, Any]) -> str:
    """The HUD's row of a job: extractDynamoRecord's dynamoKey, repo/delivery_id/workflow
    name/job_name/check_run_id (torchci/lib/crcr/crcrUtils.ts at 0a1140dfc7, lines 110-113).
    writeToDynamo is an UpdateItem (lines 170-196): a body sent again lands on the same row,
    and only its non-null fields are written."""
    workflow = body["workflow"]
    parts = (body["delivery_id"], workflow["name"], workflow["job_name"], workflow["check_run_id"])
    return "/".join([repo, *map(str, parts)])


class HudTable:
    """The HUD's table of jobs (`torchci-oot-workflow-job`): one row per `hud_key`, holding
    what `hud_record` extracts from each forward."""

    def __init__(self) -> None:
        self._rows: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def write(self, trusted: dict[str, Any], body: dict[str, Any]) -> None:
        record = hud_record(trusted, body)
        with self._lock:
            self._rows.setdefault(hud_key(trusted["verified_repo"], body), {}).update(record)

    def rows(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return {key: dict(row) for key, row in self._rows.items()}


def hud_record(trusted: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    """extractDynamoRecord (torchci/lib/crcr/crcrUtils.ts at 0a1140dfc7, lines 97-181): the
    columns the HUD writes, only those with a value (writeToDynamo's UpdateItem skips the
    undefined). It stores `artifact_url` when truthy; `failed_tests_json` and `environment`
    are columns (schema.sql) that it does not fill: the body's failure details and
    environment reach the HUD untouched inside `callback_payload` and stay there."""
    workflow, payload = body["workflow"], body.get("payload") or {}
    pr = payload.get("pull_request") or {}
    metrics = trusted.get("ci_metrics") or {}
    record: dict[str, Any] = {
        "status": workflow.get("status"),
        "downstream_repo": trusted["verified_repo"],
        "upstream_repo": (payload.get("repository") or {}).get("full_name") or "pytorch/pytorch",
        "pr_number": pr.get("number") or 0,
        "pytorch_head_sha": (pr.get("head") or {}).get("sha")
        or payload.get("head_sha")
        or body.get("delivery_id")
        or "",
        "delivery_id": body.get("delivery_id"),
        "workflow_run_url": workflow.get("url") or "",
        "workflow_name": workflow.get("name"),
        "job_name": workflow.get("job_name"),
        "check_run_id": str(workflow.get("check_run_id")),
        "run_id": workflow.get("run_id") or "",
        "run_attempt": _js_number(workflow.get("run_attempt")),
        "downstream_repo_level": trusted.get("downstream_repo_level") or None,
        "event_type": body.get("event_type") or None,
        "queue_time": metrics.get("queue_time"),
        "execution_time": metrics.get("execution_time"),
        "started_at": workflow.get("started_at") or None,
        "artifact_url": workflow.get("artifact_url") or None,
    }
    if workflow.get("status") == "completed":
        record["conclusion"] = workflow.get("conclusion")
        record["completed_at"] = workflow.get("completed_at") or None
        results = workflow.get("test_results")
        if results:
            record.update(_test_columns(results))
    return {key: value for key, value in record.items() if value is not None}


def _js_number(value: Any) -> int | float:
    """`Number(x ?? 1) || 1`: a run attempt the HUD cannot read as a number is 1."""
    try:
        number = float(1 if value is None else value)
    except (TypeError, ValueError):
        return 1
    return (
        1 if number != number or number == 0 else (int(number) if number.is_integer() else number)
    )


def _test_columns(results: dict[str, Any]) -> dict[str, Any]:
    """The counts, `typeof === "number"` each; `total_tests` summed when not given."""
    numbers = {key: value for key, value in results.items() if _js_typeof_number(value)}
    columns = {
        f"{key}_tests": numbers[key] for key in ("passed", "failed", "skipped") if key in numbers
    }
    total = numbers.get("total")
    columns["total_tests"] = (
        total
        if total is not None
        else sum(results.get(key) or 0 for key in ("passed", "failed", "skipped"))
    )
    return columns


def _js_typeof_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def hud_rejected(status: int) -> Reject:
    """The relay's answer to a HUD 4xx: the same code (utils/hud.py:61-65)."""
    try:
        phrase = HUD_PHRASES.get(status) or HTTPStatus(status).phrase
    except ValueError:
        phrase = ""
    return Reject(status, "hud_rejected", f"HUD rejected callback: HTTP {status}: {phrase}")


def hud_failed(last_status: int | None, rate_limit: int) -> Reject:
    """The relay's answer once its HUD retries are spent (utils/hud.py:87-108): 500."""
    if last_status is None:  # the URLError is re-raised: the Lambda's catch-all
        return Reject(500, "hud_failed", "Internal server error")
    return Reject(
        500,
        "hud_failed",
        "An internal failure occurred. Your update was not saved, but the CI run is still "
        "valid. You can attempt progressive retries after "
        f"{max(1, 60 // rate_limit)} seconds or ignore this failure.",
    )


def timed_out(body: dict[str, Any], now: float) -> dict[str, Any]:
    """_build_timeout_payload (callback/cleanup_handler.py:26-54): the in_progress body,
    completed as timed_out."""
    body = copy.deepcopy(body)
    completed_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
    body["workflow"].update(status="completed", conclusion="timed_out", completed_at=completed_at)
    return body


def unsigned_oidc_repo(token: str, now: float) -> str | None:
    """The `repository` claim of a JWT for the relay's audience, signature NOT checked.

    Not the relay's rule: for dry runs only, it lets an Actions OIDC token stand in.
    """
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, binascii.Error):
        return None
    if not isinstance(claims, dict):
        return None
    audience = claims.get("aud")
    audiences = audience if isinstance(audience, list) else [audience]
    expired = isinstance(claims.get("exp"), int | float) and claims["exp"] < now
    if AUDIENCE not in audiences or expired or not isinstance(claims.get("repository"), str):
        return None
    return claims["repository"]
