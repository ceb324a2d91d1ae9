"""`python -m runs.relay.bridge` as its own process, against the relay simulator and a fake crcr."""

import base64
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

from runs.relay import protocol
from runs.relay.simulator import RelaySimulator

ROOT = Path(__file__).resolve().parents[2]
REPO = "acme/backend"
DISPATCH_ID = "5d1c0a52-0000-4000-8000-000000000001"
RUN_ID = "7e2d1b63-0000-4000-8000-000000000002"
PAYLOAD = {"action": "closed", "pull_request": {"number": 7, "head": {"sha": "c" * 40}}}
COUNTS = {"passed": 40, "failed": 0, "skipped": 2, "total": 42}


# crcr's conclusion of a finished run (runs.relay.outbox.CONCLUSIONS), as the fake answers it.
CONCLUSION = {
    "passed": "success", "failed": "failure", "cancelled": "cancelled",
    "timed_out": "timed_out", "error": "cancelled",
}  # fmt: skip


def hud_job(state: str, shard: int | None = None, **result: Any) -> dict[str, Any]:
    """One of a run's HUD jobs as crcr's run API words it."""
    finished = state == "finished"
    return {
        "shard": shard,
        "state": state,
        "started_at": None,
        "result": result if finished else None,
    }


def run_state(
    status: str,
    results: dict[str, int] | None = None,
    uuid: str = RUN_ID,
    jobs: list[dict[str, Any]] | None = None,
):
    """A run's state in crcr's API: in aggregate mode one HUD job, the run itself."""
    page = f"http://crcr.test/runs/{uuid}/"
    if jobs is None:
        finished = status in CONCLUSION
        outcome = {
            "conclusion": CONCLUSION.get(status),
            "test_results": results,
            "artifact_url": page,
        }
        jobs = [hud_job("finished" if finished else "running", **(outcome if finished else {}))]
    return {
        "uuid": uuid,
        "status": status,
        "job_name": f"acme-{uuid[:4]}",
        "url": page,
        "test_results": results,
        "hud_jobs": jobs,
    }


class FakeCrcr:
    """crcr's dispatch and run API, answering each GET with the next scripted state."""

    def __init__(self, dispatches: list[dict[str, Any]], runs: dict[str, list[dict[str, Any]]]):
        self.dispatches, self.runs = dispatches, runs
        self.forwarded: list[tuple[str, dict[str, Any]]] = []
        # What the bridge told crcr when asking for each send's turn, and the waits to answer.
        self.turns: list[dict[str, Any]] = []
        self.waits: list[float] = []
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _reply(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                path = urlsplit(self.path).path
                if path == "/oidc-token":
                    return self._reply(*fake.oidc(self.path, self.headers))
                if self.headers.get("Authorization") != "Token crcr-t0ken":
                    return self._reply(401, {"detail": "bad token"})
                with fake.lock:
                    if path == f"/api/dispatches/{DISPATCH_ID}/":
                        return self._reply(200, fake.next(fake.dispatches))
                    run = path.removeprefix("/api/runs/").strip("/")
                    if run in fake.runs:
                        return self._reply(200, fake.next(fake.runs[run]))
                self._reply(404, {"detail": "not found"})

            def do_POST(self) -> None:
                if self.headers.get("Authorization") != "Token crcr-t0ken":
                    return self._reply(401, {"detail": "bad token"})
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if urlsplit(self.path).path == "/api/relay/turn/":
                    with fake.lock:  # a turn in the callback budget: the next scripted wait
                        fake.turns.append(body)
                        return self._reply(200, {"wait": fake.waits.pop(0) if fake.waits else 0})
                backend = parse_qs(urlsplit(self.path).query).get("backend", [""])[0]
                fake.forwarded.append((backend, body))
                answer = {"uuid": DISPATCH_ID, "url": f"/api/dispatches/{DISPATCH_ID}/"}
                self._reply(202, {**answer, "verdict": "pending", "runs": []})

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        ).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    @staticmethod
    def next(states: list[dict[str, Any]]) -> dict[str, Any]:
        return states.pop(0) if len(states) > 1 else states[0]

    def oidc(self, path: str, headers: Any) -> tuple[int, dict[str, Any]]:
        """The Actions runtime's token endpoint, minting an unsigned JWT for REPO."""
        audience = parse_qs(urlsplit(path).query).get("audience")
        if audience != [protocol.AUDIENCE] or headers.get("Authorization") != "Bearer runtime":
            return 403, {"message": "bad audience or runtime token"}
        claims = {"aud": protocol.AUDIENCE, "repository": REPO, "exp": time.time() + 300}
        encoded = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
        return 200, {"value": f"eyJhbGciOiJub25lIn0.{encoded}.sig"}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


ACCEPTED = {"uuid": DISPATCH_ID, "verdict": "accepted", "runs": [RUN_ID]}
PENDING = {"uuid": DISPATCH_ID, "verdict": "pending", "runs": []}


@pytest.fixture
def crcr() -> Iterator[Any]:
    servers: list[FakeCrcr] = []

    def start(dispatches: list[dict[str, Any]], runs: dict[str, list[dict[str, Any]]]):
        servers.append(FakeCrcr(dispatches, runs))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


@pytest.fixture
def relay() -> Iterator[RelaySimulator]:
    with RelaySimulator(token="relay-s3cret", allowlist={REPO: "L2"}, strict=True) as simulator:
        yield simulator


def bridge(tmp_path: Path, crcr_url: str, relay_url: str, *args: str, env: Any = None):
    """Run the bridge as GitHub Actions would, with a dispatch's event file."""
    client_payload = {"event_type": "pull_request", "delivery_id": "d-1", "payload": PAYLOAD}
    (tmp_path / "event.json").write_text(json.dumps({"client_payload": client_payload}))
    (tmp_path / "crcr-token").write_text("crcr-t0ken\n")
    (tmp_path / "relay-token").write_text("relay-s3cret\n")
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GITHUB_", "ACTIONS_", "CRCR_", "RELAY_"))
    }
    actions = {
        "GITHUB_ACTIONS": "true",
        "GITHUB_EVENT_PATH": str(tmp_path / "event.json"),
        "GITHUB_RUN_ID": "123",
        "GITHUB_RUN_ATTEMPT": "1",
        "GITHUB_JOB": "report",
        "GITHUB_WORKFLOW": "crcr",
        "GITHUB_SERVER_URL": "https://github.com",
        "GITHUB_REPOSITORY": REPO,
    }
    command = [
        *("--crcr", crcr_url, "--backend", "acme"),
        *("--crcr-token-file", str(tmp_path / "crcr-token")),
        *("--relay-url", relay_url, "--relay-token", f"file:{tmp_path / 'relay-token'}"),
        *("--poll-interval", "0.05", "--retry-base", "0.05", "--timeout", "20"),
        *args,
    ]
    return subprocess.run(
        [sys.executable, "-m", "runs.relay.bridge", *command],
        cwd=ROOT,
        env={**clean, **actions, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_passing_run_is_reported_in_progress_then_completed_with_its_counts(
    tmp_path, crcr, relay
):
    relay.dispatch("d-1", REPO, PAYLOAD)
    states = [run_state("queued"), run_state("running"), run_state("passed", COUNTS)]
    server = crcr([PENDING, ACCEPTED], {RUN_ID: states})

    done = bridge(tmp_path, server.url, relay.url)

    assert done.returncode == 0, done.stderr
    assert server.forwarded == [
        ("acme", {"event_type": "pull_request", "delivery_id": "d-1", "payload": PAYLOAD})
    ]
    assert [(entry.key.job_name, entry.status) for entry in relay.accepted] == [
        ("report", "in_progress"),
        ("report", "completed"),
    ]
    finished = relay.accepted[1].body["workflow"]
    assert finished["conclusion"] == "success"
    assert finished["test_results"] == COUNTS
    assert finished["artifact_url"] == f"http://crcr.test/runs/{RUN_ID}/"
    assert finished["url"] == "https://github.com/acme/backend/actions/runs/123"
    assert (finished["run_id"], finished["run_attempt"], finished["name"]) == ("123", "1", "crcr")
    assert relay.accepted[1].body["payload"] == PAYLOAD
    assert relay.refused == []


def test_a_failing_run_exits_1_and_reports_a_failure(tmp_path, crcr, relay):
    relay.dispatch("d-1", REPO, PAYLOAD)
    failed = {"passed": 38, "failed": 2, "skipped": 2, "total": 42}
    server = crcr([ACCEPTED], {RUN_ID: [run_state("running"), run_state("failed", failed)]})

    done = bridge(tmp_path, server.url, relay.url)

    assert done.returncode == 1
    assert "::error::crcr-bridge: not successful: report" in done.stderr
    finished = relay.accepted[-1].body["workflow"]
    assert (finished["status"], finished["conclusion"]) == ("completed", "failure")
    assert finished["test_results"] == failed


def test_a_run_that_collected_no_tests_is_reported_as_a_failure(tmp_path, crcr, relay):
    relay.dispatch("d-1", REPO, PAYLOAD)
    empty = {"passed": 0, "failed": 0, "skipped": 0, "total": 0}
    server = crcr([ACCEPTED], {RUN_ID: [run_state("passed", empty)]})

    done = bridge(tmp_path, server.url, relay.url)

    assert done.returncode == 1
    assert relay.accepted[-1].body["workflow"]["conclusion"] == "failure"


def test_a_recorded_dispatch_sends_nothing_and_exits_0(tmp_path, crcr, relay):
    relay.dispatch("d-1", REPO, PAYLOAD)
    recorded = {**PENDING, "verdict": "recorded", "verdict_reason": "PR opened, not merged"}
    server = crcr([PENDING, recorded], {})

    done = bridge(tmp_path, server.url, relay.url)

    assert done.returncode == 0, done.stderr
    assert "the gate recorded the dispatch (PR opened, not merged)" in done.stdout
    assert relay.accepted == []
    assert relay.refused == []


def test_each_run_of_a_dispatch_is_its_own_hud_job(tmp_path, crcr, relay):
    relay.dispatch("d-1", REPO, PAYLOAD)
    other = "8f3e2c74-0000-4000-8000-000000000003"
    both = {**ACCEPTED, "runs": [RUN_ID, other]}
    runs = {
        RUN_ID: [run_state("running"), run_state("passed", COUNTS)],
        other: [run_state("running", uuid=other), run_state("passed", COUNTS, uuid=other)],
    }
    server = crcr([both], runs)

    done = bridge(tmp_path, server.url, relay.url)

    assert done.returncode == 0, done.stderr
    jobs = {entry.key.job_name for entry in relay.accepted}
    assert jobs == {"report/acme-7e2d", "report/acme-8f3e"}
    assert len(relay.accepted) == 4


def test_in_per_job_mode_each_shard_is_a_hud_job_started_and_ended_with_its_shard(
    tmp_path, crcr, relay
):
    relay.dispatch("d-1", REPO, PAYLOAD)
    one = {"passed": 3, "failed": 0, "skipped": 0, "total": 3}
    two = {"passed": 1, "failed": 1, "skipped": 0, "total": 2}
    detail = [
        {
            "name": "test_x",
            "classname": "T",
            "message": "AssertionError",
            "stacktrace": "",
            "duration": 0.1,
        }
    ]
    shard0 = hud_job("finished", 0, conclusion="success", test_results=one)
    shard1 = hud_job(
        "finished", 1, conclusion="failure", test_results=two, failed_tests_detail=detail
    )
    states = [
        run_state("running", jobs=[hud_job("running", 0), hud_job("waiting", 1)]),
        run_state("running", jobs=[shard0, hud_job("waiting", 1)]),
        run_state("running", jobs=[shard0, hud_job("running", 1)]),
        run_state("failed", jobs=[shard0, shard1]),
    ]
    server = crcr([ACCEPTED], {RUN_ID: states})

    done = bridge(tmp_path, server.url, relay.url)

    assert done.returncode == 1 and "not successful: report / shard 1" in done.stderr
    assert [(entry.key.job_name, entry.status) for entry in relay.accepted] == [
        ("report / shard 0", "in_progress"), ("report / shard 0", "completed"),
        ("report / shard 1", "in_progress"), ("report / shard 1", "completed"),
    ]  # fmt: skip
    ended = [entry.body["workflow"] for entry in relay.accepted if entry.status == "completed"]
    assert [(w["conclusion"], w["test_results"]) for w in ended] == [
        ("success", one),
        ("failure", two),
    ]
    assert ended[1]["failed_tests_detail"][0]["name"] == "test_x"
    assert {w["run_id"] for w in ended} == {"123"}
    assert ended[0]["check_run_id"] != ended[1]["check_run_id"]


def test_a_relay_outage_is_ridden_out_with_backoff(tmp_path, crcr, relay):
    relay.dispatch("d-1", REPO, PAYLOAD)
    relay.fail_next(3, status=503)
    server = crcr([ACCEPTED], {RUN_ID: [run_state("passed", COUNTS)]})

    done = bridge(tmp_path, server.url, relay.url)

    assert done.returncode == 0, done.stderr
    assert done.stdout.count("relay answered 503") == 3
    assert [entry.status for entry in relay.accepted] == ["in_progress", "completed"]


def test_the_bridge_waits_for_its_turn_and_tells_crcr_of_the_relays_429(tmp_path, crcr, relay):
    relay.dispatch("d-1", REPO, PAYLOAD)
    relay.fail_next(1, status=429)  # the relay's own: no Retry-After
    server = crcr([ACCEPTED], {RUN_ID: [run_state("passed", COUNTS)]})
    server.waits = [0.5]  # the repository's budget is spent for half a second

    done = bridge(tmp_path, server.url, relay.url)

    assert done.returncode == 0, done.stderr
    assert "waiting 0.5s for a turn in the repository's callback budget" in done.stdout
    # Every send asked for its turn; the retry after the 429 told crcr, which holds the
    # whole repository back.
    assert server.turns == [{}, {}, {"status": 429, "retry_after": None}, {}]
    assert [entry.status for entry in relay.accepted] == ["in_progress", "completed"]


def test_a_gate_that_never_decides_ends_at_the_timeout_with_nothing_sent(tmp_path, crcr, relay):
    relay.dispatch("d-1", REPO, PAYLOAD)
    server = crcr([PENDING], {})

    done = bridge(tmp_path, server.url, relay.url, "--timeout", "0.5")

    assert done.returncode == 1
    assert "no run to report after" in done.stderr and "(verdict: pending)" in done.stderr
    assert relay.accepted == []


def test_a_lost_answer_is_not_resent_as_a_failure(tmp_path, crcr, relay):
    relay.dispatch("d-1", REPO, PAYLOAD)
    relay.lose_answers(1)  # in_progress lands, but the bridge sees a 502
    server = crcr([ACCEPTED], {RUN_ID: [run_state("passed", COUNTS)]})

    done = bridge(tmp_path, server.url, relay.url)

    assert done.returncode == 0, done.stderr
    assert "recorded an earlier attempt" in done.stdout
    assert [entry.status for entry in relay.accepted] == ["in_progress", "completed"]
    assert [refusal.reason for refusal in relay.refused] == ["duplicate"]


def test_a_callback_the_relay_refuses_exits_2(tmp_path, crcr, relay):
    server = crcr([ACCEPTED], {RUN_ID: [run_state("passed", COUNTS)]})  # never dispatched

    done = bridge(tmp_path, server.url, relay.url)

    assert done.returncode == 2
    assert "no matching dispatch record" in done.stderr
    assert relay.accepted == []


def test_a_run_still_going_at_the_deadline_is_reported_timed_out(tmp_path, crcr, relay):
    relay.dispatch("d-1", REPO, PAYLOAD)
    server = crcr([ACCEPTED], {RUN_ID: [run_state("running")]})

    done = bridge(tmp_path, server.url, relay.url, "--timeout", "1.5")

    assert done.returncode == 1
    finished = relay.accepted[-1].body["workflow"]
    assert (finished["status"], finished["conclusion"]) == ("completed", "timed_out")


def test_an_oidc_token_from_the_actions_runtime_authenticates_the_callbacks(tmp_path, crcr):
    server = crcr([ACCEPTED], {RUN_ID: [run_state("passed", COUNTS)]})
    oidc = {
        "ACTIONS_ID_TOKEN_REQUEST_URL": f"{server.url}/oidc-token?api-version=2.0",
        "ACTIONS_ID_TOKEN_REQUEST_TOKEN": "runtime",
    }
    with RelaySimulator(allowlist={REPO: "L2"}, accept_unsigned_oidc=True, strict=True) as relay:
        relay.dispatch("d-1", REPO, PAYLOAD)
        done = bridge(tmp_path, server.url, relay.url, "--relay-token", "oidc", env=oidc)

    assert done.returncode == 0, done.stderr
    assert [entry.key.repo for entry in relay.accepted] == [REPO, REPO]


def test_oidc_outside_actions_is_a_configuration_error(tmp_path, crcr, relay):
    relay.dispatch("d-1", REPO, PAYLOAD)
    server = crcr([ACCEPTED], {RUN_ID: [run_state("passed", COUNTS)]})

    done = bridge(tmp_path, server.url, relay.url, "--relay-token", "oidc")

    assert done.returncode == 2
    assert "id-token: write" in done.stderr


def test_an_unreachable_crcr_exits_3(tmp_path, relay):
    done = bridge(tmp_path, "http://127.0.0.1:9", relay.url, "--crcr-retry-for", "0.3")

    assert done.returncode == 3
    assert "crcr unreachable" in done.stderr


def test_missing_configuration_exits_2_and_help_exits_0(tmp_path, relay):
    missing = bridge(tmp_path, "", relay.url)
    helped = subprocess.run(
        [sys.executable, "-m", "runs.relay.bridge", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )

    assert missing.returncode == 2
    assert "missing --crcr" in missing.stderr
    assert helped.returncode == 0
    assert "Exit codes: 0 success" in helped.stdout


def test_forward_only_forwards_and_reports_nothing(tmp_path, crcr, relay):
    server = crcr([ACCEPTED], {})

    done = bridge(tmp_path, server.url, relay.url, "--forward-only")

    assert done.returncode == 0, done.stderr
    assert len(server.forwarded) == 1
    assert relay.accepted == [] and relay.refused == []


def test_the_bridge_and_the_simulator_import_nothing_from_django():
    check = (
        "import sys, runs.relay.bridge, runs.relay.reporter, runs.relay.simulator; "
        "assert not [m for m in sys.modules if m.split('.')[0] in ('django', 'rest_framework')]"
    )

    done = subprocess.run([sys.executable, "-c", check], cwd=ROOT, capture_output=True, text=True)

    assert done.returncode == 0, done.stderr


def test_the_workflow_templates_forward_every_dispatch_and_report_with_oidc():
    bridge_flow = yaml.safe_load((ROOT / "runs/relay/workflows/crcr-bridge.yml").read_text())
    forward_flow = yaml.safe_load((ROOT / "runs/relay/workflows/forward-dispatch.yml").read_text())

    for flow in (bridge_flow, forward_flow):
        assert flow[True] == {"repository_dispatch": {"types": ["pull_request", "push"]}}
        assert flow["permissions"] == {"contents": "read"}
    forward, report = bridge_flow["jobs"]["forward"], bridge_flow["jobs"]["report"]
    assert "concurrency" not in forward
    assert forward["steps"][-1]["run"] == "python -m runs.relay.bridge --forward-only"
    assert report["permissions"] == {"id-token": "write", "contents": "read"}
    assert report["concurrency"]["cancel-in-progress"] is False
    assert "pull_request.number" in report["concurrency"]["group"]
    assert report["steps"][-1]["env"]["RELAY_TOKEN"] == "oidc"
    assert "/api/dispatches/" in forward_flow["jobs"]["forward"]["steps"][0]["run"]
