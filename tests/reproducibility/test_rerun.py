"""Re-running a bundle makes a new run of the same parts, compared test by test.

The web request only records the re-run and sends it to a worker; the worker reads
and verifies the archive, gives the run the bundle's parts and plans it, or ends it
in error with the reason the re-run's page shows.
"""

import pytest
from django.core.files.base import ContentFile
from django.utils import timezone

from reproducibility import bundles, capture, rerun
from reproducibility.models import Bundle, Rerun
from runs.models import Artifact, Run
from tests.factories import make_backend, make_config, make_token, make_user
from tests.reproducibility.builders import (
    MISMATCH,
    PASSING,
    add_result,
    make_artifact,
    make_run,
)
from tests.waiting import wait_for

pytestmark = pytest.mark.django_db

PREPARING = "preparing the re-run from the bundle…"
# One real test of the bundled upstream-style tree, so a re-run plans and runs a shard.
SUM = "test/test_plain_reuse.py::TestPlainMath::test_sum"
ONE_TEST = """test_suite_config:
  files:
    - path: ${TORCH_ROOT}/test/test_plain_reuse.py
      unlisted_test_mode: skip
      tests:
        - names: [TestPlainMath::test_sum]
          mode: mandatory_success
"""


def tamper(bundle: Bundle) -> None:
    """Replace the stored archive by bytes that are not the one crcr built."""
    bundle.file.delete(save=False)
    bundle.file.save(f"{bundle.uuid}.tar.gz", ContentFile(b"not the archive"), save=False)
    Bundle.objects.filter(pk=bundle.pk).update(file=bundle.file.name)


def rerun_url(bundle: Bundle) -> str:
    return f"/runs/{bundle.run.uuid}/reproducibility/bundles/{bundle.uuid}/rerun/"


def bundle_done(run: Run) -> Bundle | None:
    return run.bundles.filter(status__in=(Bundle.Status.READY, Bundle.Status.FAILED)).first()


def test_a_ready_bundle_becomes_a_queued_run_of_the_same_parts(bundle):
    Run.objects.filter(pk=bundle.run.pk).update(changed_since_green=["no green run yet"])
    bundle.run.refresh_from_db()
    made = rerun.start(bundle, user=make_user("rita", role="reviewer"))
    original, new = bundle.run, made.run
    assert made.original == original and made.bundle == bundle
    assert new.status == Run.Status.QUEUED and new.job_name == "acme (re-run)"
    # Its attribution is the original's: a job that never was green says so once red.
    assert new.changed_since_green == ["no green run yet"]
    assert not new.is_primary  # a re-run is not the job's HUD row

    assert rerun.prepare(made.pk) == new  # the worker's part: the bundle checks out
    new.refresh_from_db()
    assert new.status == Run.Status.QUEUED and new.error == ""
    assert (new.pytorch_sha, new.backend_version, new.config_version) == (
        original.pytorch_sha, original.backend_version, original.config_version,
    )  # fmt: skip
    assert set(new.artifacts.all()) == set(original.artifacts.all())


def test_the_worker_gives_the_run_the_parts_the_bundle_names(bundle):
    # The original's row changed after its bundle was built: the bundle is what counts.
    built_with = set(bundle.run.artifacts.all())
    bundle.run.artifacts.set([make_artifact("torch-other", "2" * 64)])
    made = rerun.start(bundle)
    assert set(made.run.artifacts.all()) != built_with
    rerun.prepare(made.pk)
    assert set(Run.objects.get(pk=made.run.pk).artifacts.all()) == built_with


def test_a_tampered_bundle_is_accepted_at_once_then_refused_by_the_worker_on_its_page(
    bundle, client
):
    tamper(bundle)
    client.force_login(make_user("rita", role="reviewer"))
    response = client.post(rerun_url(bundle))
    # The request never opened the archive: it answers with the re-run's page.
    made = Rerun.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/reruns/{made.uuid}/"
    page = client.get(response["Location"]).content.decode()
    assert PREPARING in page and 'hx-trigger="every 2s"' in page

    assert rerun.prepare(made.pk) is None  # what the worker then does
    run = Run.objects.get(pk=made.run.pk)
    assert run.status == Run.Status.ERROR and "fails verification" in run.error
    assert run.finished_at is not None and not run.shards.exists()
    poll = client.get(response["Location"], HTTP_HX_REQUEST="true")
    assert poll.status_code == 286  # the page stops polling
    assert "Cannot re-run this bundle: the bundle fails verification" in poll.content.decode()
    assert PREPARING not in poll.content.decode()


def test_an_artifact_gone_since_the_bundle_ends_the_rerun_in_error(bundle):
    made = rerun.start(bundle)
    Artifact.objects.all().delete()
    assert rerun.prepare(made.pk) is None
    run = Run.objects.get(pk=made.run.pk)
    assert run.status == Run.Status.ERROR
    assert run.error == "Cannot re-run this bundle: artifact(s) torch are no longer registered"


def test_a_run_that_left_the_queue_is_not_prepared_again(bundle):
    made = rerun.start(bundle)
    tamper(bundle)
    # Another worker took it (a redelivered message, or the lost-work sweep).
    Run.objects.filter(pk=made.run.pk).update(status=Run.Status.PLANNING)
    assert rerun.prepare(made.pk) is None
    assert Run.objects.get(pk=made.run.pk).status == Run.Status.PLANNING


def test_a_bundle_not_ready_is_refused_inline_and_nothing_is_created(bundle, client):
    Bundle.objects.filter(pk=bundle.pk).update(status=Bundle.Status.PRUNED)
    bundle.refresh_from_db()
    runs_before = Run.objects.count()
    with pytest.raises(rerun.RerunError, match="pruned"):
        rerun.start(bundle)
    client.force_login(make_user("rita", role="reviewer"))
    response = client.post(rerun_url(bundle), follow=True)
    assert "Cannot re-run this bundle: the bundle is pruned, not ready" in response.content.decode()
    assert response.redirect_chain[-1][0] == f"/runs/{bundle.run.uuid}/reproducibility/"
    assert Run.objects.count() == runs_before and not Rerun.objects.exists()


def test_the_comparison_pairs_each_test_and_flags_what_changed(bundle, client):
    made = rerun.start(bundle)
    new = made.run
    add_result(new, MISMATCH, ["passed"])
    add_result(new, PASSING, ["passed"])
    add_result(new, "test/test_x.py::TestX::test_new", ["skipped"])
    rows = {row.node_id: row for row in rerun.comparison(bundle.run, new)}
    assert not rows[MISMATCH].same
    assert (rows[MISMATCH].before, rows[MISMATCH].before_category) == (
        "failed",
        "numerical_mismatch",
    )
    assert rows[PASSING].same
    assert rows["test/test_x.py::TestX::test_new"].before == "(absent)"
    Run.objects.filter(pk=new.pk).update(status=Run.Status.PASSED, started_at=timezone.now())
    client.force_login(make_user("vera"))
    page = client.get(f"/reruns/{made.uuid}/").content.decode()
    assert "3 test(s), 2 with a different outcome" in page and "<mark>different</mark>" in page
    assert client.get(f"/reruns/{made.uuid}/", HTTP_HX_REQUEST="true").status_code == 286


def test_a_reviewer_reruns_from_the_page_and_a_machine_through_the_api(bundle, client):
    reviewer = make_user("rita", role="reviewer")
    client.force_login(reviewer)
    run = bundle.run
    response = client.post(rerun_url(bundle))
    made = Rerun.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/reruns/{made.uuid}/"
    auth = {"HTTP_AUTHORIZATION": f"Token {make_token(reviewer, run.backend)}"}
    answer = client.post(f"/api/runs/{run.uuid}/bundles/{bundle.uuid}/reruns/", **auth)
    assert answer.status_code == 202 and answer["Location"].endswith(
        "/api/reruns/" + answer.json()["uuid"] + "/"
    )
    detail = client.get(f"/api/reruns/{answer.json()['uuid']}/", **auth).json()
    assert detail["original"] == str(run.uuid) and detail["run_status"] == "queued"
    assert {row["node_id"] for row in detail["comparison"]} == {MISMATCH, PASSING}


@pytest.fixture
def one_test_bundle(settings, tmp_path):
    """A finished run of a config that selects one real test, with its built bundle."""
    settings.MEDIA_ROOT = str(tmp_path / "storage")
    backend = make_backend("tiny")
    # No artifact: a shard checks each one's file against its hash.
    run = make_run(backend, make_config(backend, ONE_TEST), status="failed")
    add_result(run, SUM, ["failed", "failed", "failed"], "numerical_mismatch", "regression")
    capture.record_run_start(run)
    return bundles.build(Bundle.objects.create(run=run).pk)


def test_the_request_answers_and_the_worker_runs_the_rerun_to_its_comparison(
    celery_worker, one_test_bundle, client
):
    client.force_login(make_user("rita", role="reviewer"))
    response = client.post(rerun_url(one_test_bundle))
    made = Rerun.objects.get()
    assert response["Location"] == f"/reruns/{made.uuid}/"
    run = wait_for(
        lambda: Run.objects.filter(pk=made.run.pk, status__in=Run.FINISHED).first(),
        timeout=300,
        what="the re-run to finish on the worker",
    )
    assert run.status == Run.Status.PASSED, [(s.status, s.error) for s in run.shards.all()]
    poll = client.get(response["Location"], HTTP_HX_REQUEST="true")
    assert poll.status_code == 286
    assert "1 test(s), 1 with a different outcome" in poll.content.decode()
    # Its own bundle follows the finished run; wait for it so nothing is left working.
    wait_for(lambda: bundle_done(run), what="the re-run's own bundle")


def test_a_tampered_bundle_refused_by_the_worker_shows_why_on_the_page(
    celery_worker, bundle, client
):
    tamper(bundle)
    client.force_login(make_user("rita", role="reviewer"))
    response = client.post(rerun_url(bundle))
    made = Rerun.objects.get()
    assert response["Location"] == f"/reruns/{made.uuid}/"
    run = wait_for(
        lambda: Run.objects.filter(pk=made.run.pk, status=Run.Status.ERROR).first(),
        what="the worker to refuse the bundle",
    )
    assert "fails verification" in run.error
    assert "fails verification" in client.get(response["Location"]).content.decode()
    wait_for(lambda: bundle_done(run), what="the errored run's own bundle")


def test_without_a_broker_the_page_answers_and_the_work_runs_after_it(
    transactional_db, bundle, client, settings
):
    tamper(bundle)
    # The embedded default: tasks run in-process; what a request asks for runs after
    # its response (crcr_site.lib.enqueue.BackgroundTasksMiddleware).
    settings.CELERY_TASK_ALWAYS_EAGER = True
    client.force_login(make_user("rita", role="reviewer"))
    response = client.post(rerun_url(bundle))
    made = Rerun.objects.get()
    assert response["Location"] == f"/reruns/{made.uuid}/"
    run = wait_for(
        lambda: Run.objects.filter(pk=made.run.pk, status=Run.Status.ERROR).first(),
        what="the background thread to refuse the bundle",
    )
    assert "fails verification" in client.get(response["Location"]).content.decode()
    wait_for(lambda: bundle_done(run), what="the errored run's own bundle")


def test_rerunning_a_bundle_leaves_the_hud_cell_as_it_was_and_says_whether_it_reproduced(
    bundle, client
):
    from tests.runs.test_hud import cells

    client.force_login(make_user("vera"))
    original = bundle.run  # failed, with a regression
    before = cells(client.get("/").content.decode())
    made = rerun.start(bundle)  # as the page's button does: a manual trigger and a run
    during = client.get("/").content.decode()
    Run.objects.filter(pk=made.run.pk).update(status=Run.Status.PASSED, finished_at=timezone.now())
    after = client.get("/").content.decode()
    for html, verdict in ((during, "reproducing"), (after, "not reproduced")):
        (cell,) = cells(html)
        assert (cell["letter"], cell["tone"], cell["href"]) == (
            before[0]["letter"], before[0]["tone"], f"/runs/{original.uuid}/",
        )  # fmt: skip
        assert f"re-run from its bundle (attempt 1): {verdict}" in cell["title"]
        assert f'href="/reruns/{made.uuid}/"' in cell["tip"]
    assert before[0]["letter"] == "X"
    failures_only = cells(client.get("/?failures=on").content.decode())
    assert [cell["href"] for cell in failures_only] == [f"/runs/{original.uuid}/"]
