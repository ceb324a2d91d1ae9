"""Reviewing proposals and merging a config PR as people do it, in headless Chromium."""

import re
from pathlib import Path

from django.urls import reverse
from playwright.sync_api import expect

from selection import configwriter, proposals
from selection.models import ConfigVersion, Proposal
from tests.factories import PASSWORD, make_backend, make_config, make_proposal, make_user

TREE = Path(__file__).resolve().parents[1] / "upstream"
BASE = """\
test_suite_config:
  files:
    - path: ${TORCH_ROOT}/test/test_plain_reuse.py
      unlisted_test_mode: mandatory_success
      tests:
        # Why: asserts 11 == 10 on purpose.
        - names: [TestPlainMath::test_wrong_on_purpose]
          mode: xfail
"""
REASON = "needs lgamma; the <b>vendor</b> kernel lands in Q3"


def sign_in(page, username):
    page.goto(reverse("login"))
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="HUD")).to_be_visible()


def queue_with_proposals():
    backend = make_backend()
    make_config(backend, BASE)
    lgamma = {"unsupported_ops": ["lgamma.default"], "waiting_on": ["lgamma"]}
    add = {"unsupported_ops": ["add.Tensor"], "waiting_on": ["add"]}
    ops = {"file_path": "test/test_ops_reuse.py", "class_name": "TestOpsReuse", "evidence": lgamma}
    make_proposal(
        backend, **ops, test_name="test_matches_cpu", reason="drops OpInfo lgamma",
        edits={"ops": {"exclude": [{"name": "lgamma"}]}},
    )  # fmt: skip
    make_proposal(backend, **ops, test_name="test_returns_device_tensors", mode="xfail")
    plain = {"file_path": "test/test_plain_reuse.py", "class_name": "TestPlainMath"}
    make_proposal(backend, **plain, test_name="test_sum", mode="skip", evidence=lgamma)
    make_proposal(backend, **plain, test_name="test_passes_today", mode="skip", evidence=add)
    make_proposal(
        backend, file_path="test/test_plain_reuse.py", class_name="TestPlainStrings",
        test_name="test_sum", mode="skip", evidence=add,
    )  # fmt: skip
    return backend


def test_a_reviewer_filters_edits_bulk_approves_and_a_second_reviewer_merges(
    page, transactional_db
):
    backend = queue_with_proposals()
    make_user("rita", "reviewer")
    make_user("otto", "reviewer")
    sign_in(page, "rita")
    page.get_by_role("navigation").get_by_role("link", name="Review").click()
    page.get_by_role("textbox", name="Operator").fill("lgamma")
    page.get_by_role("button", name="Filter").click()
    expect(page.get_by_text("3 proposals match")).to_be_visible()
    expect(page).to_have_url(re.compile(r"op=lgamma"))
    expect(page.locator("tr.proposal")).to_have_count(3)

    page.evaluate("window.stillTheSamePage = true")
    row = page.locator("tr.proposal", has_text="test_returns_device_tensors")
    row.get_by_role("link", name="Edit").click()
    editing = page.locator("tr.editing")
    editing.get_by_label("Mode").select_option("skip")
    editing.get_by_label("Reason").fill(REASON)
    editing.get_by_role("button", name="Save").click()
    edited = page.locator("tr.proposal", has_text="test_returns_device_tensors")
    expect(edited).to_contain_text(REASON)
    expect(edited).to_contain_text("skip")
    assert page.evaluate("window.stillTheSamePage") is True  # swapped in place, no reload

    page.get_by_role("button", name="Approve all 3 matching").click()
    # Asked first: the count, the filter, and the proposal edited by hand above.
    expect(page.get_by_role("heading", name="Approve 3 proposals?")).to_be_visible()
    expect(page.locator("ul.edited")).to_contain_text("test_returns_device_tensors")
    assert Proposal.objects.filter(status="approved").count() == 0
    page.get_by_role("button", name="Approve 3").click()
    expect(page.get_by_text("3 proposals approved.")).to_be_visible()
    page.get_by_role("button", name="Open a config PR for Acme").click()
    expect(page.get_by_role("heading", name=re.compile("3 approved decisions"))).to_be_visible()
    diff = page.locator("div.yaml-diff")
    expect(diff).to_contain_text(f"# Why: {REASON}")
    expect(diff).to_contain_text("# Why: drops OpInfo lgamma")
    expect(diff).to_contain_text("+        - names: [TestPlainMath::test_sum]")
    expect(page.get_by_text("another reviewer must approve it")).to_be_visible()
    expect(page.get_by_role("button", name="Approve")).to_have_count(0)
    # rita approved its proposals: only a reviewer who approved none of them may merge it
    # (the two-person rule on the content); no Merge button, the reason instead.
    expect(page.get_by_role("button", name="Merge")).to_have_count(0)
    expect(
        page.get_by_text("a reviewer who approved none of them must merge it", exact=False)
    ).to_be_visible()
    change_url = page.url

    page.get_by_role("button", name="Sign out").click()
    sign_in(page, "otto")
    page.goto(change_url)
    expect(page.get_by_role("button", name="Merge")).to_have_count(0)
    page.get_by_role("button", name="Approve").click()
    expect(page.get_by_text("Approved.")).to_be_visible()
    expect(page.locator("ul.approvals")).to_contain_text("otto approved")
    page.get_by_role("button", name="Merge").click()
    expect(page.get_by_text("Merged as Acme config v2.")).to_be_visible()

    with page.expect_download() as download_info:
        page.get_by_role("link", name="Download crcr-config.yaml").click()
    download = download_info.value
    assert download.suggested_filename == "crcr-config.yaml"
    text = Path(download.path()).read_text()
    configwriter.validate(text, TREE)
    entries = proposals.explicit_entries(text)
    assert entries[("test/test_ops_reuse.py", "TestOpsReuse::test_returns_device_tensors")][0] == (
        "skip"
    )
    assert ("test/test_plain_reuse.py", "TestPlainMath::test_sum") in entries
    assert f"# Why: {REASON}" in text
    assert text == ConfigVersion.objects.get(backend=backend, number=2).yaml_text
    assert Proposal.objects.filter(status="merged").count() == 3
    assert Proposal.objects.filter(status="pending").count() == 2


def test_a_viewer_sees_the_queue_without_actions_and_a_crafted_post_is_refused(
    page, live_server, transactional_db
):
    queue_with_proposals()
    make_user("vera", "viewer")
    sign_in(page, "vera")
    page.goto(reverse("selection:proposal_list"))
    expect(page.locator("tr.proposal")).to_have_count(5)
    expect(page.get_by_text("drops OpInfo lgamma")).to_be_visible()
    for name in ("Approve", "Reject", "Approve all 5 matching", "Open a config PR for Acme"):
        expect(page.get_by_role("button", name=name)).to_have_count(0)
    expect(page.get_by_role("link", name="Edit")).to_have_count(0)

    csrf = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
    proposal = Proposal.objects.get(test_name="test_matches_cpu")
    posts = [
        (reverse("selection:proposal_review", args=[proposal.uuid]), {"decision": "approve"}),
        (reverse("selection:proposal_bulk"), {"decision": "approve"}),
        (reverse("selection:configchange_create"), {"backend": "acme"}),
    ]
    for path, form in posts:
        response = page.request.post(
            live_server.url + path, form=form, headers={"X-CSRFToken": csrf, "HX-Request": "true"}
        )
        assert response.status == 403
        # Refused for the role, not for the token, and said so in the site's 403 page.
        assert "CSRF verification failed" not in response.text()
        assert "This action needs the reviewer role." in response.text()
    assert not Proposal.objects.exclude(status="pending").exists()
