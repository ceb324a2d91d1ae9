"""Bad input that reaches a run: a malformed config and markup in test names. Each is
answered with a clear error or shown inert, and nothing is half-stored."""

import pytest

from runs import planning, results, triggers
from runs.models import Run, Shard, TestResult
from tests.factories import make_backend, make_config, make_user
from tests.reproducibility.builders import make_run

BROKEN_YAML = "test_suite_config:\n  files: [\n    - oops\n"
MARKUP = "<img src=x onerror=alert(1)>"


@pytest.mark.django_db
def test_a_run_of_a_malformed_config_ends_in_error_at_its_line_and_column(settings, tmp_path):
    settings.MEDIA_ROOT = str(tmp_path / "storage")
    backend = make_backend("badyaml")
    make_config(backend, BROKEN_YAML)
    run = triggers.start_manual(backend, "a" * 40).runs.get()
    assert planning.start(run.pk) == []
    run.refresh_from_db()
    assert run.status == Run.Status.ERROR
    assert "config.yaml:3:5" in run.error and "invalid YAML" in run.error
    assert not Shard.objects.filter(run=run).exists()
    assert not TestResult.objects.filter(run=run).exists()


@pytest.mark.django_db
def test_markup_in_test_names_and_messages_is_shown_as_text(client):
    backend = make_backend("markup")
    run = make_run(backend, make_config(backend), status="running")
    shard = Shard.objects.create(run=run, index=0, status="done")
    node_id = f"test/test_x.py::TestX::test_{MARKUP}"
    TestResult.objects.create(
        shard=shard, run=run, node_id=node_id, file_path="test/test_x.py", class_name="TestX",
        test_name=f"test_{MARKUP}", outcome="failed",
        message=f"AssertionError: <script>alert(1)</script> {MARKUP}",
    )  # fmt: skip
    results.finish_if_done(run.pk)
    client.force_login(make_user("vera"))
    page = client.get(f"/runs/{run.uuid}/").content.decode()
    assert "test_&lt;img src=x onerror=alert(1)&gt;" in page
    assert MARKUP not in page and "<script>alert(1)" not in page
