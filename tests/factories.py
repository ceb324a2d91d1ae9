"""Plain factory functions for the test suite."""

import uuid
from datetime import datetime
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.utils import timezone

from runs.models import ApiToken, Backend, Dispatch, Run, Trigger
from selection.models import ConfigVersion, Proposal

PASSWORD = "a-long-test-password"


def make_user(username: str, role: str | None = "viewer") -> Any:
    user = get_user_model().objects.create_user(username=username, password=PASSWORD)
    if role:
        user.groups.add(Group.objects.get_or_create(name=role)[0])
    return user


def make_token(user: Any, *backends: Backend) -> str:
    """A new API token's key (the database keeps only its hash), acting for `backends`."""
    return ApiToken.issue(user, name="test", backends=backends)[1]


def make_backend(slug: str = "acme", **fields: Any) -> Backend:
    defaults = {
        "name": slug.title(),
        "device_module": "crcr_reuse.reference_device",
        "repository": f"{slug}/torch-{slug}",
    }
    return Backend.objects.create(slug=slug, **(defaults | fields))


def make_config(backend: Backend, text: str = "test_suite_config:\n  files: []\n") -> ConfigVersion:
    number = backend.config_versions.count() + 1
    return ConfigVersion.objects.create(
        backend=backend, number=number, yaml_text=text, sha256=ConfigVersion.hash_text(text)
    )


def make_proposal(backend: Backend, **fields: Any) -> Proposal:
    defaults = {
        "file_path": "test/test_view_ops.py",
        "class_name": "TestViewOps",
        "test_name": "test_contiguous_self",
        "mode": Proposal.Mode.MANDATORY_SUCCESS,
        "reason": "basic metadata op, fully supported",
        "stage": Proposal.Stage.CLASSIFY,
    }
    return Proposal.objects.create(backend=backend, **(defaults | fields))


def make_pr_run(
    backend: Backend,
    status: str = Run.Status.PASSED,
    job_name: str = "acme",
    started_at: datetime | None = None,
    event_type: str = "pull_request",
    **fields: Any,
) -> Run:
    """A run of a PyTorch pull request's dispatch (one HUD job), finished with `status`."""
    dispatch = Dispatch.objects.create(
        backend=backend, delivery_id=str(uuid.uuid4()), event_type=event_type,
        raw_body="{}", payload={}, verdict="accepted",
    )  # fmt: skip
    trigger = Trigger.objects.create(
        backend=backend, kind="dispatch", dispatch=dispatch, pytorch_sha="a" * 40
    )
    config = backend.config_versions.order_by("-number").first() or make_config(backend)
    started = started_at or timezone.now()
    return Run.objects.create(
        trigger=trigger, backend=backend, job_name=job_name, backend_version="1",
        pytorch_sha="a" * 40, test_suite_sha="a" * 40, config_version=config, status=status,
        started_at=started, finished_at=started, **fields,
    )  # fmt: skip


def make_nightly_run(
    backend: Backend,
    status: str = Run.Status.PASSED,
    job_name: str = "acme",
    started_at: datetime | None = None,
    **fields: Any,
) -> Run:
    """A run of PyTorch's nightly (the beat's nightly trigger), finished with `status`."""
    trigger = Trigger.objects.create(
        backend=backend, kind=Trigger.Kind.NIGHTLY, ref="nightly", pytorch_sha="b" * 40
    )
    config = backend.config_versions.order_by("-number").first() or make_config(backend)
    started = started_at or timezone.now()
    return Run.objects.create(
        trigger=trigger, backend=backend, job_name=job_name, backend_version="1",
        pytorch_sha="b" * 40, test_suite_sha="b" * 40, config_version=config, status=status,
        started_at=started, finished_at=started, **fields,
    )  # fmt: skip
