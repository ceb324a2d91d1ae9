"""Combinations: what a trigger builds. Each is a run and its own HUD job.

The primary combination is the backend's latest version × the resolved PyTorch
SHA × that SHA's test suite × the current config version; each extra backend
version listed on the profile adds one run against the same SHA. The artifacts
are built (or registered) when the run is planned, on a worker: never inside the
request or the transaction that creates the run.
"""

import hashlib
from pathlib import Path

from django.conf import settings
from django.db import transaction

from crcr_site.lib import enqueue
from runs.models import Backend, Run, Trigger

DIMENSIONS = ("backend_version", "pytorch_sha", "test_suite_sha", "config_version_id")
DIMENSION_NAMES = {
    "backend_version": "backend",
    "pytorch_sha": "PyTorch",
    "test_suite_sha": "test suite",
    "config_version_id": "config",
}
# A bundle's re-run is a job of its own ("acme (re-run)"); the HUD shows it as another
# attempt of its job's cell.
RERUN_SUFFIX = " (re-run)"


class CombinationError(Exception):
    pass


def job_name(backend: Backend, version: str, primary: bool) -> str:
    """A stable, readable HUD job name: the same job across PyTorch SHAs."""
    return backend.slug if primary else f"{backend.slug} (backend {version})"


def test_suite_sha(pytorch_sha: str) -> str:
    """The test suite's identity: the PyTorch SHA for a checkout, else the tree's hash."""
    root = Path(settings.CRCR_TORCH_ROOT)
    if (root / ".git").exists():
        return pytorch_sha
    digest = hashlib.sha1()
    for source in sorted((root / "test").rglob("*.py")):
        digest.update(str(source.relative_to(root)).encode() + b"\0" + source.read_bytes())
    return digest.hexdigest()


def changes_since_green(run: Run) -> list[str]:
    """What moved since the job's last green run: a subset of backend/PyTorch/suite/config."""
    green = (
        Run.objects.filter(job_name=run.job_name, backend=run.backend, status=Run.Status.PASSED)
        .exclude(pk=run.pk)
        .order_by("-created_at")
        .first()
    )
    if green is None:
        return ["no green run yet"]
    return [DIMENSION_NAMES[d] for d in DIMENSIONS if getattr(green, d) != getattr(run, d)]


@transaction.atomic
def create_runs(trigger: Trigger) -> list[Run]:
    backend = trigger.backend
    config = backend.config_versions.order_by("-number").first()
    if config is None:
        raise CombinationError(f"backend {backend.slug!r} has no config version yet")
    suite = test_suite_sha(trigger.pytorch_sha)
    versions = [backend.version, *[v for v in backend.extra_versions if v != backend.version]]
    runs = []
    for index, version in enumerate(versions):
        run = Run.objects.create(
            trigger=trigger,
            backend=backend,
            job_name=job_name(backend, version, primary=index == 0),
            is_primary=index == 0,
            backend_version=version,
            pytorch_sha=trigger.pytorch_sha,
            test_suite_sha=suite,
            config_version=config,
        )
        run.changed_since_green = changes_since_green(run)
        run.save(update_fields=["changed_since_green"])
        runs.append(run)
    from runs.tasks import publish_tree

    for run in runs:
        enqueue.after_commit(publish_tree, run.pk)
    return runs
