"""Long work never holds a request, on the embedded default too (no broker).

Each of the six actions that start long work (build a bundle, re-run a bundle,
bisect, enable an operator, start a run, add a backend from a large config file) records its row, answers at once and
lands on a page that polls the work's live status; the work runs afterwards on
the web process's background thread (`crcr_site.lib.enqueue`). To know that the
answer came first, each test holds that thread with work queued before the
request, so nothing the request asked for can have run when it answers; once
released, the real work runs to its end and the page stops polling.
"""

import re

import pytest
from django.urls import reverse
from playwright.sync_api import expect

from demo.localgit import PyTorchShapedRepo
from reproducibility import bundles, capture
from reproducibility.models import Bisection, Bundle, Rerun
from runs.models import Backend, Run
from selection.models import ConfigSubmission, OpUsage, SelectionRun
from tests.factories import make_backend, make_config, make_user
from tests.reproducibility.builders import MISMATCH, PASSING, add_result, make_run
from tests.reproducibility.test_rerun import tamper
from tests.selection.test_onboarding import FORM, upload
from tests.selection.test_onboarding_large import BROKEN, LARGE
from tests.selection.test_review_browser import sign_in
from tests.waiting import wait_for

POLLS = 'hx-trigger="every 2s"'


@pytest.fixture
def reviewer(client):
    client.force_login(make_user("rita", role="reviewer"))
    return client


def finished_run(status: str = "failed", sha: str = "b" * 40) -> Run:
    backend = make_backend("acme")
    run = make_run(backend, make_config(backend), sha=sha, status=status)
    add_result(run, MISMATCH, ["failed"], "numerical_mismatch", "regression")
    add_result(run, PASSING, ["passed"])
    capture.record_run_start(run)
    return run


def polled(client, url: str):
    """The page's live part, as htmx asks for it every 2 s."""
    return client.get(url, HTTP_HX_REQUEST="true")


def test_building_a_bundle_answers_before_the_build_and_the_page_follows_it(held, reviewer):
    run = finished_run()

    response = reviewer.post(reverse("reproducibility:bundle_create", args=[run.uuid]))

    bundle = run.bundles.get()
    assert response.status_code == 302 and bundle.status == Bundle.Status.PENDING
    page = reviewer.get(response["Location"]).content.decode()
    assert 'status-pending">pending</span></td>' in page and POLLS in page
    held.set()
    wait_for(lambda: run.bundles.filter(status=Bundle.Status.READY).exists(), what="the bundle")
    done = polled(reviewer, response["Location"])
    assert done.status_code == 286 and "Download" in done.content.decode()


def test_rerunning_a_bundle_answers_before_the_worker_checks_it(held, reviewer):
    run = finished_run()
    bundle = bundles.build(Bundle.objects.create(run=run).pk)
    tamper(bundle)  # the check then ends the re-run at once, with no test to run

    response = reviewer.post(reverse("reproducibility:rerun_create", args=[run.uuid, bundle.uuid]))

    made = Rerun.objects.get()
    assert response["Location"] == reverse("reproducibility:rerun_detail", args=[made.uuid])
    assert made.run.status == Run.Status.QUEUED
    page = reviewer.get(response["Location"]).content.decode()
    assert "preparing the re-run from the bundle…" in page and POLLS in page
    held.set()
    wait_for(lambda: Run.objects.filter(pk=made.run.pk, status="error").exists(), what="it")
    done = polled(reviewer, response["Location"])
    assert done.status_code == 286 and "fails verification" in done.content.decode()


def test_a_bisection_answers_before_it_lists_a_commit(held, reviewer, settings, tmp_path):
    # An upstream that knows neither run's commit: the bisection stops at its first step.
    settings.CRCR_UPSTREAM = f"git:{PyTorchShapedRepo(tmp_path / 'pytorch').path}"
    red = finished_run()
    green = make_run(red.backend, red.config_version, sha="a" * 40, status="passed")
    Run.objects.filter(pk=green.pk).update(created_at=red.created_at.replace(year=2020))

    response = reviewer.post(reverse("reproducibility:bisection_create", args=[red.uuid]))

    bisection = Bisection.objects.get()
    assert bisection.status == Bisection.Status.QUEUED and not bisection.commits
    page = reviewer.get(response["Location"]).content.decode()
    assert (
        'Status: <span class="badge badge-amber status-queued">queued</span>' in page
        and POLLS in page
    )
    held.set()
    wait_for(lambda: Bisection.objects.filter(status="stopped").exists(), what="the bisection")
    done = polled(reviewer, response["Location"])
    assert done.status_code == 286
    assert "the upstream resolver could not list the commits" in done.content.decode()


def test_enabling_an_operator_answers_before_the_device_is_probed(held, reviewer):
    make_backend("acme")

    response = reviewer.post(
        reverse("selection:operator_enable"), {"backend": "acme", "op": "lgamma"}
    )

    run = SelectionRun.objects.get()
    # Back on the operators page, at the operator's row, which follows its run.
    assert (
        response["Location"]
        == f"{reverse('selection:operator_list')}?q=lgamma&backend=acme#op-lgamma"
    )
    assert run.status == SelectionRun.Status.QUEUED
    run_page = reverse("selection:selectionrun_detail", args=[run.uuid])
    page = reviewer.get(run_page).content.decode()
    assert '<span class="badge badge-amber status-queued">queued</span>' in page and POLLS in page
    held.set()
    wait_for(lambda: SelectionRun.objects.get(pk=run.pk).is_finished, what="the selection run")
    done = polled(reviewer, run_page)
    ended = SelectionRun.objects.get(pk=run.pk)
    assert done.status_code == 286
    assert f'status-{ended.status}">{ended.get_status_display()}</span>' in done.text


def test_starting_a_run_answers_before_it_is_planned_and_the_list_follows_it(
    held, reviewer, settings
):
    settings.CRCR_BUILD_COMMAND = 'echo "no compiler on this host"; exit 3'
    backend = make_backend("acme")
    make_config(backend)

    response = reviewer.post(
        reverse("runs:trigger_create"), {"backend": "acme", "kind": "manual", "target": "b" * 40}
    )

    run = Run.objects.get()
    assert response["Location"] == reverse("runs:run_list")
    assert run.status == Run.Status.QUEUED
    page = reviewer.get(response["Location"]).content.decode()
    assert "Started 1 run(s)" in page and "queued" in page and POLLS in page
    held.set()
    wait_for(lambda: Run.objects.filter(pk=run.pk, status="error").exists(), what="the run")
    done = polled(reviewer, response["Location"])
    assert done.status_code == 286 and "infrastructure error" in done.content.decode()


@pytest.mark.parametrize("width", [1440, 1024])
def test_a_reviewer_enables_an_operator_and_its_page_follows_it_without_a_reload(page, held, width):
    make_config(make_backend("acme"), "test_suite_config:\n  files: []\n")
    OpUsage.objects.create(
        file_path="test/test_ops.py", class_name="TestOps", test_name="t", op="lgamma.default"
    )
    make_user("rita", role="reviewer")
    page.set_viewport_size({"width": width, "height": 800})
    sign_in(page, "rita")
    page.goto(reverse("selection:operator_list"))

    page.get_by_role("button", name="Enable lgamma").click()

    row = page.locator("#op-lgamma")
    status = row.get_by_role("status")
    expect(status).to_contain_text("enabling: queued")  # answered while the work waits
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    page.evaluate("window.notReloaded = true")  # a reload would drop this mark
    held.set()
    expect(status).to_contain_text(
        re.compile("enabled on the device|enabling failed"), timeout=60_000
    )
    expect(row).not_to_have_attribute("hx-trigger", "every 2s")
    assert page.evaluate("window.notReloaded") is True


def test_adding_a_backend_from_a_large_file_answers_before_the_check(held, client):
    client.force_login(make_user("ada", role="admin"))

    response = client.post(
        reverse("selection:backend_create"),
        FORM | {"config": upload(LARGE), "config_format": "crcr"},
    )

    submission = ConfigSubmission.objects.get()
    assert response["Location"] == reverse(
        "selection:configsubmission_detail", args=[submission.uuid]
    )
    assert submission.status == ConfigSubmission.Status.QUEUED and not Backend.objects.exists()
    page = client.get(response["Location"]).content.decode()
    assert (
        '<span class="badge badge-amber status-queued">waiting for a worker</span>' in page
        and POLLS in page
    )
    held.set()
    wait_for(lambda: Backend.objects.filter(slug="spyre").exists(), what="the check")
    # The outcome is a page of its own (the new backend, or the form with the problems):
    # the poll that sees the check ended has htmx load it.
    assert polled(client, response["Location"])["HX-Refresh"] == "true"
    done = client.get(response["Location"]).content.decode()
    assert "Backend <code>spyre</code> created with config v1" in done


@pytest.mark.parametrize("width", [1440, 1024])
def test_an_admin_uploads_a_large_broken_file_and_its_page_follows_the_check(
    page, held, width, tmp_path
):
    make_user("ada", role="admin")
    page.set_viewport_size({"width": width, "height": 800})
    sign_in(page, "ada")
    page.goto(reverse("selection:backend_create"))
    for label, value in [("Slug", "spyre"), ("Repository", "torch-spyre/torch-spyre"),
                         ("Device module", "torch_spyre")]:  # fmt: skip
        page.get_by_label(label).fill(value)
    page.get_by_label("Name", exact=True).fill("IBM Spyre")
    large = tmp_path / "large.yaml"
    large.write_text(BROKEN)
    page.get_by_label("First config file").set_input_files(str(large))

    page.get_by_role("button", name="Add the backend").click()

    expect(page.locator("#status .badge")).to_have_text("waiting for a worker")
    expect(page.locator("#status progress")).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    if width == 1024:
        page.screenshot(path=str(tmp_path.parent / "large-config-check-1024.png"), full_page=True)
    held.set()
    error = page.get_by_role("alert").filter(has_text="test_missing.py' matches no file")
    expect(error).to_be_visible(timeout=120_000)
    assert page.get_by_label("Slug").input_value() == "spyre"
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    if width == 1024:
        page.screenshot(path=str(tmp_path.parent / "large-config-refused-1024.png"), full_page=True)
    assert not Backend.objects.exists()
