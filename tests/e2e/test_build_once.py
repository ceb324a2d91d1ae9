"""Build once, test many: a combination's wheels become one environment per device host,
every test process of the combination runs inside it, and nothing runs on a bad wheel.

The build command is the reference build (deploy/reference_build.py): the pinned torch
wheel from pip's index and the reference device packaged as `crcr_refdev`. The tests
under test say where they run from inside their own processes.
"""

import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from django.urls import reverse

from demo.localgit import PyTorchShapedRepo
from reproducibility.metadata import metadata
from reproducibility.models import Bundle, WorkerEnvironment
from runs import environments, planning, shard_worker, triggers
from runs.models import Artifact, Run, Shard, TestResult
from runs.relay import outbox
from tests.builds import DEVICE_MODULE, reference_build
from tests.factories import make_backend, make_config, make_user
from tests.waiting import wait_for

# Inside the test process: this interpreter, torch and the device are the environment's,
# not the worker's. Each test also writes where it ran, for the test below to compare.
PROBE_TEST = """import json, os, sys
from pathlib import Path

import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase, run_tests


def inside(path):
    return Path(path).resolve().is_relative_to(Path(sys.prefix).resolve())


class TestWhere(TestCase):
    def check(self, device):
        import crcr_refdev

        self.assertNotEqual(Path(sys.prefix).resolve(), Path(os.environ["PROBE_WORKER_PREFIX"]))
        self.assertTrue(inside(torch.__file__), torch.__file__)
        self.assertTrue(inside(crcr_refdev.__file__), crcr_refdev.__file__)
        with open(os.environ["PROBE_OUT"], "a") as out:
            out.write(json.dumps({"test": self.id(), "prefix": sys.prefix,
                                  "torch": torch.__file__, "device": crcr_refdev.__file__}) + "\\n")

    def test_add(self, device):
        self.check(device)
        x = torch.ones(3, device=device)
        self.assertEqual((x + x).cpu(), torch.full((3,), 2.0))

    def test_mul(self, device):
        self.check(device)
        x = torch.full((3,), 3.0, device=device)
        self.assertEqual((x * x).cpu(), torch.full((3,), 9.0))


instantiate_device_type_tests(TestWhere, globals())

if __name__ == "__main__":
    run_tests()
"""
CONFIG = """test_suite_config:
  files:
    - path: ${TORCH_ROOT}/test/test_where.py
      unlisted_test_mode: mandatory_success
"""


@pytest.fixture
def combination(tmp_path, settings, monkeypatch):
    """A PyTorch clone with the probe test, the reference build, a backend of its wheel."""
    repo = PyTorchShapedRepo(tmp_path / "pytorch")
    sha = repo.commit("main", "Add a probe test (#1)", {
        "pytest.ini": "[pytest]\n", "test/test_where.py": PROBE_TEST})  # fmt: skip
    settings.CRCR_TORCH_ROOT = repo.path
    settings.CRCR_UPSTREAM = f"git:{repo.path}"
    settings.MEDIA_ROOT = str(tmp_path / "storage")
    settings.CRCR_BUILD_COMMAND = reference_build(repo.path)
    settings.CRCR_MAX_SHARD_SECONDS = 1  # one test a shard: two shards
    probes = tmp_path / "probes.jsonl"
    monkeypatch.setenv("PROBE_OUT", str(probes))
    monkeypatch.setenv("PROBE_WORKER_PREFIX", str(Path(sys.prefix).resolve()))
    monkeypatch.setenv("CRCR_TEST_ENV_PASSTHROUGH", "PROBE_*")
    backend = make_backend("acme", device_module=DEVICE_MODULE, version="0.0.0")
    make_config(backend, CONFIG)
    return backend, sha, probes


def finished(run: Run) -> Run:
    return wait_for(
        lambda: Run.objects.filter(pk=run.pk, status__in=Run.FINISHED).first(),
        timeout=600,
        what=f"run {run.uuid} to finish",
    )


def probes_of(path: Path, start: int) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()[start:]]


def built_environments() -> set[str]:
    return {key for _, _, key in environments.cached()}


def test_every_shard_runs_in_the_combinations_environment_built_once_per_wheel_set(
    combination, celery_worker, tmp_path, client
):
    backend, sha, probes = combination

    first = finished(triggers.start_manual(backend, sha).runs.get())
    assert first.status == "passed", first.error
    assert first.shards.count() == 2
    wheels = {a.kind: a for a in first.artifacts.all()}
    assert wheels["pytorch"].name == "torch" and wheels["pytorch"].version == "2.13.0+cpu"
    assert wheels["backend"].name == "crcr_refdev" and wheels["backend"].version == "0.0.0"
    key = environments.key_for(first.artifacts.all())
    prefix = (Path(environments.root()) / key).resolve()
    ran = probes_of(probes, 0)
    assert sorted(p["test"].rsplit(".", 1)[1] for p in ran) == [
        "test_add_privateuseone", "test_mul_privateuseone"]  # fmt: skip
    for probe in ran:
        assert Path(probe["prefix"]).resolve() == prefix
        assert Path(probe["torch"]).resolve().is_relative_to(prefix)
    assert key in built_environments()  # (the session's cache: other tests may share it)
    after_first = built_environments()

    # The run's metadata says which environment, from which wheels, with what in it.
    recorded = metadata(first)["environments"]
    assert {env["shard"] for env in recorded} == {0, 1}
    for env in recorded:
        assert env["environment"]["kind"] == "built" and env["environment"]["key"] == key
        assert {w["sha256"] for w in env["environment"]["wheels"]} == {
            a.sha256 for a in first.artifacts.all()}  # fmt: skip
        assert "pytest==9.2.0" in env["pip_freeze"] and env["torch_version"] == "2.13.0+cpu"
        assert env["backend_version"] == "0.0.0"
    client.force_login(make_user("vera"))
    record = client.get(reverse("reproducibility:record_detail", args=[first.uuid]))
    assert f"built from crcr_refdev 0.0.0, torch 2.13.0+cpu (environment {key[:12]})" in (
        record.content.decode())  # fmt: skip
    built_at = json.loads((prefix / environments.FACTS).read_text())["built_at"]
    assert_the_bundle_recreates_the_environment(first, tmp_path)

    # The same combination again: the same wheels, the same environment, not rebuilt.
    second = finished(triggers.start_manual(backend, sha).runs.get())
    assert second.status == "passed", second.error
    assert set(second.artifacts.all()) == set(first.artifacts.all())
    assert {Path(p["prefix"]).resolve() for p in probes_of(probes, len(ran))} == {prefix}
    assert json.loads((prefix / environments.FACTS).read_text())["built_at"] == built_at
    assert built_environments() == after_first

    # A new backend version is a new backend wheel: a new environment.
    backend.version = "0.0.1"
    backend.save()
    third = finished(triggers.start_manual(backend, sha).runs.get())
    assert third.status == "passed", third.error
    new_key = environments.key_for(third.artifacts.all())
    assert new_key != key and built_environments() - after_first == {new_key}
    third_probes = probes_of(probes, 2 * len(ran))
    assert {Path(p["prefix"]).resolve() for p in third_probes} == {
        (Path(environments.root()) / new_key).resolve()}  # fmt: skip
    assert all("crcr_refdev" in p["device"] for p in third_probes)
    assert {env.backend_version for env in WorkerEnvironment.objects.filter(run=third)} == {"0.0.1"}


def assert_the_bundle_recreates_the_environment(run: Run, tmp_path: Path) -> None:
    """The bundle's `reproduce --create-env` installs the run's own wheels (found by hash)
    and the pinned test requirements it ran with; a wheel it cannot find is named."""
    bundle = wait_for(lambda: Bundle.objects.filter(run=run, status="ready").first(),
                      timeout=300, what="the run's bundle")  # fmt: skip
    unpacked = tmp_path / "bundle"
    with tarfile.open(bundle.file.path) as tar:
        tar.extractall(unpacked, filter="data")
    (top,) = unpacked.iterdir()
    reproduce = [sys.executable, "reproduce", "--create-env", str(tmp_path / "env"), "--dry-run"]
    missing = subprocess.run(reproduce, cwd=top, capture_output=True, text=True)
    device = run.artifacts.get(kind="backend")
    assert missing.returncode == 2
    assert f"wheel crcr_refdev 0.0.0 (sha256 {device.sha256}) is neither in this bundle nor " \
        "in --wheels DIR" in missing.stderr  # fmt: skip
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for artifact in run.artifacts.all():  # as a user downloads them, under any names
        shutil.copy(artifact.file.path, wheels / f"{artifact.name}-download.whl")
    made = subprocess.run([*reproduce, "--wheels", str(wheels)], cwd=top, capture_output=True,
                          text=True)  # fmt: skip
    assert made.returncode == 0, made.stderr
    install = next(line for line in made.stdout.splitlines() if " install " in line)
    assert "--no-deps" in install and "requirements.txt" in install
    assert {f"{wheels}/{a.name}-download.whl" for a in run.artifacts.all()} <= set(install.split())
    requirements = (top / "requirements.txt").read_text()
    assert "\npytest==9.2.0\n" in requirements and "\nnumpy==2.4.6\n" in requirements
    assert "\ntorch @ file://" not in requirements  # the host's wheel cache means nothing here


def built_elsewhere(backend, sha: str) -> tuple[Run, Artifact]:
    """A run whose wheels were built and stored (by another host), and its backend wheel."""
    run = triggers.start_manual(backend, sha).runs.get()
    planning.prepare_artifacts(run)
    return run, run.artifacts.get(kind="backend")


def corrupt(artifact: Artifact) -> None:
    path = Path(artifact.file.path)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.django_db
def test_a_corrupt_or_missing_wheel_fails_as_infrastructure_naming_its_hash_and_runs_nothing(
    combination, settings, tmp_path
):
    backend, sha, probes = combination
    # Planned on another host: its wheels are in storage, its shards waiting.
    run, wheel = built_elsewhere(backend, sha)
    node = "test/test_where.py::TestWherePRIVATEUSE1::test_{}_privateuseone"
    planning.store(run, [Shard(run=run, index=index, test_ids=[node.format(name)])
                         for index, name in enumerate(("add", "mul"))])  # fmt: skip

    # Another device host, whose cache has never seen these wheels, gets a corrupt one.
    settings.CRCR_ENV_DIR = str(tmp_path / "other-host")
    corrupt(wheel)
    first, second = run.shards.order_by("index")
    shard_worker.execute(first.pk)
    first.refresh_from_db()
    assert first.status == "error"
    assert f"crcr_refdev 0.0.0 (sha256 {wheel.sha256}) is corrupt in storage" in first.error
    # And a missing one.
    Path(wheel.file.path).unlink()
    shard_worker.execute(second.pk)
    second.refresh_from_db()
    assert second.status == "error"
    assert f"(sha256 {wheel.sha256}) could not be fetched from storage" in second.error

    assert not probes.exists()  # no test process ran
    assert not TestResult.objects.filter(run=run).exists()
    assert not list((tmp_path / "other-host").glob("*/bin/python"))  # nothing half-built used
    run.refresh_from_db()
    assert run.status == "error" and outbox.CONCLUSIONS[run.status] == "cancelled"  # infra


@pytest.mark.django_db
def test_planning_on_a_corrupt_wheel_ends_the_run_in_error_naming_its_hash(
    combination, settings, tmp_path
):
    backend, sha, probes = combination
    run, wheel = built_elsewhere(backend, sha)
    corrupt(wheel)
    settings.CRCR_ENV_DIR = str(tmp_path / "fresh-host")

    planning.start(run.pk)

    run.refresh_from_db()
    assert run.status == "error" and not run.shards.exists()
    assert f"(sha256 {wheel.sha256}) is corrupt in storage" in run.error
    assert not probes.exists()
