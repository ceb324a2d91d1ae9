"""The admin never shows a secret: webhook secrets are write-only, token keys shown once."""

import hashlib
import hmac
import json
import re

import pytest
from django.urls import reverse

from runs.models import ApiToken, Backend
from tests.dispatches import pr_dispatch
from tests.factories import make_backend, make_user

pytestmark = pytest.mark.django_db

SECRET = "It's a Secret to Everybody"
# Every field of the backend form, as a browser posts it.
BACKEND_FORM = {
    "name": "Acme",
    "slug": "acme",
    "device_module": "crcr_reuse.reference_device",
    "repository": "acme/torch-acme",
    "version": "0.0.0",
    "extra_versions": "[]",
    "extension_points": "[]",
    "scope_preference": "",
    "gate_policy": "{}",
    "participation": "all",
    "tracked_release": "",
    "relay_mode": "aggregate",
    "relay_url": "",
    "relay_token": "none",
    "created_at_0": "2026-12-01",
    "created_at_1": "12:00:00",
}


@pytest.fixture
def admin_client(client):
    ada = make_user("ada", role="admin")
    ada.is_staff = ada.is_superuser = True
    ada.save()
    client.force_login(ada)
    return client


def signed_webhook(client, secret: str):
    raw = json.dumps(pr_dispatch(action="opened")["payload"]).encode()
    signature = "sha256=" + hmac.new(secret.encode(), raw, hashlib.sha256).hexdigest()
    return client.post(
        "/api/webhooks/github/acme/",
        data=raw,
        content_type="application/json",
        HTTP_X_GITHUB_EVENT="pull_request",
        HTTP_X_GITHUB_DELIVERY="d-1",
        HTTP_X_HUB_SIGNATURE_256=signature,
    )


def change_url(backend):
    return reverse("admin:runs_backend_change", args=[backend.pk])


def test_the_backend_page_says_a_secret_is_set_without_showing_it(admin_client):
    backend = make_backend(webhook_secret=SECRET)

    page = admin_client.get(change_url(backend)).content.decode()

    assert "It&#x27;s a Secret" not in page and "Secret to Everybody" not in page
    assert re.search(r"Webhook secret:</label>\s*<div[^>]*>set</div>", page)
    assert "it is never shown" in page
    listing = admin_client.get(reverse("admin:runs_backend_changelist")).content.decode()
    assert "Secret to Everybody" not in listing and ">set<" in listing


def test_an_admin_sets_a_secret_that_then_checks_webhooks(admin_client, upstream):
    response = admin_client.post(
        reverse("admin:runs_backend_add"), BACKEND_FORM | {"new_webhook_secret": SECRET}
    )

    assert response.status_code == 302
    assert Backend.objects.get().webhook_secret == SECRET
    assert signed_webhook(admin_client, SECRET).status_code == 202


def test_saving_without_a_new_secret_keeps_the_old_one(admin_client):
    backend = make_backend(webhook_secret=SECRET)

    admin_client.post(change_url(backend), BACKEND_FORM | {"scope_preference": "no autograd"})

    backend.refresh_from_db()
    assert backend.webhook_secret == SECRET and backend.scope_preference == "no autograd"


def test_an_admin_replaces_or_removes_the_secret(admin_client):
    backend = make_backend(webhook_secret=SECRET)

    admin_client.post(change_url(backend), BACKEND_FORM | {"new_webhook_secret": "rotated"})
    backend.refresh_from_db()
    assert backend.webhook_secret == "rotated"

    admin_client.post(change_url(backend), BACKEND_FORM | {"remove_webhook_secret": "on"})
    backend.refresh_from_db()
    assert backend.webhook_secret == ""
    assert signed_webhook(admin_client, "rotated").status_code != 202


def test_a_new_token_shows_its_key_once_and_then_only_its_prefix(admin_client):
    machine = make_user("relay-forwarder", role="machine")

    added = admin_client.post(
        reverse("admin:runs_apitoken_add"),
        {"user": machine.pk, "name": "forwarder"},
        follow=True,
    ).content.decode()

    key = re.search(r"key is ([0-9a-f]{48})", added).group(1)
    assert "not show it again" in added
    token = ApiToken.objects.get()
    assert token.user == machine and token.prefix == key[:8]
    assert admin_client.get("/api/runs/", HTTP_AUTHORIZATION=f"Token {key}").status_code == 200
    for url in (
        reverse("admin:runs_apitoken_changelist"),
        reverse("admin:runs_apitoken_change", args=[token.pk]),
    ):
        page = admin_client.get(url).content.decode()
        assert key[:8] in page and key not in page and token.digest not in page


def test_the_plain_text_token_admin_is_gone(admin_client):
    assert admin_client.get("/admin/authtoken/tokenproxy/").status_code == 404
