"""The GitHub Actions bridge, as a separate process, against a live crcr server and
the relay simulator: forward the dispatch, in_progress, follow the run, completed."""

import json
import subprocess
import sys

from django.conf import settings

from runs.models import Run
from runs.relay.simulator import RelaySimulator
from tests.dispatches import pr_dispatch
from tests.factories import make_backend, make_config, make_token, make_user

REPO = "acme/torch-acme"
TINY = """test_suite_config:
  files:
    - path: ${TORCH_ROOT}/test/test_plain_reuse.py
      unlisted_test_mode: skip
      tests:
        - names: [TestPlainMath::test_sum, TestPlainStrings::test_sum]
          mode: mandatory_success
"""


def test_the_bridge_reproduces_the_aggregate_flow(live_server, celery_worker, upstream, tmp_path):
    backend = make_backend("acme", relay_mode="aggregate")  # no relay_url: the bridge reports
    make_config(backend, TINY)
    crcr_token = tmp_path / "crcr-token"
    crcr_token.write_text(make_token(make_user("bridge", role="machine")))
    relay_token = tmp_path / "relay-token"
    relay_token.write_text("s3cret")
    with RelaySimulator(token="s3cret", allowlist={REPO: "L2"}, strict=True) as relay:
        body = pr_dispatch()
        client_payload = relay.dispatch(body["delivery_id"], REPO, body["payload"])
        event = tmp_path / "event.json"
        event.write_text(json.dumps(client_payload))
        completed = subprocess.run(
            [
                sys.executable, "-m", "runs.relay.bridge", "--crcr", live_server.url,
                "--crcr-token-file", str(crcr_token), "--backend", "acme",
                "--relay-url", relay.url, "--relay-token", f"file:{relay_token}",
                "--payload", str(event), "--job-name", "crcr", "--workflow-name", "oot-ci",
                "--run-id", "4242", "--run-attempt", "1", "--check-run-id", "99",
                "--poll-interval", "1", "--timeout", "600",
            ],
            cwd=settings.BASE_DIR, capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        accepted = list(relay.accepted)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    run = Run.objects.get(trigger__dispatch__delivery_id=body["delivery_id"])
    assert run.status == "passed"
    assert [status for _, status, _ in accepted] == ["in_progress", "completed"]
    assert {key.run_id for key, _, _ in accepted} == {"4242"}
    final = accepted[1].body["workflow"]
    assert final["conclusion"] == "success"
    assert final["test_results"] == run.test_counts() == {
        "passed": 2, "failed": 0, "skipped": 0, "total": 2,
    }  # fmt: skip
    assert str(run.uuid) in final["url"]
    assert not run.callbacks.exists()  # crcr itself sent nothing: the bridge did
