"""The start-run form's refusals name what is wrong without the server's paths (issue 35)."""

import pytest
from django.conf import settings
from playwright.sync_api import expect

from runs.models import Trigger
from tests.factories import make_backend, make_config, make_user
from tests.selection.test_review_browser import sign_in

WINDOWS = [(1440, 900), (1024, 768)]


@pytest.mark.parametrize(("width", "height"), WINDOWS)
def test_a_release_branch_the_clone_lacks_is_refused_without_the_clones_path(
    page, transactional_db, upstream, width, height
):
    make_config(make_backend("acme"))
    make_user("rita", role="reviewer")
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, "rita")
    page.goto("/runs/new/")

    page.get_by_label("Backend").select_option("acme")
    page.get_by_label("Kind").select_option("release")
    page.get_by_label("Target").fill("release/9.9")
    page.get_by_role("button", name="Start").click()

    expect(
        page.get_by_text("branch 'release/9.9' does not exist in the PyTorch clone")
    ).to_be_visible()
    text = page.locator("main").inner_text()
    assert "suite_GROUP, a config label" in text  # the help text whole (not "suite_, a…")
    clone = settings.CRCR_UPSTREAM.removeprefix("git:")
    assert clone not in text and str(upstream.path) not in text
    assert str(settings.VAR_DIR) not in text and str(settings.BASE_DIR) not in text
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    assert not Trigger.objects.exists()
