"""Onboarding with a config file too large to check inside the request: the page stores it,
answers at once and follows the check a worker runs, then shows the backend or the problems
next to their fields. Small files keep their immediate answer (test_onboarding.py)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from runs.models import Backend
from selection import tasks as selection_tasks
from selection.models import ConfigSubmission, ConfigVersion
from tests.engine.test_spyre_import import SPYRE
from tests.factories import make_user
from tests.selection.test_onboarding import CRCR, FORM, upload
from tests.waiting import wait_for

FILES = (
    "test_plain_reuse.py",
    "test_ops_reuse.py",
    "test_dtypes_reuse.py",
    "test_modules_reuse.py",
)


def large_config(size: int = 1_200_000) -> str:
    """A legitimate crcr config of about `size` bytes: thousands of test entries over the
    bundled tree's files (over CRCR_CONFIG_BACKGROUND_BYTES' default, 1 MiB)."""
    per_file = size // (len(FILES) * 110) + 1
    text = "test_suite_config:\n  files:\n"
    for number, name in enumerate(FILES):
        text += f"    - path: ${{TORCH_ROOT}}/test/{name}\n      unlisted_test_mode: skip\n"
        text += "      tests:\n"
        text += "".join(
            f"        - names: [TestLarge{number}::test_generated_case_{index}]\n"
            f"          mode: skip\n"
            f"          description: generated entry {index} of a large config\n"
            for index in range(per_file)
        )
    return text


LARGE = large_config()
# The same file with one more entry, on a path the tree lacks: a mistake deep in it.
BROKEN = LARGE + "    - path: ${TORCH_ROOT}/test/test_missing.py\n      tests: []\n"
BROKEN_LINE = LARGE.count("\n") + 1


def submit(client, text: str):
    return client.post("/backends/new/", FORM | {"config": upload(text), "config_format": "crcr"})


@pytest.fixture
def admin(client, db):
    client.force_login(make_user("ada", role="admin"))
    return client


def test_a_large_file_is_stored_and_its_page_shows_the_check_waiting(admin, settings):
    assert len(LARGE.encode()) > settings.CRCR_CONFIG_BACKGROUND_BYTES
    answer = submit(admin, LARGE)

    # Answered without checking the file: its check waits for a worker (this test has none).
    submission = ConfigSubmission.objects.get()
    assert answer.status_code == 302
    assert answer["Location"] == f"/config-work/{submission.uuid}/"
    assert (submission.status, submission.text, submission.name) == ("queued", LARGE, "first.yaml")
    assert not Backend.objects.exists() and not ConfigVersion.objects.exists()
    page = admin.get(answer["Location"]).content.decode()
    assert "checking <code>first.yaml</code>" in page
    assert (
        'Status: <span class="badge badge-amber status-queued">waiting for a worker</span>' in page
    )
    assert "<progress" in page and 'hx-trigger="every 2s"' in page
    # Polled by htmx: the status section alone.
    polled = admin.get(answer["Location"], headers={"HX-Request": "true"}).content.decode()
    assert polled.lstrip().startswith('<section id="status"') and "<h1>" not in polled


def test_a_small_file_is_still_checked_and_saved_in_the_request(admin):
    answer = submit(admin, CRCR)
    assert answer.status_code == 201
    assert "Backend <code>spyre</code> created with config v1" in answer.content.decode()
    assert not ConfigSubmission.objects.exists()


def test_a_large_valid_file_is_checked_on_the_worker_and_the_backend_added(celery_worker, client):
    client.force_login(make_user("ada", role="admin"))
    answer = submit(client, LARGE)
    assert answer.status_code == 302
    submission = wait_for(
        lambda: ConfigSubmission.objects.filter(status="accepted").first(),
        what="the worker to accept the large config",
    )
    version = ConfigVersion.objects.get(backend__slug="spyre")
    assert version.yaml_text == LARGE and version.created_by.username == "ada"
    assert submission.result == version and submission.text == ""
    assert (submission.stage, submission.total) == ("saving the backend and config v1", 3)
    # The polling section asks for the whole page again, which is now the outcome's.
    polled = client.get(answer["Location"], headers={"HX-Request": "true"})
    assert polled["HX-Refresh"] == "true"
    page = client.get(answer["Location"]).content.decode()
    assert "Backend <code>spyre</code> created with config v1: first config: first.yaml" in page
    assert 'href="/configs/spyre/"' in page


def test_a_large_invalid_file_ends_with_the_problem_next_to_the_file_and_nothing_saved(
    celery_worker, client
):
    client.force_login(make_user("ada", role="admin"))
    answer = submit(client, BROKEN)
    submission = wait_for(
        lambda: ConfigSubmission.objects.filter(status="refused").first(),
        what="the worker to refuse the large config",
    )
    assert not Backend.objects.exists() and not ConfigVersion.objects.exists()
    assert submission.text == "" and submission.result is None
    page = client.get(answer["Location"]).content.decode()
    # The form again, as it was sent, the loader's problem under the file's field.
    field = page.split("First config file", 1)[1]
    assert f"first.yaml:{BROKEN_LINE}:13: path &#x27;${{TORCH_ROOT}}/test/test_missing.py" in field
    assert field.index("matches no file") < field.index("Config format")
    assert 'value="spyre"' in page and 'value="IBM Spyre"' in page
    assert 'action="/backends/new/"' in page


SILENT = {"status": "running", "heartbeat_at": timezone.now() - timedelta(hours=1)}


def left_by_a_dead_worker(user, claims: int) -> ConfigSubmission:
    """A submission as a SIGKILLed worker leaves it: claimed, its heartbeat silent."""
    return ConfigSubmission.objects.create(
        kind="onboard", text=LARGE, name="first.yaml", config_format="crcr",
        form_data=dict(FORM), requested_by=user, claims=claims, **SILENT,
    )  # fmt: skip


def test_a_check_whose_worker_died_is_sent_again_and_ends(celery_worker, client):
    stuck = left_by_a_dead_worker(make_user("ada", role="admin"), claims=1)

    assert selection_tasks.resend_lost_work()["submissions"] == [stuck.pk]

    done = wait_for(
        lambda: ConfigSubmission.objects.filter(pk=stuck.pk, status="accepted").first(),
        what="the worker that took the check over to accept it",
    )
    assert done.claims == 2 and done.last_failure.startswith("its worker stopped answering")
    assert ConfigVersion.objects.get(backend__slug="spyre").yaml_text == LARGE


def test_a_check_whose_attempts_ran_out_is_refused_saying_why(admin, settings):
    settings.CRCR_CLAIM_ATTEMPTS = 2
    stuck = left_by_a_dead_worker(make_user("root", role="admin"), claims=2)

    assert selection_tasks.resend_lost_work()["submissions"] == []

    page = admin.get(f"/config-work/{stuck.uuid}/").content.decode()
    field = page.split("First config file", 1)[1]
    assert "the check of this file stopped (gave up after 2 attempts: its worker stopped" in field
    assert "nothing was saved: submit it again" in field
    assert not Backend.objects.exists()


def test_a_spyre_file_past_the_threshold_is_imported_on_the_worker_with_its_report(
    celery_worker, client, settings
):
    settings.CRCR_CONFIG_BACKGROUND_BYTES = len(SPYRE) // 2  # the sample, read as large
    client.force_login(make_user("ada", role="admin"))
    answer = client.post(
        "/backends/new/", FORM | {"config": upload(SPYRE), "config_format": "spyre"}
    )
    assert answer.status_code == 302
    submission = wait_for(
        lambda: ConfigSubmission.objects.filter(status="accepted").first(),
        what="the worker to import the Spyre config",
    )
    assert submission.total == 4  # profile, import, validation, saving
    version = ConfigVersion.objects.get(backend__slug="spyre")
    assert "unlisted_test_mode: xfail" in version.yaml_text
    page = client.get(answer["Location"]).content.decode()
    assert "imported from Torch Spyre&#x27;s first.yaml" in page
    assert "What the importer did" in page and "edits.ops.include" in page
