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

from runs import results
from runs.models import Backend, RelayCallback, Run
from runs.relay import outbox
from runs.relay.simulator import RelaySimulator
from tests.factories import make_token, make_user
from tests.runs.reporter_runs import (
    REPO,
    RUNTIME_TOKEN,
    ActionsRuntime,
    dispatched_run,
    finish_shard,
    relay_audience_only,
    reporting_backend,
    self_reported_run,
    start_shard,
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


def test_nightly_release_manual_and_per_job_reports_reach_the_relay_from_the_reporter(
    live_server, crcr_token, runtime
):
    with RelaySimulator(allowlist={REPO: "L2"}, accept_unsigned_oidc=True, strict=True) as relay:
        backend = reporting_backend(relay.url, mode="per_job")
        nightly = self_reported_run(backend, "nightly", "c" * 40, ref="nightly")
        release = self_reported_run(backend, "release", "d" * 40, ref="release/2.14")
        manual = self_reported_run(backend, "manual", "e" * 40)
        run = dispatched_run(backend, relay)
        shard0 = start_shard(run, 0)
        assert outbox.due() == []  # the beat's pass leaves them to the reporter

        first = report(live_server, crcr_token, relay, runtime, "7001")
        finish_shard(shard0)
        finish_shard(start_shard(run, 1))
        results.finish_if_done(run.pk)
        second = report(live_server, crcr_token, relay, runtime, "7002")
        accepted = list(relay.accepted)

    assert first.returncode == 0, first.stdout + first.stderr
    assert second.returncode == 0, second.stdout + second.stderr
    assert "sent in_progress of acme / shard 0: 200" in first.stdout
    delivery = run.trigger.dispatch.delivery_id
    assert sent(relay) == {
        ("c" * 40, "acme", "completed"): 1,
        ("d" * 40, "acme", "completed"): 1,
        ("e" * 40, "acme", "completed"): 1,
        (delivery, "acme / shard 0", "in_progress"): 1,
        (delivery, "acme / shard 0", "completed"): 1,
        (delivery, "acme / shard 1", "in_progress"): 1,
        (delivery, "acme / shard 1", "completed"): 1,
    }
    assert {key.repo for key, _, _ in accepted} == {REPO}  # proved by the minted token
    assert relay_audience_only(runtime)
    # Each HUD job under the Actions run that first claimed it, both transitions alike.
    runs_of = {(key.job_name, key.delivery_id, status): key.run_id for key, status, _ in accepted}
    assert runs_of[("acme / shard 0", delivery, "completed")] == "7001"  # sent by run 7002
    assert runs_of[("acme / shard 1", delivery, "in_progress")] == "7002"
    for key, _, body in accepted:
        workflow = body["workflow"]
        assert workflow["url"] == f"{ACTIONS}/{key.run_id}" and workflow["run_attempt"] == "1"
        assert workflow["name"] == "crcr report"
    pages = {body["delivery_id"]: body["workflow"]["artifact_url"] for _, _, body in accepted}
    assert pages["c" * 40] == nightly.page_url() and pages["d" * 40] == release.page_url()
    assert pages["e" * 40] == manual.page_url()
    kinds = {body["delivery_id"]: body["event_type"] for _, _, body in accepted}
    assert (kinds["c" * 40], kinds["d" * 40], kinds["e" * 40]) == ("nightly", "nightly", "periodic")
    assert set(RelayCallback.objects.values_list("status", flat=True)) == {"delivered"}
    assert Backend.objects.get().relay_token == "none"  # crcr holds no relay credential


def test_a_reporter_killed_mid_drain_loses_and_duplicates_nothing(
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
        backend = reporting_backend(relay.url, mode="per_job")
        run = dispatched_run(backend, relay)
        for index in range(2):
            finish_shard(start_shard(run, index))
        results.finish_if_done(run.pk)

        env = reporter_env(live_server, crcr_token, relay, runtime, "8001")
        victim["reporter"] = subprocess.Popen(
            [sys.executable, "-m", "runs.relay.reporter"], cwd=settings.BASE_DIR, env=env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        assert victim["reporter"].wait(timeout=120) == -signal.SIGKILL
        assert len(relay.accepted) == 1
        while_leased = report(live_server, crcr_token, relay, runtime, "8002")
        assert len(relay.accepted) == 1, while_leased.stdout  # its callbacks are leased
        time.sleep(5.5)
        resumed = report(live_server, crcr_token, relay, runtime, "8003")
        accepted, refused = list(relay.accepted), list(relay.refused)

    assert while_leased.returncode == 0 and "nothing due" in while_leased.stdout
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "had recorded an earlier attempt whose answer was lost" in resumed.stdout
    jobs = Counter((key.job_name, status) for key, status, _ in accepted)
    assert jobs == {
        ("acme / shard 0", "in_progress"): 1,
        ("acme / shard 1", "in_progress"): 1,
        ("acme / shard 0", "completed"): 1,
        ("acme / shard 1", "completed"): 1,
    }
    # The resend the relay refused as a repeat; the job identity fixed by the killed reporter.
    assert [r.reason for r in refused] == ["duplicate"]
    assert {key.run_id for key, _, _ in accepted} == {"8001"}
    callbacks = Run.objects.get(pk=run.pk).callbacks.all()
    assert {c.status for c in callbacks} == {"delivered"}
    # Both in_progress rows count the killed reporter's claim (one was sent, one not).
    assert sorted(c.attempts for c in callbacks) == [1, 1, 2, 2]
