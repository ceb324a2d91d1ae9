"""The onboarding page refuses what GitHub would not call a repository, shows a config's
problems without the server's paths, and shows a message's `code` as code (issue 35)."""

import pytest
from django.conf import settings
from playwright.sync_api import expect

from runs.models import Backend
from selection.models import ConfigVersion
from tests.factories import make_user
from tests.selection.test_onboarding import CRCR
from tests.selection.test_review_browser import sign_in

WINDOWS = [(1440, 900), (1024, 768)]


def fill_profile(page, config, repository="torch-spyre/torch-spyre", token="none"):
    page.get_by_label("Slug").fill("spyre")
    page.get_by_label("Name", exact=True).fill("IBM Spyre")
    page.get_by_label("Repository").fill(repository)
    page.get_by_label("Device module").fill("torch_spyre")
    page.get_by_label("Relay token").fill(token)
    page.get_by_label("First config file").set_input_files(str(config))
    page.get_by_role("button", name="Add the backend").click()


def repository_error(page):
    # The error right after the field's label and help text.
    return page.locator("label:has(#id_repository) ~ pre.error").first


@pytest.mark.parametrize(("width", "height"), WINDOWS)
def test_a_repository_github_would_not_name_is_refused_next_to_its_field(
    page, transactional_db, tmp_path, width, height
):
    config = tmp_path / "first.yaml"
    config.write_text(CRCR)
    make_user("ada", role="admin")
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, "ada")
    page.get_by_role("link", name="Add backend").click()

    for bad in ("not a repo", "os; rm -rf /", "-owner/name", "owner/name/more"):
        fill_profile(page, config, repository=bad)
        error = repository_error(page)
        expect(error).to_contain_text(f"“{bad}” is not a GitHub repository: write owner/name")
        expect(page.get_by_label("Repository")).to_have_value(bad)
        assert not Backend.objects.exists() and not ConfigVersion.objects.exists()
    assert page.evaluate("document.documentElement.scrollWidth") <= width

    fill_profile(page, config, repository="torch-spyre/torch_spyre.dev")
    expect(page.get_by_role("heading", name="IBM Spyre added")).to_be_visible()
    assert Backend.objects.get().repository == "torch-spyre/torch_spyre.dev"


@pytest.mark.parametrize(("width", "height"), WINDOWS)
def test_a_refused_config_and_token_read_without_server_paths_or_backticks(
    page, transactional_db, tmp_path, width, height
):
    config = tmp_path / "first.yaml"
    config.write_text(CRCR.replace("test_plain_reuse.py", "test_missing.py"))
    make_user("ada", role="admin")
    page.set_viewport_size({"width": width, "height": height})
    sign_in(page, "ada")
    page.get_by_role("link", name="Add backend").click()

    fill_profile(page, config, token="a-pasted-token")

    expect(page.get_by_role("alert").filter(has_text="matches no file")).to_contain_text(
        "(looked for ${TORCH_ROOT}/test/test_missing.py)"
    )
    token = page.get_by_role("alert").filter(has_text="token spec must be")
    expect(token.locator("code").first).to_have_text("oidc")
    text = page.locator("main").inner_text()
    assert "`" not in text
    for path in (settings.CRCR_TORCH_ROOT, settings.VAR_DIR, settings.BASE_DIR):
        assert str(path) not in text
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    page.screenshot(path=f"/tmp/findings-onboarding-{width}.png", full_page=True)
    assert not Backend.objects.exists()
