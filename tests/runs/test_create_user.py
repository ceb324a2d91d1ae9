import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.urls import reverse

from crcr_site.lib.access import role_of

pytestmark = pytest.mark.django_db


def test_it_creates_a_reviewer_who_can_sign_in(client):
    call_command("create_user", "rita", role="reviewer", password="a-long-password-1")
    user = get_user_model().objects.get(username="rita")
    assert role_of(user) == "reviewer"
    response = client.post(reverse("login"), {"username": "rita", "password": "a-long-password-1"})
    assert response.status_code == 302 and response["Location"] == reverse("runs:hud")


def test_it_changes_the_role_of_an_existing_user():
    call_command("create_user", "rita", role="reviewer", password="a-long-password-1")
    call_command("create_user", "rita", role="viewer")
    assert role_of(get_user_model().objects.get(username="rita")) == "viewer"


def test_an_admin_may_use_the_admin_site(client):
    call_command("create_user", "ada", role="admin", password="a-long-password-1")
    client.post(reverse("login"), {"username": "ada", "password": "a-long-password-1"})
    assert client.get("/admin/").status_code == 200


def test_it_prints_a_working_api_token(client, capsys):
    call_command("create_user", "bot", role="viewer", token=True)
    token = capsys.readouterr().out.split("token: ")[1].strip()
    assert client.get("/api/runs/", HTTP_AUTHORIZATION=f"Token {token}").status_code == 200


def test_it_refuses_an_unknown_role():
    with pytest.raises(CommandError):
        call_command("create_user", "eve", role="owner")
