"""A failed test's log as an engineer reaches and reads it in Chromium, at 1440 and 1024 px:
one click from the run page and from a HUD cell's details, its failing line marked, `f` (or
the error's link) jumps to it, a shard's long output a page at a time."""

import re

import pytest
from playwright.sync_api import expect

from reproducibility import capture
from runs.models import TestResult
from tests.factories import make_backend, make_config, make_user
from tests.reproducibility.builders import (
    ADDCMUL_TRACE,
    MISMATCH,
    PASSING,
    add_result,
    make_run,
    store_shard_output,
)
from tests.selection.test_review_browser import sign_in

pytestmark = pytest.mark.parametrize("width", [1440, 1024])


@pytest.fixture
def failed_run(settings, tmp_path):
    """A failed run as the demo's planted fault leaves one: a regression with its reports
    and a long output (1,000 lines before the failure) in storage."""
    settings.MEDIA_ROOT = str(tmp_path / "storage")
    backend = make_backend("acme")
    run = make_run(backend, make_config(backend), status="failed")
    add_result(run, MISMATCH, ["failed", "failed", "failed"], "numerical_mismatch", "regression")
    add_result(run, PASSING, ["passed"])
    TestResult.objects.filter(node_id=MISMATCH).update(message=ADDCMUL_TRACE)
    store_shard_output(run, padding=1000)
    capture.record_run_start(run)
    make_user("vera")
    return run


def reads_the_failing_line(page, width: int) -> None:
    failing = page.locator("tr.failing")
    expect(failing).to_have_count(1)
    expect(failing).to_contain_text("AssertionError: Tensor-likes are not close!")
    tint = failing.locator("td.src").evaluate("td => getComputedStyle(td).backgroundColor")
    plain = page.locator("table.log-lines tr:not(.failing) td.src").first.evaluate(
        "td => getComputedStyle(td).backgroundColor"
    )
    assert tint != plain
    assert page.evaluate("document.documentElement.scrollWidth") <= width


def test_from_the_run_page_a_failed_tests_log_is_one_click_and_marks_its_line(
    page, failed_run, width
):
    page.set_viewport_size({"width": width, "height": 900})
    sign_in(page, "vera")
    page.goto(f"/runs/{failed_run.uuid}/")
    page.screenshot(path=f"/tmp/logs-run-{width}.png", full_page=True)
    page.locator("ul.failures").get_by_role("link", name=MISMATCH).click()
    expect(page).to_have_url(re.compile(f"/runs/{failed_run.uuid}/log/\\?test="))
    expect(page.get_by_role("heading", name=re.compile("failed test_addcmul"))).to_be_visible()
    reads_the_failing_line(page, width)
    expect(page.locator("pre.command").first).to_have_text(f"python reproduce --test {MISMATCH}")
    page.screenshot(path=f"/tmp/logs-test-{width}.png", full_page=True)

    page.keyboard.press("f")  # jump to the failure
    expect(page).to_have_url(re.compile("#failure$"))
    expect(page.locator("tr.failing")).to_be_in_viewport()

    page.get_by_role("link", name="the process's whole output at this failure").click()
    target = page.locator("tr.target")  # the test's section, on the page that holds it
    expect(target).to_contain_text("TestXPRIVATEUSEONE.test_addcmul_privateuseone_float64")
    reads_the_failing_line(page, width)
    page.keyboard.press("p")  # the page before
    expect(page.locator("tr#L401")).to_be_attached()
    page.keyboard.press("f")  # back to the failure's page, at its line
    expect(page).to_have_url(re.compile("#L1011$"))
    expect(page.locator("tr#L1011")).to_be_in_viewport()
    page.screenshot(path=f"/tmp/logs-shard-{width}.png")


def test_from_the_hud_a_red_cells_log_link_opens_its_failure_log(page, failed_run, width):
    page.set_viewport_size({"width": width, "height": 900})
    sign_in(page, "vera")
    cell = page.locator("td.tone-red a").first
    expect(cell).to_have_text("X")
    cell.hover()  # its details, with the log link
    tip = page.locator(f"#{cell.get_attribute('aria-describedby')}")
    tip.get_by_role("link", name="log").click()
    expect(page).to_have_url(re.compile(f"/runs/{failed_run.uuid}/log/$"))
    expect(page.get_by_text(MISMATCH).first).to_be_visible()
    reads_the_failing_line(page, width)
    page.get_by_role("link", name=re.compile("AssertionError: Tensor-likes")).click()
    expect(page).to_have_url(re.compile("#failure$"))
