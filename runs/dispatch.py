"""Dispatch intake: parse, validate, store raw first and idempotently, then gate.

Steps for a CRCR dispatch or a GitHub webhook:
1. refuse a body over the size limit (413) or one that is not a JSON object (400);
2. validate it against the CRCR schema (400 naming every bad field);
3. store it raw under (backend, delivery_id); a redelivery finds the first row;
4. after commit, enqueue the gate for a new row only; a row of a kind the backend does
   not take (a pull request for a nightly-only backend) is stored rejected, with the
   reason, and never gated.
"""

import hashlib
import hmac
import json
import re
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q

from crcr_site.lib import enqueue
from runs.models import Backend, Dispatch
from runs.serializers import DispatchSerializer, flatten_errors

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
# GitHub's payloads nest about ten levels; far deeper ones are hostile (and past
# about a thousand, Python's JSON parser gives up with a RecursionError).
MAX_DEPTH = 100
# In valid UTF-8 JSON text a NUL or a surrogate can only be written as a \u escape
# (json.loads refuses raw control characters, UTF-8 decoding refuses surrogates).
_ESCAPED_UNSTORABLE = re.compile(r"\\u(?:0000|[dD][89a-fA-F][0-9a-fA-F]{2})")


class IntakeError(Exception):
    """A dispatch refused before anything was stored; `status` is the HTTP answer."""

    def __init__(self, status: int, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.status = status
        self.problems = problems


@dataclass
class Received:
    dispatch: Dispatch
    created: bool


def check_size(content_length: str | None) -> None:
    limit = settings.CRCR_DISPATCH_MAX_BYTES
    try:
        length = int(content_length or 0)
    except ValueError:
        raise IntakeError(400, [f"Content-Length {content_length!r} is not a number"]) from None
    if length > limit:
        raise IntakeError(413, [f"the body has {length} bytes; the limit is {limit}"])


def parse_json(raw: bytes) -> dict[str, Any]:
    if len(raw) > settings.CRCR_DISPATCH_MAX_BYTES:
        limit = settings.CRCR_DISPATCH_MAX_BYTES
        raise IntakeError(413, [f"the body has {len(raw)} bytes; the limit is {limit}"])
    try:
        # UTF-8 only (RFC 8259): json.loads would also take UTF-16 and UTF-32 bytes,
        # which the raw record, kept as text, could not store.
        text = raw.decode("utf-8")
        body = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise IntakeError(400, [f"the body is not valid JSON: {error}"]) from None
    except RecursionError:
        raise IntakeError(400, [f"the body nests deeper than {MAX_DEPTH} levels"]) from None
    if not isinstance(body, dict):
        raise IntakeError(400, [f"the body must be a JSON object, not {type(body).__name__}"])
    problems = [
        f"{key}: nests deeper than {MAX_DEPTH} levels"
        for key, value in body.items()
        if _depth(value) > MAX_DEPTH
    ]
    if problems:
        raise IntakeError(400, problems)
    # The walk names each bad field; the text search spares it for nearly every body.
    problems = list(_unstorable(body, "")) if _ESCAPED_UNSTORABLE.search(text) else []
    if problems:
        raise IntakeError(400, problems)
    return body


def _depth(value: Any) -> int:
    """How deep arrays and objects nest in a parsed JSON value, level by level (no
    recursion: the value may be deeper than Python's stack)."""
    level, frontier = 0, [value] if isinstance(value, dict | list) else []
    while frontier:
        level += 1
        frontier = [
            child
            for item in frontier
            for child in (item.values() if isinstance(item, dict) else item)
            if isinstance(child, dict | list)
        ]
    return level


def _unstorable(value: Any, path: str) -> Iterator[str]:
    """Strings PostgreSQL's jsonb refuses (a NUL, an unpaired surrogate), by field path."""
    if isinstance(value, dict):
        for key, item in value.items():
            name = f"{path}.{key}".strip(".")
            yield from _unstorable(key, name)
            yield from _unstorable(item, name)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _unstorable(item, f"{path}[{index}]")
    elif isinstance(value, str) and _UNSTORABLE.search(value):
        yield f"{path}: contains a NUL character or an unpaired surrogate"


# One answer for every webhook refused before its body is read: an unknown backend, one
# without a webhook secret and a bad signature look the same, so slugs cannot be listed.
WEBHOOK_REFUSED = (
    "X-Hub-Signature-256 is missing or does not match the body with this backend's "
    "webhook secret (or webhooks are not enabled for it)"
)


def verify_signature(backend: Backend | None, raw: bytes, header: str | None) -> Backend:
    """GitHub's X-Hub-Signature-256: HMAC-SHA256 of the raw body with the backend's secret.

    No backend or no secret is refused as a bad signature is, after the same HMAC; returns
    the backend that signed it."""
    secret = backend.webhook_secret if backend is not None else ""
    expected = hmac.new((secret or "-").encode(), raw, hashlib.sha256).hexdigest()
    # As bytes: compare_digest refuses a str with a non-ASCII character (a TypeError).
    given = (header or "").removeprefix("sha256=").encode("utf-8", "replace")
    matches = hmac.compare_digest(expected.encode(), given)
    if backend is None or not (secret and header and header.startswith("sha256=") and matches):
        raise IntakeError(401, [WEBHOOK_REFUSED])
    return backend


def receive(backend: Backend, body: dict[str, Any], raw: bytes, source: str) -> Received:
    """Validate and store a client_payload; idempotent on its delivery_id."""
    serializer = DispatchSerializer(data=body)
    if not serializer.is_valid():
        raise IntakeError(400, flatten_errors(serializer.errors))
    data = serializer.validated_data
    fields = Dispatch.fields_from_payload(data["event_type"], data["fields"])
    # A kind the backend does not take is stored with the reason and never gated.
    kind = Dispatch.kind_of(data["event_type"], fields["base_ref"])
    refusal = backend.refusal(kind, fields["base_ref"])
    if refusal:
        fields.update(verdict=Dispatch.Verdict.REJECTED, verdict_reason=refusal)
    # Concurrency guard: the unique (backend, delivery_id) constraint decides which
    # of several concurrent deliveries stores the row. Outside a transaction the
    # INSERT commits on its own (no BEGIN/COMMIT round trips on the hot path);
    # inside one, a savepoint keeps the outer transaction usable after losing.
    # A replayed webhook (the same signed bytes, a new delivery id) is the same event.
    body_sha256 = hashlib.sha256(raw).hexdigest() if source == Dispatch.Source.WEBHOOK else ""
    in_transaction = transaction.get_connection().in_atomic_block
    try:
        with transaction.atomic() if in_transaction else nullcontext():
            dispatch = Dispatch.objects.create(
                backend=backend,
                delivery_id=data["delivery_id"],
                source=source,
                event_type=data["event_type"],
                raw_body=raw.decode(),
                body_sha256=body_sha256,
                payload=data["payload"],
                **fields,
            )
    except IntegrityError:
        same = Q(delivery_id=data["delivery_id"])
        if body_sha256:
            same |= Q(source=Dispatch.Source.WEBHOOK, body_sha256=body_sha256)
        existing = Dispatch.objects.filter(same, backend=backend).order_by("pk").first()
        if existing is None:
            raise
        return Received(existing, created=False)
    if refusal:
        return Received(dispatch, created=True)
    from runs.tasks import gate_dispatch

    # The stored row is the record: with the broker down, the sweep gates it later.
    enqueue.after_commit(gate_dispatch, dispatch.pk)
    return Received(dispatch, created=True)


def webhook_body(event: str | None, delivery: str | None, payload: dict[str, Any]) -> dict:
    """A GitHub webhook as the CRCR client_payload it would have been relayed as."""
    problems = []
    if not event:
        problems.append("X-GitHub-Event is missing")
    if not delivery:
        problems.append("X-GitHub-Delivery is missing")
    if problems:
        raise IntakeError(400, problems)
    return {"event_type": event, "delivery_id": delivery, "payload": payload}
