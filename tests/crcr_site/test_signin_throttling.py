"""Password guessing at the sign-in forms is paused after five failures (django-axes)."""

from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from django.urls import reverse

from tests.crcr_site.test_settings import start
from tests.factories import PASSWORD, make_token, make_user

pytestmark = pytest.mark.django_db

LIMIT = 5


def sign_in(client, username, password, url="login"):
    return client.post(reverse(url), {"username": username, "password": password})


def fail(client, username, times=LIMIT, url="login"):
    for _ in range(times):
        sign_in(client, username, "not-the-password", url)


def test_the_right_password_after_five_wrong_ones_gets_the_lockout_page(client):
    make_user("vera")
    fail(client, "vera")

    response = sign_in(client, "vera", PASSWORD)

    assert response.status_code == 429
    page = response.content.decode()
    assert "Try again in 15 minutes, after" in page and "UTC" in page
    assert 'class="brand"' in page  # the site's own page, not a bare error
    assert "_auth_user_id" not in client.session
    assert client.get(reverse("runs:hud")).status_code == 302


def test_four_wrong_passwords_still_let_the_right_one_in(client):
    make_user("vera")
    fail(client, "vera", times=LIMIT - 1)

    response = sign_in(client, "vera", PASSWORD)

    assert response.status_code == 302 and response["Location"] == reverse("runs:hud")


def test_another_user_from_the_same_address_is_not_locked_out(client):
    make_user("vera")
    make_user("rita", role="reviewer")
    fail(client, "vera")

    response = sign_in(client, "rita", PASSWORD)

    assert response.status_code == 302 and response["Location"] == reverse("runs:hud")


def test_a_successful_sign_in_forgets_earlier_failures(client):
    make_user("vera")
    fail(client, "vera", times=LIMIT - 1)
    assert sign_in(client, "vera", PASSWORD).status_code == 302
    client.post(reverse("logout"))
    fail(client, "vera", times=LIMIT - 1)

    assert sign_in(client, "vera", PASSWORD).status_code == 302


def test_the_lockout_ends_after_fifteen_minutes(client):
    make_user("vera")
    fail(client, "vera")
    assert sign_in(client, "vera", PASSWORD).status_code == 429

    # Sixteen minutes pass since the last attempt.
    last = AccessAttempt.objects.get(username="vera").attempt_time
    AccessAttempt.objects.update(attempt_time=last - timedelta(minutes=16))

    assert sign_in(client, "vera", PASSWORD).status_code == 302


def test_the_admin_sign_in_is_throttled_too(client):
    ada = make_user("ada", role="admin")
    ada.is_staff = ada.is_superuser = True
    ada.save()
    fail(client, "ada", url="admin:login")

    response = sign_in(client, "ada", PASSWORD, url="admin:login")

    assert response.status_code == 429
    assert client.get("/admin/").status_code == 302


def test_an_api_token_is_not_throttled_by_failed_sign_ins(client):
    user = make_user("relay-forwarder", role="machine")
    token = make_token(user)
    fail(client, "relay-forwarder")

    response = client.get("/api/runs/", HTTP_AUTHORIZATION=f"Token {token}")

    assert response.status_code == 200


def test_it_refuses_a_failure_limit_below_one():
    completed = start({"CRCR_LOGIN_FAILURE_LIMIT": "0"})
    assert completed.returncode != 0
    assert "CRCR_LOGIN_FAILURE_LIMIT" in completed.stderr
