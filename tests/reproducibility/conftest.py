"""Fixtures of the reproducibility tests."""

import pytest

from reproducibility import bundles, capture
from reproducibility.models import Bundle
from runs import planning
from tests.factories import make_backend, make_config
from tests.reproducibility.builders import MISMATCH, PASSING, add_result, make_artifact, make_run


@pytest.fixture
def bundle(settings, tmp_path):
    """A finished run with one failing and one passing test, its files, and a built bundle."""
    settings.MEDIA_ROOT = str(tmp_path / "storage")
    backend = make_backend("acme")
    run = make_run(backend, make_config(backend), status="failed")
    run.artifacts.set([make_artifact()])
    add_result(run, MISMATCH, ["failed", "failed", "failed"], "numerical_mismatch", "regression")
    add_result(run, PASSING, ["passed"])
    attempt = planning.workdir_for(run) / "shard-0" / "attempt-1"
    attempt.mkdir(parents=True)
    (attempt / "p001.junit.xml").write_text("<testsuites/>")
    (attempt / "p001.progress.jsonl").write_text('{"event": "start"}\n')
    (planning.workdir_for(run) / "tmp").mkdir(exist_ok=True)
    capture.record_run_start(run)
    made = Bundle.objects.create(run=run)
    return bundles.build(made.pk)
