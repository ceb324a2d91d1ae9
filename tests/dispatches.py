"""Dispatches derived from the real GitHub webhooks in shared/data/webhooks/."""

import copy
import json
import uuid
from typing import Any

from runs.durations import shared_data_dir


def webhook(name: str) -> dict[str, Any]:
    """A raw webhook payload (the `{name, id, payload}` files are unwrapped)."""
    data = json.loads((shared_data_dir() / "webhooks" / f"{name}.json").read_text())
    return data["payload"] if "payload" in data and "name" in data else data


def pr_dispatch(
    action: str = "closed",
    labels: tuple[str, ...] = ("Merged",),
    base: str = "main",
    number: int = 4242,
    delivery_id: str | None = None,
) -> dict[str, Any]:
    """A CRCR client_payload built from the real `pull_request.closed` webhook."""
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
