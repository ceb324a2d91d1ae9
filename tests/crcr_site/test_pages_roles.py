"""Every page for a reviewer, a viewer and a stranger; reviewer-only controls only for reviewers."""

import pytest
from django.http import QueryDict
from django.urls import reverse

from tests.crcr_site.hostile import build
from tests.factories import make_user

pytestmark = pytest.mark.django_db


# One site for each role's walk: building it is most of a check's cost, so each test
# builds it once and reports every page that is wrong, not only the first.


def test_a_reviewer_sees_every_page_with_its_actions(client):
    client.force_login(make_user("rita", role="reviewer"))
    wrong = []
    for page in build():
        response = client.get(page.url)
        if response.status_code != 200:
            wrong.append(f"{page.name}: {response.status_code}")
        elif page.reviewer_action and page.reviewer_action not in response.content.decode():
            wrong.append(f"{page.name}: no {page.reviewer_action!r}")
    assert wrong == []


def test_a_viewer_sees_every_page_without_reviewer_actions(client):
    client.force_login(make_user("vera", role="viewer"))
    wrong = []
    for page in build():
        response = client.get(page.url)
        html = response.content.decode()
        actions = [page.reviewer_action] if page.reviewer_action else []
        actions += [">Approve<", ">Merge<", "Enable "]
        if response.status_code != 200:
            wrong.append(f"{page.name}: {response.status_code}")
        wrong += [f"{page.name}: shows {action!r}" for action in actions if action in html]
    assert wrong == []


def test_a_stranger_is_sent_to_sign_in_from_every_page(client):
    wrong = []
    for page in build():
        response = client.get(page.url)
        asked = QueryDict(mutable=True)
        asked["next"] = page.url  # a page with a query string comes back quoted
        expected = f"{reverse('login')}?{asked.urlencode(safe='/')}"
        if response.status_code != 302 or response["Location"] != expected:
            wrong.append(f"{page.name}: {response.status_code} {response.get('Location')}")
    assert wrong == []


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
