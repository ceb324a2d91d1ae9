"""Polish people notice: every control labelled, no page wider than the window, no blank
405, the same test counts on a run's pages, no finished selection run "running"."""

import pytest
from django.urls import reverse

from reproducibility import capture
from selection.models import SelectionRun
from tests.crcr_site.hostile import build
from tests.factories import make_backend, make_config, make_user
from tests.reproducibility.builders import MISMATCH, PASSING, add_result, make_run
from tests.selection.test_review_browser import sign_in

pytestmark = pytest.mark.django_db

# The controls on a page that no label, aria-label or aria-labelledby names.
UNNAMED = """() => [...document.querySelectorAll("input, select, textarea")]
  .filter((el) => !["hidden", "submit", "button", "reset", "image"].includes(el.type))
  .filter((el) => ![...(el.labels || [])].some((label) => label.textContent.trim()))
  .filter((el) => !(el.getAttribute("aria-label") || "").trim())
  .filter((el) => !(el.getAttribute("aria-labelledby") || "").trim())
  .map((el) => el.outerHTML.slice(0, 160))"""

MAIN_PAGES = [
    "hud", "run list", "run detail", "reproducibility record", "dispatch list", "review queue",
    "proposal detail", "config PR list", "config PR detail", "backend config", "operators",
    "selection run", "bisection",
]  # fmt: skip


@pytest.mark.parametrize("width", [1440, 1024])
def test_every_control_of_the_main_pages_is_named_and_no_page_overflows(
    page, transactional_db, width
):
    pages = {shown.name: shown for shown in build()}
    make_user("rita", role="reviewer")  # a reviewer sees every action's control
    page.set_viewport_size({"width": width, "height": 800})
    sign_in(page, "rita")

    for name in MAIN_PAGES:
        page.goto(pages[name].url)
        assert page.evaluate(UNNAMED) == [], f"{name} has an unlabelled control"
        assert page.evaluate("document.documentElement.scrollWidth") <= width, name


def test_opening_a_config_pr_by_its_address_says_where_it_is_opened(client):
    client.force_login(make_user("rita", role="reviewer"))

    response = client.get(reverse("selection:configchange_create"), follow=True)

    assert response.redirect_chain == [(reverse("selection:proposal_list"), 302)]
    assert "A config PR is opened from the review queue" in response.text


def test_the_reproducibility_page_labels_its_controls_and_counts_tests_as_the_run_page(
    client, settings, tmp_path
):
    settings.MEDIA_ROOT = str(tmp_path / "storage")
    backend = make_backend("acme")
    run = make_run(backend, make_config(backend), status="failed")
    add_result(run, MISMATCH, ["failed", "failed", "failed"], "numerical_mismatch", "regression")
    add_result(run, PASSING, ["passed"])
    capture.record_run_start(run)
    client.force_login(make_user("rita", role="reviewer"))

    record = client.get(reverse("reproducibility:record_detail", args=[run.uuid])).text
    detail = client.get(reverse("runs:run_detail", args=[run.uuid])).text

    # Two tests, one of them tried three times: both pages count 1 passed, 1 failed of 2.
    assert "1 passed, 1 failed, 0 skipped of 2" in detail
    assert "1 passed, 1 failed, 0 skipped of 2" in record
    assert "Attempts, every try counted (retries too): failed 3 · passed 1" in record
    assert '<label for="id_outcome">Attempts with outcome</label>' in record
    # The checkbox comes right before its own text, inside its label.
    assert '<label class="check"><input type="checkbox" name="include_artifacts"' in record


@pytest.mark.parametrize(
    ("status", "error", "shown", "hidden"),
    [
        ("running", "", "· stage 4: running the proposed tests", "stopped during"),
        ("done", "", '<span class="badge badge-green status-done">done</span></p>', "stage 4"),
        ("failed", "device lost", "stopped during stage 4: running the proposed tests", "· stage"),
    ],
)
def test_a_selection_runs_stage_reads_running_only_while_it_runs(
    client, status, error, shown, hidden
):
    run = SelectionRun.objects.create(
        backend=make_backend(), kind="select", status=status, error=error,
        stage="stage 4: running the proposed tests on the device", done=12, total=12,
    )  # fmt: skip
    client.force_login(make_user("vera"))

    html = client.get(reverse("selection:selectionrun_detail", args=[run.uuid])).text

    assert shown in html and hidden not in html
