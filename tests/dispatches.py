"""Dispatches derived from GitHub webhooks: the project's own (tests/fixtures/webhooks/),
so every test that needs one runs from a clone alone."""

import copy
import json
import uuid
from pathlib import Path
from typing import Any

from tests.data import FIXTURES

WEBHOOKS = FIXTURES / "webhooks"


def webhook(name: str, folder: Path = WEBHOOKS) -> dict[str, Any]:
    """A raw webhook payload, `<folder>/<name>.json`; PyTorch CI's real files that wrap
    it as `{name, id, payload}` are unwrapped."""
    data = json.loads((folder / f"{name}.json").read_text())
    return data["payload"] if "payload" in data and "name" in data else data


def pr_dispatch(
    action: str = "closed",
    labels: tuple[str, ...] = ("Merged",),
    base: str = "main",
    number: int = 4242,
    delivery_id: str | None = None,
) -> dict[str, Any]:
    """A CRCR client_payload built from the `pull_request.closed` webhook."""
    payload = copy.deepcopy(webhook("pull_request.closed"))
    payload["action"] = action
    pull = payload["pull_request"]
    pull["number"] = payload["number"] = number
    pull["base"]["ref"] = base
    pull["labels"] = [{"name": name} for name in labels]
    pull["merged"] = False  # PyTorch's bot merges: GitHub's flag stays false
    return {
        "event_type": "pull_request",
        "delivery_id": delivery_id or str(uuid.uuid4()),
        "payload": payload,
    }


def push_dispatch(ref: str = "refs/heads/main", delivery_id: str | None = None) -> dict[str, Any]:
    payload = copy.deepcopy(webhook("push"))
    payload["ref"] = ref
    payload["deleted"] = False
    payload["after"] = "1" * 40
    return {
        "event_type": "push",
        "delivery_id": delivery_id or str(uuid.uuid4()),
        "payload": payload,
    }
