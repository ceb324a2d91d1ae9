"""Runs that queue HUD callbacks (or, for the bridge to report, none) and a stand-in Actions
runtime: a reporter claims what a backend with an `actions` sender queues."""

import base64
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from crcr_reuse.outcomes import TestRecord

from runs import results, shard_worker
from runs.models import Backend, Run, Shard, Trigger
from runs.relay import outbox, protocol
from tests.factories import make_backend, make_config
from tests.runs.relay_runs import REPO, dispatched_run, make_run

RUNTIME_TOKEN = "actions-runtime-t0ken"


def reporting_backend(relay_url: str, mode: str = "per_job") -> Backend:
    """A backend whose callbacks a GitHub Actions reporter sends: crcr holds no relay token."""
    backend = make_backend(
        "acme", relay_url=relay_url, relay_token="none", relay_sender="actions", relay_mode=mode
    )
    make_config(backend)
    return backend


def one_job_started(backend: Backend) -> Run:
    """A dispatched run whose first shard started: with crcr's relay worker as the sender, one
    in_progress queued (the run's, or in per-job mode the shard's)."""
    run = dispatched_run(backend)
    start_shard(run, 0)
    return run


def self_reported_run(backend: Backend, kind: str, sha: str, ref: str = "") -> Run:
    """A finished nightly, release or manual run: one `completed` self-report is queued."""
    trigger = Trigger.objects.create(backend=backend, kind=kind, pytorch_sha=sha, ref=ref)
    run = make_run(backend, trigger)
    shard = start_shard(run, 0)
    finish_shard(shard)
    results.finish_if_done(run.pk)
    return run


def start_shard(run: Run, index: int) -> Shard:
    shard = Shard.objects.create(run=run, index=index, test_ids=[], status="running")
    outbox.job_started(run, shard)
    return shard


def finish_shard(shard: Shard, outcomes: tuple[str, ...] = ("passed", "passed")) -> None:
    """The shard's tests ran: its results stored and the shard done, as its worker does it
    (in per-job mode that queues the shard's `completed`)."""
    records = [
        TestRecord(node_id=f"test/t.py::T::test_{shard.index}_{number}", outcome=outcome)
        for number, outcome in enumerate(outcomes)
    ]
    shard_worker.store(shard, records)


class ActionsRuntime:
    """The Actions runtime's ID-token endpoint (ACTIONS_ID_TOKEN_REQUEST_URL): an unsigned
    JWT for the audience asked, whose `repository` claim is REPO, as a job would get."""

    def __init__(self) -> None:
        self.requests: list[tuple[list[str] | None, str]] = []
        runtime = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                audience = parse_qs(urlsplit(self.path).query).get("audience")
                scheme, _, credential = (self.headers.get("Authorization") or "").partition(" ")
                authorization = f"{scheme.lower()} {credential}"  # the scheme is case-blind
                runtime.requests.append((audience, authorization))
                if authorization != f"bearer {RUNTIME_TOKEN}" or audience is None:
                    status, body = 403, {"message": "bad runtime token"}
                else:
                    status, body = 200, {"value": jwt(audience[0])}
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/_apis/token?api-version=2.0"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def jwt(audience: str) -> str:
    claims = {"aud": audience, "repository": REPO, "iss": "https://token.actions.githubusercontent.com", "exp": time.time() + 300}  # fmt: skip
    encoded = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
    return f"eyJhbGciOiJub25lIn0.{encoded}.unsigned"


def relay_audience_only(runtime: ActionsRuntime) -> bool:
    """Every token the reporter minted was for the relay's audience, with the runtime token."""
    wanted = ([protocol.AUDIENCE], f"bearer {RUNTIME_TOKEN}")
    return bool(runtime.requests) and all(request == wanted for request in runtime.requests)
