"""Every test's fate in Chromium, at 1440 and 1024 px: from a run page, a config-skipped
test's reason and config line in two clicks; the header's search with the name the run gives
the test opens its page; the review queue's search with that name finds its proposal."""

import re

import pytest
from playwright.sync_api import expect

from tests.factories import make_user
from tests.selection.test_review_browser import sign_in
from tests.selection.test_test_fates import SKIP_LINE, planted_run

RUN_NAME = "TestPlantedFaultsPRIVATEUSE1::test_cumprod_hangs_privateuseone"


def fits(page, width: int) -> None:
    assert page.evaluate("document.documentElement.scrollWidth") <= width


@pytest.mark.parametrize("width", [1440, 1024])
def test_a_config_skip_s_reason_and_line_are_two_clicks_from_the_run(page, width):
    run = planted_run()
    make_user("vera")
    page.set_viewport_size({"width": width, "height": 900})
    sign_in(page, "vera")
    page.goto(f"/runs/{run.uuid}/")
    fits(page, width)

    reason = page.get_by_text("hangs the device's queue until the shard times out")
    expect(reason).to_be_hidden()
    page.locator("details.left-out summary", has_text="test/test_planted_faults.py").click()  # 1
    expect(reason).to_be_visible()
    row = page.locator("table.left-out tr", has_text="TestPlantedFaults::test_cumprod_hangs")
    expect(row.locator(".fate")).to_have_text("skipped")
    fits(page, width)
    page.screenshot(path=f"/tmp/fate-run-{width}.png", full_page=True)

    row.get_by_role("link", name=f"line {SKIP_LINE}").click()  # 2
    expect(page).to_have_url(re.compile(f"/configs/reference/v1/#L{SKIP_LINE}$"))
    line = page.locator(f"tr#L{SKIP_LINE}")
    expect(line).to_contain_text("- names: [TestPlantedFaults::test_cumprod_hangs]")
    assert (
        line.evaluate("tr => getComputedStyle(tr.cells[1]).backgroundColor") != "rgba(0, 0, 0, 0)"
    )


@pytest.mark.parametrize("width", [1440, 1024])
def test_the_header_search_opens_a_test_s_page_by_the_name_the_run_gives_it(page, width):
    run = planted_run()
    make_user("vera")
    page.set_viewport_size({"width": width, "height": 900})
    sign_in(page, "vera")
    page.goto(f"/runs/{run.uuid}/")

    page.keyboard.press("/")
    search = page.get_by_role("searchbox", name="Find a test by its id")
    expect(search).to_be_focused()
    search.fill(RUN_NAME)
    search.press("Enter")

    expect(
        page.get_by_role("heading", name="TestPlantedFaults::test_cumprod_hangs")
    ).to_be_visible()
    backend = page.locator(".fate-backend", has_text="Reference device")
    expect(backend.locator("h3 .mode")).to_have_text("skip")
    expect(backend.locator(".fate-reason")).to_contain_text(
        "hangs the device's queue until the shard times out"
    )
    expect(backend.get_by_role("link", name=f"Config v1, line {SKIP_LINE}")).to_be_visible()
    expect(backend.locator("table.fate-history")).to_contain_text("stage 4: refined on the device")
    fits(page, width)
    page.screenshot(path=f"/tmp/fate-test-{width}.png", full_page=True)


@pytest.mark.parametrize("width", [1440, 1024])
def test_the_queue_search_finds_the_proposal_by_the_name_the_run_gives_its_test(page, width):
    planted_run()
    make_user("vera")
    page.set_viewport_size({"width": width, "height": 900})
    sign_in(page, "vera")
    page.goto("/review/")
    expect(page.locator("tr.proposal")).to_have_count(2)

    page.locator("form.filters").get_by_label("Search").fill(RUN_NAME)
    page.locator("form.filters").get_by_label("Search").press("Enter")

    expect(page.locator("tr.proposal")).to_have_count(1)
    expect(page.locator("tr.proposal")).to_contain_text("hangs the device's queue")
    fits(page, width)
