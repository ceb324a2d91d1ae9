"""The HUD as an engineer reads it in Chromium: coloured cells with letters, GitHub links,
no sideways scroll of the page, j/k between commits."""

import re

import pytest
from playwright.sync_api import expect

from runs.models import Trigger
from tests.factories import make_user
from tests.runs.test_hud import acme, plant, pull_request, sha
from tests.selection.test_review_browser import sign_in


@pytest.mark.parametrize("width", [1440, 1024])
def test_the_hud_grid_reads_by_colour_and_letter_and_moves_by_keys(page, width):
    backend = acme()
    dispatched = Trigger.objects.create(
        backend=backend, kind="dispatch", pytorch_sha=sha(2), dispatch=pull_request(backend, 11, 2)
    )
    red = plant(backend, 2, trigger=dispatched, status="failed", outcomes=("passed", "failed"))
    plant(backend, 1, status="passed")
    for number in range(24):  # more jobs than fit: the grid scrolls in its own box
        plant(backend, 1, job=f"acme (backend 1.{number} with a long name)", later=number + 1)
    make_user("vera")
    page.set_viewport_size({"width": width, "height": 800})
    sign_in(page, "vera")

    failed = page.locator("tr.hud-row").nth(0).locator("td.cell a").first
    passed = page.locator("tr.hud-row").nth(1).locator("td.cell a").first
    expect(failed).to_have_text("X")
    expect(passed).to_have_text("O")

    def background(link):
        return link.evaluate("a => getComputedStyle(a.parentElement).backgroundColor")

    assert background(failed) != background(passed)
    assert "rgba(0, 0, 0, 0)" not in (background(failed), background(passed))
    sha_link = page.locator("tr.hud-row").nth(0).locator("a.sha")
    assert sha_link.get_attribute("href") == f"https://github.com/pytorch/pytorch/commit/{sha(2)}"
    pr_link = page.get_by_role("link", name="#11 Fix lgamma 11")
    assert pr_link.get_attribute("href") == "https://github.com/pytorch/pytorch/pull/11"
    assert page.evaluate("document.documentElement.scrollWidth") <= width

    page.keyboard.press("j")
    expect(page.locator("tr.hud-row").nth(0)).to_be_focused()
    page.keyboard.press("j")
    expect(page.locator("tr.hud-row").nth(1)).to_be_focused()
    page.keyboard.press("k")
    expect(page.locator("tr.hud-row").nth(0)).to_be_focused()
    page.keyboard.press("Enter")  # the focused commit's first red cell
    expect(page).to_have_url(re.compile(f"/runs/{red.uuid}/$"))
    expect(page.get_by_role("heading", name="Run acme failed")).to_be_visible()


def test_a_nightly_only_backend_reads_as_such_over_its_columns(page):
    from runs.models import Backend
    from tests.factories import make_backend, make_config

    nightly = make_backend("nightlies", participation=Backend.Participation.NIGHTLY)
    make_config(nightly)
    plant(acme(), 1)
    plant(nightly, 1)
    make_user("vera")
    page.set_viewport_size({"width": 1024, "height": 800})
    sign_in(page, "vera")

    header = page.locator("th.backend", has_text="nightlies")
    expect(header).to_contain_text("nightly only")
    expect(header.locator(".nightly-only")).to_have_attribute(
        "title", re.compile("takes nightly and release dispatches only")
    )
    expect(page.locator("th.backend", has_text="acme")).not_to_contain_text("nightly only")
    # The name and its mark side by side, not drawn over each other.
    name, mark = header.locator("span").bounding_box(), header.locator("small").bounding_box()
    assert name and mark and mark["x"] >= name["x"] and mark["width"] > 0
    assert page.evaluate("document.documentElement.scrollWidth") <= 1024


@pytest.mark.parametrize("width", [1440, 1024])
def test_a_cell_tells_its_whole_story_on_hover_and_on_keys_and_a_bundle_rerun_marks_it(page, width):
    from tests.runs.test_hud import rerun_from_bundle

    backend = acme()
    red = plant(
        backend, 2, status="failed", outcomes=("passed", "failed"), changed_since_green=["PyTorch"]
    )
    plant(backend, 1, status="passed", outcomes=("passed", "passed", "skipped"))
    rerun_from_bundle(red, "failed")  # the bundle's re-run fails too: reproduced
    make_user("vera")
    page.set_viewport_size({"width": width, "height": 800})
    sign_in(page, "vera")

    cell = page.locator("tr.hud-row").nth(0).locator("td.cell").first
    link = cell.locator("a").first
    expect(link).to_have_text("X")  # the upstream verdict, not the re-run's
    assert "tone-red" in (cell.get_attribute("class") or "")
    tip = page.locator(f"#{link.get_attribute('aria-describedby')}")
    expect(tip).to_be_hidden()
    link.hover()
    expect(tip).to_be_visible()
    for field in (
        "acme: failed",  # job and status
        "attempt 1 of 1",
        "queued 30 s · ran 1 min 00 s",  # queue time and duration
        "1 of 2 tests passed",
        "re-run from its bundle (attempt 1): reproduced",
    ):
        expect(tip).to_contain_text(field)
    expect(tip.get_by_role("link", name="log")).to_have_attribute("href", f"/runs/{red.uuid}/log/")
    box, view = tip.bounding_box(), page.viewport_size
    assert box and view and box["x"] >= 0 and box["x"] + box["width"] <= view["width"]
    page.screenshot(path=f"/tmp/hudcells-hover-{width}.png")

    page.mouse.move(0, 0)
    expect(tip).to_be_hidden()
    page.keyboard.press("j")  # the first commit, then its first cell by keys
    page.keyboard.press("l")
    expect(link).to_be_focused()
    expect(tip).to_be_visible()
    page.keyboard.press("j")  # the same column, next commit
    below = page.locator("tr.hud-row").nth(1).locator("td.cell a").first
    expect(below).to_be_focused()
    below_tip = page.locator(f"#{below.get_attribute('aria-describedby')}")
    expect(below_tip).to_contain_text("2 of 3 tests passed")
    expect(tip).to_be_hidden()
    page.keyboard.press("Escape")
    expect(below_tip).to_be_hidden()
    page.keyboard.press("k")
    expect(tip).to_be_visible()
    page.screenshot(path=f"/tmp/hudcells-focus-{width}.png")
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(f"/runs/{red.uuid}/$"))
