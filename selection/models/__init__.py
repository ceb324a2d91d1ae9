"""Upstream test inventory, operator index, proposals and config versions."""

import hashlib
import uuid
from contextlib import AbstractContextManager
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Value
from django.db.models.functions import Cast, Concat, Lower
from django.utils import timezone

from crcr_site.lib import leases
from crcr_site.lib.leases import Leased


class InventorySnapshot(models.Model):
    """A scan of PyTorch's test tree at one SHA ("repo memory")."""

    pytorch_sha = models.CharField(max_length=40, unique=True)
    root = models.CharField(max_length=500, help_text="where the tree was read from")
    stats = models.JSONField(
        default=dict, blank=True, help_text="files parsed, files reused, tests, seconds"
    )
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return self.pytorch_sha[:12]

    def test_hashes(self) -> dict[tuple[str, str, str], str]:
        """(file, class, test) -> content hash: what an upgrade diffs."""
        rows = UpstreamTest.objects.filter(file__snapshot=self).values_list(
            "file__path", "class_name", "test_name", "content_hash"
        )
        return {(path, cls, name): digest for path, cls, name, digest in rows}


class TestFile(models.Model):
    __test__ = False  # not a pytest test class

    snapshot = models.ForeignKey(InventorySnapshot, on_delete=models.CASCADE, related_name="files")
    path = models.CharField(max_length=300, help_text="relative to the PyTorch checkout")
    content_hash = models.CharField(max_length=64)
    summary = models.TextField(blank=True)
    embedding = models.BinaryField(null=True, blank=True)
    area = models.CharField(max_length=40, blank=True, help_text="dynamo, distributed, ops, …")
    parse_error = models.TextField(blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["snapshot", "path"], name="testfile_unique_path")
        ]
        # Incremental inventory: "was this exact file already parsed in some snapshot?"
        indexes = [models.Index(fields=["path", "content_hash"], name="testfile_by_hash")]

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
    line = models.PositiveIntegerField(default=0)
    device_generic = models.BooleanField(
        default=True, help_text="instantiated per device (instantiate_device_type_tests)"
    )
    parametrize = models.JSONField(
        default=dict, blank=True, help_text="@parametrize names and their values' source"
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["file", "class_name", "test_name"], name="upstreamtest_unique_name"
            )
        ]

    def __str__(self) -> str:
        return f"{self.class_name}::{self.test_name}"

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.file.path, self.class_name, self.test_name)


class OpUsage(models.Model):
    """Operator index row: a test called an aten overload (keyed by natural test key)."""

    class Source(models.TextChoices):
        EAGER = "eager", "eager (dispatch mode)"
        COMPILED = "compiled", "compiled (TORCH_LOGS)"

    file_path = models.CharField(max_length=300)
    class_name = models.CharField(max_length=200)
    test_name = models.CharField(max_length=300)
    opinfo = models.CharField(
        max_length=200, blank=True, help_text="the OpInfo variant that called it (OpInfo tests)"
    )
    op = models.CharField(max_length=200, help_text="aten overload, e.g. add.Tensor")
    source = models.CharField(max_length=10, choices=Source.choices, default=Source.EAGER)
    is_helper = models.BooleanField(
        default=False, help_text="called by set-up or verification, not the op under test"
    )
    recorded_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["file_path", "class_name", "test_name", "opinfo", "op", "source"],
                name="opusage_unique_variant",
            )
        ]
        indexes = [
            # The operators page and "tests waiting on X": op -> tests.
            models.Index(fields=["op"], name="opusage_by_op"),
            # Stage 3 and re-capture: test -> ops.
            models.Index(fields=["file_path", "class_name", "test_name"], name="opusage_by_test"),
        ]

    def __str__(self) -> str:
        return f"{self.op} in {self.class_name}::{self.test_name}"

    @property
    def packet(self) -> str:
        """The operator without its overload: add.Tensor -> add."""
        return self.op.split(".", 1)[0]


class CapturedTest(models.Model):
    """What one capture run saw of a generic test: its variants, spans and outcomes."""

    file_path = models.CharField(max_length=300)
    class_name = models.CharField(max_length=200, blank=True)
    test_name = models.CharField(max_length=300)
    device = models.CharField(max_length=40, default="cpu", help_text="where it was captured")
    variants = models.PositiveIntegerField(default=0)
    passed = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    skipped = models.PositiveIntegerField(default=0)
    first_failure = models.TextField(blank=True)
    opinfos = models.JSONField(default=list, blank=True)
    dtypes = models.JSONField(default=list, blank=True)
    modules = models.JSONField(default=list, blank=True)
    compiled = models.BooleanField(default=False, help_text="ops read from TORCH_LOGS graphs")
    uncaptured = models.BooleanField(default=False, help_text="ran without capture (lazy)")
    seconds = models.FloatField(default=0)
    recorded_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            # Re-running the capture updates a test's row, never adds a second one.
            models.UniqueConstraint(
                fields=["file_path", "class_name", "test_name"], name="capturedtest_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.class_name}::{self.test_name} ({self.variants} variants)"


class SelectionRun(Leased):
    """One run of the selection pipeline (stages 1-4, enabling an op, or an upgrade)."""

    class Kind(models.TextChoices):
        SELECT = "select", "stages 1-4"
        ENABLE_OP = "enable_op", "enable an operator"
        UPGRADE = "upgrade", "upgrade PyTorch"

    class Status(models.TextChoices):
        QUEUED = "queued", "queued"
        RUNNING = "running", "running"
        WAITING = "waiting", "waiting for its chunks"  # on workers: selection.chunks
        DONE = "done", "done"
        FAILED = "failed", "failed"

    uuid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    backend = models.ForeignKey(
        "runs.Backend", on_delete=models.PROTECT, related_name="selection_runs"
    )
    kind = models.CharField(max_length=10, choices=Kind.choices)
    argument = models.CharField(
        max_length=200, blank=True, help_text="the operator to enable, or the new PyTorch SHA"
    )
    pytorch_sha = models.CharField(max_length=40, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    stage = models.CharField(max_length=100, blank=True, help_text="what it is doing now")
    done = models.PositiveIntegerField(default=0)
    total = models.PositiveIntegerField(default=0)
    summary = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} for {self.backend_id} ({self.status})"

    @property
    def is_finished(self) -> bool:
        return self.status in (self.Status.DONE, self.Status.FAILED)

    @property
    def percent(self) -> int:
        return int(100 * self.done / self.total) if self.total else 0

    @property
    def proposals_made(self) -> int:
        """The proposals this run created or changed: the queue's `run` filter shows them."""
        counts = self.summary.get("proposals") or {}
        return int(counts.get("created", 0)) + int(counts.get("updated", 0))

    @property
    def proposals_said(self) -> str:
        """What the run did to the review queue, in words ("" before it says)."""
        counts = self.summary.get("proposals")
        if not isinstance(counts, dict):
            return ""
        return (
            f"{counts.get('created', 0)} new, {counts.get('updated', 0)} updated, "
            f"{counts.get('unchanged', 0)} already decided"
        )

    def claim(self) -> bool:
        """Queued to running (or take a dead worker's over); False when another holds it."""
        return leases.claim(
            self, self.Status.QUEUED, self.Status.RUNNING, started_at=timezone.now()
        )

    def held(self) -> AbstractContextManager[None]:
        """Keep this run's claim alive while the block runs."""
        return leases.held(self, self.Status.RUNNING)

    def report(self, stage: str, done: int = 0, total: int = 0) -> None:
        """Record progress (what the page polls)."""
        self.stage, self.done, self.total = stage, done, total
        SelectionRun.objects.filter(pk=self.pk).update(stage=stage, done=done, total=total)

    def finish(self, summary: dict[str, Any], error: str = "") -> None:
        status = self.Status.FAILED if error else self.Status.DONE
        now = timezone.now()
        self.status, self.summary, self.error, self.finished_at = status, summary, error, now
        SelectionRun.objects.filter(pk=self.pk).update(
            status=status, summary=summary, error=error, finished_at=now
        )


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

    @property
    def revision(self) -> str:
        """SHA-256 hex of the base version's hash and the proposed text: exactly the diff shown.

        Approvals and merges name the revision the reviewer saw, so a rebase or an edit
        in between cannot make an approval land on text nobody reviewed.
        """
        return hashlib.sha256(f"{self.base.sha256}\n{self.proposed_text}".encode()).hexdigest()


class ConfigApproval(models.Model):
    change = models.ForeignKey(ConfigChange, on_delete=models.CASCADE, related_name="approvals")
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT)
    revision = models.CharField(max_length=64, help_text="the change's revision approved")
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
        PROMOTE = "promote", "promotion from a CI run"

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
    selection_run = models.ForeignKey(
        SelectionRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="proposals"
    )
    created_at = models.DateTimeField(default=timezone.now)
    # Its evidence and edits as JSON text, lower-cased, kept by the database on every write
    # (bulk ones too): the queue's op and dtype filters look for `"name"` in it. Matching
    # the JSON fields themselves cast each row's JSON to text first, most of a filtered
    # page's query at 200,000 proposals (bench/pages_at_scale.py).
    names = models.GeneratedField(
        expression=Lower(
            Concat(
                Cast("evidence", models.TextField()),
                Value(" ", models.TextField()),
                Cast("edits", models.TextField()),
            )
        ),
        output_field=models.TextField(),
        db_persist=True,
    )

    class Meta:
        indexes = [
            # The review queue filtered by status and file: its count, and its pages newest
            # first, walked in that order (`crcr_site.lib.paging.page_of`); "Open a
            # config PR" (`configprs.ready`).
            models.Index(
                fields=["backend", "status", "file_path", "created_at", "id"],
                name="proposal_queue_newest",
            ),
            # The pipeline's "is there already a decision for this test?".
            models.Index(
                fields=["backend", "file_path", "class_name", "test_name"], name="proposal_by_test"
            ),
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


class ProposalEvent(models.Model):
    """One reviewer action on a proposal: who did what, when, and what it changed."""

    class Action(models.TextChoices):
        APPROVED = "approved", "approved"
        REJECTED = "rejected", "rejected"
        EDITED = "edited", "edited"

    proposal = models.ForeignKey(Proposal, on_delete=models.CASCADE, related_name="events")
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    action = models.CharField(max_length=10, choices=Action.choices)
    old = models.JSONField(default=dict, blank=True, help_text="the fields before the action")
    new = models.JSONField(default=dict, blank=True, help_text="the fields after the action")
    bulk = models.BooleanField(default=False, help_text="part of a bulk action")
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-at"]

    def __str__(self) -> str:
        return f"{self.actor} {self.action} {self.proposal}"

    @property
    def changes(self) -> list[tuple[str, Any, Any]]:
        """(field, before, after) for each field the action set."""
        return [(key, self.old.get(key), value) for key, value in self.new.items()]


class ConfigComment(models.Model):
    """A comment on a config PR."""

    change = models.ForeignKey(ConfigChange, on_delete=models.CASCADE, related_name="comments")
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    body = models.TextField(max_length=5000)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created_at"]

    def __str__(self) -> str:
        return f"{self.author} on {self.change}"


# Models of their own modules (this one is at its size budget), imported for Django.
from selection.models.chunks import SelectionChunk as SelectionChunk  # noqa: E402
from selection.models.submissions import ConfigSubmission as ConfigSubmission  # noqa: E402
