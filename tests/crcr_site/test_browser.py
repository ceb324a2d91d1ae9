"""The pages as a person uses them, in headless Chromium."""

import re

from playwright.sync_api import expect

from tests.factories import PASSWORD, make_user


def test_a_viewer_signs_in_and_walks_the_navigation(page, transactional_db):
    make_user("vera", role="viewer")
    page.goto("/")
    expect(page).to_have_url(re.compile(r"/accounts/login/"))
    page.get_by_label("Username").fill("vera")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="HUD")).to_be_visible()
    expect(page.get_by_text("vera · viewer")).to_be_visible()
    for link in ["Runs", "Review", "Configs", "Operators", "HUD"]:
        page.get_by_role("navigation").get_by_role("link", name=link).click()
        expect(page.get_by_role("heading", name=link, exact=True)).to_be_visible()
        expect(page.get_by_role("link", name=link)).to_have_attribute("aria-current", "page")
        expect(page.locator(".empty")).to_be_visible()
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
