"""Sending a Celery task once the row it works on is committed, without losing work.

The row is the record of the work to do (a dispatch to gate, a run to plan); the
message only says "now". When the broker cannot be reached the message is
dropped with a warning, the row stays as it is, and a beat sweep that looks for
such rows sends the task again once the broker is back.

What a web request sends goes out after its response, on one background thread of
the web process (`BackgroundTasksMiddleware`): with a broker, the messages (each a
round trip to the broker, about 1.3 ms of a 12 ms dispatch intake); on the embedded
default (no broker: tasks run in-process), the tasks themselves, so a page never waits
for a build, a bundle or a run. A message lost with the web process in that instant
is one the sweep sends again, as when the broker is down.
"""

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from celery import Task
from django.conf import settings
from django.db import connection, transaction
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from kombu.exceptions import ChannelError
from kombu.exceptions import OperationalError as BrokerError

logger = logging.getLogger(__name__)

# In-process tasks a web request asked for, run once it has answered (embedded default).
_after_response: ContextVar[list[tuple[Task, tuple[Any, ...]]] | None] = ContextVar(
    "after_response", default=None
)
# One thread, so the work runs (or its messages go) in the order it was asked for.
_background = ThreadPoolExecutor(max_workers=1, thread_name_prefix="crcr-in-process-tasks")


def after_commit(task: Task, *args: Any) -> None:
    """Send `task(*args)` when the current transaction commits (at once outside one)."""
    transaction.on_commit(partial(send, task, *args))


def send(task: Task, *args: Any) -> bool:
    """Send now (after the response, in a web request); False when the broker is
    unreachable (the sweep sends it later)."""
    deferred = _after_response.get()
    if deferred is not None:
        deferred.append((task, args))
        return True
    return _publish(task, args)


def _publish(task: Task, args: tuple[Any, ...]) -> bool:
    try:
        task.delay(*args)
    except (BrokerError, OSError) as error:
        logger.warning("broker unreachable: %s%s left to the sweep (%s)", task.name, args, error)
        return False
    return True


def waiting(task: Task) -> int | None:
    """Messages waiting in the task's queue on the broker; None without a broker."""
    app = task.app
    if app.conf.task_always_eager:
        return None
    queue = app.amqp.router.route({}, task.name)["queue"]
    with app.connection_for_write() as connection:
        try:
            return int(connection.default_channel.queue_declare(queue.name, passive=True)[1])
        except ChannelError:
            return 0  # Redis drops a list once it is empty: no such queue, no message


def lost_before(task: Task, seconds: int) -> datetime | None:
    """Work waiting since before this moment lost its message, when nothing waits in the
    task's queue (a busy queue still holds the messages); None: do not look."""
    if waiting(task) != 0:
        return None
    return timezone.now() - timedelta(seconds=seconds)


class BackgroundTasksMiddleware:
    """Tasks sent while a request is handled go out after its response, on a background
    thread: their messages to the broker, or (embedded default) the tasks themselves."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        deferred: list[tuple[Task, tuple[Any, ...]]] = []
        token = _after_response.set(deferred)
        try:
            response = self.get_response(request)
        finally:
            _after_response.reset(token)
        after = _run_in_process if settings.CELERY_TASK_ALWAYS_EAGER else _publish_later
        for task, args in deferred:
            _background.submit(after, task, args)
        return response


def _publish_later(task: Task, args: tuple[Any, ...]) -> None:
    """A request's message, sent after its response; what goes wrong is logged (no one
    waits for this thread), and the sweep sends the task again."""
    try:
        _publish(task, args)
    except Exception:
        logger.exception("sending %s%s failed: left to the sweep", task.name, args)


def _run_in_process(task: Task, args: tuple[Any, ...]) -> None:
    """Run a request's task here, then what it sent, in order, as one worker would;
    nothing it sends goes to a broker (there is none)."""
    queue: list[tuple[Task, tuple[Any, ...]]] = [(task, args)]
    try:
        while queue:
            task, args = queue.pop(0)
            sent: list[tuple[Task, tuple[Any, ...]]] = []
            token = _after_response.set(sent)
            try:
                task.apply(args=args, throw=True)
            except Exception:
                logger.exception("in-process task %s%s failed", task.name, args)
            finally:
                _after_response.reset(token)
            queue.extend(sent)
    finally:
        connection.close()
