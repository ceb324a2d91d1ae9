"""Re-running a bundle makes a new run of the same parts, compared test by test."""

import pytest
from django.core.files.base import ContentFile

from reproducibility import rerun
from reproducibility.models import Bundle, Rerun
from runs.models import Run
from tests.factories import make_user
from tests.reproducibility.builders import MISMATCH, PASSING, add_result

pytestmark = pytest.mark.django_db


def test_a_ready_bundle_becomes_a_queued_run_of_the_same_parts(bundle):
    made = rerun.start(bundle, user=make_user("rita", role="reviewer"))
    original, new = bundle.run, made.run
    assert made.original == original and made.bundle == bundle
    assert new.status == Run.Status.QUEUED and new.job_name == "acme (re-run)"
    assert (new.pytorch_sha, new.backend_version, new.config_version) == (
        original.pytorch_sha, original.backend_version, original.config_version,
    )  # fmt: skip
    assert set(new.artifacts.all()) == set(original.artifacts.all())
    assert not new.is_primary  # a re-run is not the job's HUD row


def test_a_tampered_bundle_is_not_rerun_and_nothing_is_created(bundle):
    bundle.file.delete(save=False)
    bundle.file.save(f"{bundle.uuid}.tar.gz", ContentFile(b"not the archive"), save=False)
    Bundle.objects.filter(pk=bundle.pk).update(file=bundle.file.name)
    runs_before = Run.objects.count()
    with pytest.raises(rerun.RerunError, match="fails verification"):
        rerun.start(bundle)
    assert Run.objects.count() == runs_before and not Rerun.objects.exists()


def test_a_bundle_not_ready_is_refused(bundle):
    Bundle.objects.filter(pk=bundle.pk).update(status=Bundle.Status.PRUNED)
    bundle.refresh_from_db()
    with pytest.raises(rerun.RerunError, match="pruned"):
        rerun.start(bundle)


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
    Run.objects.filter(pk=new.pk).update(status=Run.Status.PASSED)
    client.force_login(make_user("vera"))
    page = client.get(f"/reruns/{made.uuid}/").content.decode()
    assert "3 test(s), 2 with a different outcome" in page and "<mark>different</mark>" in page
    assert client.get(f"/reruns/{made.uuid}/", HTTP_HX_REQUEST="true").status_code == 286


def test_a_reviewer_reruns_from_the_page_and_a_machine_through_the_api(bundle, client):
    from tests.factories import make_token

    reviewer = make_user("rita", role="reviewer")
    client.force_login(reviewer)
    run = bundle.run
    response = client.post(f"/runs/{run.uuid}/reproducibility/bundles/{bundle.uuid}/rerun/")
    made = Rerun.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/reruns/{made.uuid}/"
    auth = {"HTTP_AUTHORIZATION": f"Token {make_token(reviewer)}"}
    answer = client.post(f"/api/runs/{run.uuid}/bundles/{bundle.uuid}/reruns/", **auth)
    assert answer.status_code == 202 and answer["Location"].endswith(
        "/api/reruns/" + answer.json()["uuid"] + "/"
    )
    detail = client.get(f"/api/reruns/{answer.json()['uuid']}/", **auth).json()
    assert detail["original"] == str(run.uuid) and detail["run_status"] == "queued"
    assert {row["node_id"] for row in detail["comparison"]} == {MISMATCH, PASSING}
