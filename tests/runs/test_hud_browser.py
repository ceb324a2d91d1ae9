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
    page.keyboard.press("Enter")  # the focused commit's first red cell: its failure's log
    expect(page).to_have_url(re.compile(f"/runs/{red.uuid}/log/$"))
    expect(page.get_by_role("link", name="Run acme")).to_be_visible()


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
