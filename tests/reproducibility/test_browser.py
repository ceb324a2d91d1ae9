"""The reproducibility page as a person uses it, in headless Chromium."""

import re

from playwright.sync_api import expect

from reproducibility import bundles
from reproducibility.models import Bundle
from tests.factories import PASSWORD, make_user


def sign_in(page, username: str) -> None:
    page.goto("/accounts/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()


def test_a_viewer_waits_for_the_bundle_then_downloads_one_that_verifies(
    transactional_db, bundle, page, tmp_path
):
    make_user("vera")
    ready = {"status": bundle.status, "file": bundle.file.name}
    Bundle.objects.filter(pk=bundle.pk).update(status=Bundle.Status.BUILDING, file="")
    sign_in(page, "vera")
    page.goto(f"/runs/{bundle.run.uuid}/reproducibility/")
    expect(page.get_by_role("heading", name=re.compile("Reproducibility of"))).to_be_visible()
    expect(page.locator("#bundles")).to_contain_text("building")
    Bundle.objects.filter(pk=bundle.pk).update(**ready)  # the worker finishes meanwhile
    link = page.get_by_role("link", name="Download")
    expect(link).to_be_visible(timeout=10_000)  # htmx polled the bundle section
    with page.expect_download() as download:
        link.click()
    saved = tmp_path / download.value.suggested_filename
    download.value.save_as(saved)
    assert saved.name == f"crcr-run-{bundle.run.uuid}.tar.gz"
    assert bundles.verify_archive(saved, bundle.sha256) == []
