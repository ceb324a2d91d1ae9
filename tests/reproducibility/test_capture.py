"""The hooks runs/ calls record every run's parts, without anyone asking."""

import json

import pytest
from django.core.exceptions import ImproperlyConfigured

from reproducibility import capture, metadata
from reproducibility.models import Bundle, RunRecord, WorkerEnvironment
from runs.models import Shard
from tests.factories import make_backend, make_config
from tests.reproducibility.builders import (
    MISMATCH,
    PASSING,
    add_result,
    make_artifact,
    make_dispatch,
    make_run,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def run(settings, tmp_path):
    settings.MEDIA_ROOT = str(tmp_path / "storage")
    backend = make_backend("acme")
    config = make_config(backend, "test_suite_config:\n  files: []\n# v1\n")
    made = make_run(backend, config, status="running", dispatch=make_dispatch(backend))
    made.artifacts.set([make_artifact(), make_artifact("acme_device", "2" * 64, "backend")])
    Shard.objects.create(run=made, index=0, test_ids=[MISMATCH, PASSING], estimated_seconds=12.5)
    return made


def test_the_start_hook_freezes_trigger_artifacts_config_plan_and_seeds(run):
    record = capture.record_run_start(run)
    assert record.trigger["pr_number"] == 4242 and record.trigger["action"] == "closed"
    assert record.trigger["pytorch_sha"] == "a" * 40
    assert json.loads(record.trigger["dispatch"]["raw_body"])["payload"]["action"] == "closed"
    assert {a["sha256"] for a in record.artifacts} == {"1" * 64, "2" * 64}
    assert record.config_text.endswith("# v1\n") and record.config_number == 1
    assert record.config_sha256 == run.config_version.sha256
    assert record.plan == [{"index": 0, "test_ids": [MISMATCH, PASSING], "estimated_seconds": 12.5}]
    assert record.seeds["PYTHONHASHSEED"] == "0"
    assert record.command["env"]["CRCR_REUSE_DEVICE"] == "crcr_reuse.reference_device"
    assert record.test_tree["kind"] == "bundled"
    assert len(record.crcr["commit"]) == 40


def test_the_start_hook_twice_keeps_one_record_with_the_newest_facts(run):
    capture.record_run_start(run)
    Shard.objects.create(run=run, index=1, test_ids=["t"], estimated_seconds=1)
    capture.record_run_start(run)
    assert RunRecord.objects.filter(run=run).count() == 1
    assert [shard["index"] for shard in RunRecord.objects.get(run=run).plan] == [0, 1]


def test_the_worker_hook_records_the_host_and_the_variables_that_change_tests(run, monkeypatch):
    monkeypatch.setenv("PYTORCH_TESTING_DEVICE_ONLY_FOR", "privateuse1")
    monkeypatch.setenv("CI", "true")
    capture._host_cache.clear()
    shard = run.shards.get()
    shard.attempts = 1
    row = capture.record_worker(run, shard)
    assert row.run == run and row.shard == shard and row.shard_attempt == 1
    assert row.torch_version == "2.13.0+cpu" and row.cpu_arch and row.os
    assert "torch==2.13.0+cpu" in row.pip_freeze
    assert row.env_vars["PYTORCH_TESTING_DEVICE_ONLY_FOR"] == "privateuse1"
    assert row.env_vars["CI"] == "true" and row.env_vars["PYTHONHASHSEED"] == "0"
    capture.record_worker(run, shard)
    assert WorkerEnvironment.objects.filter(shard=shard).count() == 1


def test_the_end_hook_records_a_run_that_never_planned_and_asks_for_one_bundle(run):
    run.status = "error"
    run.save()
    bundle = capture.record_run_end(run)
    assert RunRecord.objects.filter(run=run).exists()
    assert bundle.status == Bundle.Status.PENDING
    assert capture.record_run_end(run) == bundle
    assert run.bundles.count() == 1


def test_metadata_holds_every_attempt_with_outcome_duration_and_message(run):
    add_result(run, MISMATCH, ["failed", "failed"], "numerical_mismatch", "regression")
    add_result(run, PASSING, ["passed"])
    meta = metadata.metadata(run)
    assert meta["recorded"] is False  # read live: the start hook has not run
    mismatch = [a for a in meta["attempts"] if a["node_id"] == MISMATCH]
    assert [a["attempt"] for a in mismatch] == [1, 2]
    assert mismatch[0]["outcome"] == "failed" and mismatch[0]["duration"] == 0.5
    assert "not close" in mismatch[0]["message"]
    assert meta["failures"][0]["category"] == "numerical_mismatch"
    assert meta["reproduce"]["env"]["PYTHONHASHSEED"] == "0"
    assert "TORCH_ROOT" not in meta["reproduce"]["env"]


def test_a_bad_retention_setting_is_refused_by_name(monkeypatch):
    from reproducibility import bundles

    monkeypatch.setenv("CRCR_BUNDLE_RETENTION_DAYS", "soon")
    with pytest.raises(ImproperlyConfigured, match="CRCR_BUNDLE_RETENTION_DAYS"):
        bundles.retention_days()
    monkeypatch.setenv("CRCR_BUNDLE_RETENTION_DAYS", "0")
    with pytest.raises(ImproperlyConfigured, match="minimum 1"):
        bundles.retention_days()
