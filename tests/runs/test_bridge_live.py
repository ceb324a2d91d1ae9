"""The GitHub Actions bridge, as a separate process holding only the OIDC token it mints, against
a live crcr server and the relay simulator: forward the dispatch, in_progress, follow the run,
completed; then an upstream "re-run failed jobs" runs the job again as attempt 2, and crcr
re-runs only the failed shard as that attempt."""

import json
import os
import subprocess
import sys

import pytest
from django.conf import settings as django_settings

from runs.models import RelayCallback, Run
from runs.relay.simulator import RelaySimulator
from tests.dispatches import pr_dispatch
from tests.factories import make_backend, make_config, make_token, make_user
from tests.runs.relay_runs import REPO
from tests.runs.reporter_runs import RUNTIME_TOKEN, ActionsRuntime, relay_audience_only

PLAIN = "test/test_plain_reuse.py::TestPlainMath"
# One test passes, one asserts 11 == 10 (a regression: nothing excuses it).
TWO = """test_suite_config:
  files:
    - path: ${TORCH_ROOT}/test/test_plain_reuse.py
      unlisted_test_mode: skip
      tests:
        - names: [TestPlainMath::test_sum, TestPlainMath::test_wrong_on_purpose]
          mode: mandatory_success
"""


def bridge(live_server, token, relay, runtime, event, attempt: int) -> subprocess.CompletedProcess:
    """The report job's step, as crcr-bridge.yml runs it: no database, broker or relay secret."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("DATABASE", "DJANGO", "CELERY", "CRCR", "RELAY"))
    }
    env |= {
        "ACTIONS_ID_TOKEN_REQUEST_URL": runtime.url,
        "ACTIONS_ID_TOKEN_REQUEST_TOKEN": RUNTIME_TOKEN,
        "GITHUB_ACTIONS": "true",
        "GITHUB_SERVER_URL": "https://github.com",
        "GITHUB_REPOSITORY": REPO,
        "GITHUB_RUN_ID": "4242",
        "GITHUB_RUN_ATTEMPT": str(attempt),
        "GITHUB_JOB": "crcr",
        "GITHUB_WORKFLOW": "oot-ci",
        "CRCR_URL": live_server.url,
        "CRCR_BACKEND": "acme",
        "CRCR_TOKEN": token,
        "CRCR_CHECK_RUN_ID": "99",
        "RELAY_URL": relay.url,
        "RELAY_TOKEN": "oidc",
    }
    return subprocess.run(
        [sys.executable, "-m", "runs.relay.bridge", "--payload", str(event),
         "--poll-interval", "1", "--timeout", "600"],
        cwd=django_settings.BASE_DIR, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip


# The HUD jobs the relay took, per mode: the run, or each shard (attempt 2 re-runs shard 1).
JOBS = {
    "aggregate": [("1", "crcr"), ("1", "crcr"), ("2", "crcr"), ("2", "crcr")],
    "per_job": [
        ("1", "crcr / shard 0"), ("1", "crcr / shard 0"), ("1", "crcr / shard 1"),
        ("1", "crcr / shard 1"), ("2", "crcr / shard 1"), ("2", "crcr / shard 1"),
    ],
}  # fmt: skip


@pytest.mark.parametrize("mode", ["aggregate", "per_job"])
def test_the_bridge_reports_a_run_and_its_rerun_of_failed_shards_as_the_next_attempt(
    live_server, celery_worker, upstream, tmp_path, settings, client, mode
):
    settings.CRCR_MAX_SHARD_SECONDS = 0.01  # one shard per test
    # Reported from GitHub Actions: crcr holds no relay credential, its workers send nothing.
    backend = make_backend(
        "acme", relay_mode=mode, relay_sender="actions", relay_token="none",
        relay_url="https://relay.invalid/github/callback",
    )  # fmt: skip
    make_config(backend, TWO)
    token = make_token(make_user("bridge", role="machine"), backend)
    runtime = ActionsRuntime()
    with RelaySimulator(allowlist={REPO: "L2"}, accept_unsigned_oidc=True, strict=True) as relay:
        body = pr_dispatch()
        event = tmp_path / "event.json"
        event.write_text(json.dumps(relay.dispatch(body["delivery_id"], REPO, body["payload"])))
        first = bridge(live_server, token, relay, runtime, event, attempt=1)
        second = bridge(live_server, token, relay, runtime, event, attempt=2)
        accepted = list(relay.accepted)
    runtime.close()

    assert first.returncode == 1, first.stdout + first.stderr  # a run did not succeed
    assert second.returncode == 1, second.stdout + second.stderr
    run = Run.objects.get(trigger__dispatch__delivery_id=body["delivery_id"], run_attempt=1)
    again = run.attempts.get()
    assert "re-runs what failed" in second.stdout
    assert (run.status, again.status, again.run_attempt) == ("failed", "failed", 2)
    # Only the failed shard ran again, as a run of its own: attempt 1's results stay as they were.
    assert run.shards.count() == 2
    assert [shard.test_ids for shard in again.shards.all()] == [[f"{PLAIN}::test_wrong_on_purpose"]]
    assert run.test_counts() == {"passed": 1, "failed": 1, "skipped": 0, "total": 2}
    assert not RelayCallback.objects.exists()  # the bridge sent everything itself
    # Each HUD job under the Actions run, in_progress then completed, once per attempt.
    jobs = [(key.run_attempt, key.job_name) for key, _, _ in accepted]
    assert sorted(jobs) == JOBS[mode]
    assert {key.run_id for key, _, _ in accepted} == {"4242"}
    for job in set(jobs):
        assert [status for key, status, _ in accepted if (key.run_attempt, key.job_name) == job] == [
            "in_progress", "completed",
        ]  # fmt: skip
    ended = {
        (key.run_attempt, key.job_name): body["workflow"]
        for key, status, body in accepted
        if status == "completed"
    }
    failed = {"passed": 0, "failed": 1, "skipped": 0, "total": 1}
    if mode == "aggregate":
        first_result, second_result = ended[("1", "crcr")], ended[("2", "crcr")]
        assert first_result["test_results"] == run.test_counts()
    else:
        passed = ended[("1", "crcr / shard 0")]
        assert passed["conclusion"] == "success" and passed["test_results"]["passed"] == 1
        first_result, second_result = ended[("1", "crcr / shard 1")], ended[("2", "crcr / shard 1")]
        assert first_result["test_results"] == failed
    assert first_result["conclusion"] == second_result["conclusion"] == "failure"
    assert first_result["failed_tests_detail"][0]["name"] == "test_wrong_on_purpose"
    assert second_result["test_results"] == again.test_counts() == failed
    assert second_result["url"] == f"https://github.com/{REPO}/actions/runs/4242"
    assert str(again.uuid) in second_result["artifact_url"]
    assert {key.repo for key, _, _ in accepted} == {REPO}  # proved by the minted token
    assert relay_audience_only(runtime)
    client.force_login(make_user("vera"))
    page = client.get(f"/runs/{run.uuid}/").content.decode()
    assert f'href="/runs/{again.uuid}/">attempt 2</a>' in page
