"""Claims that outlive no worker: a row of work held by one worker on a lease.

A run to plan, a bundle to build, a selection run and a bisection are each one
row. A worker takes the row with a conditional update (`claim`), and keeps the
claim alive from a thread (`Heartbeat`) while it works. When the worker dies
(SIGKILL, OOM, a lost host) the heartbeat stops, and once it has been silent for
three beats anyone may take the row over: the redelivered message, or the beat
sweep (`sweep`) that sends the task again. Each claim counts as an attempt; once
`attempts_allowed()` are spent the sweep gives the row up with the last failure.

Shards keep their own claim (runs.shard_worker) but share the heartbeat thread.

Every time a lease is judged by is the database's (`Now()` in the conditional update):
the hosts' clocks may differ by minutes, and a worker whose clock runs ahead would
take over live work (one behind would lose its own) if each wrote and read its own.
"""

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from celery import Task
from django.conf import settings
from django.db import InterfaceError, OperationalError, close_old_connections, connection, models
from django.db.models import Case, F, Q, Value, When
from django.db.models.expressions import CombinedExpression
from django.db.models.functions import Now

from crcr_site.lib import enqueue

# What a takeover records about the attempt it replaces.
WORKER_STOPPED = "its worker stopped answering (killed, out of memory or its host lost)"


class Leased(models.Model):
    """The claim of one worker on a row of work: a heartbeat, attempts, the last failure."""

    heartbeat_at = models.DateTimeField(
        null=True, blank=True, help_text="last sign of life of the worker holding the claim"
    )
    claims = models.PositiveSmallIntegerField(
        default=0, help_text="how many times a worker took this work"
    )
    last_failure = models.TextField(blank=True, help_text="why the previous attempt ended")

    class Meta:
        abstract = True

    @property
    def retry_note(self) -> str:
        """What a page says about earlier attempts; empty when the first one holds."""
        if not self.last_failure:
            return ""
        return (
            f"attempt {self.claims} of {attempts_allowed()}; "
            f"the previous attempt ended: {self.last_failure}"
        )


def _objects(model: type[models.Model]) -> "models.Manager[Any]":
    """The rows of a leased model (each has its own `status` and `created_at`)."""
    return model._default_manager


def stale_before() -> CombinedExpression:
    """A heartbeat older than this is a dead worker's (three beats missed): by the
    database's clock, the one every heartbeat is written with."""
    return Now() - timedelta(seconds=3 * settings.CRCR_HEARTBEAT_SECONDS)


def attempts_allowed() -> int:
    return int(settings.CRCR_CLAIM_ATTEMPTS)


def claim(row: Leased, waiting: str, working: str, **updates: Any) -> bool:
    """Move `row` from `waiting` to `working`, or take it over from a dead worker.

    A conditional update: of two workers only one wins, and a row whose attempts
    are spent is left to the sweep. `updates` are written with the claim."""
    model = type(row)
    silent = Q(status=working, heartbeat_at__lt=stale_before())
    won = (
        _objects(model)
        .filter(Q(status=waiting) | silent, pk=row.pk, claims__lt=attempts_allowed())
        .update(
            status=working,
            heartbeat_at=Now(),
            claims=F("claims") + 1,
            last_failure=Case(
                When(silent, then=Value(WORKER_STOPPED)),
                default=F("last_failure"),
                output_field=models.TextField(),
            ),
            **updates,
        )
    )
    if won:
        row.refresh_from_db(fields=["status", "heartbeat_at", "claims", "last_failure", *updates])
    return bool(won)


def release(row: Leased, working: str, failure: str) -> None:
    """End this attempt at once, keeping why: the sweep sends the work again (or gives up)."""
    long_ago = stale_before() - timedelta(seconds=1)
    _objects(type(row)).filter(pk=row.pk, status=working).update(
        heartbeat_at=long_ago, last_failure=failure[:4000]
    )


class Heartbeat(threading.Thread):
    """Call `beat` every CRCR_HEARTBEAT_SECONDS until the block ends.

    A dropped database connection is closed and opened again on the next beat:
    a heartbeat thread that died would let the sweep hand live work to another worker.
    """

    def __init__(self, beat: Callable[[], object]) -> None:
        super().__init__(daemon=True)
        self.beat, self.stopped = beat, threading.Event()

    def run(self) -> None:
        try:
            while not self.stopped.wait(settings.CRCR_HEARTBEAT_SECONDS):
                try:
                    self.beat()
                except (OperationalError, InterfaceError):
                    close_old_connections()
        finally:
            connection.close()

    def __enter__(self) -> "Heartbeat":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.join()


@contextmanager
def held(row: Leased, working: str) -> Iterator[None]:
    """Keep the claim on `row` alive while the block runs; an exception that escapes
    the block ends the attempt with its reason (the sweep decides what comes next)."""
    model = type(row)

    def beat() -> None:
        _objects(model).filter(pk=row.pk, status=working).update(heartbeat_at=Now())

    with Heartbeat(beat):
        try:
            yield
        except Exception as error:
            release(row, working, f"{type(error).__name__}: {error}")
            raise


def sweep(
    model: type[Leased],
    waiting: str,
    working: str,
    resend: Callable[[Any], Task | None],
    give_up: Callable[[Any, str], None],
    lost_before: datetime | None = None,
) -> list[int]:
    """The beat's pass over one kind of work; the rows whose task was sent again.

    - a claim whose heartbeat went silent, attempts left: its task is sent again;
    - a claim whose heartbeat went silent, attempts spent: given up with the last failure;
    - waiting since before `lost_before` (None: the queue still holds messages, skip):
      its message was lost with the broker, so it is sent again.
    `resend(row)` names the task for a row (None: nothing can resume it, give it up).
    """
    silent = _objects(model).filter(status=working, heartbeat_at__lt=stale_before())
    for row in silent.filter(claims__gte=attempts_allowed()):
        give_up(row, f"gave up after {row.claims} attempts: {row.last_failure or WORKER_STOPPED}")
    rows = list(silent.filter(claims__lt=attempts_allowed()))
    if lost_before is not None:
        rows += _objects(model).filter(status=waiting, created_at__lt=lost_before)
    sent = []
    for row in rows:
        task = resend(row)
        if task is None:
            give_up(row, f"stopped: {row.last_failure or WORKER_STOPPED}")
        elif enqueue.send(task, row.pk):
            sent.append(row.pk)
    return sent
