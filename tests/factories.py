"""Plain factory functions for the test suite."""

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from runs.models import ApiToken, Backend
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
