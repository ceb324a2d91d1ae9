"""Work claimed by a worker that died is taken over, or given up with its reason.

Each row below is left the way a SIGKILLed worker leaves it: claimed, its
heartbeat silent. tests/faults/test_planning_taken_over.py kills a real worker.
"""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from crcr_site.lib import leases
from reproducibility import bundles
from reproducibility import tasks as reproducibility_tasks
from reproducibility.models import Bisection, Bundle
from runs import tasks as runs_tasks
from runs.models import Run
from selection import tasks as selection_tasks
from selection.models import SelectionRun
from tests.factories import make_backend, make_config, make_user
from tests.reproducibility.builders import make_artifact, make_run
from tests.waiting import wait_for

SILENT = {"heartbeat_at": timezone.now() - timedelta(hours=1)}


@pytest.fixture
def backend(db):
    backend = make_backend("acme")
    make_config(backend)
    return backend


@pytest.fixture
def run(backend):
    made = make_run(backend, backend.config_versions.get())
    made.artifacts.set([make_artifact()])
    return made


def test_a_live_claim_is_kept_a_silent_one_taken_over_a_spent_one_left(run, settings):
    settings.CRCR_CLAIM_ATTEMPTS = 3
    live = Bundle.objects.create(run=run, status="building", claims=1, heartbeat_at=timezone.now())
    silent = Bundle.objects.create(run=run, status="building", claims=1, **SILENT)
    spent = Bundle.objects.create(run=run, status="building", claims=3, **SILENT)

    assert not live.claim()
    assert silent.claim()
    assert not spent.claim()

    silent.refresh_from_db()
    assert silent.claims == 2 and silent.last_failure == leases.WORKER_STOPPED
    assert silent.retry_note.startswith("attempt 2 of 3; the previous attempt ended: its worker")


def test_a_bundle_whose_builder_died_is_built_by_the_sweep(run, celery_worker, client):
    stuck = Bundle.objects.create(run=run, status="building", claims=1, **SILENT)

    assert reproducibility_tasks.resend_lost_work()["bundles"] == [stuck.pk]

    built = wait_for(
        lambda: Bundle.objects.filter(pk=stuck.pk, status="ready").first(),
        what="the bundle to be built by the worker that took it over",
    )
    assert built.claims == 2 and built.file
    client.force_login(make_user("vera"))
    page = client.get(reverse("reproducibility:record_detail", args=[run.uuid])).content.decode()
    assert "attempt 2 of 3; the previous attempt ended: its worker stopped answering" in page


def test_a_bundle_whose_attempts_ran_out_fails_and_no_longer_blocks_a_new_one(run, settings):
    settings.CRCR_CLAIM_ATTEMPTS = 2
    stuck = Bundle.objects.create(
        run=run, status="building", claims=2, last_failure="MemoryError: ", **SILENT
    )

    assert reproducibility_tasks.resend_lost_work()["bundles"] == []

    stuck.refresh_from_db()
    assert stuck.status == "failed"
    assert stuck.error == "gave up after 2 attempts: MemoryError: "
    assert bundles.request(run).pk != stuck.pk


def test_a_planning_whose_attempts_ran_out_ends_the_run_in_error(run, settings, client):
    settings.CRCR_CLAIM_ATTEMPTS = 3
    Run.objects.filter(pk=run.pk).update(status="planning", claims=3, **SILENT)

    assert runs_tasks.resend_lost_work()["plan"] == []

    run.refresh_from_db()
    assert run.status == "error" and run.finished_at is not None
    assert run.error == f"gave up after 3 attempts: {leases.WORKER_STOPPED}"
    client.force_login(make_user("vera"))
    page = client.get(reverse("runs:run_detail", args=[run.uuid])).content.decode()
    assert "gave up after 3 attempts: its worker stopped answering" in page


def test_a_bisection_whose_worker_kept_dying_is_stopped_with_the_reason(run, client):
    bisection = Bisection.objects.create(
        good_run=run, bad_run=run, status="running", claims=3,
        last_failure="OSError: No space left on device", **SILENT,
    )  # fmt: skip

    assert reproducibility_tasks.resend_lost_work()["bisections"] == []

    bisection.refresh_from_db()
    assert bisection.status == "stopped"
    assert bisection.message == "gave up after 3 attempts: OSError: No space left on device"
    client.force_login(make_user("vera"))
    url = reverse("reproducibility:bisection_detail", args=[bisection.uuid])
    assert "No space left on device" in client.get(url).content.decode()


def test_a_selection_run_left_by_a_dead_worker_is_shown_failed_with_why(backend, client):
    spent = SelectionRun.objects.create(
        backend=backend, kind="select", status="running", claims=3, **SILENT
    )
    # An upgrade runs inside its management command: nothing can resume it.
    upgrade = SelectionRun.objects.create(
        backend=backend, kind="upgrade", argument="f" * 40, status="running", claims=1, **SILENT
    )

    assert selection_tasks.resend_lost_work() == {"runs": [], "submissions": [], "chunks": []}

    spent.refresh_from_db()
    upgrade.refresh_from_db()
    assert spent.status == upgrade.status == "failed"
    assert spent.error == f"gave up after 3 attempts: {leases.WORKER_STOPPED}"
    assert upgrade.error == f"stopped: {leases.WORKER_STOPPED}"
    client.force_login(make_user("vera"))
    url = reverse("selection:selectionrun_detail", args=[spent.uuid])
    assert "gave up after 3 attempts" in client.get(url).content.decode()


def test_an_exception_ends_the_attempt_at_once_with_its_reason(run):
    bundle = Bundle.objects.create(run=run)
    assert bundle.claim()

    with pytest.raises(RuntimeError), leases.held(bundle, Bundle.Status.BUILDING):
        raise RuntimeError("storage unreachable")

    bundle.refresh_from_db()
    silent = Bundle.objects.filter(pk=bundle.pk, heartbeat_at__lt=leases.stale_before())
    assert bundle.status == "building" and silent.exists()  # by the database's clock
    assert bundle.last_failure == "RuntimeError: storage unreachable"
