"""Pacing HUD callbacks: one budget per repository, shared by every sender, under the relay's limit.

The relay counts each repository's callbacks over a sliding 60 s window, refused ones too,
and answers 429 past RATE_LIMIT_PER_MIN (100), with no Retry-After (`runs/relay/README.md`).
Every sender of crcr's callbacks (the relay worker, a GitHub Actions reporter's claim, a
bridge asking crcr for its turn) takes each send, retries included, from its repository's
budget first (`turn`):
1. lock the repository's budget row; time is the database's, the same for every host;
2. while a 429 or a Retry-After holds the repository back, the turn comes after it;
3. forget the sends older than the window; with fewer than CRCR_RELAY_CALLBACKS_PER_MINUTE
   left in it, record this send: its turn is now;
4. else the turn comes when the oldest send counted leaves the window, plus jitter (up to a
   quarter of the window), so that the callbacks held back do not all return at once.
A callback whose turn is later is put back for that time, with no attempt counted, and the
run page shows it waiting (`outbox.wait_turn`): the beat's sweep, or its countdown, sends it.
"""

import random
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.db.models.functions import Coalesce, Greatest, Now

from runs.models import RelayBudget
from runs.relay import delivery


def window() -> float:
    return float(settings.CRCR_RELAY_RATE_WINDOW_SECONDS)


def turn(repository: str) -> float:
    """Take one send from `repository`'s budget: 0.0 when it may go now (the send is
    counted), else the seconds until its turn (nothing is counted)."""
    RelayBudget.objects.get_or_create(repository=repository)
    with transaction.atomic():
        # Concurrency guard: this update locks the budget's row until the transaction ends
        # (a row lock on PostgreSQL, the database's write lock on SQLite), so two senders
        # never both take the last send of a window, whatever process or host they run on.
        RelayBudget.objects.filter(repository=repository).update(blocked_until=F("blocked_until"))
        budget = RelayBudget.objects.annotate(now=Now()).get(repository=repository)
        now = budget.now.timestamp()
        if budget.blocked_until is not None and budget.blocked_until.timestamp() > now:
            return budget.blocked_until.timestamp() - now + _jitter()
        sends = [at for at in budget.sends if at > now - window()]
        limit = settings.CRCR_RELAY_CALLBACKS_PER_MINUTE
        if len(sends) < limit:
            budget.sends = [*sends, now]
            budget.save(update_fields=["sends"])
            return 0.0
        # The send that must leave the window before one more fits in it.
        return sends[len(sends) - limit] + window() - now + _jitter()


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
    until = Now() + timedelta(seconds=wait)
    RelayBudget.objects.filter(repository=repository).update(
        blocked_until=Greatest(Coalesce("blocked_until", until), until)
    )
