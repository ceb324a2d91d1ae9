"""Bad dispatches and webhooks are refused with the reason, and nothing is stored."""

import hashlib
import hmac
import json

import pytest

from runs.models import Dispatch
from tests.dispatches import pr_dispatch, push_dispatch
from tests.factories import make_token, make_user

pytestmark = pytest.mark.django_db


def post(client, token, body, **headers):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return client.post(
        "/api/dispatches/",
        data=data,
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Token {token}",
        **headers,
    )


def without(path: str):
    """A dispatch with the field at a dotted path removed."""
    body = pr_dispatch()
    *parents, last = path.split(".")
    node = body
    for key in parents:
        node = node[key]
    del node[last]
    return body


def with_value(path: str, value):
    body = pr_dispatch()
    *parents, last = path.split(".")
    node = body
    for key in parents:
        node = node[key]
    node[last] = value
    return body


MALFORMED = [
    (b"{not json", "not valid JSON"),
    (b"\xff\xfe", "not valid JSON"),
    (b"[1, 2, 3]", "must be a JSON object, not list"),
    (without("delivery_id"), "delivery_id: This field is required"),
    (without("event_type"), "event_type: This field is required"),
    (without("payload"), "payload: This field is required"),
    (with_value("event_type", "issue_comment"), 'event_type: "issue_comment" is not a valid'),
    (with_value("payload", ["not", "an", "object"]), "payload: Expected a dictionary"),
    (with_value("delivery_id", "../../etc/passwd"), "delivery_id: must be a GUID-like id"),
    (without("payload.pull_request"), "payload.pull_request: This field is required"),
    (without("payload.action"), "payload.action: This field is required"),
    (with_value("payload.pull_request.number", "forty-two"), "payload.pull_request.number"),
    (with_value("payload.pull_request.head.sha", "abc"), "head.sha: must be a 40-hex"),
    (with_value("payload.pull_request.labels", "Merged"), "payload.pull_request.labels"),
    (with_value("payload.pull_request.title", "a\x00b"), "pull_request.title: contains a NUL"),
    (with_value("payload.pull_request.title", "half \ud83d"), "pull_request.title: contains"),
    # Past PostgreSQL's integer column.
    (with_value("payload.pull_request.number", 2**64), "payload.pull_request.number: Ensure"),
    # Deeper than Python's JSON parser goes, and merely deeper than any GitHub payload.
    (b'{"payload": ' + b"[" * 5000 + b"]" * 5000 + b"}", "nests deeper than 100 levels"),
    (with_value("payload.pull_request.title", json.loads("[" * 150 + "]" * 150)),
     "payload: nests deeper than 100 levels"),
]  # fmt: skip


@pytest.mark.parametrize(("body", "problem"), MALFORMED)
def test_a_malformed_dispatch_gets_400_naming_the_problem(
    client, backend, machine_token, body, problem
):
    response = post(client, machine_token, body)
    assert response.status_code == 400
    assert problem in " ".join(response.json()["problems"])
    assert not Dispatch.objects.exists()


def test_an_oversized_dispatch_gets_413(client, backend, machine_token, settings):
    body = pr_dispatch()
    body["payload"]["pull_request"]["body"] = "x" * (settings.CRCR_DISPATCH_MAX_BYTES + 1)
    response = post(client, machine_token, body)
    assert response.status_code == 413
    assert "limit" in response.json()["error"]
    assert not Dispatch.objects.exists()


def test_a_dispatch_of_github_size_is_accepted(client, backend, machine_token, upstream):
    body = pr_dispatch(action="opened")
    body["payload"]["pull_request"]["body"] = "x" * 60_000
    # An emoji outside the BMP is a surrogate pair in the JSON text: stored, not refused.
    body["payload"]["pull_request"]["title"] = "Faster lgamma \U0001f680"
    assert post(client, machine_token, body).status_code == 202
    assert Dispatch.objects.get().payload["pull_request"]["title"].endswith("\U0001f680")


def test_a_ref_sent_as_a_number_is_read_as_the_text_the_field_accepted(
    client, backend, machine_token
):
    """The payload is kept as sent, its columns come from the typed fields (a float `ref`
    once reached `str.startswith` as a float: a 500)."""
    body = push_dispatch()
    body["payload"]["ref"] = 2.5
    assert post(client, machine_token, body).status_code == 202
    stored = Dispatch.objects.get()
    assert (stored.base_ref, stored.payload["ref"], stored.kind) == ("2.5", 2.5, "push")


@pytest.mark.parametrize("role", ["viewer", "reviewer", None])
def test_only_a_machine_token_may_dispatch(client, backend, role):
    token = make_token(make_user("someone", role=role))
    response = post(client, token, pr_dispatch())
    assert response.status_code == 403
    assert "machine role" in response.json()["detail"]
    assert not Dispatch.objects.exists()


def test_a_dispatch_without_a_token_gets_401(client, backend):
    response = client.post("/api/dispatches/", pr_dispatch(), content_type="application/json")
    assert response.status_code == 401
    assert not Dispatch.objects.exists()


def test_a_dispatch_for_an_unknown_backend_gets_404(client, backend, machine_token):
    response = post(client, machine_token, pr_dispatch(), HTTP_X_CRCR_BACKEND="nobody")
    assert response.status_code == 404
    assert not Dispatch.objects.exists()


def sign(secret: str, raw: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), raw, hashlib.sha256).hexdigest()


def webhook(client, raw: bytes, signature: str | None, event="pull_request", delivery="d-1"):
    headers = {"HTTP_X_GITHUB_EVENT": event, "HTTP_X_GITHUB_DELIVERY": delivery}
    if signature:
        headers["HTTP_X_HUB_SIGNATURE_256"] = signature
    return client.post(
        "/api/webhooks/github/acme/", data=raw, content_type="application/json", **headers
    )


@pytest.fixture
def secret(backend) -> str:
    backend.webhook_secret = "It's a Secret to Everybody"
    backend.save()
    return backend.webhook_secret


def test_a_webhook_with_a_bad_signature_gets_401_and_stores_nothing(client, secret):
    raw = json.dumps(pr_dispatch()["payload"]).encode()
    # A byte past ASCII reaches Django as a latin-1 character (compare_digest refuses it).
    non_ascii = sign(secret, raw)[:-1] + "\xe9"
    for signature in (
        None, "sha1=abc", sign("wrong secret", raw), sign(secret, raw + b" "), non_ascii,
        "sha256=" + "\xff" * 64,
    ):  # fmt: skip
        response = webhook(client, raw, signature)
        assert response.status_code == 401, signature
    assert not Dispatch.objects.exists()


def test_a_signed_webhook_is_stored_like_a_dispatch(client, secret, upstream):
    raw = json.dumps(pr_dispatch(action="opened")["payload"]).encode()
    response = webhook(client, raw, sign(secret, raw), delivery="72d3162e-cc78-11e3-81ab")
    assert response.status_code == 202
    dispatch = Dispatch.objects.get()
    assert dispatch.source == "webhook" and dispatch.delivery_id == "72d3162e-cc78-11e3-81ab"
    assert dispatch.raw_body.encode() == raw
    assert (
        webhook(client, raw, sign(secret, raw), delivery="72d3162e-cc78-11e3-81ab").status_code
        == 200
    )
    assert Dispatch.objects.count() == 1


def test_a_signed_webhook_replayed_with_a_new_delivery_id_starts_nothing(client, secret, upstream):
    raw = json.dumps(pr_dispatch()["payload"]).encode()
    first = webhook(client, raw, sign(secret, raw), delivery="d-original")
    # The signature covers the body only: an attacker can resend it under any delivery id.
    replay = webhook(client, raw, sign(secret, raw), delivery="d-replayed")

    assert first.status_code == 202
    assert replay.status_code == 200
    assert replay.json()["url"] == first.json()["url"]
    assert list(Dispatch.objects.values_list("delivery_id", flat=True)) == ["d-original"]
    other = json.dumps(pr_dispatch(number=4243)["payload"]).encode()
    assert webhook(client, other, sign(secret, other), delivery="d-other").status_code == 202


def test_a_github_ping_is_answered_and_not_stored(client, secret):
    raw = b'{"zen": "Design for failure."}'
    response = webhook(client, raw, sign(secret, raw), event="ping")
    assert response.status_code == 200
    assert not Dispatch.objects.exists()


def test_webhooks_are_refused_for_a_backend_without_a_secret(client, backend):
    raw = json.dumps(pr_dispatch()["payload"]).encode()
    assert webhook(client, raw, sign("", raw)).status_code == 401
    assert not Dispatch.objects.exists()


def test_an_unknown_backend_is_answered_as_a_bad_signature_is(client, secret, backend):
    """Nobody can tell which backend slugs exist, or which take webhooks, from the answers."""
    raw = json.dumps(pr_dispatch()["payload"]).encode()
    bad = webhook(client, raw, sign("wrong secret", raw))
    answers = [
        client.post(
            f"/api/webhooks/github/{slug}/", data=raw, content_type="application/json",
            HTTP_X_GITHUB_EVENT="pull_request", HTTP_X_HUB_SIGNATURE_256=sign(secret, raw),
        )
        for slug in ("nosuch", "acme-typo")
    ]  # fmt: skip
    backend.webhook_secret = ""
    backend.save()
    answers.append(webhook(client, raw, sign("", raw)))  # a backend without a secret
    for answer in answers:
        assert (answer.status_code, answer.content) == (bad.status_code, bad.content)
    assert bad.status_code == 401 and b"does not match" in bad.content
    assert not Dispatch.objects.exists()
