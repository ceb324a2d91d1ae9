"""Every page for a reviewer, a viewer and a stranger; reviewer-only controls only for reviewers."""

import pytest
from django.http import QueryDict
from django.urls import reverse

from tests.crcr_site.hostile import PAGE_NAMES, page_named
from tests.factories import make_user

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("name", PAGE_NAMES)
def test_a_reviewer_sees_every_page_with_its_actions(client, name):
    page = page_named(name)
    client.force_login(make_user("rita", role="reviewer"))
    response = client.get(page.url)
    assert response.status_code == 200
    if page.reviewer_action:
        assert page.reviewer_action in response.content.decode()


@pytest.mark.parametrize("name", PAGE_NAMES)
def test_a_viewer_sees_every_page_without_reviewer_actions(client, name):
    page = page_named(name)
    client.force_login(make_user("vera", role="viewer"))
    response = client.get(page.url)
    assert response.status_code == 200
    html = response.content.decode()
    if page.reviewer_action:
        assert page.reviewer_action not in html
    assert ">Approve<" not in html and ">Merge<" not in html and "Enable " not in html


@pytest.mark.parametrize("name", PAGE_NAMES)
def test_a_stranger_is_sent_to_sign_in_from_every_page(client, name):
    page = page_named(name)
    response = client.get(page.url)
    assert response.status_code == 302
    asked = QueryDict(mutable=True)
    asked["next"] = page.url  # a page with a query string comes back quoted
    assert response["Location"] == f"{reverse('login')}?{asked.urlencode(safe='/')}"


def test_starting_a_run_is_a_reviewers_page(client):
    client.force_login(make_user("vera", role="viewer"))
    assert client.get(reverse("runs:trigger_create")).status_code == 403
    client.force_login(make_user("rita", role="reviewer"))
    assert client.get(reverse("runs:trigger_create")).status_code == 200


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "/api/runs/"),
        ("get", "/api/runs/00000000-0000-0000-0000-000000000000/"),
        ("post", "/api/dispatches/?backend=acme"),
        ("get", "/api/runs/00000000-0000-0000-0000-000000000000/reproducibility/"),
    ],
)
def test_a_stranger_calling_the_api_gets_401(client, method, path):
    assert getattr(client, method)(path).status_code == 401
