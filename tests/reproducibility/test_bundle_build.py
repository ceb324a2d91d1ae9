"""A bundle is built from a run's record and files, verified file by file, and pruned."""

import io
import json
import subprocess
import sys
import tarfile
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.files.base import ContentFile
from django.core.management import CommandError, call_command
from django.utils import timezone

from reproducibility import bundles
from reproducibility.models import Bundle
from runs import planning
from tests.factories import make_backend, make_config
from tests.reproducibility.builders import MISMATCH, PASSING, add_result, make_artifact, make_run

pytestmark = pytest.mark.django_db


def unpack(bundle: Bundle, into: Path) -> Path:
    with bundle.file.open("rb") as stream, tarfile.open(fileobj=stream, mode="r:gz") as tar:
        tar.extractall(into, filter="data")
    return into / f"crcr-run-{bundle.run.uuid}"


def test_a_built_bundle_is_ready_with_its_hash_size_and_expiry(bundle):
    assert bundle.status == Bundle.Status.READY, bundle.error
    assert bundle.file.name == f"bundles/{bundle.uuid}.tar.gz"
    assert len(bundle.sha256) == 64 and bundle.size > 1000
    assert timedelta(days=29) < bundle.expires_at - timezone.now() <= timedelta(days=30)


def test_the_bundle_holds_metadata_config_plan_results_requirements_tree_and_script(
    bundle, tmp_path
):
    top = unpack(bundle, tmp_path / "fresh")
    names = {path.relative_to(top).as_posix() for path in top.rglob("*") if path.is_file()}
    assert {"manifest.json", "metadata.json", "config.yaml", "plan.json", "requirements.txt",
            "reproduce", "README.md", "attestation.intoto.json"} <= names  # fmt: skip
    assert "results/shard-0/attempt-1/p001.junit.xml" in names
    assert "tree/test/test_planted_faults.py" in names and "tree/refdev_faults.yaml" in names
    assert not any("__pycache__" in name for name in names)
    assert (top / "config.yaml").read_text() == bundle.run.config_version.yaml_text
    assert json.loads((top / "plan.json").read_text())["plan"][0]["test_ids"] == [
        MISMATCH, PASSING,
    ]  # fmt: skip
    assert (top / "reproduce").stat().st_mode & 0o111
    manifest = json.loads((top / "manifest.json").read_text())
    assert {entry["path"] for entry in manifest["files"]} == names - {"manifest.json"}
    # The wheels are referenced by hash and location, not included.
    assert manifest["referenced"][0]["sha256"] == "1" * 64
    # The factory's suite hash is not the tree's: the bundle says so instead of hiding it.
    assert "changed since the run" in manifest["warnings"][0]


def test_the_attestation_names_the_regression_as_failed(bundle, tmp_path):
    top = unpack(bundle, tmp_path / "fresh")
    statement = json.loads((top / "attestation.intoto.json").read_text())
    assert statement["predicateType"] == "https://in-toto.io/attestation/test-result/v0.1"
    assert statement["predicate"]["result"] == "FAILED"
    assert statement["predicate"]["failedTests"] == [MISMATCH]
    assert statement["predicate"]["passedTests"] == [PASSING]
    assert statement["subject"][0]["digest"] == {"sha256": "1" * 64}


def test_the_reproduce_script_lists_the_plan_with_recorded_outcomes(bundle, tmp_path):
    top = unpack(bundle, tmp_path / "fresh")
    listed = subprocess.run(
        [sys.executable, "reproduce", "--list"], cwd=top, capture_output=True, text=True
    )
    assert listed.returncode == 0, listed.stderr
    assert f"{MISMATCH}  failed -> failed -> failed" in listed.stdout


def test_editing_one_byte_of_an_unpacked_bundle_fails_verification_naming_the_file(
    bundle, tmp_path
):
    top = unpack(bundle, tmp_path / "fresh")
    checked = subprocess.run(
        [sys.executable, "reproduce", "--verify"], cwd=top, capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stderr
    data = bytearray((top / "config.yaml").read_bytes())
    data[0] ^= 0x01
    (top / "config.yaml").write_bytes(bytes(data))
    checked = subprocess.run(
        [sys.executable, "reproduce", "--verify"], cwd=top, capture_output=True, text=True
    )
    assert checked.returncode == 2
    assert "config.yaml: SHA-256 mismatch" in checked.stderr
    # A re-run refuses a tampered bundle too.
    rerun = subprocess.run(
        [sys.executable, "reproduce", "--all"], cwd=top, capture_output=True, text=True
    )
    assert rerun.returncode == 2 and "config.yaml" in rerun.stderr


def repack_with_one_byte_changed(bundle: Bundle, member_name: str) -> bytes:
    """The bundle's archive with one byte of one member flipped, packed again."""
    source = io.BytesIO(bundle.file.open("rb").read())
    target = io.BytesIO()
    with (
        tarfile.open(fileobj=source, mode="r:gz") as old,
        tarfile.open(fileobj=target, mode="w:gz") as new,
    ):
        for member in old.getmembers():
            data = old.extractfile(member).read() if member.isfile() else None
            if member.name.endswith(member_name) and data:
                data = bytes([data[0] ^ 0x01]) + data[1:]
            new.addfile(member, io.BytesIO(data) if data is not None else None)
    return target.getvalue()


def test_editing_one_byte_inside_the_archive_names_the_file_and_the_archive(bundle, tmp_path):
    archive = tmp_path / "edited.tar.gz"
    archive.write_bytes(repack_with_one_byte_changed(bundle, "/metadata.json"))
    problems = bundles.verify_archive(archive, bundle.sha256)
    assert problems[0].startswith("edited.tar.gz: SHA-256")
    assert any("/metadata.json: SHA-256 mismatch" in problem for problem in problems)
    with pytest.raises(CommandError, match="metadata.json"):
        call_command("verify_bundle", str(archive))


def test_a_flipped_byte_in_the_compressed_archive_names_the_archive(bundle, tmp_path):
    data = bytearray(bundle.file.open("rb").read())
    data[len(data) // 2] ^= 0xFF
    archive = tmp_path / "flipped.tar.gz"
    archive.write_bytes(bytes(data))
    problems = bundles.verify_archive(archive, bundle.sha256)
    # Whatever else breaks (the gzip stream, files inside), the archive is named first.
    assert problems[0].startswith("flipped.tar.gz: SHA-256")


def test_the_untouched_archive_verifies(bundle, tmp_path):
    archive = tmp_path / "good.tar.gz"
    archive.write_bytes(bundle.file.open("rb").read())
    assert bundles.verify_archive(archive, bundle.sha256) == []


def test_an_archive_with_a_path_escaping_its_folder_is_refused(tmp_path):
    archive = tmp_path / "evil.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo("../outside.txt")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"bad"))
    assert bundles.verify_archive(archive) == ["../outside.txt: unsafe archive member"]
    assert not (tmp_path.parent / "outside.txt").exists()


def test_bundles_past_their_retention_are_pruned_and_others_kept(bundle, monkeypatch):
    monkeypatch.setenv("CRCR_BUNDLE_RETENTION_DAYS", "7")
    fresh = Bundle.objects.create(
        run=bundle.run, status=Bundle.Status.READY, expires_at=bundles.expiry()
    )
    fresh.file.save(f"{fresh.uuid}.tar.gz", ContentFile(b"x"))
    path = Path(bundle.file.path)
    Bundle.objects.filter(pk=bundle.pk).update(expires_at=timezone.now() - timedelta(days=1))
    call_command("prune_bundles", stdout=io.StringIO())
    bundle.refresh_from_db()
    fresh.refresh_from_db()
    assert bundle.status == Bundle.Status.PRUNED and not bundle.file and not path.exists()
    assert fresh.status == Bundle.Status.READY and Path(fresh.file.path).exists()
    assert timedelta(days=6) < fresh.expires_at - timezone.now() <= timedelta(days=7)


def test_a_bundle_that_cannot_be_built_is_failed_with_the_reason(settings, tmp_path):
    settings.MEDIA_ROOT = str(tmp_path / "storage")
    backend = make_backend("acme")
    run = make_run(backend, make_config(backend), status="failed")
    wheel = make_artifact("acme_device", "3" * 64, "backend")
    wheel.file.save("acme_device-1.0-py3-none-any.whl", ContentFile(b"not what was registered"))
    run.artifacts.set([wheel])
    made = bundles.build(Bundle.objects.create(run=run, include_artifacts=True).pk)
    assert made.status == Bundle.Status.FAILED
    assert "artifact acme_device does not match its SHA-256" in made.error
    assert bundles.build(made.pk) is None  # a redelivered task finds it claimed


def test_a_tree_outside_crcr_is_referenced_and_the_script_asks_for_it(settings, tmp_path):
    import shutil

    from django.conf import settings as django_settings

    tree = tmp_path / "pytorch-tests"
    shutil.copytree(django_settings.BASE_DIR / "tests" / "upstream", tree)
    settings.CRCR_TORCH_ROOT = tree
    settings.MEDIA_ROOT = str(tmp_path / "storage")
    backend = make_backend("acme")
    run = make_run(backend, make_config(backend), status="failed")
    add_result(run, MISMATCH, ["failed"], "numerical_mismatch", "regression")
    built = bundles.build(Bundle.objects.create(run=run).pk)
    top = unpack(built, tmp_path / "fresh")
    assert not (top / "tree").exists()
    asked = subprocess.run(
        [sys.executable, "reproduce", "--test", MISMATCH], cwd=top, capture_output=True, text=True
    )
    assert asked.returncode == 2 and "pass --torch-root the test tree at" in asked.stderr
    (tree / "test" / "test_extra.py").write_text("def test_x(): pass\n")
    other = subprocess.run(
        [sys.executable, "reproduce", "--test", MISMATCH, "--torch-root", str(tree)],
        cwd=top, capture_output=True, text=True,
    )  # fmt: skip
    assert other.returncode == 2 and "is not the test tree the run used" in other.stderr


def test_a_symbolic_link_planted_among_the_results_is_named_and_never_followed(settings, tmp_path):
    settings.MEDIA_ROOT = str(tmp_path / "storage")
    secret = tmp_path / "secret.txt"
    secret.write_text("the worker's private key")
    backend = make_backend("acme")
    run = make_run(backend, make_config(backend), status="passed")
    add_result(run, PASSING, ["passed"])
    workdir = planning.workdir_for(run)
    attempt = workdir / "shard-0" / "attempt-1"
    attempt.mkdir(parents=True)
    (attempt / "p001.junit.xml").write_text("<testsuites/>")
    # What test code could plant: a log that is a link, and a whole attempt folder.
    (attempt / "p002.log").symlink_to(secret)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "p001.log").write_text("the worker's private key")
    (workdir / "shard-0" / "attempt-2").symlink_to(elsewhere, target_is_directory=True)

    bundle = bundles.build(Bundle.objects.create(run=run).pk)

    assert bundle.status == Bundle.Status.READY, bundle.error
    top = unpack(bundle, tmp_path / "fresh")
    files = [path for path in top.rglob("*") if path.is_file()]
    assert not any("private key" in path.read_text(errors="replace") for path in files)
    assert (top / "results/shard-0/attempt-1/p001.junit.xml").is_file()
    warnings = " ".join(bundle.manifest["warnings"])
    assert f"results/shard-0/attempt-1/p002.log: a symbolic link to {secret}" in warnings
    assert "results/shard-0/attempt-2: a symbolic link" in warnings
    assert bundles.verify_archive(Path(bundle.file.path), bundle.sha256) == []


WORKER_FREEZE = """\
boto3==1.40.0
expecttest==0.3.0
hypothesis==6.170.17
moto==5.1.0
mypy==1.18.2
numpy==2.4.6
playwright==1.55.0
pytest==9.2.0
ruff==0.14.0
torch==2.13.0+cpu
"""


def test_requirements_hold_the_tests_environment_not_the_workers_whole_freeze(settings, tmp_path):
    from reproducibility.models import WorkerEnvironment

    settings.MEDIA_ROOT = str(tmp_path / "storage")
    backend = make_backend("acme")
    run = make_run(backend, make_config(backend), status="failed")
    WorkerEnvironment.objects.create(
        run=run, hostname="w1", python_version="3.11", os="Linux", cpu_arch="x86_64",
        pip_freeze=WORKER_FREEZE,
    )  # fmt: skip
    built = bundles.build(Bundle.objects.create(run=run).pk)
    text = (unpack(built, tmp_path / "out") / "requirements.txt").read_text()
    pinned = [line for line in text.splitlines() if line and not line.startswith(("#", "-"))]
    assert pinned == [
        "expecttest==0.3.0", "hypothesis==6.170.17", "numpy==2.4.6", "pytest==9.2.0",
        "torch==2.13.0+cpu",
    ]  # fmt: skip
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in text
    assert "less 5 package(s) the tests do not use" in text


def test_a_bundle_asked_to_include_wheels_holds_them_and_says_what_it_could_not(settings, tmp_path):
    import hashlib
    import os

    settings.MEDIA_ROOT = str(tmp_path / "storage")
    backend = make_backend("acme")
    run = make_run(backend, make_config(backend), status="failed")
    content = os.urandom(40_000)  # a wheel's 40 KB, which no compression shrinks
    wheel = make_artifact("acme_device", hashlib.sha256(content).hexdigest(), "backend")
    wheel.file.save("acme_device-1.0-py3-none-any.whl", ContentFile(content))
    installed = make_artifact("torch", "7" * 64)  # an installed torch: no file to include
    run.artifacts.set([wheel, installed])
    without = bundles.build(Bundle.objects.create(run=run).pk)
    within = bundles.build(Bundle.objects.create(run=run, include_artifacts=True).pk)
    top = unpack(within, tmp_path / "with")
    assert (top / "artifacts" / "acme_device-1.0-py3-none-any.whl").read_bytes() == content
    assert not (unpack(without, tmp_path / "without") / "artifacts").exists()
    assert within.size > without.size + 39_000  # the wheel is really inside
    assert within.wheels == "1 included, 1 referenced (not stored files)"
    assert without.wheels == "referenced"


def test_the_bundles_links_point_at_the_server_it_was_asked_from(settings, tmp_path, client):
    from tests.factories import make_user

    settings.MEDIA_ROOT = str(tmp_path / "storage")
    settings.ALLOWED_HOSTS = ["crcr.example.org"]
    backend = make_backend("acme")
    run = make_run(backend, make_config(backend), status="failed")
    client.force_login(make_user("rita", role="reviewer"))
    response = client.post(
        f"/runs/{run.uuid}/reproducibility/bundles/", HTTP_HOST="crcr.example.org", secure=True
    )
    assert response.status_code == 302
    built = bundles.build(Bundle.objects.get(run=run).pk)
    top = unpack(built, tmp_path / "out")
    page = f"https://crcr.example.org/runs/{run.uuid}/"
    assert f"Page: {page}" in (top / "README.md").read_text()
    assert json.loads((top / "metadata.json").read_text())["run"]["url"] == page
    assert ":8000" not in (top / "README.md").read_text()
