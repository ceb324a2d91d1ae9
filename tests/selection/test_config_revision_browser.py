"""A reviewer approves a config PR that was rebased under them, in headless Chromium."""

import re

from django.urls import reverse
from playwright.sync_api import expect

from selection import configprs
from selection.models import ConfigApproval, ConfigChange
from tests.factories import make_backend, make_config, make_user
from tests.selection.test_configprs import BASE, approved
from tests.selection.test_review_browser import sign_in

RED, GREEN = "rgb(180, 35, 24)", "rgb(26, 127, 55)"


def revision_shown(page):
    return page.locator("dl.facts dt:text-is('Revision') + dd")


def test_an_approval_of_a_diff_rebased_meanwhile_is_refused_until_the_page_is_reloaded(
    page, transactional_db
):
    backend = make_backend()
    make_config(backend, BASE)
    rita, otto = make_user("rita", "reviewer"), make_user("otto", "reviewer")
    approved(backend, "test_sum", reason="sums on the host only")
    first = configprs.open_change(backend, otto)
    approved(backend, "test_passes_today", mode="xfail", reason="fails on the device today")
    second = configprs.open_change(backend, rita)
    seen = second.revision

    sign_in(page, "otto")
    page.goto(reverse("selection:configchange_detail", args=[second.uuid]))
    expect(revision_shown(page)).to_have_text(seen[:12])
    # Meanwhile the other PR is merged and rita rebases this one onto v2: another text.
    configprs.approve(first, rita, first.revision)
    configprs.merge(first, rita, first.revision)
    configprs.rebase(second, rita)
    now = ConfigChange.objects.get(pk=second.pk).revision
    assert now != seen

    page.get_by_label("Approval comment").fill("read the v1 diff")
    page.get_by_role("button", name="Approve").click()
    refusal = page.locator("ul.messages li")
    expect(refusal).to_have_text(
        f"Not approved: this config PR changed since you loaded it (you saw revision "
        f"{seen[:12]}, it is now {now[:12]}): read the new diff and approve again."
    )
    expect(refusal).to_have_css("color", RED)
    assert not ConfigApproval.objects.filter(change=second).exists()

    page.reload()
    expect(revision_shown(page)).to_have_text(now[:12])
    expect(page.locator("div.yaml-diff")).to_contain_text("# Why: fails on the device today")
    page.get_by_role("button", name="Approve").click()
    expect(page.get_by_text("Approved.")).to_be_visible()
    expect(page.get_by_text("Approved.")).to_have_css("color", GREEN)  # success is not an error
    # The approval is of the current revision: no "not the current one" after the name.
    expect(page.locator("ul.approvals li")).to_have_text(re.compile(r"^otto approved, "))
    assert ConfigApproval.objects.get(change=second).revision == now
    page.get_by_role("button", name="Merge").click()
    expect(page.get_by_text("Merged as Acme config v3.")).to_be_visible()
