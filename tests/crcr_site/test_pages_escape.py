"""Test names, failure messages and log lines are shown as text on every page, never as HTML."""

import pytest
from playwright.sync_api import expect

from tests.crcr_site.hostile import ESCAPED, IMG, PAGE_NAMES, SCRIPT, build, page_named
from tests.factories import PASSWORD, make_user

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("name", PAGE_NAMES)
def test_a_test_named_like_a_script_renders_as_text(client, name):
    page = page_named(name)
    client.force_login(make_user("rita", role="reviewer"))
    response = client.get(page.url)
    assert response.status_code == 200
    html = response.content.decode()
    assert SCRIPT not in html and IMG not in html
    assert ESCAPED in html


@pytest.mark.parametrize("name", PAGE_NAMES)
def test_the_live_fragments_of_a_page_escape_too(client, name):
    page = page_named(name)
    client.force_login(make_user("rita", role="reviewer"))
    response = client.get(page.url, headers={"HX-Request": "true"})
    assert response.status_code in (200, 286)
    html = response.content.decode()
    assert SCRIPT not in html and IMG not in html


def test_no_page_runs_the_planted_script_in_a_browser(page, transactional_db):
    pages = build()
    make_user("rita", role="reviewer")
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.goto("/accounts/login/")
    page.get_by_label("Username").fill("rita")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="HUD")).to_be_visible()
    for shown in pages:
        page.goto(shown.url)
        # Whatever is folded away is opened, as a person reading the page would.
        page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
        texts = page.get_by_text(SCRIPT)
        assert any(texts.nth(i).is_visible() for i in range(texts.count())), shown.name
        assert page.locator("img[src=x]").count() == 0, shown.name
    assert dialogs == []
