"""A selection run's heavy work cut into chunks: the operator capture and stage 4, a file (or
part of a big one) each, run as tasks on the `device` queue by any number of workers.

A chunk stores its results as it goes (its worker's heartbeat flushes them), so a chunk
whose worker died is resumed by the next attempt: only its tests without a stored result
run again (`selection.chunk_worker`)."""

from typing import Any

from django.db import models
from django.db.models import Count, Q, Sum
from django.utils import timezone

from crcr_site.lib.leases import Leased


class ChunkQuerySet(models.QuerySet["SelectionChunk"]):
    def unfinished(self) -> "ChunkQuerySet":
        return self.exclude(status__in=SelectionChunk.FINISHED)

    def per_file(self) -> list[dict[str, Any]]:
        """Per file and phase: chunks finished of all, tests done of all (the run's page)."""
        rows = (
            self.values("file_path", "phase")
            .annotate(
                chunks=Count("pk"),
                chunks_done=Count("pk", filter=Q(status__in=SelectionChunk.FINISHED)),
                chunks_running=Count("pk", filter=Q(status=SelectionChunk.Status.RUNNING)),
                tests=Sum("total"),
                tests_done=Sum("done"),
                lost=Count("pk", filter=Q(status=SelectionChunk.Status.FAILED) | Q(lost=True)),
            )
            .order_by("file_path", "-phase")
        )
        phases = dict(SelectionChunk.Phase.choices)
        return [dict(row, phase_label=phases[row["phase"]]) for row in rows]


class SelectionChunk(Leased):
    """Tests of one file that one task runs in one phase of a selection run."""

    class Phase(models.TextChoices):
        CAPTURE = "capture", "operator capture"
        DEVICE = "device", "stage 4 on the device"

    class Status(models.TextChoices):
        QUEUED = "queued", "queued"
        RUNNING = "running", "running"
        DONE = "done", "done"
        FAILED = "failed", "failed"

    FINISHED = (Status.DONE, Status.FAILED)

    run = models.ForeignKey(
        "selection.SelectionRun", on_delete=models.CASCADE, related_name="chunks"
    )
    phase = models.CharField(max_length=10, choices=Phase.choices)
    file_path = models.CharField(max_length=500)
    ordinal = models.PositiveIntegerField(help_text="its place among the file's chunks")
    tests = models.JSONField(
        default=list, help_text="what it owns: generic tests (capture) or node ids (device)"
    )
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    done = models.PositiveIntegerField(default=0, help_text="tests with a stored result")
    total = models.PositiveIntegerField(default=0)
    results = models.JSONField(
        default=list, help_text="capture lines or test records, stored as the chunk goes"
    )
    lost = models.BooleanField(
        default=False, help_text="the capture process died: the file's index is partial"
    )
    processes = models.PositiveIntegerField(default=0, help_text="pytest processes it ran")
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    objects = ChunkQuerySet.as_manager()

    class Meta:
        ordering = ["run", "phase", "file_path", "ordinal"]
        constraints = [
            models.UniqueConstraint(
                fields=["run", "phase", "file_path", "ordinal"], name="selectionchunk_unique"
            )
        ]
        # The sweep's query: running chunks whose heartbeat went silent, queued ones.
        indexes = [models.Index(fields=["status", "heartbeat_at"], name="chunk_status_beat")]

    def __str__(self) -> str:
        return f"{self.phase} {self.file_path} #{self.ordinal} ({self.status})"
