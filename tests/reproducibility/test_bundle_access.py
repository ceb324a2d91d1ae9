"""A bundle download reaches nothing but that run's bundle, and only for signed-in users."""

import pytest
from django.core.files.base import ContentFile

from reproducibility.models import Bundle, Rerun
from tests.factories import make_backend, make_config, make_token, make_user
from tests.reproducibility.builders import make_run

pytestmark = pytest.mark.django_db

ARCHIVE = b"\x1f\x8b pretend archive"


@pytest.fixture
def storage(settings, tmp_path):
    settings.MEDIA_ROOT = str(tmp_path / "storage")
    (tmp_path / "secret.txt").write_text("not for you")
    return tmp_path


def ready_bundle(run) -> Bundle:
    bundle = Bundle.objects.create(run=run, status=Bundle.Status.READY, sha256="f" * 64)
    bundle.file.save(f"{bundle.uuid}.tar.gz", ContentFile(ARCHIVE))
    return bundle


@pytest.fixture
def runs(storage):
    backend = make_backend("acme")
    config = make_config(backend)
    mine, other = make_run(backend, config), make_run(backend, config, sha="b" * 40)
    return mine, ready_bundle(mine), other, ready_bundle(other)


def page_url(run, bundle) -> str:
    return f"/runs/{run.uuid}/reproducibility/bundles/{bundle.uuid}/download/"


def api_url(run, bundle) -> str:
    return f"/api/runs/{run.uuid}/bundles/{bundle.uuid}/download/"


def test_a_viewer_downloads_the_bundle_with_its_checksum(client, runs):
    run, bundle, _, _ = runs
    client.force_login(make_user("vera"))
    response = client.get(page_url(run, bundle))
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == ARCHIVE
    assert response["X-Checksum-SHA256"] == "f" * 64
    assert f'filename="crcr-run-{run.uuid}.tar.gz"' in response["Content-Disposition"]


def test_a_machine_downloads_it_with_a_token_and_is_refused_without_one(client, runs):
    run, bundle, _, _ = runs
    assert client.get(api_url(run, bundle)).status_code == 401
    token = make_token(make_user("ci-bot", role=None), run.backend)
    response = client.get(api_url(run, bundle), HTTP_AUTHORIZATION=f"Token {token}")
    assert response.status_code == 200 and b"".join(response.streaming_content) == ARCHIVE


def test_a_stranger_is_sent_to_sign_in(client, runs):
    run, bundle, _, _ = runs
    response = client.get(page_url(run, bundle))
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


def test_another_runs_bundle_is_not_found_through_this_run(client, runs):
    run, _, _, others = runs
    client.force_login(make_user("vera"))
    assert client.get(page_url(run, others)).status_code == 404
    token = make_token(make_user("ci-bot", role=None), run.backend)
    response = client.get(api_url(run, others), HTTP_AUTHORIZATION=f"Token {token}")
    assert response.status_code == 404


@pytest.mark.parametrize(
    "tail",
    [
        "../../../secret.txt/download/",
        "..%2F..%2F..%2Fsecret.txt/download/",
        "%2e%2e/%2e%2e/secret.txt/download/",
        "{bundle}/../../secret.txt",
        "{bundle}/download/../../../../secret.txt",
        "..\\..\\secret.txt/download/",
        "/etc/passwd/download/",
    ],
)
def test_path_traversal_in_the_download_url_is_not_found(client, runs, tail):
    run, bundle, _, _ = runs
    client.force_login(make_user("vera"))
    path = f"/runs/{run.uuid}/reproducibility/bundles/" + tail.format(bundle=bundle.uuid)
    response = client.get(path)
    assert response.status_code == 404
    assert b"not for you" not in response.content


@pytest.mark.parametrize("name", ["bundles/../../secret.txt", "../secret.txt", "/etc/passwd"])
def test_a_stored_name_outside_the_bundle_storage_is_never_served(client, runs, name):
    run, bundle, _, _ = runs
    Bundle.objects.filter(pk=bundle.pk).update(file=name)
    client.force_login(make_user("vera"))
    assert client.get(page_url(run, bundle)).status_code == 404


def test_a_bundle_still_building_is_not_found(client, runs):
    run, bundle, _, _ = runs
    Bundle.objects.filter(pk=bundle.pk).update(status=Bundle.Status.BUILDING)
    client.force_login(make_user("vera"))
    assert client.get(page_url(run, bundle)).status_code == 404


def test_a_viewer_cannot_start_work_and_nothing_changes(client, runs):
    run, bundle, _, _ = runs
    client.force_login(make_user("vera"))
    base = f"/runs/{run.uuid}/reproducibility"
    assert client.post(f"{base}/bundles/", {"include_artifacts": "on"}).status_code == 403
    assert client.post(f"{base}/bundles/{bundle.uuid}/rerun/").status_code == 403
    assert client.post(f"{base}/bisections/").status_code == 403
    token = make_token(make_user("ci-bot", role="viewer"), run.backend)
    auth = {"HTTP_AUTHORIZATION": f"Token {token}"}
    assert client.post(f"/api/runs/{run.uuid}/bundles/", **auth).status_code == 403
    assert client.post(f"/api/runs/{run.uuid}/bisections/", **auth).status_code == 403
    assert run.bundles.count() == 1 and not Rerun.objects.exists()
