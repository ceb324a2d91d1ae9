"""The relay outbox: CRCR callbacks waiting to be delivered to the HUD."""

import uuid
from datetime import datetime, timedelta
from typing import Any

from django.db import models
from django.db.models import Exists, OuterRef, Q
from django.db.models.functions import Now
from django.utils import timezone

from runs.models.results import Shard
from runs.models.runs import Run


class RelayCallbackQuerySet(models.QuerySet["RelayCallback"]):
    def due(self, now: datetime | Now | None = None) -> "RelayCallbackQuerySet":
        """Rows to send now, in the outbox's order, for the relay worker and for reporters
        alike: pending, their time come, and a `completed` only once its job's
        `in_progress` is no longer pending or being sent (it is sent after it, or refused)."""
        unsent_start = RelayCallback.objects.filter(
            delivery_id=OuterRef("delivery_id"),
            job_name=OuterRef("job_name"),
            hud_run_id=OuterRef("hud_run_id"),
            hud_run_attempt=OuterRef("hud_run_attempt"),
            transition=RelayCallback.Transition.IN_PROGRESS,
            status__in=(RelayCallback.Status.PENDING, RelayCallback.Status.SENDING),
        )
        return (
            self.filter(status=RelayCallback.Status.PENDING, next_attempt_at__lte=now or Now())
            .exclude(Q(transition=RelayCallback.Transition.COMPLETED) & Exists(unsent_start))
            .order_by("created_at", "pk")
        )

    def release_expired_leases(self, now: datetime | Now | None = None) -> int:
        """Rows whose sender died holding them are pending again. Its answer is lost, so
        the next try is ambiguous (no status code): a repeat refused then means it landed.
        A row claimed without a lease (by code older than leases) had 5 minutes. Judged
        by the database's clock, which wrote the lease (`outbox.take`)."""
        now = now or Now()
        unleased = Q(lease_until=None, next_attempt_at__lte=now - timedelta(minutes=5))
        return self.filter(
            Q(lease_until__lte=now) | unleased, status=RelayCallback.Status.SENDING
        ).update(status=RelayCallback.Status.PENDING, last_status_code=None)


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
    # Who holds (or last held) the row while sending it, and until when: the relay
    # worker, or one claim of a GitHub Actions reporter (its lease id).
    claimed_by = models.CharField(max_length=200, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    # The API token whose claim holds the lease: only it may write the answer back.
    lease_holder = models.ForeignKey(
        "runs.ApiToken", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # The Actions run that reports this HUD job, fixed when a reporter first claims one of
    # the job's rows, so that its in_progress and completed carry the same identity even
    # when two reporter runs send them. Empty: the body's own (crcr's relay worker).
    reported_run_id = models.CharField(max_length=100, blank=True)
    reported_run_attempt = models.CharField(max_length=20, blank=True)
    reported_url = models.CharField(max_length=500, blank=True)
    # When a row the repository's callback budget held back gets its turn (it is pending
    # meanwhile, shown as waiting for it); None: it is not waiting for the budget.
    turn_at = models.DateTimeField(null=True, blank=True)

    objects = RelayCallbackQuerySet.as_manager()

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

    def job(self) -> RelayCallbackQuerySet:
        """This row and the other transition of its HUD job."""
        return RelayCallback.objects.filter(
            delivery_id=self.delivery_id,
            job_name=self.job_name,
            hud_run_id=self.hud_run_id,
            hud_run_attempt=self.hud_run_attempt,
        )

    def adopt_job_identity(self) -> bool:
        """Take the reporting Actions run its HUD job already has (a row written after the
        job's other row was claimed by a reporter); whether this row has one now."""
        if not self.reported_run_id:
            fixed = self.job().exclude(reported_run_id="").values(*self.IDENTITY).first()
            if fixed is not None:
                RelayCallback.objects.filter(pk=self.pk).update(**fixed)
                for name, value in fixed.items():
                    setattr(self, name, value)
        return bool(self.reported_run_id)

    # The fields that fix a HUD job's identity at the relay, besides crcr's own key.
    IDENTITY = ("reported_run_id", "reported_run_attempt", "reported_url", "workflow_name")

    def outgoing_body(self) -> dict[str, Any]:
        """The body to send: as written, under the reporting Actions run once one is fixed
        (`run_id`, `run_attempt` and `url` name it; `artifact_url` stays crcr's run page)."""
        if not self.reported_run_id:
            return self.body
        workflow = {
            **self.body["workflow"],
            "name": self.workflow_name,
            "run_id": self.reported_run_id,
            "run_attempt": self.reported_run_attempt,
            "url": self.reported_url,
        }
        return {**self.body, "workflow": workflow}

    @property
    def auth_misconfigured(self) -> bool:
        """Its last try found no usable relay token (see `runs.relay.outbox.deliver`)."""
        return self.last_response.startswith(self.AUTH_MISCONFIGURED)

    @property
    def auth_problem(self) -> str:
        """What exactly is wrong with the token: for reviewers and admins."""
        return self.last_response.partition("\n")[2] if self.auth_misconfigured else ""


class RelayBudget(models.Model):
    """One repository's budget of sends to the relay, shared by every sender of its HUD
    callbacks (`runs.relay.pacing`): the relay limits callbacks per repository."""

    repository = models.CharField(max_length=200, unique=True)
    # The database's times (epoch seconds) of the sends in the current window, oldest first.
    sends = models.JSONField(default=list)
    # Past a 429 or a Retry-After nothing goes to the relay for this repository until then.
    blocked_until = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"relay budget of {self.repository}"
