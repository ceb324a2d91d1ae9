"""A dispatched run whose HUD job has started, for the outbox tests that drive `deliver`."""

import uuid

from django.utils import timezone

from runs.models import Backend, Dispatch, RelayCallback, Run, Trigger
from runs.relay import outbox
from runs.relay.simulator import RelaySimulator
from tests.dispatches import pr_dispatch

REPO = "acme/torch-acme"


def started_run(backend: Backend, simulator: RelaySimulator) -> Run:
    """A running dispatched run (aggregate mode) whose in_progress callback is queued."""
    body = pr_dispatch(delivery_id=str(uuid.uuid4()))
    simulator.dispatch(body["delivery_id"], REPO, body["payload"])
    dispatch = Dispatch.objects.create(
        backend=backend, delivery_id=body["delivery_id"], event_type="pull_request",
        raw_body="{}", payload=body["payload"], verdict="accepted",
    )  # fmt: skip
    trigger = Trigger.objects.create(
        backend=backend, kind="dispatch", dispatch=dispatch, pytorch_sha="a" * 40
    )
    run = Run.objects.create(
        trigger=trigger, backend=backend, job_name="acme", backend_version="1",
        pytorch_sha="a" * 40, test_suite_sha="a" * 40,
        config_version=backend.config_versions.get(), status=Run.Status.RUNNING,
    )  # fmt: skip
    outbox.job_started(run)
    return run


def in_progress(run: Run) -> RelayCallback:
    return run.callbacks.get(transition=RelayCallback.Transition.IN_PROGRESS)


def make_due(callback: RelayCallback) -> None:
    """As if its next try's time had come (the beat would hand it to `deliver` then)."""
    RelayCallback.objects.filter(pk=callback.pk).update(next_attempt_at=timezone.now())
