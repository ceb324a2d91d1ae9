"""Config work too large for a web request: stored, then done on a worker with progress.

Validating a config costs ~0.6 s a megabyte (a generated config of 53,000 entries, 8 MB,
the YAML size limit: 6.8 s on a loaded 2-core machine), writing a config PR's decisions
into one ~3.3 s a megabyte (ruamel.yaml round-trips the whole text). A page does either
inside the request up to `CRCR_CONFIG_BACKGROUND_BYTES` of config, and past it:
1. `start()` records the work as a `ConfigSubmission` (a submitted file's text and the
   form's other fields; a config PR's backend or change) and sends
   `selection.tasks.check_submission` once that commits (after the response:
   `crcr_site.lib.enqueue`); the view redirects to the submission's page, which polls;
2. `check()` (the task) claims the row and does what the request does for a small
   config, each step recorded on the row: onboarding (`onboarding.add_backend`), opening
   or rebasing a config PR (`configprs`). It ends the submission accepted in the
   transaction that saves the work's rows, or refused with the problems per field
   (`__all__`: not a field's), nothing else saved. A submitted text is dropped either way;
3. a worker that dies mid-work leaves the claim silent: the beat sweep
   (`selection.tasks.resend_lost_work`) sends the work again, or, once
   CRCR_CLAIM_ATTEMPTS are spent, refuses the submission saying why.
"""

import contextlib
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models.functions import Length

from crcr_site.lib import enqueue
from runs.models import Backend
from selection import configprs, onboarding
from selection.models import ConfigChange, ConfigSubmission, ConfigVersion

Kind = ConfigSubmission.Kind
STOPPED = "the check of this file stopped ({reason}); nothing was saved: submit it again"
PR_STOPPED = "the config PR's work stopped ({reason}); nothing was saved: ask again"


class Ended(Exception):
    """Another worker ended the submission first."""


def is_large(size: int) -> bool:
    """A config of `size` bytes is worked on by a worker, not inside the request."""
    return size > settings.CRCR_CONFIG_BACKGROUND_BYTES


def latest_is_large(backend: Backend) -> bool:
    """Is the backend's latest config version too large to write a config PR into in a
    request? (Its length in characters, read by the database, not the text.)"""
    size = (
        ConfigVersion.objects.filter(backend=backend)
        .order_by("-number")
        .values_list(Length("yaml_text"), flat=True)
        .first()
    )
    return size is not None and is_large(size)


def start(kind: str, form_data: dict[str, Any], user: Any, **text: str) -> ConfigSubmission:
    """Record the work and send its task once the row commits; `text`: a submitted file's
    `text`, `name` and `config_format`."""
    from selection.tasks import check_submission

    submission = ConfigSubmission.objects.create(
        kind=kind, form_data=form_data, requested_by=user if user.is_authenticated else None,
        **text,
    )  # fmt: skip
    enqueue.after_commit(check_submission, submission.pk)
    return submission


def check(submission: ConfigSubmission) -> None:
    """Do the submission's work to its end; returns at once when another worker holds it."""
    if not submission.claim():
        return
    work: dict[str, Callable[[ConfigSubmission], None]] = {
        Kind.ONBOARD: _onboard, Kind.OPEN_PR: _open_change, Kind.REBASE_PR: _rebase,
    }  # fmt: skip
    with submission.held(), contextlib.suppress(Ended):
        work[submission.kind](submission)


def _accept(submission: ConfigSubmission, **outcome: Any) -> None:
    # Conditional: when the submission ended meanwhile (a slower worker given it by the
    # sweep), the rows saved in this transaction are rolled back.
    if not submission.finish({}, **outcome):
        raise Ended(f"submission {submission.pk} ended meanwhile")


def _onboard(submission: ConfigSubmission) -> None:
    def accept(done: onboarding.Onboarded) -> None:
        report = done.report.text() if done.report else ""
        _accept(submission, result=done.config, report=report)

    try:
        onboarding.add_backend(
            submission.form_data, submission.text, submission.name,
            submission.config_format, submission.requested_by,
            progress=submission.report_progress, saved=accept,
        )  # fmt: skip
    except onboarding.OnboardingError as error:
        submission.finish(error.problems)


def _open_change(submission: ConfigSubmission) -> None:
    backend = Backend.objects.get(slug=submission.form_data["backend"])
    submission.report_progress("writing the approved decisions into the config", 0, 1)
    try:
        with transaction.atomic():
            change = configprs.open_change(backend, submission.requested_by)
            if change is None:
                raise configprs.ChangeError(
                    f"{backend.name} has no approved proposals outside a config PR"
                )
            _accept(submission, change=change)
    except configprs.ChangeError as error:
        submission.finish({"__all__": [str(error)]})


def _rebase(submission: ConfigSubmission) -> None:
    change = ConfigChange.objects.get(uuid=submission.form_data["change"])
    submission.report_progress("writing the decisions into the latest config", 0, 1)
    try:
        with transaction.atomic():
            conflicts = configprs.rebase(change, submission.requested_by)
            note = f"{len(conflicts)} conflict(s): see below." if conflicts else ""
            _accept(submission, change=change, report=note)
    except configprs.ChangeError as error:
        submission.finish({"__all__": [str(error)]})


def give_up(submission: ConfigSubmission, reason: str) -> None:
    """The sweep's end of a submission no worker can finish: refused, saying why."""
    if submission.kind == Kind.ONBOARD:
        submission.finish({"config": [STOPPED.format(reason=reason)]})
    else:
        submission.finish({"__all__": [PR_STOPPED.format(reason=reason)]})
