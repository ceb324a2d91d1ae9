"""Fuzzed dispatch bodies: every answer is 202/200 for a valid one or 400 naming
the bad field, never a server error, and a refused body stores nothing."""

import copy
import json
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runs.models import Dispatch
from tests.dispatches import pr_dispatch, push_dispatch

pytestmark = pytest.mark.django_db

TEMPLATES = {"pull_request": pr_dispatch(), "push": push_dispatch()}
# The fields the intake validates, and some it only passes through.
PATHS = [
    "event_type", "delivery_id", "payload", "payload.action", "payload.pull_request",
    "payload.pull_request.number", "payload.pull_request.head", "payload.pull_request.head.sha",
    "payload.pull_request.base", "payload.pull_request.base.ref", "payload.pull_request.labels",
    "payload.pull_request.merged", "payload.pull_request.title", "payload.repository",
    "payload.repository.full_name", "payload.ref", "payload.after", "payload.deleted",
]  # fmt: skip
FIELDS = ("event_type", "delivery_id", "payload")

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    # Around the database's integer range, where a PR number would overflow it.
    | st.integers(min_value=2**31 - 3, max_value=2**66)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30)
    # What PostgreSQL's jsonb refuses, and markup.
    | st.sampled_from(["nul \x00 inside", "\ud800 unpaired", "<script>alert(1)</script>"]),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=10), children, max_size=3)
    ),
    max_leaves=8,
)


def _parent(body: dict[str, Any], path: str) -> tuple[Any, str]:
    *parents, last = path.split(".")
    node: Any = body
    for key in parents:
        node = node.get(key) if isinstance(node, dict) else None
    return node, last


@st.composite
def mutated_dispatches(draw: st.DrawFn) -> dict[str, Any]:
    """A real dispatch with up to three fields deleted or replaced by any JSON value."""
    body = copy.deepcopy(TEMPLATES[draw(st.sampled_from(sorted(TEMPLATES)))])
    body["delivery_id"] = str(uuid.uuid4())
    for _ in range(draw(st.integers(0, 3))):
        node, key = _parent(body, draw(st.sampled_from(PATHS)))
        if not isinstance(node, dict):
            continue
        if draw(st.booleans()):
            node.pop(key, None)
        else:
            node[key] = draw(json_values)
    return body


def nested(depth: int) -> bytes:
    """A dispatch whose payload nests `depth` arrays deep."""
    opened, closed = "[" * depth, "]" * depth
    return f'{{"event_type": "push", "delivery_id": "x", "payload": {opened}{closed}}}'.encode()


bodies = (
    mutated_dispatches().map(lambda body: json.dumps(body).encode())
    | st.integers(min_value=1, max_value=20_000).map(nested)
    | json_values.map(lambda value: json.dumps(value).encode())
    | mutated_dispatches().map(lambda body: json.dumps(body).encode("utf-16"))
    | st.binary(max_size=200)
)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(raw=bodies)
def test_a_fuzzed_dispatch_is_accepted_or_refused_naming_the_field(
    client, backend, machine_token, raw
):
    before = Dispatch.objects.count()
    response = client.post(
        "/api/dispatches/",
        data=raw,
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Token {machine_token}",
    )
    assert response.status_code in (200, 202, 400), response.content[:500]
    if response.status_code == 400:
        problems = response.json()["problems"]
        assert problems and all(isinstance(p, str) and p for p in problems)
        try:
            parsed = json.loads(raw.decode())  # JSON travels as UTF-8 (RFC 8259)
        except (ValueError, RecursionError):
            parsed = None
        if isinstance(parsed, dict):  # then each problem starts with the field's path
            named = (*FIELDS, *parsed)
            assert all(p.startswith(named) and ": " in p for p in problems), problems
        assert Dispatch.objects.count() == before
    else:
        assert Dispatch.objects.count() == before + (response.status_code == 202)
