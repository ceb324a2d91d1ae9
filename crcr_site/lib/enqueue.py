"""Sending a Celery task once the row it works on is committed, without losing work.

The row is the record of the work to do (a dispatch to gate, a run to plan); the
message only says "now". When the broker cannot be reached the message is
dropped with a warning, the row stays as it is, and a beat sweep that looks for
such rows sends the task again once the broker is back.
"""

import logging
from functools import partial
from typing import Any

from celery import Task
from django.db import transaction
from kombu.exceptions import OperationalError as BrokerError

logger = logging.getLogger(__name__)


def after_commit(task: Task, *args: Any) -> None:
    """Send `task(*args)` when the current transaction commits (at once outside one)."""
    transaction.on_commit(partial(send, task, *args))


def send(task: Task, *args: Any) -> bool:
    """Send now; False when the broker is unreachable (the sweep sends it later)."""
    try:
        task.delay(*args)
    except (BrokerError, OSError) as error:
        logger.warning("broker unreachable: %s%s left to the sweep (%s)", task.name, args, error)
        return False
    return True
