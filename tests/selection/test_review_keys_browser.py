"""The review queue by keyboard and a proposal's own page, in headless Chromium, at a wide
and a 1,024 px window."""

import pytest
from django.urls import reverse
from playwright.sync_api import expect

from selection.models import Proposal
from tests.factories import make_user
from tests.selection.test_review_browser import queue_with_proposals, sign_in

WIDTHS = [(1440, 900), (1024, 768)]


@pytest.mark.parametrize(("width", "height"), WIDTHS)
def test_j_then_a_approves_the_first_proposal_and_focus_moves_to_the_next(
    page, transactional_db, width, height
):
    queue_with_proposals()
    make_user("rita", "reviewer")
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, "rita")
    page.goto(reverse("selection:proposal_list"))
    rows = page.locator("tr.proposal")
    first, second = rows.nth(0), rows.nth(1)
    more = page.locator("details.more-filters")
    expect(more).to_contain_text("More filters")
    expect(page.get_by_label("Backend")).to_be_hidden()  # folded
    expect(page.get_by_role("textbox", name="Operator")).to_be_visible()

    page.keyboard.press("j")
    expect(first).to_be_focused()
    page.keyboard.press("a")
    expect(first).to_contain_text("approved")
    expect(second).to_be_focused()  # on to the next pending proposal

    page.keyboard.press("e")  # edit the one in focus: its form, focus on its first field
    editing = page.locator("tr.editing")
    expect(editing.get_by_label("Mode")).to_be_focused()
    editing.get_by_label("Reason").fill("a reason typed with j and a in it")
    page.keyboard.press("a")  # typing: not a shortcut
    expect(editing).to_be_visible()
    editing.get_by_role("button", name="Save").click()
    expect(second).to_contain_text("a reason typed with j and a in it")
    expect(second).to_be_focused()  # the saved row again, not the page's body
    assert Proposal.objects.filter(status="approved").count() == 1
    assert page.evaluate("document.documentElement.scrollWidth") <= width


@pytest.mark.parametrize(("width", "height"), WIDTHS)
def test_question_mark_and_the_button_show_the_shortcuts(page, transactional_db, width, height):
    queue_with_proposals()
    make_user("vera", "viewer")
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, "vera")
    page.goto(reverse("selection:proposal_list"))
    overlay = page.get_by_role("dialog", name="Keyboard shortcuts")
    expect(overlay).to_be_hidden()
    page.keyboard.press("?")
    expect(overlay).to_be_visible()
    expect(overlay).to_contain_text("approve the proposal in focus")
    page.keyboard.press("Escape")
    expect(overlay).to_be_hidden()
    page.get_by_role("button", name="Keyboard shortcuts").click()
    expect(overlay).to_be_visible()
    page.keyboard.press("?")
    expect(overlay).to_be_hidden()
    page.locator("details.more-filters summary").click()
    expect(page.get_by_label("Backend")).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= width


@pytest.mark.parametrize(("width", "height"), WIDTHS)
def test_the_proposal_pages_approve_is_in_view_and_approves(page, transactional_db, width, height):
    queue_with_proposals()
    make_user("rita", "reviewer")
    proposal = Proposal.objects.get(test_name="test_matches_cpu")
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, "rita")
    page.goto(reverse("selection:proposal_detail", args=[proposal.uuid]))
    approve = page.get_by_role("button", name="Approve")
    expect(approve).to_be_visible()
    box = approve.bounding_box()
    assert box is not None and box["x"] + box["width"] <= width
    assert box["y"] + box["height"] <= height
    expect(page.get_by_role("heading", name="Operators used")).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= width

    approve.click()
    expect(page.get_by_text("Approved.")).to_be_visible()
    expect(page.locator(".facts")).to_contain_text("approved by rita")
    proposal.refresh_from_db()
    assert proposal.status == Proposal.Status.APPROVED
