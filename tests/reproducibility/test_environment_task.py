"""A real Celery worker on the broker records the environment of its host."""

import platform
import socket

from reproducibility.models import WorkerEnvironment
from reproducibility.tasks import capture_environment
from tests.waiting import wait_for


def test_a_worker_records_its_environment_through_the_broker(celery_worker):
    capture_environment.delay()
    row = wait_for(WorkerEnvironment.objects.first, what="the worker's environment row")
    assert row.hostname == socket.gethostname()
    assert row.python_version == platform.python_version()
    assert row.torch_version == "2.13.0+cpu"
    assert "Django==" in row.pip_freeze
    assert row.cpu_arch == platform.machine()
