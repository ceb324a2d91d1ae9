"""A proposal's own page: the same actions as the queue's row, and its evidence in words."""

import re
from html import unescape

import pytest
from django.urls import reverse

from selection import configprs
from selection.models import OpUsage, Proposal, ProposalEvent
from tests.factories import make_backend, make_config, make_proposal, make_user

pytestmark = pytest.mark.django_db

EVIDENCE = {
    "classifier": "evidence",
    "unsupported_ops": ["lgamma.default"],
    "waiting_on": ["lgamma"],
    "restrictions": ["dtypesIfPRIVATEUSE1", "skipMeta"],
    "capture": {"variants": 4, "passed": 4, "failed": 0, "skipped": 0},
    "device": {
        "variants": 4, "passed": 1, "xpassed": 0, "failed": 3, "flaky": [],
        "failures": [{
            "node_id": "test/test_ops.py::TestCommon::test_lgamma_privateuse1_float32",
            "category": "unsupported_op", "op": "lgamma.default", "dtype": "float32",
            "line": "NotImplementedError: Could not run 'aten::lgamma'",
            "message": "Traceback (most recent call last):\n  File \"x.py\", line 3\n"
                       "NotImplementedError: Could not run 'aten::lgamma' <script>x</script>",
        }],
    },
    "dropped": {"lgamma": ["lgamma.default"]},
}  # fmt: skip
KEY = {"file_path": "test/test_ops.py", "class_name": "TestCommon"}


@pytest.fixture
def proposal():
    backend = make_backend()
    make_config(backend)
    proposal = make_proposal(backend, **KEY, test_name="test_lgamma", evidence=EVIDENCE)
    make_proposal(backend, **KEY, test_name="test_digamma", mode="skip")
    for op, helper in (("lgamma.default", False), ("add.Tensor", True), ("add.Tensor", False)):
        OpUsage.objects.create(
            **KEY, test_name="test_lgamma", op=op, is_helper=helper, opinfo=f"v{helper}"
        )
    return proposal


def page(client, proposal):
    return client.get(reverse("selection:proposal_detail", args=[proposal.uuid]))


def test_approving_from_the_proposal_page_changes_its_status_and_comes_back(client, proposal):
    rita = make_user("rita", "reviewer")
    client.force_login(rita)
    assert ">Approve</button>" in page(client, proposal).text
    response = client.post(
        reverse("selection:proposal_review", args=[proposal.uuid]),
        {"decision": "approve", "back": "proposal"},
        follow=True,
    )
    assert response.redirect_chain[-1][0] == reverse(
        "selection:proposal_detail", args=[proposal.uuid]
    )
    assert (
        "Approved." in response.text and 'status-approved">approved</span> by rita' in response.text
    )
    proposal.refresh_from_db()
    assert (proposal.status, proposal.reviewer) == (Proposal.Status.APPROVED, rita)
    assert ProposalEvent.objects.get().action == "approved"
    assert ">Approve</button>" not in response.text and ">Reject</button>" in response.text


def test_a_refused_decision_on_the_page_says_why_next_to_the_buttons(client, proposal):
    rita = make_user("rita", "reviewer")
    client.force_login(rita)
    Proposal.objects.filter(pk=proposal.pk).update(status="approved")
    configprs.open_change(proposal.backend, rita)  # takes it into a config PR
    response = client.post(
        reverse("selection:proposal_review", args=[proposal.uuid]),
        {"decision": "reject", "back": "proposal"},
    )
    assert response.status_code == 409
    assert 'role="alert">this proposal is part of a config PR' in response.text
    assert ">Reject</button>" not in response.text  # its decision is fixed in the PR
    proposal.refresh_from_db()
    assert proposal.status == Proposal.Status.APPROVED


def test_a_viewer_sees_the_proposal_page_without_buttons(client, proposal):
    client.force_login(make_user("vera", "viewer"))
    body = page(client, proposal).text
    assert "test_lgamma" in body
    for action in (">Approve<", ">Reject<", ">Edit<"):
        assert action not in body


def test_the_evidence_reads_as_sections_with_links_and_no_repr(client, proposal):
    client.force_login(make_user("vera", "viewer"))
    body = page(client, proposal).text
    for heading in ("Operators used", "Restrictions", "Device result", "Similar tests"):
        assert f">{heading}</h3>" in body
    operators = reverse("selection:operator_list")
    assert f'href="{operators}?q=lgamma&amp;backend=acme"><code>lgamma.default</code>' in body
    assert f'href="{operators}?q=add&amp;backend=acme"><code>add.Tensor</code>' in body
    assert "not supported by Acme" in body
    assert "<code>skipMeta</code>" in body
    assert "1 of 4 variants passed on the device, 3 failed" in body
    assert "Could not run &#x27;aten::lgamma&#x27; &lt;script&gt;" in body  # the log, escaped
    assert "<script>x" not in body
    similar = body.split(">Similar tests</h3>")[1]
    assert "TestCommon::test_digamma" in similar and "skip" in similar
    text = unescape(re.sub(r"<script.*?</script>|<[^>]+>", " ", body, flags=re.S))
    for marker in ("{'", "['", "('", '{"', "':"):
        assert marker not in text


def test_an_edited_proposal_says_who_edited_it_on_its_page(client, proposal):
    client.force_login(make_user("rita", "reviewer"))
    assert "as the pipeline proposed it" in page(client, proposal).text
    client.post(
        reverse("selection:proposal_edit", args=[proposal.uuid]),
        {"mode": "skip", "reason": "needs the lgamma kernel"},
    )
    body = page(client, proposal).text
    assert "edited by rita, " in body and "as the pipeline proposed it" not in body
