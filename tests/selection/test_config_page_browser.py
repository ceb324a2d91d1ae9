"""The config page and a config PR's split diff fit the window, in headless Chromium."""

import pytest
from django.urls import reverse
from playwright.sync_api import expect

from selection import configprs
from tests.factories import make_backend, make_config, make_user
from tests.selection.test_config_page import decided, merged
from tests.selection.test_configprs import BASE
from tests.selection.test_review_browser import sign_in

# One unbroken token longer than any window: the YAML must wrap it, not scroll sideways.
LONG = "https://example.com/kernels/" + "x" * 300


def fits(page, width):
    """No horizontal scrolling, measured once the page and its stylesheet have loaded."""
    page.wait_for_load_state("load")
    return page.evaluate("document.documentElement.scrollWidth") <= width


@pytest.mark.parametrize("width", [1440, 1024])
def test_the_config_page_and_the_split_diff_fit_the_window_and_the_toggle_switches(
    page, transactional_db, width
):
    backend = make_backend()
    make_config(backend, BASE)
    rita, otto = make_user("rita", "reviewer"), make_user("otto", "reviewer")
    decided(backend, "test_sum", rita, reason=f"sums on the host only, see {LONG}")
    merged(backend, rita, otto)
    decided(backend, "test_passes_today", otto, mode="xfail", reason=f"fails today: {LONG}")
    change = configprs.open_change(backend, otto)
    page.set_viewport_size({"width": width, "height": 900})
    sign_in(page, "rita")

    page.goto(reverse("selection:backendconfig_detail", args=["acme"]))
    expect(page.get_by_role("heading", name="Acme config v2")).to_be_visible()
    expect(page.locator("table.code tr#L10 td.num")).to_have_text("10")
    assert fits(page, width)
    page.get_by_role("link", name="Blame v2").click()
    expect(page.locator("table.blame")).to_contain_text("because sums on the host only")
    assert fits(page, width)

    page.goto(reverse("selection:configchange_detail", args=[change.uuid]))
    expect(page.locator("table.diff.unified")).to_be_visible()
    page.get_by_role("link", name="Split").click()
    split = page.locator("table.diff.split")
    expect(split).to_be_visible()
    expect(page.locator("table.diff.unified")).to_have_count(0)
    expect(split.locator("td.src.add").first).to_contain_text("# Why: fails today")
    assert fits(page, width)
    page.get_by_role("link", name="Unified").click()
    expect(page.locator("table.diff.unified")).to_be_visible()
    expect(split).to_have_count(0)
    assert fits(page, width)
