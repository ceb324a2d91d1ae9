"""The two-person rule covers a config PR's content: whoever approved any proposal in it
may neither approve nor merge it, so no change is reviewed by one person alone."""

import pytest
from django.urls import reverse

from selection import configprs
from selection.models import ConfigApproval, ConfigChange, ConfigVersion, Proposal
from tests.factories import make_backend, make_config, make_proposal, make_user

pytestmark = pytest.mark.django_db

BASE = """\
test_suite_config:
  files:
    - path: ${TORCH_ROOT}/test/test_plain_reuse.py
      unlisted_test_mode: mandatory_success
"""


def post(client, user, name: str, target, data: dict) -> str:
    """A POST by `user` through the page, followed: the page's text after it."""
    client.force_login(user)
    response = client.post(reverse(f"selection:{name}", args=[target.uuid]), data, follow=True)
    assert response.status_code == 200
    return response.content.decode()


@pytest.fixture
def laundered(client):
    """Ann approves the proposals from the review queue; Ben only opens the config PR."""
    backend = make_backend("acme")
    make_config(backend, BASE)
    ann, ben = make_user("ann", "reviewer"), make_user("ben", "reviewer")
    for name in ("test_sum", "test_passes_today"):
        proposal = make_proposal(
            backend, file_path="test/test_plain_reuse.py", class_name="TestPlainMath",
            test_name=name, mode=Proposal.Mode.SKIP, reason="host only",
        )  # fmt: skip
        post(client, ann, "proposal_review", proposal, {"decision": "approve"})
    change = configprs.open_change(backend, ben)
    assert change is not None and change.proposals.count() == 2
    return change, ann, ben


def test_the_reviewer_of_its_proposals_can_neither_approve_nor_merge_the_pr(client, laundered):
    change, ann, _ = laundered
    page = post(client, ann, "configchange_approve", change, {"revision": change.revision})
    assert "Not approved: you approved proposals in this config PR" in page
    page = post(client, ann, "configchange_merge", change, {"revision": change.revision})
    assert "Not merged: you approved proposals in this config PR" in page
    assert not ConfigApproval.objects.exists()
    change.refresh_from_db()
    assert change.status == ConfigChange.Status.OPEN
    assert ConfigVersion.objects.count() == 1
    # The page says why instead of offering the buttons.
    client.force_login(ann)
    detail = client.get(reverse("selection:configchange_detail", args=[change.uuid]))
    text = detail.content.decode()
    assert "a reviewer who approved none of them must approve it" in text
    assert ">Approve</button>" not in text and ">Merge</button>" not in text


def test_an_approval_by_one_who_approved_its_proposals_does_not_count(laundered):
    # Say it was recorded before the rule: the PR still has no second person's approval.
    change, ann, ben = laundered
    ConfigApproval.objects.create(change=change, reviewer=ann, revision=change.revision)
    with pytest.raises(configprs.ChangeError, match="needs a reviewer's approval"):
        configprs.merge(change, ben, change.revision)
    assert configprs.may_merge(change, ben) is not None


def test_a_reviewer_who_approved_none_of_it_approves_and_the_opener_merges(client, laundered):
    change, ann, ben = laundered
    cai = make_user("cai", "reviewer")
    page = post(client, cai, "configchange_approve", change, {"revision": change.revision})
    assert "Approved." in page
    page = post(client, ann, "configchange_merge", change, {"revision": change.revision})
    assert "Not merged: you approved proposals" in page
    page = post(client, ben, "configchange_merge", change, {"revision": change.revision})
    assert "Merged as Acme config v2" in page
    change.refresh_from_db()
    assert change.status == ConfigChange.Status.MERGED and change.merged_version.created_by == ben


def test_a_one_person_team_may_still_approve_and_merge_its_own_decisions(laundered, settings):
    settings.CRCR_FORBID_SELF_APPROVAL = False
    change, ann, _ = laundered
    configprs.approve(change, ann, change.revision)
    assert configprs.merge(change, ann, change.revision).number == 2
