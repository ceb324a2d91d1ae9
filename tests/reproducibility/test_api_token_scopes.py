"""The reproducibility API acts only for the token's backends: a token of another backend
gets 403 on each endpoint, reads nothing and starts nothing."""

import pytest
from django.core.files.base import ContentFile

from reproducibility.models import Bisection, Bundle, Rerun
from runs.models import Run
from tests.factories import make_backend, make_config, make_token, make_user
from tests.reproducibility.builders import make_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def theirs(settings, tmp_path) -> tuple[Run, Bundle]:
    """The beta team's red run with a ready bundle, a re-run and a bisection of it."""
    settings.MEDIA_ROOT = str(tmp_path / "storage")
    beta = make_backend("beta")
    config = make_config(beta)
    green = make_run(beta, config, sha="a" * 40)
    red = make_run(beta, config, sha="b" * 40, status="failed")
    bundle = Bundle.objects.create(run=red, status=Bundle.Status.READY, sha256="f" * 64)
    bundle.file.save(f"{bundle.uuid}.tar.gz", ContentFile(b"\x1f\x8b archive"))
    Rerun.objects.create(original=red, run=make_run(beta, config, sha="c" * 40), bundle=bundle)
    Bisection.objects.create(good_run=green, bad_run=red)
    return red, bundle


@pytest.fixture
def acme_reviewer() -> dict[str, str]:
    """A reviewer's token of the acme team: it may start work, for acme only."""
    acme = make_backend("acme")
    return {"HTTP_AUTHORIZATION": f"Token {make_token(make_user('rita', 'reviewer'), acme)}"}


@pytest.mark.parametrize(
    "path",
    [
        "/api/runs/{run}/reproducibility/",
        "/api/runs/{run}/attestation/",
        "/api/runs/{run}/bundles/",
        "/api/runs/{run}/bundles/{bundle}/",
        "/api/runs/{run}/bundles/{bundle}/download/",
        "/api/reruns/{rerun}/",
        "/api/bisections/{bisection}/",
    ],
)
def test_another_backends_records_are_not_read(client, theirs, acme_reviewer, path):
    run, bundle = theirs
    ids = {"rerun": Rerun.objects.get().uuid, "bisection": Bisection.objects.get().uuid}

    response = client.get(path.format(run=run.uuid, bundle=bundle.uuid, **ids), **acme_reviewer)

    assert response.status_code == 403
    assert b"archive" not in b"".join(getattr(response, "streaming_content", [response.content]))


def test_another_backends_run_gets_no_bundle_rerun_or_bisection(client, theirs, acme_reviewer):
    run, bundle = theirs
    base = f"/api/runs/{run.uuid}"

    made = client.post(f"{base}/bundles/", {"include_artifacts": True}, **acme_reviewer)
    rerun = client.post(f"{base}/bundles/{bundle.uuid}/reruns/", **acme_reviewer)
    bisection = client.post(f"{base}/bisections/", **acme_reviewer)

    assert (made.status_code, rerun.status_code, bisection.status_code) == (403, 403, 403)
    assert run.bundles.count() == 1
    assert Rerun.objects.count() == 1 and Bisection.objects.count() == 1


def test_the_backends_own_token_reads_and_starts_work(client, theirs):
    run, bundle = theirs
    beta = {"HTTP_AUTHORIZATION": f"Token {make_token(make_user('bea', 'reviewer'), run.backend)}"}

    assert client.get(f"/api/runs/{run.uuid}/bundles/", **beta).status_code == 200
    made = client.post(f"/api/runs/{run.uuid}/bundles/", {"include_artifacts": True}, **beta)
    assert made.status_code == 202 and run.bundles.count() == 2
