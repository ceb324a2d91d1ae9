"""The review queue in the browser: it fits the window, and a refused or failed inline action
keeps the page and says why, in place."""

import pytest
from playwright.sync_api import expect

from selection.models import Proposal
from tests.factories import make_user
from tests.selection.test_review_browser import queue_with_proposals, sign_in

WINDOWS = [(1440, 900), (1024, 768)]


@pytest.mark.parametrize(("width", "height"), WINDOWS)
def test_a_refused_edit_shows_its_error_in_the_row_and_a_server_failure_a_notice(
    page, transactional_db, width, height
):
    queue_with_proposals()
    make_user("rita", "reviewer")
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, "rita")
    page.get_by_role("navigation").get_by_role("link", name="Review").click()
    page.evaluate("window.stillTheSamePage = true")
    row = page.locator("tr.proposal", has_text="test_passes_today")
    row.get_by_role("link", name="Edit").click()
    editing = page.locator("tr.editing")

    editing.get_by_label("Reason").fill("   ")  # passes the browser's check, not crcr's
    editing.get_by_role("button", name="Save").click()

    expect(editing.get_by_role("alert")).to_have_text("a reason is required")
    expect(editing.get_by_label("Reason")).to_be_visible()  # the form stays, to be fixed
    expect(page.get_by_role("heading", name="Review")).to_be_visible()
    assert page.locator("#notice").is_hidden()

    page.route("**/edit/", lambda route: route.fulfill(status=500, body="Internal Server Error"))
    editing.get_by_label("Reason").fill("needs the add kernel")
    editing.get_by_role("button", name="Save").click()

    expect(page.locator("#notice")).to_contain_text("The server failed to answer (500)")
    expect(editing.get_by_label("Reason")).to_have_value("needs the add kernel")  # not lost
    assert page.evaluate("window.stillTheSamePage") is True


@pytest.mark.parametrize(("width", "height"), WINDOWS)
def test_the_queue_fits_the_window_with_the_first_approve_in_view_and_bulk_approval_asks_first(
    page, transactional_db, width, height
):
    queue_with_proposals()
    make_user("rita", "reviewer")
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, "rita")
    page.get_by_role("navigation").get_by_role("link", name="Review").click()

    first = page.locator("tr.proposal").first.get_by_role("button", name="Approve")
    expect(first).to_be_visible()
    box = first.bounding_box()
    assert (
        box is not None and box["x"] + box["width"] <= width and box["y"] + box["height"] <= height
    )
    assert page.evaluate("document.documentElement.scrollWidth") <= width  # no sideways scroll

    page.get_by_role("button", name="Approve all 5 matching").click()
    expect(page.get_by_role("heading", name="Approve 5 proposals?")).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    assert not Proposal.objects.filter(status="approved").exists()  # nothing changed yet
