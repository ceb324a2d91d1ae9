"""A refused comment on a config PR (issue 35): the page stays, with the error in words by
the box and the text kept; a comment the box let through is never refused for its length."""

import pytest
from django.urls import reverse
from playwright.sync_api import expect

from selection import configprs
from selection.models import ConfigComment
from tests.factories import make_backend, make_config, make_user
from tests.selection.test_configprs import BASE, approved
from tests.selection.test_review_browser import sign_in

WINDOWS = [(1440, 900), (1024, 768)]
RED = "rgb(180, 35, 24)"


@pytest.mark.parametrize(("width", "height"), WINDOWS)
def test_a_refused_comment_is_said_by_its_box_in_words_and_a_long_one_with_breaks_is_taken(
    page, transactional_db, width, height
):
    backend = make_backend()
    make_config(backend, BASE)
    rita = make_user("rita", "reviewer")
    approved(backend, "test_sum", reason="sums on the host only")
    change = configprs.open_change(backend, rita)
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, "rita")
    page.goto(reverse("selection:configchange_detail", args=[change.uuid]))
    box = page.locator("textarea[name=body]")

    # Whitespace passes the browser's `required`, not crcr's.
    box.fill("   ")
    page.get_by_role("button", name="Comment", exact=True).click()
    error = page.locator("form:has(textarea[name=body]) [role=alert]")
    expect(error).to_have_text("a comment needs some text")
    expect(error).to_have_css("color", RED)
    expect(page.get_by_role("navigation", name="main")).to_be_visible()

    # Past the limit (the box's own limit taken off, as an older page or a script would).
    page.evaluate("document.querySelector('textarea[name=body]').removeAttribute('maxlength')")
    box.fill("x" * 5001)
    page.get_by_role("button", name="Comment", exact=True).click()
    expect(error).to_have_text("a comment is at most 5000 characters; this one has 5001")
    expect(error).to_have_css("color", RED)
    expect(page.get_by_role("navigation", name="main")).to_be_visible()
    expect(page.get_by_role("heading", level=1)).to_be_visible()
    assert box.input_value() == "x" * 5001  # kept, to be cut down
    assert "body" not in (error.text_content() or "")
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    page.screenshot(path=f"/tmp/findings-comment-{width}.png")
    assert not ConfigComment.objects.exists()

    # 5,000 characters as the box counts them, nine of them line breaks (two each when sent).
    text = "\n".join(["y" * 499] * 10) + "z"
    assert len(text) == 5000
    box.fill(text)
    page.get_by_role("button", name="Comment", exact=True).click()
    expect(page.locator("ul.comments")).to_contain_text("y" * 499)
    assert ConfigComment.objects.get().body == text
