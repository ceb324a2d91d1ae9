"""The Content-Security-Policy: on every response, exact, and enforced by the browser
(every browser test's `page` also fails on a violation in the console: tests/conftest.py)."""

from playwright.sync_api import expect

from tests.factories import make_user
from tests.selection.test_review_browser import sign_in

POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "object-src 'none'; frame-ancestors 'none'; form-action 'self'; base-uri 'self'"
)


def test_every_kind_of_response_carries_the_exact_policy(client, db):
    client.force_login(make_user("vera", role="viewer"))
    for url in ("/", "/review/", "/runs/", "/accounts/login/", "/api/whoami/", "/no-such-page/"):
        assert client.get(url)["Content-Security-Policy"] == POLICY, url


def test_the_browser_refuses_an_injected_inline_script_and_style(
    browser, live_server, transactional_db
):
    context = browser.new_context(base_url=live_server.url)
    page = context.new_page()
    console: list[str] = []
    page.on("console", lambda message: console.append(message.text))
    make_user("vera")
    sign_in(page, "vera")
    expect(page.get_by_role("heading", name="HUD")).to_be_visible()
    assert page.locator("style").count() == 0  # htmx injected no indicator style

    page.evaluate(
        """() => {
            const script = document.createElement("script");
            script.textContent = "window.injected = true";
            document.body.appendChild(script);
            const style = document.createElement("style");
            style.textContent = "body { display: none }";
            document.head.appendChild(style);
        }"""
    )

    assert page.evaluate("() => window.injected") is None
    expect(page.get_by_role("heading", name="HUD")).to_be_visible()
    page.wait_for_timeout(200)
    refused = [text for text in console if "Content Security Policy" in text]
    assert len(refused) == 2 and "inline script" in refused[0] and "inline style" in refused[1]
    context.close()
