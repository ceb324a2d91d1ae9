"""What every page shares: errors in the site's layout, a favicon, the API browsable."""

import re
import uuid
from html import unescape

import pytest
from django.core.management import call_command
from django.test import Client, override_settings
from django.urls import reverse
from playwright.sync_api import expect

from runs.models import Dispatch
from tests.crcr_site.hostile import build
from tests.factories import make_user
from tests.selection.test_review_browser import sign_in

pytestmark = pytest.mark.django_db


def test_a_missing_page_and_a_forbidden_one_keep_the_layout_and_say_why(client):
    client.force_login(make_user("vera"))

    missing = client.get(f"/runs/{uuid.uuid4()}/")
    forbidden = client.get(reverse("runs:trigger_create"))  # reviewers only

    assert missing.status_code == 404
    assert "Not found" in missing.text and 'href="/review/"' in missing.text
    assert forbidden.status_code == 403
    assert "This action needs the reviewer role." in forbidden.text
    assert 'aria-label="main"' in forbidden.text  # the site's navigation, not a bare text


@override_settings(ROOT_URLCONF="tests.crcr_site.boom_urls")
def test_a_server_error_is_a_page_of_the_site_not_a_traceback():
    client = Client(raise_request_exception=False)
    client.force_login(make_user("vera"))

    failed = client.get("/boom/")

    assert failed.status_code == 500
    assert "Server error" in failed.text and "favicon.svg" in failed.text
    assert "Traceback" not in failed.text and "a bug" not in failed.text


def test_the_api_schema_is_complete_and_valid(tmp_path):
    # Every endpoint documented (an APIView without a serializer used to be left out).
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "s.yml"))
    schema = (tmp_path / "s.yml").read_text()
    for path in ("/api/dispatches/:", "/api/webhooks/github/{slug}/:", "/api/whoami/:"):
        assert path in schema


def test_the_api_docs_are_for_people_signed_in(client):
    assert client.get(reverse("api:docs")).status_code == 302  # to sign in
    client.force_login(make_user("vera"))
    assert client.get(reverse("api:schema"), HTTP_ACCEPT="application/json").status_code == 200


@pytest.mark.parametrize("width", [1440, 1024])
def test_the_api_docs_and_a_404_render_from_crcrs_own_files_within_the_window(
    page, transactional_db, live_server, width
):
    make_user("vera")
    page.set_viewport_size({"width": width, "height": 800})
    hosts: set[str] = set()
    page.on("request", lambda request: hosts.add(request.url.split("/")[2]))
    sign_in(page, "vera")

    page.get_by_role("link", name="API").click()
    expect(page.get_by_text("/api/dispatches/", exact=True).first).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    icon = page.locator("link[rel=icon]").first.get_attribute("href")
    assert icon and "favicon" in icon

    page.goto(f"/runs/{uuid.uuid4()}/")
    expect(page.get_by_role("heading", name="Not found")).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    assert page.locator("link[rel=icon]").get_attribute("href").endswith("favicon.svg")
    assert hosts == {live_server.url.split("/")[2]}  # no CDN, no outside request


def test_no_page_shows_a_python_repr_or_raw_json(client):
    pages = build()
    client.force_login(make_user("rita", role="reviewer"))
    for page in pages:
        html = client.get(page.url).content.decode()
        text = unescape(re.sub(r"<script.*?</script>|<[^>]+>", " ", html, flags=re.S))
        # What a person reads: no dict, list or tuple repr, no JSON object.
        for marker in ("{'", "['", "('", '{"', "':"):
            assert marker not in text, f"{page.name} shows {marker!r}"


def test_the_payload_of_a_dispatch_downloads_exactly_as_received(client):
    dispatch = next(page for page in build() if page.name == "dispatch detail")
    client.force_login(make_user("vera"))
    detail = client.get(dispatch.url).text
    assert "Download the payload as received" in detail
    raw = Dispatch.objects.get().raw_body
    downloaded = client.get(f"{dispatch.url}payload.json")
    assert downloaded["Content-Type"] == "application/json"
    assert downloaded["Content-Disposition"].startswith("attachment;")
    assert downloaded.content.decode() == raw
