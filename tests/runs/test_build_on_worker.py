"""The build command runs on the worker that plans the run: never in the request or
transaction that starts it, within a time limit, its output kept and shown as progress."""

import os

import pytest
from django.urls import reverse

from crcr_site.lib import enqueue
from reproducibility.models import WorkerEnvironment
from reproducibility.tasks import capture_environment
from runs import planning
from runs.models import Run
from tests.builds import reference_build
from tests.factories import make_user
from tests.reproducibility.builders import make_run
from tests.waiting import wait_for

# The reference build's wheels (real ones: the run's environment is built from them).
WHEELS = [
    "build:crcr_refdev-0.0.0-py3-none-any.whl",
    "build:torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",
]
# Waits until the test says go, so the test knows exactly where the build stands
# (five minutes at most: a test that failed before saying go leaves no build behind).
BLOCKING_BUILD = (
    'echo "waiting for go"; n=0; while [ ! -e "$BUILD_GATE/go" ]; do '
    "n=$((n + 1)); [ $n -gt 1500 ] && exit 1; sleep 0.2; done; "
    f'echo "compiling aten"; {reference_build()} > "$BUILD_GATE/reference.log" 2>&1'
)


@pytest.fixture
def gate(tmp_path, monkeypatch):
    folder = tmp_path / "gate"
    folder.mkdir()
    monkeypatch.setenv("BUILD_GATE", str(folder))
    yield folder
    (folder / "go").touch()  # never leave the worker building for a failed test


def test_the_start_page_answers_while_the_build_runs_on_the_worker_and_shows_it(
    client, backend, upstream, celery_worker, settings, gate, tmp_path
):
    settings.CRCR_BUILD_COMMAND = BLOCKING_BUILD
    settings.MEDIA_ROOT = str(tmp_path / "storage")
    client.force_login(make_user("rita", role="reviewer"))

    # The build cannot finish before the test says go: an answer now means the page
    # did not wait for it.
    started = client.post(
        reverse("runs:trigger_create"), {"backend": "acme", "kind": "manual", "target": "b" * 40}
    )
    assert started.status_code == 302
    run = Run.objects.get()
    assert not run.artifacts.exists(), (run.status, run.stage, run.claims, run.last_failure,
                                        [a.location for a in run.artifacts.all()])  # fmt: skip

    url = reverse("runs:run_detail", args=[run.uuid])
    wait_for(
        lambda: "Planning: building: waiting for go" in client.get(url).content.decode(),
        timeout=300,
        what="the run page to show the build's progress",
    )
    (gate / "go").touch()
    run = wait_for(
        lambda: Run.objects.filter(pk=run.pk, status__in=Run.FINISHED).first(),
        timeout=300,
        what="the run to be planned with the built wheel",
    )
    assert run.status != "error", run.error
    assert sorted(a.location for a in run.artifacts.all()) == WHEELS
    log = planning.workdir_for(run) / planning.BUILD_LOG
    assert log.read_text() == "waiting for go\ncompiling aten\n"


def test_a_build_past_its_time_limit_is_killed_and_ends_the_run_in_error(
    backend, settings, tmp_path
):
    settings.CRCR_BUILD_COMMAND = f'echo "started"; echo $$ > {tmp_path}/pid; sleep 600'
    settings.CRCR_BUILD_TIMEOUT = 2
    settings.MEDIA_ROOT = str(tmp_path / "storage")
    run = make_run(backend, backend.config_versions.get(), status="queued")

    planning.start(run.pk)

    run.refresh_from_db()
    assert run.status == "error"
    assert "the build command ran past CRCR_BUILD_TIMEOUT (2 s) and was stopped" in run.error
    assert run.error.endswith("started")
    pid = int((tmp_path / "pid").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # the command's shell is gone with its group


def test_a_failed_build_ends_the_run_with_its_output(backend, settings, tmp_path):
    settings.CRCR_BUILD_COMMAND = 'echo "aten/native/Foo.cpp:12: error: no member"; exit 3'
    settings.MEDIA_ROOT = str(tmp_path / "storage")
    run = make_run(backend, backend.config_versions.get(), status="queued")

    planning.start(run.pk)

    run.refresh_from_db()
    assert run.status == "error" and not run.artifacts.exists()
    assert run.error == (
        "the build command failed (exit 3):\naten/native/Foo.cpp:12: error: no member"
    )
    assert "no member" in (planning.workdir_for(run) / planning.BUILD_LOG).read_text()


def test_on_the_embedded_default_a_requests_work_runs_after_its_response(
    transactional_db, settings
):
    settings.CELERY_TASK_ALWAYS_EAGER = True  # the embedded default: no broker

    def view(request):
        enqueue.send(capture_environment)
        # Eagerly, the task would have run right here, inside the request.
        assert not WorkerEnvironment.objects.exists()
        return "answered"

    assert enqueue.BackgroundTasksMiddleware(view)(object()) == "answered"
    wait_for(WorkerEnvironment.objects.exists, what="the task to run after the response")
    assert WorkerEnvironment.objects.count() == 1
