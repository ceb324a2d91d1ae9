"""Re-running a bundle as a reviewer does it, in headless Chromium, with the real worker."""

import re

from django.core.files.base import ContentFile
from playwright.sync_api import expect

from reproducibility.models import Bundle, Rerun
from runs.models import Run
from tests.factories import PASSWORD, make_user
from tests.waiting import wait_for


def test_a_reviewer_clicks_rerun_and_the_page_shows_what_the_worker_found(
    celery_worker, bundle, page
):
    # An archive that is not the one crcr built: only the worker, reading it, finds out.
    bundle.file.delete(save=False)
    bundle.file.save(f"{bundle.uuid}.tar.gz", ContentFile(b"not the archive"), save=False)
    Bundle.objects.filter(pk=bundle.pk).update(file=bundle.file.name)
    make_user("rita", role="reviewer")
    page.goto("/accounts/login/")
    page.get_by_label("Username").fill("rita")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.goto(f"/runs/{bundle.run.uuid}/reproducibility/")

    page.get_by_role("button", name="Re-run this bundle").click()

    expect(page.get_by_role("heading", name=re.compile("Re-run of"))).to_be_visible()
    made = Rerun.objects.get()
    assert page.url.endswith(f"/reruns/{made.uuid}/")
    # Preparing, then (htmx polls the section) the worker's verdict, without a reload.
    expect(page.locator("#comparison .error")).to_contain_text(
        "Cannot re-run this bundle: the bundle fails verification", timeout=30_000
    )
    expect(page.locator("#comparison")).to_contain_text("infrastructure error")
    run = Run.objects.get(pk=made.run.pk)
    assert run.status == Run.Status.ERROR
    # The errored run's own bundle follows; let it finish before the database is reset.
    wait_for(lambda: run.bundles.exclude(status__in=("pending", "building")).exists())
