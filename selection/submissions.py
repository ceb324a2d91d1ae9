"""Config files too large to check inside a web request: stored, then checked on a worker.

Validating a config costs ~0.6 s a megabyte (a generated config of 53,000 entries, 8 MB,
the YAML size limit: 6.8 s on a loaded 2-core machine), so a page checks a file up to
`CRCR_CONFIG_BACKGROUND_BYTES` while it answers and a larger one like this:
1. `submit()` stores the text and the form's other fields as a `ConfigSubmission`; the
   view sends `selection.tasks.check_submission` once that commits (after its response,
   `crcr_site.lib.enqueue`) and redirects to the submission's page, which polls;
2. `check()` (the task) claims the row and runs the same check the request runs for a
   small file (`onboarding.add_backend`), each step recorded on the row; it ends the
   submission accepted in the transaction that saves the backend and its config v1, or
   refused with the problems per field, nothing else saved. The text is dropped either way;
3. a worker that dies mid-check leaves the claim silent: the beat sweep
   (`selection.tasks.resend_lost_work`) sends the check again, or, once
   CRCR_CLAIM_ATTEMPTS are spent, refuses the submission saying why.
"""

from typing import Any

from django.conf import settings

from selection import onboarding
from selection.models import ConfigSubmission

STOPPED = "the check of this file stopped ({reason}); nothing was saved: submit it again"


class Ended(Exception):
    """Another worker ended the submission first."""


def is_large(size: int) -> bool:
    """A file of `size` bytes is checked on a worker, not inside the request."""
    return size > settings.CRCR_CONFIG_BACKGROUND_BYTES


def submit(
    kind: str, text: str, name: str, config_format: str, form_data: dict[str, Any], user: Any
) -> ConfigSubmission:
    return ConfigSubmission.objects.create(
        kind=kind, text=text, name=name[:255], config_format=config_format,
        form_data=form_data, requested_by=user if user.is_authenticated else None,
    )  # fmt: skip


def check(submission: ConfigSubmission) -> None:
    """Check a submission to its end; returns at once when another worker holds it."""
    if not submission.claim():
        return

    def accept(done: onboarding.Onboarded) -> None:
        report = done.report.text() if done.report else ""
        # Conditional: when the submission ended meanwhile (a slower worker given it by
        # the sweep), the backend and config saved with this end are rolled back.
        if not submission.finish({}, result=done.config, report=report):
            raise Ended(f"submission {submission.pk} ended meanwhile")

    with submission.held():
        try:
            onboarding.add_backend(
                submission.form_data, submission.text, submission.name,
                submission.config_format, submission.requested_by,
                progress=submission.report_progress, saved=accept,
            )  # fmt: skip
        except onboarding.OnboardingError as error:
            submission.finish(error.problems)
        except Ended:
            pass


def give_up(submission: ConfigSubmission, reason: str) -> None:
    """The sweep's end of a submission no worker can finish: refused, saying why."""
    submission.finish({"config": [STOPPED.format(reason=reason)]})
