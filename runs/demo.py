"""The embedded demo: what the README's first command sets up before serving the UI."""

import os
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.db import transaction

from runs.models import Backend
from selection.models import ConfigVersion

DEMO_USERNAME = "demo"
DEMO_PASSWORD = os.environ.get("CRCR_DEMO_PASSWORD", "crcr-demo")
DEMO_CONFIG = Path(settings.BASE_DIR) / "selection" / "reuse" / "configs" / "reference.yaml"


@dataclass
class DemoState:
    backend: Backend
    config: ConfigVersion


@transaction.atomic
def load_backend() -> DemoState:
    """The reference-device backend profile and its first config version (idempotent)."""
    backend, _ = Backend.objects.get_or_create(
        slug="reference",
        defaults={
            "name": "Reference device",
            "device_module": settings.CRCR_DEVICE_MODULE,
            "repository": "crcr-demo/reference-backend",
            "version": "0.1.0",
            "extension_points": ["eager"],
            "scope_preference": "no autograd yet; skip distributed and compiled tests",
            "tracked_release": "release/2.14",
        },
    )
    config = backend.config_versions.order_by("-number").first()
    if config is None:
        text = DEMO_CONFIG.read_text()
        config = ConfigVersion.objects.create(
            backend=backend,
            number=1,
            yaml_text=text,
            sha256=ConfigVersion.hash_text(text),
            message="initial config for the reference device",
        )
    return DemoState(backend=backend, config=config)


def create_demo_user() -> None:
    call_command("create_user", DEMO_USERNAME, role="admin", password=DEMO_PASSWORD)
