"""Who may see and do what: strangers, viewers, reviewers and machine clients."""

import pytest
from django.urls import reverse

from selection.models import Proposal
from tests.factories import PASSWORD, make_backend, make_proposal, make_token, make_user

PAGES = [
    "runs:hud",
    "runs:run_list",
    "selection:proposal_list",
    "selection:configchange_list",
    "selection:operator_list",
]

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("name", PAGES)
def test_a_stranger_is_sent_to_sign_in(client, name):
    response = client.get(reverse(name))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


@pytest.mark.parametrize("name", PAGES)
def test_a_viewer_sees_every_page_with_its_empty_state(client, name):
    client.force_login(make_user("vera", role="viewer"))
    response = client.get(reverse(name))
    assert response.status_code == 200
    assert b'class="empty"' in response.content


def test_a_viewer_cannot_approve_a_proposal(client):
    proposal = make_proposal(make_backend())
    client.force_login(make_user("vera", role="viewer"))
    url = reverse("selection:proposal_review", args=[proposal.uuid])
    response = client.post(url, {"decision": "approve"})
    assert response.status_code == 403
    proposal.refresh_from_db()
    assert proposal.status == Proposal.Status.PENDING


def test_a_viewer_sees_no_review_buttons(client):
    make_proposal(make_backend())
    client.force_login(make_user("vera", role="viewer"))
    response = client.get(reverse("selection:proposal_list"))
    assert b"test_contiguous_self" in response.content
    assert b">Approve<" not in response.content


def test_a_stranger_posting_a_review_is_sent_to_sign_in(client):
    proposal = make_proposal(make_backend())
    url = reverse("selection:proposal_review", args=[proposal.uuid])
    response = client.post(url, {"decision": "approve"})
    assert response.status_code == 302
    proposal.refresh_from_db()
    assert proposal.status == Proposal.Status.PENDING


def test_a_reviewer_approves_a_proposal_and_is_recorded(client):
    proposal = make_proposal(make_backend())
    reviewer = make_user("rita", role="reviewer")
    client.force_login(reviewer)
    url = reverse("selection:proposal_review", args=[proposal.uuid])
    response = client.post(url, {"decision": "approve"})
    assert response.status_code == 302
    proposal.refresh_from_db()
    assert proposal.status == Proposal.Status.APPROVED
    assert proposal.reviewer == reviewer and proposal.reviewed_at is not None


def test_a_reviewer_with_a_bad_decision_changes_nothing(client):
    proposal = make_proposal(make_backend())
    client.force_login(make_user("rita", role="reviewer"))
    url = reverse("selection:proposal_review", args=[proposal.uuid])
    response = client.post(url, {"decision": "merge-everything"})
    assert response.status_code == 400
    assert b"decision" in response.content
    proposal.refresh_from_db()
    assert proposal.status == Proposal.Status.PENDING


def test_sign_in_with_the_right_password_lands_on_the_hud(client):
    make_user("vera")
    response = client.post(reverse("login"), {"username": "vera", "password": PASSWORD})
    assert response.status_code == 302 and response["Location"] == reverse("runs:hud")


def test_sign_in_with_a_wrong_password_is_refused(client):
    make_user("vera")
    response = client.post(reverse("login"), {"username": "vera", "password": "wrong"})
    assert response.status_code == 200
    assert b"didn't match" in response.content


def test_an_api_call_without_a_token_gets_401(client):
    response = client.get("/api/runs/")
    assert response.status_code == 401


def test_an_api_call_with_a_bad_token_gets_401(client):
    response = client.get("/api/runs/", HTTP_AUTHORIZATION="Token not-a-real-token")
    assert response.status_code == 401


def test_an_api_call_with_a_token_lists_runs(client):
    token = make_token(make_user("machine", role=None))
    response = client.get("/api/runs/", HTTP_AUTHORIZATION=f"Token {token}")
    assert response.status_code == 200
    assert response.json()["results"] == []


def test_the_openapi_schema_describes_the_api(client):
    token = make_token(make_user("machine", role=None))
    response = client.get("/api/schema/", HTTP_AUTHORIZATION=f"Token {token}")
    assert response.status_code == 200
    assert b"/api/runs/" in response.content


def test_the_openapi_schema_is_not_shown_to_strangers(client):
    response = client.get("/api/schema/")
    assert response.status_code == 401
    assert b"/api/runs/" not in response.content
