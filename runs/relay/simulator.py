"""A local stand-in for CRCR's relay callback endpoint that enforces the real relay's rules.

Imports nothing from Django: the test suite and users dry-running an integration start it
in-process (`with RelaySimulator(...) as relay:`); `manage.py relay_simulator` runs it in
the foreground. What it copies from the real relay, and what it adds, is in `runs/relay/README.md`.

A request passes, in the real relay's order: failure injection, path and method, JSON,
bearer token (401), allowlist level (below L2: 200 `ignored`), per-repository rate limit
(429), body validation (400), then either the nightly self-report path or the dispatch
record (400 when unknown) and the per-job state machine (400 when repeated or out of order).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from runs.relay.protocol import (
    AUDIENCE,
    CALLBACK_PATH,
    MAX_BODY_BYTES,
    SELF_REPORT_EVENT_TYPES,
    validate_callback,
)

LEVELS = ("L1", "L2", "L3", "L4")
ADMIN_PREFIX = "/_simulator/"
IN_PROGRESS, COMPLETED = "IN_PROGRESS", "COMPLETED"


class JobKey(NamedTuple):
    """One HUD job as the relay's state machine keys it."""

    delivery_id: str
    repo: str
    run_id: str
    run_attempt: str
    job_name: str


class Accepted(NamedTuple):
    key: JobKey
    status: str
    body: dict[str, Any]


@dataclass(frozen=True)
class Refused:
    status: int
    reason: str
    detail: str
    repo: str | None = None
    key: JobKey | None = None
    body: Any = None


Reply = tuple[int, dict[str, Any], dict[str, str]]


class RelaySimulator:
    """CRCR's callback endpoint, in memory, over real HTTP on loopback.

    `tokens` maps each accepted bearer token to the repository it proves, as an OIDC
    token's `repository` claim does; `token` is a shorthand for one token proving `repo`
    (default: the first repository of the allowlist).
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        allowlist: Mapping[str, str] | None = None,
        *,
        repo: str | None = None,
        tokens: Mapping[str, str] | None = None,
        rate_limit: int = 100,
        rate_window: float = 60.0,
        accept_unsigned_oidc: bool = False,
        auto_dispatch: bool = False,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.allowlist = {name: _level(level) for name, level in (allowlist or {}).items()}
        self.tokens = dict(tokens or {})
        if token is not None:
            proven = repo or next(iter(self.allowlist), None)
            if proven is None:
                raise ValueError("a token needs a repository: pass repo= or an allowlist")
            self.tokens[token] = proven
        if rate_limit < 1 or rate_window <= 0:
            raise ValueError("the rate limit needs at least one request per positive window")
        self.host, self.port = host, port
        self.rate_limit, self.rate_window = rate_limit, rate_window
        self.accept_unsigned_oidc, self.auto_dispatch, self.log = (
            accept_unsigned_oidc,
            auto_dispatch,
            log,
        )
        # One lock guards every piece of state below: handler threads run concurrently,
        # and a transition must be checked and recorded atomically, as the relay's is.
        self._lock = threading.Lock()
        self._dispatched: dict[tuple[str, str], dict[str, Any]] = {}
        self._jobs: dict[JobKey, str] = {}
        self._hits: dict[str, deque[float]] = {}
        self._fail_until, self._fail_status = 0.0, 503
        self._fail_next: deque[tuple[int, str | None]] = deque()
        self._lose_next: deque[int] = deque()
        self._accepted: list[Accepted] = []
        self._refused: list[Refused] = []
        self._ignored: list[tuple[str, Any]] = []
        self._lost: list[Accepted] = []
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle ------------------------------------------------------------------------

    def start(self) -> RelaySimulator:
        server = ThreadingHTTPServer((self.host, self.port), _Handler)
        server.daemon_threads = True
        server.simulator = self  # type: ignore[attr-defined]
        self._server, self.port = server, server.server_address[1]
        # A short poll interval makes stop() quick; the server idles cheaply either way.
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.02}, name="relay-simulator"
        )
        self._thread.daemon = True
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> RelaySimulator:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def url(self) -> str:
        """The callback endpoint: what a bridge or crcr is configured with as RELAY_URL."""
        return self.base_url + CALLBACK_PATH

    # --- what the relay knows and did -----------------------------------------------------

    def dispatch(
        self, delivery_id: str, repo: str, payload: dict[str, Any], event_type: str | None = None
    ) -> dict[str, Any]:
        """Record a dispatch to `repo`, as the relay's webhook side does, and return the
        client_payload that repository_dispatch would carry."""
        if repo not in self.allowlist:
            raise ValueError(f"{repo} is not on the allowlist: the relay dispatches only there")
        event_type = event_type or ("pull_request" if "pull_request" in payload else "push")
        client_payload = {"event_type": event_type, "delivery_id": delivery_id, "payload": payload}
        with self._lock:
            if (delivery_id, repo) in self._dispatched:
                raise ValueError(f"{delivery_id} was already dispatched to {repo}")
            self._dispatched[(delivery_id, repo)] = client_payload
        return client_payload

    @property
    def accepted(self) -> list[Accepted]:
        with self._lock:
            return list(self._accepted)

    @property
    def refused(self) -> list[Refused]:
        with self._lock:
            return list(self._refused)

    @property
    def ignored(self) -> list[tuple[str, Any]]:
        with self._lock:
            return list(self._ignored)

    @property
    def lost_answers(self) -> list[Accepted]:
        """Transitions recorded whose answer was replaced by a 5xx (see `lose_answers`)."""
        with self._lock:
            return list(self._lost)

    def states(self) -> dict[JobKey, str]:
        with self._lock:
            return dict(self._jobs)

    # --- faults ---------------------------------------------------------------------------

    def fail_for(self, seconds: float, status: int = 503) -> None:
        """Answer every callback with `status` for `seconds`, recording nothing."""
        with self._lock:
            self._fail_until, self._fail_status = time.monotonic() + seconds, status

    def fail_next(self, n: int, status: int = 503, retry_after: str | None = None) -> None:
        """Answer the next `n` callbacks with `status`, with a Retry-After header when one
        is given (a 429 always has one: one second unless told otherwise)."""
        if retry_after is None and status == 429:
            retry_after = "1"
        with self._lock:
            self._fail_next.extend([(status, retry_after)] * n)

    def lose_answers(self, n: int, status: int = 502) -> None:
        """Record the next `n` valid transitions but answer `status`, as when the relay
        times out after its state write: the sender cannot know the transition landed."""
        with self._lock:
            self._lose_next.extend([status] * n)

    # --- the endpoint ---------------------------------------------------------------------

    def answer(self, method: str, path: str, headers: Mapping[str, str], raw: bytes) -> Reply:
        """The relay's answer to one HTTP request: (status, JSON body, extra headers)."""
        path = urlsplit(path).path
        if path.startswith(ADMIN_PREFIX):
            return self._admin(method, path, raw)
        with self._lock:
            reply = self._answer_locked(method, path, headers, raw)
        if self.log:
            self.log(f"{reply[0]} {reply[1].get('status') or reply[1].get('detail')}")
        return reply

    def _answer_locked(
        self, method: str, path: str, headers: Mapping[str, str], raw: bytes
    ) -> Reply:
        injected, retry_after = self._injected_status()
        if injected:
            extra = {"Retry-After": retry_after} if retry_after is not None else {}
            return self._refuse(
                injected, "injected_failure", "simulated relay failure", extra=extra
            )
        if path != CALLBACK_PATH:
            return self._refuse(404, "not_found", "Not found")
        if method != "POST":
            return self._refuse(405, "method_not_allowed", "Method not allowed")
        if len(raw) > MAX_BODY_BYTES:
            return self._refuse(413, "too_large", f"body over {MAX_BODY_BYTES} bytes")
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            return self._refuse(400, "invalid_json", "Invalid JSON body")
        authorization = next((v for k, v in headers.items() if k.lower() == "authorization"), "")
        repo = self._repo_for(authorization)
        if repo is None:
            return self._refuse(401, "unauthorized", "Invalid authorization token", body=body)
        if LEVELS.index(self.allowlist.get(repo, "L1")) < LEVELS.index("L2"):
            self._ignored.append((repo, body))
            return 200, {"ok": True, "status": "ignored"}, {}
        wait = self._rate_limited(repo)
        if wait is not None:
            detail = f"rate limit exceeded for {repo}"
            extra = {"Retry-After": str(wait)}
            return self._refuse(429, "rate_limited", detail, repo=repo, body=body, extra=extra)
        problems = validate_callback(body)
        if problems:
            detail = "callback body invalid: " + "; ".join(problems)
            return self._refuse(
                400, "invalid_body", detail, repo=repo, body=body, problems=problems
            )
        return self._transition(repo, body)

    def _transition(self, repo: str, body: dict[str, Any]) -> Reply:
        wf, status = body["workflow"], body["workflow"]["status"]
        key = JobKey(body["delivery_id"], repo, wf["run_id"], wf["run_attempt"], wf["job_name"])
        if body["event_type"] in SELF_REPORT_EVENT_TYPES:
            # The relay keeps no state for self-reports: one `completed`, no dispatch record.
            return self._accept(key, status, body)
        if (key.delivery_id, repo) not in self._dispatched and not self.auto_dispatch:
            detail = "callback rejected: no matching dispatch record"
            return self._refuse(400, "unknown_delivery", detail, repo=repo, key=key, body=body)
        current = self._jobs.get(key)
        target = IN_PROGRESS if status == "in_progress" else COMPLETED
        expected = None if target == IN_PROGRESS else IN_PROGRESS
        if current != expected:
            reason = "duplicate" if current == target else "out_of_order"
            detail = (
                f"callback rejected: invalid state transition ({reason}: "
                f"{current or 'DISPATCHED'} -> {target}) delivery_id={key.delivery_id} "
                f"repo={repo} job={key.job_name} status={status}"
            )
            return self._refuse(400, reason, detail, repo=repo, key=key, body=body)
        self._jobs[key] = target
        return self._accept(key, status, body)

    def _accept(self, key: JobKey, status: str, body: dict[str, Any]) -> Reply:
        entry = Accepted(key, status, body)
        self._accepted.append(entry)
        if self._lose_next:
            self._lost.append(entry)
            return self._lose_next.popleft(), {"detail": "simulated: answer lost"}, {}
        return 200, {"ok": True, "status": status}, {}

    def _refuse(
        self,
        status: int,
        reason: str,
        detail: str,
        *,
        repo: str | None = None,
        key: JobKey | None = None,
        body: Any = None,
        extra: dict[str, str] | None = None,
        problems: list[str] | None = None,
    ) -> Reply:
        self._refused.append(Refused(status, reason, detail, repo, key, body))
        answer: dict[str, Any] = {"detail": detail, "reason": reason}
        if problems:
            answer["problems"] = problems
        return status, answer, extra or {}

    def _injected_status(self) -> tuple[int | None, str | None]:
        """The status (and Retry-After) of an injected failure, or (None, None)."""
        if self._fail_next:
            return self._fail_next.popleft()
        if time.monotonic() < self._fail_until:
            return self._fail_status, "1" if self._fail_status == 429 else None
        return None, None

    def _rate_limited(self, repo: str) -> int | None:
        """Seconds to wait, or None. Every request counts, refused ones too, as in the relay."""
        now = time.monotonic()
        hits = self._hits.setdefault(repo, deque())
        hits.append(now)
        while hits and hits[0] <= now - self.rate_window:
            hits.popleft()
        if len(hits) <= self.rate_limit:
            return None
        # The oldest hit that must leave the window before one more request fits.
        return max(1, math.ceil(hits[-self.rate_limit] + self.rate_window - now))

    def _repo_for(self, authorization: str) -> str | None:
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        token = token.strip()
        if token in self.tokens:
            return self.tokens[token]
        return _unsigned_oidc_repo(token) if self.accept_unsigned_oidc else None

    def _admin(self, method: str, path: str, raw: bytes) -> Reply:
        """Local-only helpers for a simulator run from the command line."""
        if method == "GET" and path == ADMIN_PREFIX + "log":
            with self._lock:
                log = {
                    "accepted": [
                        {"key": e.key._asdict(), "status": e.status} for e in self._accepted
                    ],
                    "refused": [
                        {"status": r.status, "reason": r.reason, "detail": r.detail}
                        for r in self._refused
                    ],
                    "ignored": [repo for repo, _ in self._ignored],
                }
            return 200, log, {}
        if method == "POST" and path == ADMIN_PREFIX + "dispatches":
            try:
                spec = json.loads(raw)
                client_payload = self.dispatch(
                    spec["delivery_id"], spec["repo"], spec["payload"], spec.get("event_type")
                )
            except (ValueError, KeyError, TypeError) as error:
                return 400, {"detail": f"cannot dispatch: {error}"}, {}
            return 201, client_payload, {}
        return 404, {"detail": "Not found"}, {}


def _level(level: str) -> str:
    level = str(level).upper()
    if level not in LEVELS:
        raise ValueError(f"allowlist levels are {', '.join(LEVELS)}, not {level!r}")
    return level


def _unsigned_oidc_repo(token: str) -> str | None:
    """The `repository` claim of a JWT for the relay's audience, signature NOT checked.

    For dry runs only: it lets a real Actions OIDC token (or a hand-made one) stand in.
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
    expired = isinstance(claims.get("exp"), int | float) and claims["exp"] < time.time()
    if AUDIENCE not in audiences or expired or not isinstance(claims.get("repository"), str):
        return None
    return claims["repository"]


class _Handler(BaseHTTPRequestHandler):
    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        simulator: RelaySimulator = self.server.simulator  # type: ignore[attr-defined]
        headers = dict(self.headers.items())
        status, body, extra = simulator.answer(self.command, self.path, headers, raw)
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in extra.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the simulator's own `log` reports each answer
