"""Pacing HUD callbacks: one budget per repository, shared by every sender, under the relay's limit.

The relay counts each repository's callbacks over a sliding 60 s window, refused ones too,
and answers 429 past RATE_LIMIT_PER_MIN (100), with no Retry-After (`runs/relay/README.md`).
Every sender of crcr's callbacks (the relay worker, a GitHub Actions reporter's claim, a
bridge asking crcr for its turn) takes each send, retries included, from its repository's
budget first (`turn`):
1. lock the repository's budget row; time is the database's (`Clock`), the same for
   every host;
2. while a 429 or a Retry-After holds the repository back, the turn comes after it;
3. forget the sends older than the window; with fewer than CRCR_RELAY_CALLBACKS_PER_MINUTE
   left in it, record this send: its turn is now (the relay worker counts it again from
   the relay's answer, `answered`: the relay counted it in between);
4. else the turn comes when the oldest send counted leaves the window, plus jitter (up to a
   quarter of the window), so that the callbacks held back do not all return at once.
A callback whose turn is later is put back for that time, with no attempt counted, and the
run page shows it waiting (`outbox.wait_turn`): the beat's sweep, or its countdown, sends it.
"""

import random
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.db.models.functions import Coalesce, Greatest, Now

from runs.models import RelayBudget
from runs.relay import delivery


class Clock(Now):
    """The database's time at this very statement. PostgreSQL's CURRENT_TIMESTAMP (Django's
    `Now`) is when the transaction began, before it waited for the budget's lock: a send
    recorded at that earlier time would leave crcr's window before it leaves the relay's."""

    def as_postgresql(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        return self.as_sql(compiler, connection, template="CLOCK_TIMESTAMP()", **extra)


def window() -> float:
    return float(settings.CRCR_RELAY_RATE_WINDOW_SECONDS)


@dataclass(frozen=True)
class Turn:
    """A send's turn: `wait` 0.0 means now, and `at` is the time it is counted from."""

    wait: float
    at: float | None = None


def turn(repository: str) -> Turn:
    """Take one send from `repository`'s budget: now (the send is counted), or the seconds
    until its turn (nothing is counted)."""
    with transaction.atomic():
        budget, now = _locked(repository)
        if budget.blocked_until is not None and budget.blocked_until.timestamp() > now:
            return Turn(budget.blocked_until.timestamp() - now + _jitter())
        sends = sorted(at for at in budget.sends if at > now - window())
        limit = settings.CRCR_RELAY_CALLBACKS_PER_MINUTE
        if len(sends) < limit:
            budget.sends = [*sends, now]
            budget.save(update_fields=["sends"])
            return Turn(0.0, now)
        # The send that must leave the window before one more fits in it.
        return Turn(sends[len(sends) - limit] + window() - now + _jitter())


def answered(repository: str, sent: Turn) -> None:
    """The send of `sent` has its answer: count it from now. The relay counted it when it
    arrived, between the two; counted from its answer, it leaves crcr's window no sooner
    than it leaves the relay's (a GitHub Actions sender's is counted from its turn)."""
    with transaction.atomic():
        budget, now = _locked(repository)
        if sent.at in budget.sends:
            budget.sends = [now if at == sent.at else at for at in budget.sends]
            budget.save(update_fields=["sends"])


def _locked(repository: str) -> tuple[RelayBudget, float]:
    """The repository's budget, locked until the transaction ends, and the time now."""
    RelayBudget.objects.get_or_create(repository=repository)
    # Concurrency guard: this update locks the budget's row until the transaction ends
    # (a row lock on PostgreSQL, the database's write lock on SQLite), so two senders
    # never both take the last send of a window, whatever process or host they run on.
    RelayBudget.objects.filter(repository=repository).update(blocked_until=F("blocked_until"))
    budget = RelayBudget.objects.annotate(now=Clock()).get(repository=repository)
    return budget, budget.now.timestamp()


def _jitter() -> float:
    return random.uniform(0.0, window() / 4)


def hold_back(repository: str, answer: delivery.Answer) -> None:
    """After a 429 or a Retry-After, nothing goes to the relay for `repository` until then:
    a Retry-After's time, else (the relay's own 429 has none) a whole window, by when the
    relay has forgotten every request it counted before this one."""
    if answer.status == 429:
        wait = answer.retry_after if answer.retry_after is not None else window()
    elif answer.retryable and answer.retry_after is not None:
        wait = answer.retry_after  # a 503 with Retry-After: the relay is away until then
    else:
        return
    RelayBudget.objects.get_or_create(repository=repository)
    until = Clock() + timedelta(seconds=wait)
    RelayBudget.objects.filter(repository=repository).update(
        blocked_until=Greatest(Coalesce("blocked_until", until), until)
    )
