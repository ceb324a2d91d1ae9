"""API tokens are stored as SHA-256 digests: a key works, the database never holds it."""

import hashlib
import importlib
import re

import pytest
from django.apps import apps
from django.core.management import call_command
from rest_framework.authtoken.models import Token

from runs.models import ApiToken
from tests.factories import make_token, make_user

pytestmark = pytest.mark.django_db

hashed_tokens = importlib.import_module("runs.migrations.0013_hashed_tokens")


def runs_with(client, key):
    return client.get("/api/runs/", HTTP_AUTHORIZATION=f"Token {key}")


def test_a_key_authenticates_and_only_its_digest_and_prefix_are_stored(client):
    key = make_token(make_user("relay-forwarder", role="machine"))

    assert runs_with(client, key).status_code == 200
    token = ApiToken.objects.get()
    assert token.digest == hashlib.sha256(key.encode()).hexdigest()
    assert token.prefix == key[:8] and len(key) > 40
    stored = " ".join(str(value) for value in ApiToken.objects.values().get().values())
    assert key not in stored


def test_a_wrong_key_with_a_known_prefix_gets_401(client):
    key = make_token(make_user("relay-forwarder", role="machine"))

    assert runs_with(client, key[:8] + "0" * (len(key) - 8)).status_code == 401
    # The stored digest is no key either: a leaked table row opens nothing.
    assert runs_with(client, ApiToken.objects.get().digest).status_code == 401


def test_a_token_of_a_deactivated_user_gets_401(client):
    user = make_user("relay-forwarder", role="machine")
    key = make_token(user)
    user.is_active = False
    user.save()

    assert runs_with(client, key).status_code == 401


def test_using_a_token_records_when_it_was_last_used(client):
    key = make_token(make_user("relay-forwarder", role="machine"))
    assert ApiToken.objects.get().last_used_at is None

    runs_with(client, key)

    assert ApiToken.objects.get().last_used_at is not None


def test_a_machine_token_still_may_post_dispatches_and_a_viewer_token_may_not(client):
    machine = make_token(make_user("relay-forwarder", role="machine"))
    viewer = make_token(make_user("vera", role="viewer"))

    def post(key):
        return client.post(
            "/api/dispatches/?backend=missing",
            data=b"{}",
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Token {key}",
        )

    assert post(viewer).status_code == 403
    # Past authentication and the role check, refused only for the unknown backend.
    refused = post(machine)
    assert refused.status_code == 404 and "no backend named" in refused.json()["error"]


def test_create_user_prints_a_new_key_each_time_and_stores_none(client, capsys):
    call_command("create_user", "bot", role="machine", token=True)
    call_command("create_user", "bot", role="machine", token=True)
    keys = re.findall(r"token: (\S+)", capsys.readouterr().out)

    assert len(set(keys)) == 2
    assert all(runs_with(client, key).status_code == 200 for key in keys)
    digests = set(ApiToken.objects.values_list("digest", flat=True))
    assert digests == {hashlib.sha256(key.encode()).hexdigest() for key in keys}


def test_the_migration_moves_a_plain_text_token_so_its_key_still_works(client):
    user = make_user("old-forwarder", role="machine")
    old = Token.objects.create(user=user)

    hashed_tokens.move_drf_tokens(apps, None)

    assert not Token.objects.exists()
    moved = ApiToken.objects.get()
    assert moved.user == user and moved.prefix == old.key[:8]
    assert moved.created_at == old.created
    assert runs_with(client, old.key).status_code == 200
