"""The embedded demo: what the README's first command sets up before serving the UI.

It creates the demo user, the reference-device backend with its first config,
a small local stand-in for a PyTorch clone (main, release/2.14 and nightly
branches, so the local-git resolver has something real to read), and feeds a
real GitHub `pull_request` webhook, wrapped as a merged-PR CRCR dispatch,
through the intake, then builds the nightly of the same commit (a second run of the same
job). Every step is idempotent: running it twice changes nothing.
"""

import copy
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import transaction

from demo.localgit import PyTorchShapedRepo
from runs import dispatch as intake
from runs import triggers
from runs.models import Backend, Dispatch, Trigger
from runs.relay.simulator import RelaySimulator
from selection import configprs, review
from selection.models import ConfigChange, ConfigVersion, Proposal

DEMO_USERNAME = "demo"
DEMO_REVIEWER = "demo-reviewer"
DEMO_PASSWORD = os.environ.get("CRCR_DEMO_PASSWORD", "crcr-demo")
BUNDLED_TREE = Path(settings.BASE_DIR) / "tests" / "upstream"
DEMO_WEBHOOK = Path(__file__).parent / "demo_data" / "pull_request.closed.json"
DEMO_PR = 160_000


def bundled_tree_config() -> str:
    """The bundled tree's demo config with its relative paths anchored at ${TORCH_ROOT},
    so a run can write it anywhere and point TORCH_ROOT at the tree it tests."""
    text = (BUNDLED_TREE / "crcr-config.yaml").read_text()
    return text.replace("path: test/", "path: ${TORCH_ROOT}/test/")


@dataclass
class DemoState:
    backend: Backend
    config: ConfigVersion


@transaction.atomic
def load_backend() -> DemoState:
    """The reference-device backend profile and its first config version."""
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
        text = bundled_tree_config()
        config = ConfigVersion.objects.create(
            backend=backend,
            number=1,
            yaml_text=text,
            sha256=ConfigVersion.hash_text(text),
            message="initial config for the reference device",
        )
    return DemoState(backend=backend, config=config)


def relay_simulator(backend: Backend) -> RelaySimulator:
    """A local relay simulator for the demo backend's repository, which it points at."""
    token_file = Path(settings.CRCR_SECRETS_DIR) / "relay-token"
    token_file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not token_file.exists():
        token_file.write_text(secrets.token_urlsafe(24))
    simulator = RelaySimulator(
        port=0,
        token=token_file.read_text().strip(),
        allowlist={backend.repository: "L2"},
        auto_dispatch=True,  # the demo's dispatch did not come through a real relay
    ).start()
    backend.relay_url, backend.relay_token = simulator.url, f"file:{token_file}"
    backend.save(update_fields=["relay_url", "relay_token"])
    return simulator


def create_demo_user() -> None:
    """The demo admin, who opens the config PR, and a second reviewer, who approves and
    merges it: nobody approves their own config change."""
    call_command("create_user", DEMO_USERNAME, role="admin", password=DEMO_PASSWORD)
    call_command("create_user", DEMO_REVIEWER, role="reviewer", password=DEMO_PASSWORD)


def ensure_upstream() -> Path | None:
    """Create the local stand-in clone when CRCR_UPSTREAM points at the default one."""
    kind, _, target = settings.CRCR_UPSTREAM.partition(":")
    path = Path(target)
    if kind != "git" or path != Path(settings.VAR_DIR) / "upstream":
        return None  # a real clone or GitHub: not ours to create
    if (path / ".git").exists():
        return path
    repo = PyTorchShapedRepo(path)
    repo.commit("release/2.14", "[release/2.14] Bump version")
    repo.nightly(repo.land(DEMO_PR, title="Make the demo op faster"))
    return path


def merged_pr_dispatch() -> dict:
    """The bundled real `pull_request.closed` webhook as a merged PR into main."""
    payload = copy.deepcopy(json.loads(DEMO_WEBHOOK.read_text()))
    pull = payload["pull_request"]
    payload["number"] = pull["number"] = DEMO_PR
    pull["base"]["ref"] = "main"
    pull["labels"] = [*pull["labels"], {"name": "Merged"}]
    return {"event_type": "pull_request", "delivery_id": f"demo-{DEMO_PR}", "payload": payload}


def feed_dispatch(backend: Backend) -> Dispatch:
    """Send the demo dispatch through the intake; the gate runs eagerly after commit."""
    body = merged_pr_dispatch()
    raw = json.dumps(body).encode()
    received = intake.receive(backend, body, raw, Dispatch.Source.CRCR)
    received.dispatch.refresh_from_db()
    return received.dispatch


def start_nightly(backend: Backend) -> Trigger:
    """Build PyTorch's nightly as the beat does: its source commit is the merged PR's, so
    the same job runs again, a nightly run beside the PR's (the summary's two tabs).
    Idempotent: the same nightly is built once."""
    return triggers.start_nightly(backend)


def open_config_pr(backend: Backend) -> ConfigChange | None:
    """Approve, as the demo user, what stage 4 verified on the device and gather it
    into a config PR; the other proposals wait in the review queue. Idempotent."""
    waiting = backend.config_changes.filter(status=ConfigChange.Status.OPEN).first()
    if waiting:
        return waiting
    user = get_user_model().objects.get(username=DEMO_USERNAME)
    verified = Proposal.objects.filter(
        backend=backend, status=Proposal.Status.PENDING, stage=Proposal.Stage.REFINE
    )
    review.decide_all(verified, user, approve=True)
    return configprs.open_change(backend, user)
