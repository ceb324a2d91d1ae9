"""The HUD grid: rows of upstream events, a column per job, one character a cell."""

import pytest
from django.utils import timezone

from runs.models import Dispatch, Failure, Run, Shard, TestResult, Trigger
from tests.factories import make_backend, make_config, make_user

pytestmark = pytest.mark.django_db


def make_run(backend, sha, job, status, pr=None, flaky=False, tests=1) -> Run:
    dispatch = None
    if pr:
        dispatch = Dispatch.objects.create(
            backend=backend, delivery_id=f"d-{sha}-{job}", event_type="pull_request",
            raw_body="{}", payload={}, pr_number=pr,
        )  # fmt: skip
    trigger = Trigger.objects.create(
        backend=backend, kind="dispatch" if pr else "nightly", pytorch_sha=sha, dispatch=dispatch
    )
    now = timezone.now()
    run = Run.objects.create(
        trigger=trigger, backend=backend, job_name=job, backend_version="1", pytorch_sha=sha,
        test_suite_sha=sha, config_version=backend.config_versions.first(), status=status,
        started_at=now, finished_at=now if status != "running" else None,
    )  # fmt: skip
    shard = Shard.objects.create(run=run, index=0)
    for number in range(tests):
        result = TestResult.objects.create(
            shard=shard, run=run, node_id=f"t.py::T::test_{number}", file_path="t.py",
            test_name="test", outcome="failed" if flaky else "passed",
        )  # fmt: skip
        if flaky:
            Failure.objects.create(result=result, run=run, category="other", verdict="flaky")
    return run


def test_the_hud_shows_one_character_per_job_and_event(client):
    backend = make_backend("acme")
    make_config(backend)
    make_run(backend, "a" * 40, "acme", "passed", pr=11)
    make_run(backend, "a" * 40, "acme (backend 1.0)", "failed", pr=11)
    make_run(backend, "b" * 40, "acme", "passed", flaky=True)
    make_run(backend, "c" * 40, "acme", "running", pr=12)
    make_run(backend, "d" * 40, "acme", "timed_out", pr=13)
    client.force_login(make_user("vera"))
    page = client.get("/").content.decode()
    for char in ("O", "X", "F", "?", "T"):
        assert f'class="cell cell-{char}"' in page
    assert "#11" in page and ">nightly<" in page
    assert page.index("acme (backend 1.0)") > page.index("<th>acme</th>")
    assert "pass rate" in page and "67%" in page and "0%" in page


def test_an_empty_hud_explains_itself(client):
    client.force_login(make_user("vera"))
    assert b"No runs yet." in client.get("/").content
