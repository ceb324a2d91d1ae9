"""The Celery app: three queues, routing by task, and the beat schedule."""

import os
from typing import Any

from celery import Celery, signals
from kombu import Queue

from crcr_site.lib import sealing

sealing.unseal()  # a sealed worker's credentials, before the settings read them
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "crcr_site.settings")

app = Celery("crcr")
app.config_from_object("django.conf:settings", namespace="CELERY")

# default: intake, planning, ingestion, bundles; device: shard execution on the
# accelerator host; relay: HUD callbacks, so a slow relay never blocks a shard.
app.conf.task_queues = (Queue("default"), Queue("device"), Queue("relay"))
app.conf.task_default_queue = "default"
app.conf.task_routes = {
    "runs.tasks.execute_shard": {"queue": "device"},
    # Collection imports the device's test machinery, so it runs where shards run.
    "runs.tasks.plan_run": {"queue": "device"},
    "reproducibility.tasks.capture_environment": {"queue": "device"},
    # A bisection runs the failing tests at each midpoint: a device host's work.
    "reproducibility.tasks.run_bisection": {"queue": "device"},
    # A re-run's bundle is checked on the queue that plans it, so the sweep of lost
    # planning messages sees it waiting there and does not plan the run unchecked.
    "reproducibility.tasks.prepare_rerun": {"queue": "device"},
    # The selection pipeline's stage 4 and "enable an operator" run tests on the device.
    "selection.tasks.run_selection": {"queue": "device"},
    # A selection run's chunks: the operator capture and stage 4, a file (or part) each.
    "selection.tasks.run_chunk": {"queue": "device"},
    "selection.tasks.enable_operator": {"queue": "device"},
    "runs.tasks.deliver_callback": {"queue": "relay"},
    "runs.tasks.deliver_due_callbacks": {"queue": "relay"},
}
# A task is acknowledged only after it finished, so a worker killed mid-task
# leaves the message on the broker for another worker (no lost shard).
app.conf.task_acks_late = True
app.conf.task_reject_on_worker_lost = True
app.conf.worker_prefetch_multiplier = 1
app.conf.broker_connection_retry_on_startup = True
app.autodiscover_tasks()


@signals.celeryd_init.connect
def seal_worker(**_: Any) -> None:
    """A worker starts again without credentials in its environment, so its test
    processes cannot read them from `/proc` (`crcr_site.lib.sealing`)."""
    sealing.seal()
