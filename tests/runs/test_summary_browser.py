"""The summary and metrics pages in Chromium at 1440 and 1024 px, on the demo's shape (a
merged PR's run of the job `reference` and its nightly): the figures of each tab, the tabs
switching, the L3 panel's thresholds and distance, the charts, no sideways scroll."""

import re

import pytest
from playwright.sync_api import expect

from tests.factories import make_user
from tests.runs.test_summary import demo_shaped, flaky_in
from tests.selection.test_review_browser import sign_in


def fits(page, width: int) -> None:
    """No sideways scroll; else, the elements past the edge."""
    past = page.evaluate(
        f"""() => [...document.querySelectorAll("body *")]
            .filter(e => e.getBoundingClientRect().right > {width})
            .slice(0, 5).map(e => e.tagName + "." + e.className)"""
    )
    assert page.evaluate("document.documentElement.scrollWidth") <= width, past


@pytest.mark.parametrize("width", [1440, 1024])
def test_the_summary_shows_pr_and_nightly_figures_and_the_l3_distance(page, width):
    runs = demo_shaped()
    make_user("vera")
    page.set_viewport_size({"width": width, "height": 900})
    sign_in(page, "vera")

    page.get_by_role("navigation", name="main").get_by_role("link", name="Summary").click()
    expect(page.get_by_role("heading", name="Summary")).to_be_visible()
    table = page.locator("table.summary")
    backend = table.locator("tr.backend")
    expect(backend).to_contain_text("reference all jobs")
    cells = backend.locator("td")
    expect(cells.nth(0)).to_have_text("L2")
    expect(cells.nth(1)).to_have_text("50.0 %")  # pass rate: 2 of the 4 PR jobs
    expect(cells.nth(3)).to_have_text("2")  # failures
    expect(cells.nth(6)).to_have_text("2 min 00 s")  # average duration
    expect(cells.nth(7)).to_have_text("30 s")  # queue
    expect(cells.nth(9)).to_have_text("25.0 %")  # timeout rate
    red = cells.nth(1).locator(".badge").evaluate("b => getComputedStyle(b).backgroundColor")
    # The L3 panel: both thresholds, and how far the backend is from each.
    panel = page.locator("table.readiness")
    expect(panel).to_contain_text("pass rate > 90 %")
    expect(panel).to_contain_text("timeout rate < 10 %")
    expect(panel.locator("tr.backend td").nth(1)).to_contain_text("misses by 40.0")
    expect(panel.locator("tr.backend td").nth(1)).to_contain_text("17 green jobs in a row")
    expect(panel.locator("tr.backend td").nth(2)).to_contain_text("misses by 15.0")
    fits(page, width)
    page.screenshot(path=f"/tmp/metrics-summary-pr-{width}.png", full_page=True)

    page.get_by_role("navigation", name="Which jobs").get_by_role("link", name="Nightly").click()
    expect(page).to_have_url(re.compile(r"event=nightly"))
    expect(cells.nth(1)).to_have_text("100.0 %")
    expect(cells.nth(5)).to_have_text("1")  # total: the nightly run alone
    expect(cells.nth(8)).to_have_text("1 min 20 s")  # execution
    expect(table.locator("tr.backend a")).to_have_attribute(
        "href", f"/runs/{runs['nightly'].uuid}/"
    )
    green = cells.nth(1).locator(".badge").evaluate("b => getComputedStyle(b).backgroundColor")
    assert red != green
    expect(page.get_by_role("link", name="Nightly")).to_have_attribute("aria-current", "page")
    expect(
        page.get_by_role("navigation", name="main").get_by_role("link", name="Summary")
    ).to_have_attribute("aria-current", "page")
    page.get_by_role("navigation", name="Time range").get_by_role("link", name="24 h").click()
    expect(page).to_have_url(re.compile(r"event=nightly&days=1$"))
    expect(cells.nth(5)).to_have_text("1")  # run an hour ago
    fits(page, width)
    page.screenshot(path=f"/tmp/metrics-summary-nightly-{width}.png", full_page=True)


@pytest.mark.parametrize("width", [1440, 1024])
def test_the_metrics_page_charts_pr_against_nightly(page, width):
    demo_shaped()
    make_user("vera")
    page.set_viewport_size({"width": width, "height": 900})
    sign_in(page, "vera")

    page.get_by_role("navigation", name="main").get_by_role("link", name="Metrics").click()
    totals = page.locator("table.metrics-totals")
    expect(totals.locator("tr", has_text="Pull requests").locator("td")).to_have_text(
        ["4", "2", "2", "50.0 %"]
    )
    expect(totals.locator("tr", has_text="Nightly").locator("td")).to_have_text(
        ["1", "1", "0", "100.0 %"]
    )
    expect(page.get_by_label("Time range")).to_have_value("30")  # the window counted
    expect(totals.locator("thead")).to_contain_text("Last 30 days")
    charts = page.locator("svg.chart.daily")
    expect(charts).to_have_count(3)
    for n in range(3):
        box = charts.nth(n).bounding_box()
        assert box is not None and box["width"] <= width
    page.get_by_label("Time range").select_option("90")
    page.get_by_role("button", name="Show").click()
    expect(page).to_have_url(re.compile(r"days=90"))
    expect(totals.locator("thead")).to_contain_text("Last 90 days")
    expect(
        page.get_by_role("navigation", name="main").get_by_role("link", name="Metrics")
    ).to_have_attribute("aria-current", "page")
    fits(page, width)
    page.screenshot(path=f"/tmp/metrics-metrics-{width}.png", full_page=True)


@pytest.mark.parametrize("width", [1440, 1024])
def test_the_flaky_page_lists_the_demo_flaky_test(page, width):
    runs = demo_shaped()
    flaky_in(runs["pr0"])
    make_user("vera")
    page.set_viewport_size({"width": width, "height": 900})
    sign_in(page, "vera")

    page.get_by_role("navigation", name="main").get_by_role("link", name="Flaky").click()
    row = page.locator("table.flaky tbody tr")
    expect(row).to_have_count(1)
    expect(row).to_contain_text("TestFlaky::test_flaky_counter")
    expect(row).to_contain_text("not proposed yet")
    expect(page.get_by_label("Time range")).to_have_value("7")  # the window listed
    fits(page, width)
    page.screenshot(path=f"/tmp/metrics-flaky-{width}.png", full_page=True)
