"""A local stand-in for CRCR's relay callback endpoint that answers as the real relay does.

Imports nothing from Django: the test suite and users dry-running an integration start it
in-process (`with RelaySimulator(...) as relay:`); `manage.py relay_simulator` runs it in the
foreground. Its rules were read from pytorch/test-infra at 61a77570f4
(`aws/lambda/cross_repo_ci_relay/`); `runs/relay/README.md` cites them and lists what it adds.

A request passes, in the relay's order: injected faults (the simulator's own), path and
method, JSON (400), bearer token (401), allowlist level (below L2: 200 `ignored`), the
per-repository rate limit (429, no Retry-After), with `strict=True` crcr's own
`validate_callback` (400), the relay's field parsing (400 for a missing field, 500 for a
`run_id` that is no integer), then either the nightly path (`completed` only, no state) or the
dispatch record (400 when unknown or expired), the per-job state machine (400 when repeated or
out of order) and the state write, and last the forward to a HUD that refuses what the real
one does (413 over 2 MiB, 400 without `job_name` or `check_run_id`): after the state moved.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from runs.relay import relay_rules as rules
from runs.relay.protocol import CALLBACK_PATH, validate_callback
from runs.relay.relay_rules import (
    COMPLETED,
    DISPATCHED,
    IN_PROGRESS,
    RATE_LIMIT_PER_MIN,
    STATE_TTL,
    ZOMBIE_TIMEOUT,
    Accepted,
    JobKey,
    Refused,
)

ADMIN_PREFIX = "/_simulator/"


Reply = tuple[int, dict[str, Any], dict[str, str]]


class RelaySimulator:
    """CRCR's callback endpoint, in memory, over real HTTP on loopback.

    `tokens` maps each accepted bearer token to the repository it proves, as an OIDC token's
    `repository` claim does; `token` is a shorthand for one token proving `repo` (default: the
    first repository of the allowlist). `clock` (seconds, default `time.time`) and `advance()`
    drive the state TTL, the sweeper, the rate window and `fail_for`. `hud=False` is a relay
    without HUD_API_URL (it forwards nothing, as in the relay's own tests); `strict=True` also
    refuses what crcr's `validate_callback` would, for tests that check crcr's own bodies.
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
        rate_limit: int = RATE_LIMIT_PER_MIN,
        rate_window: float = 60.0,
        rate_limit_retry_after: str | None = None,
        strict: bool = False,
        hud: bool = True,
        state_ttl: float = STATE_TTL,
        zombie_timeout: float = ZOMBIE_TIMEOUT,
        auto_sweep: bool = True,
        clock: Callable[[], float] = time.time,
        accept_unsigned_oidc: bool = False,
        auto_dispatch: bool = False,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.allowlist = {
            name: rules.allowlist_level(level) for name, level in (allowlist or {}).items()
        }
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
        self.rate_limit_retry_after = rate_limit_retry_after
        self.strict, self.hud, self.auto_sweep = strict, hud, auto_sweep
        self.state_ttl, self.zombie_timeout = state_ttl, zombie_timeout
        self.accept_unsigned_oidc, self.auto_dispatch = accept_unsigned_oidc, auto_dispatch
        self.log = log
        self._clock, self._offset = clock, 0.0
        # One lock guards every piece of state below: handler threads run concurrently, and
        # a transition is checked and recorded atomically (the relay's get-then-setex is not,
        # but two racing callbacks of one job are a sender's bug either way).
        self._lock = threading.Lock()
        self._records: dict[str, rules.Record] = {}  # Redis state keys, without "crcr:state:"
        self._tracker: dict[str, float] = {}  # the in-progress ZSET: member -> deadline
        self._hits: dict[str, deque[float]] = {}
        self.rate_peaks: dict[str, int] = {}  # repo: the most requests counted in one window
        self._fail_until, self._fail_status = 0.0, 503
        self._fail_retry_after: str | None = None
        self._fail_next: deque[tuple[int, str | None]] = deque()
        self._lose_next: deque[int] = deque()
        self._hud_faults: deque[int | None] = deque()
        self._accepted: list[Accepted] = []
        self._refused: list[Refused] = []
        self._ignored: list[tuple[str, Any]] = []
        self._lost: list[Accepted] = []
        self._swept: list[Accepted] = []
        self.hud_table = rules.HudTable()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

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

    def now(self) -> float:
        """The simulator's time: `clock()` moved on by every `advance`."""
        return self._clock() + self._offset

    def advance(self, seconds: float) -> None:
        """Move the clock on, then let the sweeper run (unless `auto_sweep=False`)."""
        with self._lock:
            self._offset += seconds
            if self.auto_sweep:
                self._sweep(self.now())

    def sweep(self) -> list[JobKey]:
        """Run the relay's zombie sweeper now; returns the jobs it reported timed out."""
        with self._lock:
            return self._sweep(self.now())

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
            now, key = self.now(), rules.state_key(delivery_id, repo, 0, 0)
            if self._get(key, now) is not None:
                raise ValueError(f"{delivery_id} was already dispatched to {repo}")
            self._records[key] = rules.Record(DISPATCHED, now, now + self.state_ttl)
        return client_payload

    @property
    def accepted(self) -> list[Accepted]:
        """Every transition the relay recorded (and nightly report it took), in order."""
        return self._copy(self._accepted)

    @property
    def refused(self) -> list[Refused]:
        return self._copy(self._refused)

    @property
    def ignored(self) -> list[tuple[str, Any]]:
        return self._copy(self._ignored)

    @property
    def lost_answers(self) -> list[Accepted]:
        """Transitions recorded but answered 5xx (`lose_answers`, or a HUD that failed)."""
        return self._copy(self._lost)

    @property
    def swept(self) -> list[Accepted]:
        """Jobs the sweeper reported to the HUD as `timed_out`, with the body it sent."""
        return self._copy(self._swept)

    def _copy(self, entries: list[Any]) -> list[Any]:
        with self._lock:
            return list(entries)

    def states(self) -> dict[JobKey, str]:
        with self._lock:
            now = self.now()
            return {
                record.key: record.state
                for record in self._records.values()
                if record.key is not None and record.expires > now
            }

    # --- faults ---------------------------------------------------------------------------

    def fail_for(self, seconds: float, status: int = 503, retry_after: str | None = None) -> None:
        """Answer every callback with `status` for `seconds`, recording nothing."""
        with self._lock:
            self._fail_until, self._fail_status = self.now() + seconds, status
            self._fail_retry_after = retry_after

    def fail_next(self, n: int, status: int = 503, retry_after: str | None = None) -> None:
        """Answer the next `n` callbacks with `status`; with a Retry-After header only when
        `retry_after` is given (the relay's own 429 has none)."""
        with self._lock:
            self._fail_next.extend([(status, retry_after)] * n)

    def lose_answers(self, n: int, status: int = 502) -> None:
        """Record the next `n` valid transitions but answer `status`, as when the relay
        times out after its state write: the sender cannot know the transition landed."""
        with self._lock:
            self._lose_next.extend([status] * n)

    def fail_hud(self, n: int, status: int | None = 500) -> None:
        """The next `n` forwards to the HUD get `status` (None: no answer). The relay retries
        a 5xx or silence HUD_MAX_RETRIES times, then answers 500; it answers a 4xx with the
        HUD's code. Either way the state has moved (utils/hud.py:54-108)."""
        with self._lock:
            self._hud_faults.extend([status] * n)

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
        now = self.now()
        if self.auto_sweep:
            self._sweep(now)
        repo: str | None = None
        body: Any = None
        try:
            self._injected(now)
            if path != CALLBACK_PATH:  # callback/lambda_function.py:32-43
                raise rules.Reject(404, "not_found", "Not found")
            if method != "POST":
                raise rules.Reject(405, "method_not_allowed", "Method not allowed")
            body = rules.parse_json(raw)
            repo = self._repo_for(headers)
            return self._handle(repo, body, now)
        except rules.Reject as rejection:
            refusal = Refused(rejection.status, rejection.reason, rejection.detail, repo)
            self._refused.append(replace(refusal, key=rejection.key, body=body))
            answer: dict[str, Any] = {"detail": rejection.detail, "reason": rejection.reason}
            if rejection.problems:
                answer["problems"] = rejection.problems
            return rejection.status, answer, rejection.headers

    def _handle(self, repo: str, body: Any, now: float) -> Reply:
        """callback_handler.handle (callback/callback_handler.py:291-431)."""
        level = self.allowlist.get(repo)
        if level is None or level == "L1":
            self._ignored.append((repo, body))
            return 200, {"ok": True, "status": "ignored"}, {}
        self._count_request(repo, now)
        if self.strict and (problems := validate_callback(body)):
            detail = "callback body invalid: " + "; ".join(problems)
            raise rules.Reject(400, "invalid_body", detail, problems=problems)
        try:
            nightly = body.get("event_type", "") in rules.NIGHTLY_EVENT_TYPES
        except (AttributeError, TypeError):  # a body that is no object; an unhashable type
            raise rules.Reject(500, "internal_error", "Internal server error") from None
        fields = rules.parse_fields(body)
        if nightly:
            return self._nightly(repo, level, body, fields)
        return self._transition(repo, level, body, fields, now)

    def _nightly(self, repo: str, level: str, body: Any, fields: rules.Fields) -> Reply:
        """No dispatch record, no state: one `completed`, forwarded (lines 255-288)."""
        key = fields.key(repo)
        if fields.status != "completed":
            detail = (
                f"nightly/periodic callbacks must have status 'completed', got {fields.status!r}"
            )
            raise rules.Reject(400, "invalid_status", detail, key=key)
        self._forward(rules.trusted(repo, level, None, None), body)
        entry = Accepted(key, "completed", body)
        self._accepted.append(entry)
        return self._ok(entry)

    def _transition(
        self, repo: str, level: str, body: Any, fields: rules.Fields, now: float
    ) -> Reply:
        key = fields.key(repo)
        dispatch = self._get(rules.state_key(fields.delivery_id, repo, 0, 0), now)
        if dispatch is None and not self.auto_dispatch:
            detail = "callback rejected: no matching dispatch record"
            raise rules.Reject(400, "unknown_delivery", detail, key=key)
        state_key = rules.state_key(
            fields.delivery_id, repo, fields.run_id, fields.run_attempt, fields.job_name
        )
        current = self._get(state_key, now)
        if fields.status not in ("in_progress", "completed"):
            detail = f"unknown callback status: {fields.status!r}"
            raise rules.Reject(400, "invalid_status", detail, key=key)
        target = IN_PROGRESS if fields.status == "in_progress" else COMPLETED
        reason = rules.refusal(fields.run_id, current, target)
        if reason:
            detail = (
                "callback rejected: invalid state transition "
                f"delivery_id={fields.delivery_id} repo={repo} status={fields.status}"
            )
            raise rules.Reject(400, reason, detail, key=key)
        self._records[state_key] = rules.Record(target, now, now + self.state_ttl, key, body, level)
        metrics: tuple[float | None, float | None]
        if target == IN_PROGRESS:
            self._tracker[state_key] = now + self.zombie_timeout
            metrics = (rules.delta(dispatch.timestamp if dispatch else None, now), None)
        else:
            self._tracker.pop(state_key, None)
            metrics = (None, rules.delta(current.timestamp if current else None, now))
        entry = Accepted(key, fields.status, body)
        self._accepted.append(entry)
        try:
            self._forward(rules.trusted(repo, level, *metrics), body)
        except rules.Reject as rejection:
            if rejection.status >= 500:
                self._lost.append(entry)
            raise
        return self._ok(entry)

    def _ok(self, entry: Accepted) -> Reply:
        if self._lose_next:
            self._lost.append(entry)
            return self._lose_next.popleft(), {"detail": "simulated: answer lost"}, {}
        return 200, {"ok": True, "status": entry.status}, {}

    def _forward(self, envelope: dict[str, Any], body: dict[str, Any]) -> None:
        """forward_to_hud (utils/hud.py:14-108): raises the relay's answer when the HUD
        refuses (its code) or keeps failing (500), 5xx and silence retried HUD_MAX_RETRIES times."""
        if not self.hud:
            return  # a relay without HUD_API_URL skips the forward (utils/hud.py:30-35)
        data = rules.forward_bytes(envelope, body)
        last: int | None = None
        for _ in range(rules.HUD_MAX_RETRIES + 1):
            last = self._hud_faults.popleft() if self._hud_faults else rules.hud_status(data, body)
            if last is not None and last < 400:
                self.hud_table.write(envelope, body)
                return
            if last is not None and last < 500:
                raise rules.hud_rejected(last)
        raise rules.hud_failed(last, self.rate_limit)

    def _sweep(self, now: float) -> list[JobKey]:
        """cleanup_handler.handle (callback/cleanup_handler.py): a job still IN_PROGRESS past
        its deadline is reported `timed_out` to the HUD, then recorded COMPLETED."""
        swept = []
        for member, deadline in sorted(self._tracker.items(), key=lambda item: item[1]):
            if deadline > now:
                continue
            parsed = rules.parse_member(member)  # the relay re-reads the key from the member
            record = self._get(rules.state_key(*parsed), now) if parsed else None
            if record is None or record.state != IN_PROGRESS or record.key is None:
                del self._tracker[member]
                continue
            body = rules.timed_out(record.body, now)
            execution = rules.delta(record.timestamp, now)
            try:
                self._forward(rules.trusted(record.key.repo, record.level, None, execution), body)
            except rules.Reject:
                continue  # kept for the sweeper's next run (cleanup_handler.py:170-206)
            record.state, record.timestamp, record.expires = COMPLETED, now, now + self.state_ttl
            del self._tracker[member]
            self._swept.append(Accepted(record.key, "timed_out", body))
            swept.append(record.key)
        return swept

    def _get(self, key: str, now: float) -> rules.Record | None:
        record = self._records.get(key)
        if record is not None and record.expires <= now:  # Redis dropped it: setex's TTL
            del self._records[key]
            return None
        return record

    def _injected(self, now: float) -> None:
        if self._fail_next:
            status, retry_after = self._fail_next.popleft()
        elif now < self._fail_until:
            status, retry_after = self._fail_status, self._fail_retry_after
        else:
            return
        headers = {"Retry-After": retry_after} if retry_after is not None else {}
        raise rules.Reject(status, "injected_failure", "simulated relay failure", headers=headers)

    def _count_request(self, repo: str, now: float) -> None:
        """check_rate_limit (utils/redis_helper.py:172-207): a sliding window in which every
        request counts, refused ones too; over the limit, 429 with no Retry-After."""
        hits = self._hits.setdefault(repo, deque())
        hits.append(now)
        while hits and hits[0] <= now - self.rate_window:
            hits.popleft()
        self.rate_peaks[repo] = max(self.rate_peaks.get(repo, 0), len(hits))
        if len(hits) > self.rate_limit:
            detail, wait = f"rate limit exceeded for {repo}", self.rate_limit_retry_after
            headers = {"Retry-After": wait} if wait is not None else {}
            raise rules.Reject(429, "rate_limited", detail, headers=headers)

    def _repo_for(self, headers: Mapping[str, str]) -> str:
        """The repository a token proves: 401 for none (utils/jwt_helper.py:208-257)."""
        token = rules.bearer_token(headers)
        if token in self.tokens:
            return self.tokens[token]
        repo = rules.unsigned_oidc_repo(token, self.now()) if self.accept_unsigned_oidc else None
        if repo is None:
            raise rules.Reject(401, "unauthorized", "Invalid authorization token")
        return repo

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
                    "swept": [e.key._asdict() for e in self._swept],
                }
            return 200, log, {}
        if method != "POST" or path not in (ADMIN_PREFIX + "dispatches", ADMIN_PREFIX + "advance"):
            return 404, {"detail": "Not found"}, {}
        try:
            spec = json.loads(raw)
            if path.endswith("/advance"):  # {"seconds": N}: move the clock on, then sweep
                self.advance(float(spec["seconds"]))
                return 200, {"now": self.now()}, {}
            client_payload = self.dispatch(
                spec["delivery_id"], spec["repo"], spec["payload"], spec.get("event_type")
            )
        except (ValueError, KeyError, TypeError) as error:
            return 400, {"detail": f"cannot do that: {error}"}, {}
        return 201, client_payload, {}


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
