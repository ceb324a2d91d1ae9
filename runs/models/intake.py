"""Intake: upstream events as delivered (dispatches) and what asked for a build (triggers)."""

import uuid
from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

from runs.models.backends import Backend

NIGHTLY_REF = "refs/heads/nightly"
RELEASE_REFS = ("refs/heads/release/", "refs/tags/v")


class Dispatch(models.Model):
    """One upstream event as CRCR (or a GitHub webhook) delivered it, stored raw first."""

    class Source(models.TextChoices):
        CRCR = "crcr", "CRCR repository_dispatch"
        WEBHOOK = "webhook", "GitHub webhook"

    class Verdict(models.TextChoices):
        PENDING = "pending", "pending"
        ACCEPTED = "accepted", "accepted: built"
        RECORDED = "recorded", "recorded, not built"
        RECHECK = "recheck", "waiting for a re-check"
        REJECTED = "rejected", "rejected"

    uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    backend = models.ForeignKey(Backend, on_delete=models.PROTECT, related_name="dispatches")
    delivery_id = models.CharField(max_length=100)
    source = models.CharField(max_length=10, choices=Source.choices, default=Source.CRCR)
    event_type = models.CharField(max_length=40)
    raw_body = models.TextField()
    # A webhook's signature covers its body, not X-GitHub-Delivery: the body's hash
    # tells a replay with a new delivery id from a new event.
    body_sha256 = models.CharField(max_length=64, blank=True, default="")
    payload = models.JSONField()
    action = models.CharField(max_length=40, blank=True)
    pr_number = models.PositiveIntegerField(null=True, blank=True)
    base_ref = models.CharField(max_length=200, blank=True)
    head_sha = models.CharField(max_length=40, blank=True)
    verdict = models.CharField(max_length=10, choices=Verdict.choices, default=Verdict.PENDING)
    verdict_reason = models.TextField(blank=True)
    recheck_at = models.DateTimeField(null=True, blank=True)
    received_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            # Idempotent intake: a redelivery finds the first record.
            models.UniqueConstraint(
                fields=["backend", "delivery_id"], name="dispatch_unique_delivery"
            ),
            # A signed webhook body is accepted once per backend, whatever its delivery id.
            models.UniqueConstraint(
                fields=["backend", "body_sha256"],
                condition=models.Q(source="webhook") & ~models.Q(body_sha256=""),
                name="dispatch_unique_webhook_body",
            ),
        ]
        # The dispatch list, newest first.
        indexes = [models.Index(fields=["-received_at"], name="dispatch_recent")]
        ordering = ["-received_at"]

    def __str__(self) -> str:
        return f"{self.event_type} {self.delivery_id}"

    @staticmethod
    def fields_from_payload(event_type: str, payload: dict[str, Any]) -> dict[str, Any]:
        """The columns the gate and the pages read, taken from a validated payload."""
        if event_type == "pull_request":
            pull = payload["pull_request"]
            return {
                "action": payload["action"],
                "pr_number": pull["number"],
                "base_ref": pull["base"]["ref"],
                "head_sha": pull["head"]["sha"],
            }
        return {"action": "push", "base_ref": payload["ref"], "head_sha": payload["after"]}

    @staticmethod
    def kind_of(event_type: str, ref: str) -> str:
        """What upstream event a dispatch stands for: `pull_request`; `nightly`, a push to
        PyTorch's nightly branch; `release`, a push to a release branch or a version tag;
        else `push`."""
        if event_type == "pull_request":
            return "pull_request"
        if ref == NIGHTLY_REF:
            return "nightly"
        return "release" if ref.startswith(RELEASE_REFS) else "push"

    @property
    def kind(self) -> str:
        return self.kind_of(self.event_type, self.base_ref)

    @property
    def labels(self) -> list[str]:
        if self.event_type != "pull_request":
            return []
        return [label["name"] for label in self.payload["pull_request"].get("labels", [])]

    def decide(self, verdict: str, reason: str, expected: tuple[str, ...]) -> bool:
        """Record the gate's verdict if the dispatch is still in an expected state."""
        # Conditional update: a redelivered gate task finds the verdict taken and stops.
        changed = Dispatch.objects.filter(pk=self.pk, verdict__in=expected).update(
            verdict=verdict, verdict_reason=reason
        )
        if changed:
            self.verdict, self.verdict_reason = verdict, reason
        return bool(changed)


class Trigger(models.Model):
    """What asked for a build: a dispatch, the nightly schedule, a release or a person."""

    class Kind(models.TextChoices):
        DISPATCH = "dispatch", "dispatch"
        NIGHTLY = "nightly", "nightly"
        RELEASE = "release", "release"
        MANUAL = "manual", "manual"

    uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    backend = models.ForeignKey(Backend, on_delete=models.PROTECT, related_name="triggers")
    kind = models.CharField(max_length=10, choices=Kind.choices)
    dispatch = models.OneToOneField(
        Dispatch, null=True, blank=True, on_delete=models.PROTECT, related_name="trigger"
    )
    ref = models.CharField(max_length=200, blank=True, help_text="branch the SHA came from")
    pytorch_sha = models.CharField(max_length=40)
    # A label selection its runs' pytest processes get (`--reuse-labels`: smoke, core,
    # suite_<group>, a config's label; comma-separated); empty: every test of the config.
    labels = models.CharField(max_length=200, blank=True)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        # The HUD's facts of a page's commits (`runs.hud_commits.add_facts`).
        indexes = [models.Index(fields=["pytorch_sha"], name="trigger_by_commit")]

    def __str__(self) -> str:
        return f"{self.kind} {self.pytorch_sha[:12]}"
