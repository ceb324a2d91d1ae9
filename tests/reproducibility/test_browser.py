"""The reproducibility page as a person uses it, in headless Chromium."""

import re

import pytest
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


@pytest.mark.parametrize("width", [1440, 1024])
def test_a_requested_bundle_reads_ready_without_a_reload_and_nothing_says_pending(
    held, settings, tmp_path, page, width
):
    """The build task waits on the embedded default's held thread (a session worker would
    build it at once); the test builds it as the worker would."""
    from tests.factories import make_backend, make_config
    from tests.reproducibility.builders import make_artifact, make_run

    settings.MEDIA_ROOT = str(tmp_path / "storage")
    backend = make_backend("acme")
    run = make_run(backend, make_config(backend), status="failed")
    run.artifacts.set([make_artifact()])  # an installed torch, as the demo's: no stored file
    make_user("rita", role="reviewer")
    page.set_viewport_size({"width": width, "height": 900})
    sign_in(page, "rita")
    page.goto(f"/runs/{run.uuid}/reproducibility/")
    expect(page.locator(".bundle-wheels-note")).to_contain_text("can only reference them")
    page.get_by_label(re.compile("wheels", re.I)).check()
    page.get_by_role("button", name="Build a bundle").click()
    section = page.locator("#bundles")
    expect(section).to_contain_text("pending")
    expect(page.locator("body")).to_contain_text("its row below shows when it is ready")

    bundles.build(Bundle.objects.get(run=run).pk)  # the worker builds it meanwhile

    expect(section.get_by_role("link", name="Download")).to_be_visible(timeout=10_000)
    expect(section).to_contain_text("ready")
    # What is inside, said as it is: this run has no stored wheel to include.
    expect(section).to_contain_text("none included: 1 referenced (not stored files)")
    expect(page.locator("body")).not_to_contain_text("pending")
    page.screenshot(path=f"/tmp/hudcells-bundle-{width}.png")
    assert page.evaluate("document.documentElement.scrollWidth") <= width
