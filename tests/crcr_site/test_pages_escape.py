"""Test names, failure messages and log lines are shown as text on every page, never as HTML."""

import pytest
from playwright.sync_api import expect

from tests.crcr_site.hostile import ESCAPED, IMG, SCRIPT, build
from tests.factories import PASSWORD, make_user

pytestmark = pytest.mark.django_db


# Building the hostile site is most of a check's cost: each test builds it once and
# reports every page that is wrong, not only the first.


def test_a_test_named_like_a_script_renders_as_text(client):
    client.force_login(make_user("rita", role="reviewer"))
    wrong = []
    for page in build():
        response = client.get(page.url)
        html = response.content.decode()
        if response.status_code != 200:
            wrong.append(f"{page.name}: {response.status_code}")
        elif SCRIPT in html or IMG in html or ESCAPED not in html:
            wrong.append(f"{page.name}: the name is not escaped")
    assert wrong == []


def test_the_live_fragments_of_a_page_escape_too(client):
    client.force_login(make_user("rita", role="reviewer"))
    wrong = []
    for page in build():
        response = client.get(page.url, headers={"HX-Request": "true"})
        html = response.content.decode()
        if response.status_code not in (200, 286):
            wrong.append(f"{page.name}: {response.status_code}")
        elif SCRIPT in html or IMG in html:
            wrong.append(f"{page.name}: the fragment is not escaped")
    assert wrong == []


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
