"""The relay outbox: CRCR callbacks waiting to be delivered to the HUD."""

import uuid

from django.db import models
from django.utils import timezone

from runs.models.results import Shard
from runs.models.runs import Run


class RelayCallback(models.Model):
    """Outbox row: one CRCR callback, delivered in order and at most once."""

    class Transition(models.TextChoices):
        IN_PROGRESS = "in_progress", "in progress"
        COMPLETED = "completed", "completed"

    class Status(models.TextChoices):
        PENDING = "pending", "pending"
        SENDING = "sending", "sending"
        DELIVERED = "delivered", "delivered"
        REJECTED = "rejected", "rejected (final)"

    uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="callbacks")
    shard = models.ForeignKey(
        Shard, null=True, blank=True, on_delete=models.CASCADE, related_name="callbacks"
    )
    delivery_id = models.CharField(max_length=100)
    workflow_name = models.CharField(max_length=200)
    job_name = models.CharField(max_length=200)
    # The HUD job identity's run_id/run_attempt (strings in the CRCR schema).
    hud_run_id = models.CharField(max_length=100)
    hud_run_attempt = models.CharField(max_length=20, default="1")
    transition = models.CharField(max_length=12, choices=Transition.choices)
    body = models.JSONField()
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    last_status_code = models.IntegerField(null=True, blank=True)
    last_response = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            # One callback per transition per HUD job identity.
            models.UniqueConstraint(
                fields=[
                    "delivery_id",
                    "job_name",
                    "hud_run_id",
                    "hud_run_attempt",
                    "transition",
                ],
                name="callback_unique_transition",
            )
        ]
        # The relay worker's "what is due" scan.
        indexes = [models.Index(fields=["status", "next_attempt_at"], name="callback_due")]
        ordering = ["created_at"]

    # The first line of `last_response` of a row held because the backend's relay token
    # cannot be had; the lines after it hold the detail, for reviewers and admins only
    # (a file path, an OS error), never for every signed-in viewer.
    AUTH_MISCONFIGURED = (
        "relay authentication is misconfigured for this backend — an admin must fix it"
    )

    def __str__(self) -> str:
        return f"{self.job_name} {self.transition} ({self.status})"

    @property
    def auth_misconfigured(self) -> bool:
        """Its last try found no usable relay token (see `runs.relay.outbox.deliver`)."""
        return self.last_response.startswith(self.AUTH_MISCONFIGURED)

    @property
    def auth_problem(self) -> str:
        """What exactly is wrong with the token: for reviewers and admins."""
        return self.last_response.partition("\n")[2] if self.auth_misconfigured else ""
