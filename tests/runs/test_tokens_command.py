"""Tokens are issued, listed, scoped and revoked from `manage.py tokens` and the admin; what
a token acts for is what the API then lets it do."""

import importlib

import pytest
from django.apps import apps
from django.core.management import call_command
from django.core.management.base import CommandError

from runs.models import ApiToken
from tests.factories import make_backend, make_user

pytestmark = pytest.mark.django_db

scoping = importlib.import_module("runs.migrations.0021_token_backends")


def tokens(capsys, *args: str) -> str:
    call_command("tokens", *args)
    return capsys.readouterr().out


def whoami(client, key: str):
    return client.get("/api/whoami/", HTTP_AUTHORIZATION=f"Token {key}")


def claim(client, key: str, slug: str):
    return client.post(
        f"/api/relay/claim/?backend={slug}", {}, content_type="application/json",
        HTTP_AUTHORIZATION=f"Token {key}",
    )  # fmt: skip


def test_a_token_issued_for_two_backends_acts_for_them_and_no_other(client, capsys):
    for slug in ("acme", "beta", "gamma"):
        make_backend(slug)
    make_user("ci", role="machine")

    out = tokens(capsys, "issue", "--user", "ci", "--backend", "acme", "--backend", "beta")

    key = out.split("token: ")[1].strip()
    assert "acts-for=acme,beta" in out
    assert whoami(client, key).json() == {"username": "ci", "backends": ["acme", "beta"]}
    # Past the scope check, refused for the worker sender: the scope let it through.
    assert claim(client, key, "beta").status_code == 409
    assert claim(client, key, "gamma").status_code == 403


def test_issuing_refuses_an_unknown_backend_or_none_at_all(capsys):
    make_backend("acme")
    make_user("ci", role="machine")

    with pytest.raises(CommandError, match=r"no backend named nope \(known: acme\)"):
        tokens(capsys, "issue", "--user", "ci", "--backend", "nope")
    with pytest.raises(CommandError, match="acts for none"):
        tokens(capsys, "issue", "--user", "ci")
    assert not ApiToken.objects.exists()


def test_list_shows_each_tokens_backends_and_never_its_key(capsys):
    for slug in ("acme", "beta"):
        make_backend(slug)
    make_user("ci", role="machine")
    key = tokens(capsys, "issue", "--user", "ci", "--name", "ci-acme", "--backend", "acme")
    key = key.split("token: ")[1].strip()

    listing = tokens(capsys, "list")

    assert f"{key[:8]}  ci-acme  user=ci  acts-for=acme  used=never" in listing
    assert key not in listing
    assert tokens(capsys, "list", "--backend", "beta") == ""


def test_scope_moves_a_token_to_another_backend(client, capsys):
    for slug in ("acme", "beta"):
        make_backend(slug)
    make_user("ci", role="machine")
    key = tokens(capsys, "issue", "--user", "ci", "--backend", "acme").split("token: ")[1].strip()

    assert "acts-for=beta" in tokens(capsys, "scope", key[:8], "--backend", "beta")

    assert whoami(client, key).json()["backends"] == ["beta"]
    assert claim(client, key, "acme").status_code == 403


def test_a_revoked_token_no_longer_authenticates(client, capsys):
    make_backend("acme")
    make_user("ci", role="machine")
    key = tokens(capsys, "issue", "--user", "ci", "--backend", "acme").split("token: ")[1].strip()

    assert tokens(capsys, "revoke", key[:8]).startswith(f"revoked {key[:8]}")

    assert whoami(client, key).status_code == 401 and not ApiToken.objects.exists()
    with pytest.raises(CommandError, match="no token has the prefix"):
        tokens(capsys, "revoke", key[:8])


def test_create_user_issues_a_scoped_token(client, capsys):
    make_backend("acme")
    call_command("create_user", "bot", role="machine", token=True, backends=["acme"])
    key = capsys.readouterr().out.split("token: ")[1].strip()
    assert whoami(client, key).json()["backends"] == ["acme"]


def test_the_admin_issues_a_scoped_token_and_lists_what_each_acts_for(admin_client):
    acme, _ = make_backend("acme"), make_backend("beta")
    user = make_user("ci", role="machine")

    assert 'name="backends"' in admin_client.get("/admin/runs/apitoken/add/").content.decode()
    admin_client.post(
        "/admin/runs/apitoken/add/", {"user": user.pk, "name": "ci-acme", "backends": [acme.pk]}
    )

    token = ApiToken.objects.get()
    assert list(token.backends.values_list("slug", flat=True)) == ["acme"]
    listing = admin_client.get("/admin/runs/apitoken/").content.decode()
    assert "acts for" in listing.lower() and ">acme<" in listing


def test_on_a_one_backend_site_the_migration_scopes_existing_tokens_to_it():
    acme = make_backend("acme")
    token, _ = ApiToken.issue(make_user("ci", role="machine"))

    scoping.scope_existing_tokens(apps, None)

    assert list(token.backends.all()) == [acme]


def test_on_a_site_of_several_backends_existing_tokens_wait_for_an_admin():
    for slug in ("acme", "beta"):
        make_backend(slug)
    token, _ = ApiToken.issue(make_user("ci", role="machine"))

    scoping.scope_existing_tokens(apps, None)

    assert not token.backends.exists()
