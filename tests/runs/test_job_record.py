"""The relay's full job record: a `completed` carries the failed tests, the run's page as
`artifact_url` and the SDK and device versions as `environment`; the simulator takes them
as the relay does and its HUD stores what the HUD's extractDynamoRecord stores."""

import importlib.metadata
import platform
from typing import Any

import pytest

from reproducibility import capture
from runs import results
from runs.models import Run, Shard
from runs.relay import outbox, protocol
from runs.relay.simulator import RelaySimulator
from tests.factories import make_token, make_user
from tests.runs.relay_runs import dispatched_run, relay_backend
from tests.runs.test_relay_outbox import completed_of, delivered, shard_ran
from tests.runs.test_relay_simulator import PAYLOAD, REPO, callback, post
from tests.waiting import wait_for

SDK = f"crcr_reuse.reference_device {importlib.metadata.version('crcr-reuse')}"
ENVIRONMENT = {"sdk": "torch_npu 2.5.1", "device": "Ascend 910B, CANN 8.0", "torch": "2.13.0"}


@pytest.fixture
def strict():
    with RelaySimulator(token="s3cret", allowlist={"acme/torch-acme": "L2"}, strict=True) as sim:
        yield sim


@pytest.fixture
def relay():
    with RelaySimulator(token="s3cret", allowlist={REPO: "L2"}) as sim:
        yield sim


def ran_on_this_host(run: Run, index: int) -> Shard:
    """A shard claimed by this host's worker: reproducibility records its environment."""
    shard = Shard.objects.create(run=run, index=index, test_ids=[], status="running", attempts=1)
    capture.record_worker(run, shard)
    outbox.job_started(run, shard)
    return shard


def test_a_shard_job_reports_its_failed_tests_page_and_environment(
    strict, tmp_path, transactional_db, celery_worker, settings
):
    backend = relay_backend(strict, tmp_path, relay_mode="per_job")
    run = dispatched_run(backend, strict)
    ran_on_this_host(run, 0)
    shard_ran(run, 0, ["passed", "failed", "skipped"])
    results.finish_if_done(run.pk)
    wait_for(lambda: delivered(run), what="the shard's callbacks")

    workflow = completed_of(strict)["acme / shard 0"]
    assert workflow["environment"] == {
        "sdk": SDK,
        "device": platform.machine(),
        "torch": "2.13.0+cpu",
        "python": platform.python_version(),
        "os": platform.platform(),
    }
    assert [test["name"] for test in workflow["failed_tests_detail"]] == ["test_0_1"]
    # The HUD's log link: the shard's output, on crcr's log page.
    page = f"{settings.CRCR_PUBLIC_URL.rstrip('/')}/runs/{run.uuid}/log/shard-0/"
    assert workflow["artifact_url"] == page
    # The HUD's row: the page and the counts; the environment and failure details travel
    # in the callback body it was forwarded, which its extraction does not copy.
    (row,) = [row for row in strict.hud_table.rows().values() if row["status"] == "completed"]
    assert (row["artifact_url"], row["failed_tests"], row["total_tests"]) == (page, 1, 3)
    assert "environment" not in row and "failed_tests_json" not in row


def test_the_bridge_reads_the_environment_of_the_runs_hud_job(client, db, tmp_path):
    with RelaySimulator(token="s3cret", allowlist={"acme/torch-acme": "L2"}) as sim:
        backend = relay_backend(sim, tmp_path, relay_sender="actions")
    run = dispatched_run(backend)
    ran_on_this_host(run, 0)
    ran_on_this_host(run, 1)
    Shard.objects.filter(run=run, index=0).update(environment={})  # a claim not recorded
    shard_ran(run, 0, ["passed"])
    shard_ran(run, 1, ["passed"])
    results.finish_if_done(run.pk)
    token = make_token(make_user("machine", role="machine"), backend)

    answer = client.get(f"/api/runs/{run.uuid}/", HTTP_AUTHORIZATION=f"Token {token}").json()

    (job,) = answer["hud_jobs"]
    assert job["result"]["environment"]["sdk"] == SDK  # the first shard that has one
    assert job["result"]["conclusion"] == "success"


def test_the_relay_takes_the_new_fields_untouched_and_its_hud_stores_the_page(relay):
    dispatched = relay.dispatch("d-1", REPO, PAYLOAD)
    failed = [{"name": "test_add_privateuseone_float32", "classname": "TestBinaryUfuncs"}]
    body = callback(
        dispatched, "completed", environment=ENVIRONMENT, failed_tests_detail=failed,
        artifact_url="https://crcr.example/runs/1/",
        test_results={"passed": 3, "failed": 1, "skipped": 0},
        conclusion="failure", run_attempt="2",
    )  # fmt: skip
    post(relay, callback(dispatched, run_attempt="2"))

    answer = post(relay, body)

    assert (answer.status, answer.json()) == (200, {"ok": True, "status": "completed"})
    forwarded = relay.accepted[-1].body["workflow"]
    assert forwarded["environment"] == ENVIRONMENT
    assert forwarded["failed_tests_detail"][0]["name"] == "test_add_privateuseone_float32"
    (row,) = relay.hud_table.rows().values()
    assert row["artifact_url"] == "https://crcr.example/runs/1/"
    assert (row["run_attempt"], row["pr_number"], row["total_tests"]) == (2, 7, 4)
    assert (row["passed_tests"], row["failed_tests"], row["conclusion"]) == (3, 1, "failure")
    assert "environment" not in row and "failed_tests_json" not in row


def test_the_relay_does_not_judge_an_environment_but_crcr_does_before_sending(relay):
    dispatched = relay.dispatch("d-1", REPO, PAYLOAD)
    body = callback(dispatched)
    body["workflow"]["environment"] = {"sdk": 25, "Device!": "x" * 300}

    relaxed = post(relay, body)  # the relay reads none of it

    assert relaxed.status == 200
    problems = protocol.validate_callback(body)
    assert problems == [
        "workflow.environment.sdk: must be a string of 1 to 256 bytes",
        "workflow.environment.Device!: must be a string of 1 to 256 bytes",
    ]
    body["workflow"]["environment"] = [ENVIRONMENT]
    assert protocol.validate_callback(body) == [
        "workflow.environment: must be an object of at most 16 facts"
    ]


def test_a_strict_relay_refuses_a_malformed_environment_naming_it(strict):
    dispatched = strict.dispatch("d-1", "acme/torch-acme", PAYLOAD)
    body: dict[str, Any] = callback(dispatched)
    body["workflow"]["environment"] = {"sdk": ""}

    answer = post(strict, body)

    assert answer.status == 400
    assert answer.json()["problems"] == [
        "workflow.environment.sdk: must be a string of 1 to 256 bytes"
    ]
    assert strict.accepted == []


def test_an_environment_keeps_its_facts_short_and_drops_the_empty_ones():
    body = callback(
        protocol.nightly_payload("c" * 40), "completed",
        environment={"sdk": "é" * 200, "device": "", "torch": "2.13.0"},
    )  # fmt: skip

    facts = body["workflow"]["environment"]
    assert sorted(facts) == ["sdk", "torch"]
    assert len(facts["sdk"].encode()) <= 256 and facts["sdk"].endswith("…")
    assert protocol.validate_callback(body) == []
    with pytest.raises(ValueError, match="environment keys are lower-case names"):
        callback(protocol.nightly_payload("c" * 40), "completed", environment={"SDK": "1"})
