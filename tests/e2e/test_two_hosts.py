"""Two hosts that share only the database, the broker and an S3-compatible storage.

Host A (the crcr host: `default` and `relay` queues) has the PyTorch clone; host B (an
accelerator host: the `device` queue) has none, a work folder and an environment cache
of its own. B receives the wheels and the test tree through storage and sends back every
report and log; A builds the bundle from storage alone. The storage is a real S3 server
on 127.0.0.1 (moto's server mode), reached over HTTP by both hosts.
"""

import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import boto3
import pytest
from django.conf import settings

from demo.localgit import PyTorchShapedRepo
from reproducibility.models import Bundle, WorkerEnvironment
from runs.models import Run
from tests.builds import DEVICE_MODULE, reference_build
from tests.factories import make_backend, make_config
from tests.waiting import wait_for
from tests.workers import (
    SMALL,
    environment,
    finished,
    free_port,
    results_once,
    start_worker,
    stop,
    trigger,
)

BUNDLED = Path(settings.BASE_DIR) / "tests" / "upstream"
FILES = ["pytest.ini", "refdev_faults.yaml", "test/conftest.py", "test/test_dtypes_reuse.py"]
BUCKET = "crcr-two-hosts"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "crcr-test", "AWS_SECRET_ACCESS_KEY": "crcr-test-secret"}


@pytest.fixture
def s3(tmp_path):
    """An S3-compatible server of the test's own on 127.0.0.1, with one bucket."""
    port = free_port()
    log = (tmp_path / "s3.log").open("wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    client = boto3.client("s3", endpoint_url=url, region_name="us-east-1",
                          aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"])  # fmt: skip
    try:
        wait_for(lambda: _bucket_made(client), timeout=60, what="the S3 server to answer")
        yield url, client
    finally:
        server.terminate()
        server.wait(timeout=30)


def _bucket_made(client) -> bool:
    try:
        client.create_bucket(Bucket=BUCKET)
    except Exception:  # not listening yet
        time.sleep(0.2)
        return False
    return True


def keys(client, prefix: str) -> set[str]:
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return {item["Key"] for page in pages for item in page.get("Contents", [])}


def test_a_device_host_sharing_only_database_broker_and_storage_runs_a_whole_run(
    transactional_db, s3, broker, tmp_path
):
    url, client = s3
    clone = PyTorchShapedRepo(tmp_path / "pytorch")
    files = {name: (BUNDLED / name).read_text() for name in FILES}
    sha = clone.commit("main", "Add dtype tests (#1)", files)
    backend = make_backend("twohosts", device_module=DEVICE_MODULE, version="0.0.0")
    make_config(backend, SMALL)
    storage = {"CRCR_STORAGE_BACKEND": "storages.backends.s3.S3Storage", "CRCR_S3_BUCKET": BUCKET,
               "CRCR_S3_ENDPOINT_URL": url, "CRCR_S3_REGION": "us-east-1", **CREDENTIALS}  # fmt: skip
    host_a = environment(
        tmp_path, broker, **storage, CRCR_WORK_DIR=str(tmp_path / "host-a"),
        CRCR_TORCH_ROOT=str(clone.path), CRCR_UPSTREAM=f"git:{clone.path}",
    )  # fmt: skip
    no_clone = tmp_path / "host-b-has-no-pytorch-clone"
    host_b = environment(
        tmp_path, broker, **storage, CRCR_WORK_DIR=str(tmp_path / "host-b"),
        CRCR_ENV_DIR=str(tmp_path / "host-b-environments"), CRCR_TORCH_ROOT=str(no_clone),
        CRCR_UPSTREAM=f"git:{no_clone}", CRCR_BUILD_COMMAND=reference_build(),
    )  # fmt: skip
    a = start_worker(host_a, "host-a", log=tmp_path / "host-a.log", queues="default,relay")
    b = start_worker(host_b, "host-b", log=tmp_path / "host-b.log", queues="device")
    try:
        trigger(host_a, "twohosts", sha)
        run = finished(Run.objects.get(backend=backend), timeout=600)
        bundle = wait_for(
            lambda: Bundle.objects.filter(run=run, status="ready").first(),
            timeout=300, what="host A to build the bundle from storage",
        )  # fmt: skip
    finally:
        stop(a, b)
    assert run.status == "passed", run.error
    results_once(run)

    # B had only storage to go on: the tree and the wheels came from there; its reports
    # and logs went back there. A never ran a test.
    prefix = f"runs/{run.uuid}/"
    stored = keys(client, "")
    assert f"trees/{run.test_suite_sha}.tar.gz" in stored
    wheels = {a.sha256: a for a in run.artifacts.all()}
    assert {a.kind for a in wheels.values()} == {"pytorch", "backend"}
    assert all(a.file.name in stored for a in wheels.values())
    assert f"{prefix}build.log" in stored
    for shard in run.shards.all():
        attempt = f"{prefix}shard-{shard.index}/attempt-1/"
        assert {f"{attempt}p001.{kind}" for kind in ("ids", "junit.xml", "progress.jsonl", "log")
                } <= stored  # fmt: skip
    assert list((tmp_path / "host-b" / "runs" / str(run.uuid)).glob("shard-*/attempt-*/p001.log"))
    assert not list((tmp_path / "host-a").glob(f"runs/{run.uuid}/shard-*"))
    assert not no_clone.exists()
    recorded = WorkerEnvironment.objects.filter(run=run)
    assert {env.environment["kind"] for env in recorded} == {"built"}
    assert all(env.environment["python"].startswith(str(tmp_path / "host-b-environments"))
               for env in recorded)  # fmt: skip

    # The bundle, built by A from storage, is complete and verifies.
    archive = tmp_path / "bundle.tar.gz"
    client.download_file(BUCKET, bundle.file.name, str(archive))
    unpacked = tmp_path / "unpacked"
    with tarfile.open(archive) as tar:
        tar.extractall(unpacked, filter="data")
    (top,) = unpacked.iterdir()
    bundled = {p.relative_to(top / "results").as_posix() for p in (top / "results").rglob("*.*")}
    for shard in run.shards.all():
        assert f"shard-{shard.index}/attempt-1/p001.junit.xml" in bundled
        assert f"shard-{shard.index}/attempt-1/p001.log" in bundled
    verified = subprocess.run(
        [sys.executable, "reproduce", "--verify"], cwd=top, capture_output=True, text=True
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
    shutil.rmtree(unpacked)
