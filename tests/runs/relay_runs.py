"""Backends and dispatched runs for the relay tests: a run whose HUD job has started."""

import uuid
from pathlib import Path
from typing import Any

from django.utils import timezone

from runs.models import Backend, Dispatch, RelayCallback, Run, Trigger
from runs.relay import outbox
from runs.relay.simulator import RelaySimulator
from tests.dispatches import pr_dispatch
from tests.factories import make_backend, make_config

REPO = "acme/torch-acme"


def relay_backend(simulator: RelaySimulator, tmp_path: Path, **fields: Any) -> Backend:
    """A backend whose callbacks crcr's relay worker sends to `simulator`, with a token file."""
    token = tmp_path / "relay-token"
    token.write_text("s3cret\n")
    backend = make_backend("acme", relay_url=simulator.url, relay_token=f"file:{token}", **fields)
    make_config(backend)
    return backend


def make_run(backend: Backend, trigger: Trigger) -> Run:
    return Run.objects.create(
        trigger=trigger, backend=backend, job_name="acme", backend_version="1",
        pytorch_sha=trigger.pytorch_sha, test_suite_sha=trigger.pytorch_sha,
        config_version=backend.config_versions.get(), status=Run.Status.RUNNING,
    )  # fmt: skip


def dispatched_run(backend: Backend, simulator: RelaySimulator | None = None) -> Run:
    """A running run of a merged-PR dispatch (the simulator's, when one is given); its job
    has started (with crcr's relay worker as the sender, the run's in_progress is queued)."""
    body = pr_dispatch(delivery_id=str(uuid.uuid4()))
    if simulator is not None:
        simulator.dispatch(body["delivery_id"], REPO, body["payload"])
    dispatch = Dispatch.objects.create(
        backend=backend, delivery_id=body["delivery_id"], event_type="pull_request",
        raw_body="{}", payload=body["payload"], verdict="accepted",
    )  # fmt: skip
    trigger = Trigger.objects.create(
        backend=backend, kind="dispatch", dispatch=dispatch, pytorch_sha="a" * 40
    )
    run = make_run(backend, trigger)
    outbox.job_started(run)
    return run


def in_progress(run: Run) -> RelayCallback:
    return run.callbacks.get(transition=RelayCallback.Transition.IN_PROGRESS)


def make_due(callback: RelayCallback) -> None:
    """As if its next try's time had come (the beat would hand it to `deliver` then)."""
    RelayCallback.objects.filter(pk=callback.pk).update(next_attempt_at=timezone.now())
