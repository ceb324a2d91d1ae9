"""A real run on the worker, its bundle downloaded from its page, reproduced in a fresh folder."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from reproducibility import capture
from reproducibility.models import Bundle, Rerun, RunRecord, WorkerEnvironment
from runs import triggers
from runs.models import Run
from tests.factories import make_backend, make_config, make_user
from tests.waiting import wait_for

pytestmark = pytest.mark.django_db

UNSUPPORTED = (
    "test/test_planted_faults.py::TestPlantedFaultsPRIVATEUSE1::"
    "test_lgamma_is_unsupported_privateuseone_float32"
)
PASSING = "test/test_plain_reuse.py::TestPlainMath::test_sum"
# Two tests of the bundled tree: a planted failure and a plain pass. The failure is
# the unsupported op: it is deterministic, so it is not retried and the run stays
# two pytest processes long (a numerical mismatch would be run three times).
CONFIG = """test_suite_config:
  files:
    - path: ${TORCH_ROOT}/test/test_planted_faults.py
      unlisted_test_mode: skip
      tests:
        # Why: the reference device has no lgamma kernel.
        - names: [TestPlantedFaults::test_lgamma_is_unsupported]
          mode: mandatory_success
    - path: ${TORCH_ROOT}/test/test_plain_reuse.py
      unlisted_test_mode: skip
      tests:
        - names: [TestPlainMath::test_sum]
          mode: mandatory_success
"""
DONE = (Bundle.Status.READY, Bundle.Status.FAILED)


@pytest.fixture(scope="module")
def finished(django_db_setup, django_db_blocker, celery_worker_session, tmp_path_factory):
    """One tiny run through the real worker, the three hooks called as runs/ calls them."""
    from django.conf import settings

    old = settings.MEDIA_ROOT
    settings.MEDIA_ROOT = str(tmp_path_factory.mktemp("storage"))
    with django_db_blocker.unblock():
        backend = make_backend("tinyrun")
        make_config(backend, CONFIG)
        trigger = triggers.start_manual(backend, "d" * 40)
        run = wait_for(
            lambda: Run.objects.filter(trigger=trigger, status__in=Run.FINISHED).first(),
            timeout=300,
            what="the run to finish",
        )
        capture.record_run_start(run)
        for shard in run.shards.all():
            capture.record_worker(run, shard)
        pending = capture.record_run_end(run)
        bundle = wait_for(
            lambda: Bundle.objects.filter(pk=pending.pk, status__in=DONE).first(),
            timeout=120,
            what="the bundle",
        )
        yield run, bundle
        Rerun.objects.filter(original=run).delete()
        Run.objects.filter(trigger__backend=backend).delete()
        backend.triggers.all().delete()
        backend.config_versions.all().delete()
        backend.delete()
    settings.MEDIA_ROOT = old


def download_from_the_page(client, run: Run, into: Path) -> Path:
    """What a person does: open the page, follow the download link, unpack the archive."""
    into.mkdir()
    client.force_login(make_user("vera"))
    page = client.get(f"/runs/{run.uuid}/reproducibility/").content.decode()
    link = re.search(r'href="([^"]+/download/)"', page).group(1)
    response = client.get(link)
    assert response.status_code == 200
    archive = into / "bundle.tar.gz"
    archive.write_bytes(b"".join(response.streaming_content))
    subprocess.run(["tar", "xzf", str(archive), "-C", str(into)], check=True)
    return next(into.glob("crcr-run-*"))


def reproduce(folder: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "reproduce", *args],
        cwd=folder,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_run_failed_on_the_planted_failure(finished):
    run, bundle = finished
    assert run.status == Run.Status.FAILED
    assert bundle.status == Bundle.Status.READY, bundle.error
    assert bundle.manifest["warnings"] == []  # the tree is the one the run used


def test_the_hooks_recorded_the_plan_and_each_shards_worker(finished):
    run, _ = finished
    record = RunRecord.objects.get(run=run)
    assert [s["test_ids"] for s in record.plan] == [s.test_ids for s in run.shards.all()]
    assert sorted(id for s in record.plan for id in s["test_ids"]) == sorted([UNSUPPORTED, PASSING])
    environments = WorkerEnvironment.objects.filter(run=run)
    assert environments.count() == run.shards.count()
    assert all(env.torch_version == "2.13.0+cpu" for env in environments)


def test_a_bundle_from_the_page_reproduces_the_failing_test(finished, client, tmp_path):
    run, _ = finished
    folder = download_from_the_page(client, run, tmp_path / "fresh")
    verified = reproduce(folder, "--verify")
    assert verified.returncode == 0, verified.stderr
    again = reproduce(folder, "--test", UNSUPPORTED)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"[same] {UNSUPPORTED}: recorded failed unsupported_op" in again.stdout
    [result] = json.loads(next((folder / "work").glob("*/result.json")).read_text())
    assert (result["outcome"], result["category"]) == ("failed", "unsupported_op")
    assert "Could not run 'aten::lgamma" in result["message"]
    assert (folder / "work").is_dir() and next((folder / "work").glob("*/junit.xml"))
    # Re-running left the bundle's own files as the manifest says.
    assert reproduce(folder, "--verify").returncode == 0


def test_the_real_bundle_reruns_as_a_new_run_of_the_same_parts(finished, client):
    run, bundle = finished
    client.force_login(make_user("rita", role="reviewer"))
    response = client.post(f"/runs/{run.uuid}/reproducibility/bundles/{bundle.uuid}/rerun/")
    made = Rerun.objects.get(original=run)
    assert response["Location"] == f"/reruns/{made.uuid}/"
    # Inside this test's transaction the new run is not planned: it stays queued.
    assert made.run.status == Run.Status.QUEUED
    assert (made.run.pytorch_sha, made.run.config_version) == (run.pytorch_sha, run.config_version)
    assert set(made.run.artifacts.all()) == set(run.artifacts.all())
