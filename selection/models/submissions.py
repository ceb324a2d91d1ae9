"""Config work asked for on a page and too large for a request (checking a submitted
config file, writing a config PR into a large config): the record of the work, its
progress and its outcome, done on a worker."""

import uuid
from contextlib import AbstractContextManager
from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

from crcr_site.lib import leases
from crcr_site.lib.leases import Leased


class ConfigSubmission(Leased):
    """A submitted YAML text is not a config until its check accepts it: nothing else reads
    `text`, and the text is dropped once the check ends (an accepted one lives on as the
    config version it became). A config PR's work submits no text: `form_data` names the
    backend or the change."""

    class Kind(models.TextChoices):
        ONBOARD = "onboard", "add a backend"
        OPEN_PR = "open_pr", "open a config PR"
        REBASE_PR = "rebase_pr", "rebase a config PR"

    class Status(models.TextChoices):
        QUEUED = "queued", "waiting for a worker"
        RUNNING = "running", "checking"
        ACCEPTED = "accepted", "accepted"
        REFUSED = "refused", "refused"

    uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    kind = models.CharField(max_length=10, choices=Kind.choices)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    text = models.TextField(blank=True, help_text="the submitted YAML, until its check ends")
    name = models.CharField(max_length=255, help_text="the uploaded file's name")
    config_format = models.CharField(max_length=10)
    form_data = models.JSONField(default=dict, blank=True, help_text="the form's other fields")
    stage = models.CharField(max_length=100, blank=True, help_text="what the check is doing")
    done = models.PositiveIntegerField(default=0)
    total = models.PositiveIntegerField(default=0)
    problems = models.JSONField(
        default=dict, blank=True, help_text="field -> what is wrong with it (refused)"
    )
    report = models.TextField(blank=True, help_text="what an importer did (accepted)")
    result = models.ForeignKey(
        "selection.ConfigVersion", null=True, blank=True, on_delete=models.SET_NULL
    )
    change = models.ForeignKey(
        "selection.ConfigChange", null=True, blank=True, on_delete=models.SET_NULL,
        help_text="the config PR opened or rebased (accepted)",
    )  # fmt: skip
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.get_kind_display()}: {self.name} ({self.status})"

    @property
    def is_finished(self) -> bool:
        return self.status in (self.Status.ACCEPTED, self.Status.REFUSED)

    @property
    def percent(self) -> int:
        return int(100 * self.done / self.total) if self.total else 0

    def claim(self) -> bool:
        """Move a queued check to running (or take over a dead worker's); False when
        another worker holds it or it has ended."""
        return leases.claim(self, self.Status.QUEUED, self.Status.RUNNING)

    def held(self) -> AbstractContextManager[None]:
        """Keep this check's claim alive while the block runs."""
        return leases.held(self, self.Status.RUNNING)

    def report_progress(self, stage: str, done: int, total: int) -> None:
        """Record progress (what the page polls): a `selection.progress` callback."""
        self.stage, self.done, self.total = stage, done, total
        ConfigSubmission.objects.filter(pk=self.pk).update(stage=stage, done=done, total=total)

    def finish(self, problems: dict[str, list[str]], **outcome: Any) -> bool:
        """End the check: refused with `problems`, else accepted with `outcome` (result,
        report). Conditional: of two workers that both got here, one ends it."""
        status = self.Status.REFUSED if problems else self.Status.ACCEPTED
        ended = dict(
            status=status, problems=problems, text="", finished_at=timezone.now(), **outcome
        )
        if not ConfigSubmission.objects.filter(pk=self.pk, status=self.status).update(**ended):
            return False
        for name, value in ended.items():
            setattr(self, name, value)
        return True
