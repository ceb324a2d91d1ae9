"""The HUD's L3 readiness panel in Chromium: green where a job meets RFC 102, red where it
misses, no sideways scroll of the page."""

import pytest
from playwright.sync_api import expect

from tests.factories import make_backend, make_config, make_user
from tests.runs.test_readiness import plant
from tests.selection.test_review_browser import sign_in


@pytest.mark.parametrize("width", [1440, 1024])
def test_the_readiness_panel_reads_by_colour_at_each_width(page, width):
    backend = make_backend("acme")
    make_config(backend)
    plant(backend, passed=19, failed=1, job_name="acme")
    plant(backend, passed=17, timed_out=3, job_name="acme (backend 0.9 with a long name)")
    make_user("vera")
    page.set_viewport_size({"width": width, "height": 900})
    sign_in(page, "vera")

    panel = page.locator("table.readiness")
    expect(page.get_by_role("heading", name="L3 readiness")).to_be_visible()
    late = panel.locator("tr", has_text="acme (backend 0.9")
    green = panel.locator("tr", has_text="acme").filter(has_not_text="0.9").nth(1)
    expect(green.locator("td").nth(1)).to_contain_text("95.0 % meets, 5.0 to spare")
    expect(late.locator("td").nth(2)).to_contain_text("15.0 % misses by 5.0")

    def background(cell):
        return cell.evaluate("td => getComputedStyle(td).backgroundColor")

    meets, misses = background(green.locator("td").nth(1)), background(late.locator("td").nth(2))
    assert meets != misses and "rgba(0, 0, 0, 0)" not in (meets, misses)
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    box = panel.bounding_box()
    assert box is not None and box["width"] <= 1024
