"""Per-run metadata, worker environments, bundles, re-runs and bisections."""

import uuid
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

from crcr_site.lib import leases
from crcr_site.lib.leases import Leased

# What an environment row is compared on when shards ran on different hosts.
COMPARED_FIELDS = ("hostname", "python_version", "torch_version", "backend_version", "cuda", "os")


class RunRecord(models.Model):
    """What a run was made of, frozen when its shards were planned."""

    run = models.OneToOneField("runs.Run", on_delete=models.CASCADE, related_name="record")
    trigger = models.JSONField(default=dict, help_text="kind, ref, SHA, PR, action, raw payload")
    artifacts = models.JSONField(default=list, help_text="name, version, SHA-256, location")
    config_number = models.PositiveIntegerField(null=True, blank=True)
    config_sha256 = models.CharField(max_length=64, blank=True)
    config_text = models.TextField()
    plan = models.JSONField(default=list, help_text="shards with their ids and estimates")
    seeds = models.JSONField(default=dict)
    command = models.JSONField(default=dict, help_text="pytest arguments and environment")
    test_tree = models.JSONField(default=dict, help_text="bundled tree or a checkout at a SHA")
    crcr = models.JSONField(default=dict, help_text="crcr's own commit and checkout")
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"record of {self.run}"


class WorkerEnvironmentQuerySet(models.QuerySet["WorkerEnvironment"]):
    def of_run(self, run: Any) -> "WorkerEnvironmentQuerySet":
        return self.filter(run=run).select_related("shard").order_by("captured_at", "pk")


class WorkerEnvironment(models.Model):
    """The runtime environment of a worker when it claimed a shard of a run."""

    run = models.ForeignKey(
        "runs.Run", null=True, blank=True, on_delete=models.CASCADE, related_name="environments"
    )
    shard = models.ForeignKey(
        "runs.Shard", null=True, blank=True, on_delete=models.CASCADE, related_name="environments"
    )
    shard_attempt = models.PositiveIntegerField(default=0, help_text="the shard's claim number")
    hostname = models.CharField(max_length=200)
    python_version = models.CharField(max_length=40)
    torch_version = models.CharField(max_length=60, blank=True)
    backend_version = models.CharField(max_length=60, blank=True)
    cuda = models.CharField(max_length=100, blank=True)
    os = models.CharField(max_length=200)
    cpu_arch = models.CharField(max_length=40)
    env_vars = models.JSONField(default=dict)
    pip_freeze = models.TextField(blank=True)
    # The interpreter the shard's tests ran in: the combination's environment built from
    # its wheels (key, wheels, freeze), or the worker's own (runs.environments).
    environment = models.JSONField(default=dict, blank=True)
    captured_at = models.DateTimeField(default=timezone.now)

    objects = WorkerEnvironmentQuerySet.as_manager()

    class Meta:
        constraints = [
            # One row per claim of a shard: a redelivered hook records nothing twice.
            models.UniqueConstraint(
                fields=["shard", "shard_attempt"],
                condition=models.Q(shard__isnull=False),
                name="environment_unique_claim",
            )
        ]

    def __str__(self) -> str:
        return f"{self.hostname} ({self.python_version}, torch {self.torch_version})"

    def comparable(self) -> dict[str, str]:
        """Every fact that can change a test's outcome, as strings keyed by a label."""
        facts = {name: str(getattr(self, name)) for name in COMPARED_FIELDS}
        facts["cpu_arch"] = self.cpu_arch
        facts["interpreter"] = self.interpreter()
        for name, value in sorted(self.env_vars.items()):
            facts[f"${name}"] = str(value)
        return facts

    def interpreter(self) -> str:
        """Which environment the tests ran in, in words."""
        built = self.environment or {}
        if built.get("kind") == "built":
            wheels = ", ".join(f"{w['name']} {w['version']}" for w in built.get("wheels", []))
            return f"built from {wheels} (environment {built.get('key', '')[:12]})"
        return "the worker's own (no build command: installed torch)" if built else ""

    def hud_environment(self, device_module: str) -> dict[str, str]:
        """What the HUD job of its shard reports as `environment` (the HUD's column:
        {"sdk": "<version>", "device": "<hardware>", ...}): the backend's module and version,
        the accelerator (the GPU and driver when there is one, else the host's architecture,
        where the reference device's kernels run), torch, Python and the OS."""
        facts = {
            "sdk": f"{device_module} {self.backend_version}".strip(),
            "device": self.cuda or self.cpu_arch,
            "torch": self.torch_version,
            "python": self.python_version,
            "os": self.os,
        }
        return {key: value for key, value in facts.items() if value}

    def packages(self) -> dict[str, str]:
        """`pip freeze` as name -> full line (comments dropped)."""
        lines = (line.strip() for line in self.pip_freeze.splitlines())
        return {
            line.split("==")[0].split(" @ ")[0].lower(): line
            for line in lines
            if line and not line.startswith("#")
        }


class BundleQuerySet(models.QuerySet["Bundle"]):
    def expired(self, now: datetime | None = None) -> "BundleQuerySet":
        """Ready or failed bundles past their retention (the daily prune's query)."""
        return self.filter(
            status__in=(Bundle.Status.READY, Bundle.Status.FAILED),
            expires_at__lt=now or timezone.now(),
        )

    def current(self) -> "BundleQuerySet":
        """Bundles not pruned, newest first."""
        return self.exclude(status=Bundle.Status.PRUNED).order_by("-created_at", "-pk")


class Bundle(Leased):
    """A downloadable archive that reproduces a run, with a manifest of checksums."""

    class Status(models.TextChoices):
        PENDING = "pending", "pending"
        BUILDING = "building", "building"
        READY = "ready", "ready"
        FAILED = "failed", "failed"
        PRUNED = "pruned", "pruned"

    uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="bundles")
    file = models.FileField(upload_to="bundles/", blank=True, max_length=500)
    sha256 = models.CharField(max_length=64, blank=True)
    size = models.BigIntegerField(default=0)
    manifest = models.JSONField(default=dict)
    include_artifacts = models.BooleanField(
        default=False, help_text="wheels inside the archive instead of referenced by hash"
    )
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    error = models.TextField(blank=True)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    public_url = models.URLField(
        max_length=300, blank=True,
        help_text="the server it was asked from, where its links point (else CRCR_PUBLIC_URL)",
    )  # fmt: skip
    created_at = models.DateTimeField(default=timezone.now)
    built_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)

    objects = BundleQuerySet.as_manager()

    class Meta:
        # The prune's "expired" scan.
        indexes = [models.Index(fields=["status", "expires_at"], name="bundle_expiry")]

    def __str__(self) -> str:
        return f"bundle of {self.run}"

    @property
    def is_done(self) -> bool:
        return self.status not in (self.Status.PENDING, self.Status.BUILDING)

    @property
    def wheels(self) -> str:
        """What it holds of the run's wheels, from its manifest once built: inside (how
        many), or referenced by hash and location (a wheel asked for that is no stored
        file, such as an installed torch, can only be referenced)."""
        if not self.include_artifacts:
            return "referenced"
        if self.status != self.Status.READY:
            return "asked to include"
        files = self.manifest.get("files", [])
        inside = sum(entry["path"].startswith("artifacts/") for entry in files)
        left = len(self.manifest.get("referenced", []))
        if not inside and not left:
            return "none: the run has no wheel"
        if not left:
            return f"{inside} included"
        if not inside:
            return f"none included: {left} referenced (not stored files)"
        return f"{inside} included, {left} referenced (not stored files)"

    @property
    def download_name(self) -> str:
        return f"crcr-run-{self.run.uuid}.tar.gz"

    def claim(self) -> bool:
        """Move a pending bundle to building (or take over a dead builder's); False when
        another worker holds it."""
        return leases.claim(self, self.Status.PENDING, self.Status.BUILDING)


class Rerun(models.Model):
    """A new run made from a run's bundle, to compare outcomes test by test."""

    uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    original = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="reruns")
    run = models.OneToOneField("runs.Run", on_delete=models.CASCADE, related_name="rerun_origin")
    bundle = models.ForeignKey(Bundle, null=True, blank=True, on_delete=models.SET_NULL)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"re-run of {self.original}"


class Bisection(Leased):
    """A search for the first bad upstream commit between a green and a red run."""

    class Status(models.TextChoices):
        QUEUED = "queued", "queued"
        RUNNING = "running", "running"
        FOUND = "found", "first bad commit found"
        STOPPED = "stopped", "stopped"

    uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    good_run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="+")
    bad_run = models.ForeignKey("runs.Run", on_delete=models.CASCADE, related_name="bisections")
    test_ids = models.JSONField(default=list)
    commits = models.JSONField(
        default=list, help_text="after the good SHA up to the bad, oldest first"
    )
    steps = models.JSONField(default=list)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    first_bad_sha = models.CharField(max_length=40, blank=True)
    message = models.TextField(blank=True)
    # What the running step is doing now (building a commit: the build's last line).
    stage = models.CharField(max_length=300, blank=True)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"bisect {self.good_run} .. {self.bad_run}"

    def report(self, stage: str) -> None:
        """What the bisection is doing now (its page polls it)."""
        self.stage = stage[:300]
        Bisection.objects.filter(pk=self.pk).update(stage=self.stage)

    def builds(self) -> int:
        """Commits this bisection had to build (a cached build does not count)."""
        return sum(1 for step in self.steps if step.get("built"))

    @property
    def is_finished(self) -> bool:
        return self.status in (self.Status.FOUND, self.Status.STOPPED)

    def claim(self) -> bool:
        """Move a queued bisection to running (or take over a dead worker's); False when
        another worker holds it."""
        return leases.claim(
            self, self.Status.QUEUED, self.Status.RUNNING, started_at=timezone.now()
        )

    def add_step(self, step: dict[str, Any]) -> None:
        self.steps = [*self.steps, step]
        Bisection.objects.filter(pk=self.pk).update(steps=self.steps)

    def finish(self, status: str, message: str, first_bad_sha: str = "") -> None:
        self.status, self.message, self.first_bad_sha = status, message, first_bad_sha
        self.finished_at, self.stage = timezone.now(), ""
        self.save(update_fields=["status", "message", "first_bad_sha", "finished_at", "stage"])

    def steps_in_order(self) -> list[dict[str, Any]]:
        """Steps in commit order, each with its commit's position and the order it ran in."""
        total = len(self.commits)
        ordered = [step | {"order": n, "position": step["index"] + 1, "total": total}
                   for n, step in enumerate(self.steps)]  # fmt: skip
        return sorted(ordered, key=lambda step: step["index"])

    def remaining(self) -> int:
        """Upper bound of test steps left: log2 of the commits still in range."""
        lo, hi = self.window()
        return max(0, (hi - lo - 1).bit_length())

    def window(self) -> tuple[int, int]:
        """(last known good index, first known bad index) into `commits`; -1 is the good run."""
        lo, hi = -1, len(self.commits) - 1
        for step in self.steps:
            if step.get("verdict") == "good":
                lo = max(lo, step["index"])
            elif step.get("verdict") == "bad":
                hi = min(hi, step["index"])
        return lo, hi
