"""A worker SIGKILLed while it validates a large uploaded config: the submission is not
lost. Beat's sweep hands the check to another worker once the claim's heartbeat has gone
silent, and the backend is added from the file the admin sent."""

import signal

from django.conf import settings

from crcr_site.celery import app
from crcr_site.lib import leases
from selection.models import ConfigSubmission, ConfigVersion
from tests.factories import make_user
from tests.selection.test_onboarding import FORM
from tests.selection.test_onboarding_large import large_config
from tests.waiting import wait_for
from tests.workers import Beat, environment, start_worker, stop

# Seconds of validation even on a quiet machine: the kill lands while it runs.
HUGE = large_config(6_000_000)
VALIDATING = "validating the config against the PyTorch tree"


def send(broker: str, task: str, *args: object) -> None:
    """Send a task by name to the workers' private broker (as the web does after a POST)."""
    with app.connection_for_write(broker) as connection:
        app.send_task(task, args=list(args), queue="default", connection=connection)


def test_a_check_whose_worker_was_killed_is_taken_over(transactional_db, broker, tmp_path):
    submission = ConfigSubmission.objects.create(
        kind="onboard", text=HUGE, name="first.yaml", config_format="crcr",
        form_data=dict(FORM), requested_by=make_user("ada", role="admin"),
    )  # fmt: skip
    env = environment(tmp_path, broker)
    first = start_worker(env, "first", log=tmp_path / "first.log")
    second = None
    try:
        send(broker, "selection.tasks.check_submission", submission.pk)
        wait_for(
            lambda: ConfigSubmission.objects.filter(pk=submission.pk, stage=VALIDATING).exists(),
            timeout=120,
            what="the first worker to start validating",
        )
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
        submission.refresh_from_db()
        assert (submission.status, submission.claims) == ("running", 1)
        assert submission.text == HUGE  # the submission outlives its worker

        second = start_worker(env, "second", log=tmp_path / "second.log")
        beat = Beat(broker, "selection.tasks.resend_lost_work", every=3)
        done = wait_for(
            lambda: (
                beat.tick()
                and ConfigSubmission.objects.filter(pk=submission.pk, status="accepted").first()
            ),
            timeout=300,
            what="the sweep to hand the check to the second worker, and it to accept it",
        )
    finally:
        stop(first, second)
    assert done.claims == 2 and done.last_failure == leases.WORKER_STOPPED
    version = ConfigVersion.objects.get(backend__slug="spyre")
    assert version.yaml_text == HUGE and done.result == version
    # Validation writes nothing: no scratch copy in the test tree outlives the killed worker.
    assert not list(settings.CRCR_TORCH_ROOT.glob(".crcr-validate-*"))
