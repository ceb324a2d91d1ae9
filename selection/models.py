"""Upstream test inventory, operator index, proposals and config versions."""

import hashlib
import uuid
from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone


class InventorySnapshot(models.Model):
    """A scan of PyTorch's test tree at one SHA ("repo memory")."""

    pytorch_sha = models.CharField(max_length=40, unique=True)
    root = models.CharField(max_length=500, help_text="where the tree was read from")
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return self.pytorch_sha[:12]


class TestFile(models.Model):
    __test__ = False  # not a pytest test class

    snapshot = models.ForeignKey(InventorySnapshot, on_delete=models.CASCADE, related_name="files")
    path = models.CharField(max_length=300, help_text="relative to the PyTorch checkout")
    content_hash = models.CharField(max_length=64)
    summary = models.TextField(blank=True)
    embedding = models.BinaryField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["snapshot", "path"], name="testfile_unique_path")
        ]

    def __str__(self) -> str:
        return self.path


class UpstreamTest(models.Model):
    """A generic test (source method) of an upstream file, before device instantiation."""

    file = models.ForeignKey(TestFile, on_delete=models.CASCADE, related_name="tests")
    class_name = models.CharField(max_length=200)
    test_name = models.CharField(max_length=300)
    decorators = models.JSONField(default=list, blank=True)
    device_restrictions = models.JSONField(default=list, blank=True)
    ops = models.JSONField(default=list, blank=True, help_text="OpInfo names it spans")
    modules = models.JSONField(default=list, blank=True)
    dtypes = models.JSONField(default=list, blank=True)
    docstring = models.TextField(blank=True)
    summary = models.TextField(blank=True)
    content_hash = models.CharField(max_length=64)
    embedding = models.BinaryField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["file", "class_name", "test_name"], name="upstreamtest_unique_name"
            )
        ]

    def __str__(self) -> str:
        return f"{self.class_name}::{self.test_name}"


class OpUsage(models.Model):
    """Operator index row: a test called an aten overload (keyed by natural test key)."""

    class Source(models.TextChoices):
        EAGER = "eager", "eager (dispatch mode)"
        COMPILED = "compiled", "compiled (TORCH_LOGS)"

    file_path = models.CharField(max_length=300)
    class_name = models.CharField(max_length=200)
    test_name = models.CharField(max_length=300)
    op = models.CharField(max_length=200, help_text="aten overload, e.g. add.Tensor")
    source = models.CharField(max_length=10, choices=Source.choices, default=Source.EAGER)
    is_helper = models.BooleanField(
        default=False, help_text="called by set-up or verification, not the op under test"
    )
    recorded_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["file_path", "class_name", "test_name", "op", "source"],
                name="opusage_unique",
            )
        ]
        # The operators page: op -> tests.
        indexes = [models.Index(fields=["op"], name="opusage_by_op")]

    def __str__(self) -> str:
        return f"{self.op} in {self.class_name}::{self.test_name}"


class ConfigVersion(models.Model):
    """One merged version of a backend's test config (the YAML text is the record)."""

    uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    backend = models.ForeignKey(
        "runs.Backend", on_delete=models.PROTECT, related_name="config_versions"
    )
    number = models.PositiveIntegerField()
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="children"
    )
    yaml_text = models.TextField()
    sha256 = models.CharField(max_length=64)
    message = models.CharField(max_length=300, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["backend", "number"], name="configversion_unique")
        ]
        ordering = ["backend", "-number"]

    def __str__(self) -> str:
        return f"{self.backend} config v{self.number}"

    @staticmethod
    def hash_text(text: str) -> str:
        return hashlib.sha256(text.encode()).hexdigest()


class ConfigChange(models.Model):
    """A config PR: approved decisions as a proposed new config text against a base."""

    class Status(models.TextChoices):
        OPEN = "open", "open"
        NEEDS_REBASE = "needs_rebase", "needs rebase"
        MERGED = "merged", "merged"
        CLOSED = "closed", "closed"

    uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    backend = models.ForeignKey(
        "runs.Backend", on_delete=models.PROTECT, related_name="config_changes"
    )
    title = models.CharField(max_length=300)
    base = models.ForeignKey(ConfigVersion, on_delete=models.PROTECT, related_name="changes")
    proposed_text = models.TextField()
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.OPEN)
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    merged_version = models.OneToOneField(
        ConfigVersion, null=True, blank=True, on_delete=models.PROTECT, related_name="merged_from"
    )
    created_at = models.DateTimeField(default=timezone.now)
    merged_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.title


class ConfigApproval(models.Model):
    change = models.ForeignKey(ConfigChange, on_delete=models.CASCADE, related_name="approvals")
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT)
    comment = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["change", "reviewer"], name="approval_once")]

    def __str__(self) -> str:
        return f"{self.reviewer} approved {self.change}"


class Proposal(models.Model):
    """A proposed outcome for one generic test, with its reason and evidence."""

    class Mode(models.TextChoices):
        MANDATORY_SUCCESS = "mandatory_success", "mandatory success"
        XFAIL = "xfail", "xfail"
        XFAIL_STRICT = "xfail_strict", "xfail (strict)"
        SKIP = "skip", "skip"

    class Stage(models.TextChoices):
        COARSE = "coarse", "stage 1: coarse filter"
        CLASSIFY = "classify", "stage 3: classification"
        REFINE = "refine", "stage 4: refined on the device"
        ENABLE_OP = "enable_op", "enable an operator"
        UPGRADE = "upgrade", "PyTorch upgrade"
        QUARANTINE = "quarantine", "flaky quarantine"

    class Status(models.TextChoices):
        PENDING = "pending", "pending"
        APPROVED = "approved", "approved"
        REJECTED = "rejected", "rejected"
        MERGED = "merged", "merged into the config"

    uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    backend = models.ForeignKey("runs.Backend", on_delete=models.PROTECT, related_name="proposals")
    file_path = models.CharField(max_length=300)
    class_name = models.CharField(max_length=200, blank=True)
    test_name = models.CharField(max_length=300)
    mode = models.CharField(max_length=20, choices=Mode.choices)
    edits = models.JSONField(default=dict, blank=True)
    reason = models.CharField(max_length=500)
    evidence = models.JSONField(default=dict, blank=True)
    stage = models.CharField(max_length=12, choices=Stage.choices)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    reviewer = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    reviewed_at = models.DateTimeField(null=True, blank=True)
    config_change = models.ForeignKey(
        ConfigChange, null=True, blank=True, on_delete=models.SET_NULL, related_name="proposals"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        # The review queue: filtered by status and file, newest first.
        indexes = [
            models.Index(fields=["backend", "status", "file_path"], name="proposal_queue"),
        ]
        ordering = ["file_path", "class_name", "test_name"]

    def __str__(self) -> str:
        return f"{self.class_name}::{self.test_name} → {self.mode}"

    def review(self, user: Any, approve: bool) -> bool:
        """Approve or reject; a proposal already merged into a config cannot change."""
        status = self.Status.APPROVED if approve else self.Status.REJECTED
        now = timezone.now()
        # Conditional update: a merge that got there first wins, this review is refused.
        changed = (
            Proposal.objects.filter(pk=self.pk)
            .exclude(status=self.Status.MERGED)
            .update(status=status, reviewer=user, reviewed_at=now)
        )
        if changed:
            self.status, self.reviewer, self.reviewed_at = status, user, now
        return bool(changed)
