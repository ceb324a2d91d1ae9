"""`python -m runs.relay.reporter` as its own process, as crcr-report.yml runs it: it holds only
an OIDC-shaped token it minted from a stand-in Actions runtime, claims from a live crcr, sends
to the relay simulator (which knows no static token) and writes the answers back."""

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator

import pytest
from django.conf import settings

from runs.models import ApiToken, Backend, RelayCallback, Run
from runs.relay import outbox
from runs.relay.simulator import RelaySimulator
from tests.factories import make_token, make_user
from tests.runs.relay_runs import REPO
from tests.runs.reporter_runs import (
    RUNTIME_TOKEN,
    ActionsRuntime,
    relay_audience_only,
    reporting_backend,
    self_reported_run,
)

ACTIONS = "https://github.com/acme/torch-acme/actions/runs"


@pytest.fixture
def runtime() -> Iterator[ActionsRuntime]:
    runtime = ActionsRuntime()
    yield runtime
    runtime.close()


@pytest.fixture
def crcr_token(transactional_db) -> str:
    return make_token(make_user("reporter", role="machine"))


def reporter_env(live_server, token: str, relay: RelaySimulator, runtime, run_id: str):
    """What the workflow's step gets: no database, no broker, no relay secret."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("DATABASE", "DJANGO", "CELERY", "CRCR", "RELAY"))
    }
    return env | {
        "ACTIONS_ID_TOKEN_REQUEST_URL": runtime.url,
        "ACTIONS_ID_TOKEN_REQUEST_TOKEN": RUNTIME_TOKEN,
        "GITHUB_ACTIONS": "true",
        "GITHUB_SERVER_URL": "https://github.com",
        "GITHUB_REPOSITORY": REPO,
        "GITHUB_WORKFLOW": "crcr report",
        "GITHUB_RUN_ID": run_id,
        "GITHUB_RUN_ATTEMPT": "1",
        "CRCR_URL": live_server.url,
        "CRCR_BACKEND": "acme",
        "CRCR_TOKEN": token,
        "RELAY_URL": relay.url,
        "RELAY_TOKEN": "oidc",
    }


def report(live_server, token, relay, runtime, run_id: str) -> subprocess.CompletedProcess:
    env = reporter_env(live_server, token, relay, runtime, run_id)
    return subprocess.run(
        [sys.executable, "-m", "runs.relay.reporter", "--drain-for", "60"],
        cwd=settings.BASE_DIR, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def sent(relay: RelaySimulator) -> Counter[tuple[str, str, str]]:
    return Counter((key.delivery_id, key.job_name, status) for key, status, _ in relay.accepted)


def test_nightly_release_and_manual_reports_reach_the_relay_from_the_reporter(
    live_server, crcr_token, runtime
):
    with RelaySimulator(allowlist={REPO: "L2"}, accept_unsigned_oidc=True, strict=True) as relay:
        backend = reporting_backend(relay.url)
        ApiToken.objects.get().backends.add(backend)  # the reporter's token acts for it
        nightly = self_reported_run(backend, "nightly", "c" * 40, ref="nightly")
        release = self_reported_run(backend, "release", "d" * 40, ref="release/2.14")
        manual = self_reported_run(backend, "manual", "e" * 40)
        assert outbox.due() == []  # the beat's pass leaves them to the reporter

        reported = report(live_server, crcr_token, relay, runtime, "7001")
        accepted = list(relay.accepted)

    assert reported.returncode == 0, reported.stdout + reported.stderr
    assert reported.stdout.count("sent completed of acme: 200") == 3
    assert sent(relay) == {
        ("c" * 40, "acme", "completed"): 1,
        ("d" * 40, "acme", "completed"): 1,
        ("e" * 40, "acme", "completed"): 1,
    }
    assert {key.repo for key, _, _ in accepted} == {REPO}  # proved by the minted token
    assert relay_audience_only(runtime)
    for key, _, body in accepted:  # each a HUD job of the Actions run that sent it
        workflow = body["workflow"]
        assert key.run_id == "7001" and workflow["url"] == f"{ACTIONS}/7001"
        assert workflow["run_attempt"] == "1" and workflow["name"] == "crcr report"
    pages = {body["delivery_id"]: body["workflow"]["artifact_url"] for _, _, body in accepted}
    assert pages["c" * 40] == nightly.page_url() and pages["d" * 40] == release.page_url()
    assert pages["e" * 40] == manual.page_url()
    kinds = {body["delivery_id"]: body["event_type"] for _, _, body in accepted}
    assert (kinds["c" * 40], kinds["d" * 40], kinds["e" * 40]) == ("nightly", "nightly", "periodic")
    assert set(RelayCallback.objects.values_list("status", flat=True)) == {"delivered"}
    assert Backend.objects.get().relay_token == "none"  # crcr holds no relay credential


def test_a_reporter_killed_mid_drain_loses_and_duplicates_nothing_on_the_hud(
    live_server, crcr_token, runtime, settings
):
    settings.CRCR_RELAY_LEASE_SECONDS = 5
    victim: dict[str, subprocess.Popen] = {}

    def kill_after_the_first_send(line: str) -> None:
        # Called once the relay has recorded the callback, before it answers: the reporter
        # dies never knowing whether its send landed.
        process = victim.get("reporter")
        if process is not None and process.poll() is None and line.startswith("200"):
            os.kill(process.pid, signal.SIGKILL)
            process.wait()

    with RelaySimulator(
        allowlist={REPO: "L2"},
        accept_unsigned_oidc=True,
        strict=True,
        log=kill_after_the_first_send,
    ) as relay:
        backend = reporting_backend(relay.url)
        ApiToken.objects.get().backends.add(backend)  # the reporter's token acts for it
        # Four self-reports in the outbox's order, each its own HUD job (a SHA of its own):
        # the killed reporter claims the first two.
        shas = ["1" * 40, "2" * 40, "3" * 40, "4" * 40]
        self_reported_run(backend, "nightly", shas[0], ref="nightly")
        self_reported_run(backend, "release", shas[1], ref="release/2.14")
        self_reported_run(backend, "manual", shas[2])
        self_reported_run(backend, "nightly", shas[3], ref="nightly")

        env = reporter_env(live_server, crcr_token, relay, runtime, "8001")
        victim["reporter"] = subprocess.Popen(
            [sys.executable, "-m", "runs.relay.reporter", "--batch", "2"], cwd=settings.BASE_DIR,
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        assert victim["reporter"].wait(timeout=120) == -signal.SIGKILL
        assert len(relay.accepted) == 1
        while_leased = report(live_server, crcr_token, relay, runtime, "8002")
        assert len(relay.accepted) == 3, while_leased.stdout  # only the two not leased
        time.sleep(5.5)
        resumed = report(live_server, crcr_token, relay, runtime, "8003")
        accepted, refused = list(relay.accepted), list(relay.refused)
        rows = relay.hud_table.rows()

    assert while_leased.returncode == 0 and "nothing due" in while_leased.stdout
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    # The relay keeps no state for a self-report, so it takes the resend of the one whose
    # answer was lost again: as the same HUD job, the very body it took first.
    assert Counter(key.delivery_id for key, _, _ in accepted) == {
        shas[0]: 2,
        shas[1]: 1,
        shas[2]: 1,
        shas[3]: 1,
    }
    first_send, resend = [body for key, _, body in accepted if key.delivery_id == shas[0]]
    assert resend == first_send and refused == []
    # The HUD keys a job's row by repo, delivery, workflow, job and check run, and updates it:
    # the resend lands on the first send's row. One row per report, each completed.
    assert len(rows) == 4 and {row["status"] for row in rows.values()} == {"completed"}
    assert sorted(row["artifact_url"] for row in rows.values()) == sorted(
        run.page_url() for run in Run.objects.all()
    )
    # Each job under the Actions run that first claimed it.
    runs_of = {key.delivery_id: key.run_id for key, _, _ in accepted}
    assert [runs_of[sha] for sha in shas] == ["8001", "8001", "8002", "8002"]
    callbacks = {c.delivery_id: c for c in RelayCallback.objects.all()}
    assert {c.status for c in callbacks.values()} == {"delivered"}
    # The killed reporter's claim counts for both its rows (one was sent, one not).
    assert [callbacks[sha].attempts for sha in shas] == [2, 2, 1, 1]


def test_a_reporter_past_the_repositorys_budget_waits_for_its_turn_and_sends_all(
    live_server, crcr_token, runtime, settings
):
    # The minute scaled to 3 s: crcr's budget 2 sends, the relay's limit 3.
    settings.CRCR_RELAY_CALLBACKS_PER_MINUTE, settings.CRCR_RELAY_RATE_WINDOW_SECONDS = 2, 3
    with RelaySimulator(
        allowlist={REPO: "L2"}, accept_unsigned_oidc=True, rate_limit=3, rate_window=3
    ) as relay:
        backend = reporting_backend(relay.url)
        ApiToken.objects.get().backends.add(backend)
        for sha in "9abcd":
            self_reported_run(backend, "nightly", sha * 40, ref="nightly")

        reported = report(live_server, crcr_token, relay, runtime, "7001")
        refused, peak = list(relay.refused), relay.rate_peaks[REPO]

    assert reported.returncode == 0, reported.stdout + reported.stderr
    assert "the callback budget is spent: claiming again in" in reported.stdout
    assert sent(relay) == {(sha * 40, "acme", "completed"): 1 for sha in "9abcd"}
    assert refused == [] and peak <= 3  # never a 429
    assert set(RelayCallback.objects.values_list("status", flat=True)) == {"delivered"}
