"""Per-run metadata, worker environments, bundles and bisections."""

import uuid

from django.db import models
from django.utils import timezone


class RunRecord(models.Model):
    """What a run was made of, frozen when it started: trigger, artifacts, config, plan."""

    run = models.OneToOneField("runs.Run", on_delete=models.CASCADE, related_name="record")
    trigger = models.JSONField(default=dict)
    artifacts = models.JSONField(default=list)
    config_text = models.TextField()
    plan = models.JSONField(default=list)
    seeds = models.JSONField(default=dict)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"record of {self.run}"


class WorkerEnvironment(models.Model):
    """The runtime environment of a worker that ran (part of) a run."""

    run = models.ForeignKey(
        "runs.Run", null=True, blank=True, on_delete=models.CASCADE, related_name="environments"
    )
    hostname = models.CharField(max_length=200)
    python_version = models.CharField(max_length=40)
    torch_version = models.CharField(max_length=60, blank=True)
    backend_version = models.CharField(max_length=60, blank=True)
    cuda = models.CharField(max_length=100, blank=True)
    os = models.CharField(max_length=200)
    cpu_arch = models.CharField(max_length=40)
    env_vars = models.JSONField(default=dict)
    pip_freeze = models.TextField(blank=True)
    captured_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.hostname} ({self.python_version}, torch {self.torch_version})"


class Bundle(models.Model):
    """A downloadable archive that reproduces a run, with a manifest of checksums."""

    class Status(models.TextChoices):
        PENDING = "pending", "pending"
        READY = "ready", "ready"
        FAILED = "failed", "failed"
        PRUNED = "pruned", "pruned"

    uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="bundles")
    file = models.FileField(upload_to="bundles/", blank=True, max_length=500)
    sha256 = models.CharField(max_length=64, blank=True)
    size = models.BigIntegerField(default=0)
    manifest = models.JSONField(default=dict)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"bundle of {self.run}"


class Bisection(models.Model):
    """A search for the first bad upstream commit between a green and a red run."""

    class Status(models.TextChoices):
        RUNNING = "running", "running"
        FOUND = "found", "first bad commit found"
        STOPPED = "stopped", "stopped"

    uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    good_run = models.ForeignKey("runs.Run", on_delete=models.PROTECT, related_name="+")
    bad_run = models.ForeignKey("runs.Run", on_delete=models.PROTECT, related_name="+")
    test_ids = models.JSONField(default=list)
    steps = models.JSONField(default=list)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.RUNNING)
    first_bad_sha = models.CharField(max_length=40, blank=True)
    message = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"bisect {self.good_run} .. {self.bad_run}"
