"""The reproducibility page shows a run's record readably, and its API gives the same facts."""

import pytest
from django.core.files.base import ContentFile

from reproducibility import capture
from reproducibility.models import Bisection, Bundle, WorkerEnvironment
from runs.models import Shard
from tests.factories import make_backend, make_config, make_token, make_user
from tests.reproducibility.builders import (
    MISMATCH,
    PASSING,
    add_result,
    make_artifact,
    make_dispatch,
    make_run,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def run(settings, tmp_path):
    settings.MEDIA_ROOT = str(tmp_path / "storage")
    backend = make_backend("acme")
    config = make_config(backend, "test_suite_config:\n  files: []  # <b>why</b>\n")
    made = make_run(backend, config, status="failed", dispatch=make_dispatch(backend))
    made.artifacts.set([make_artifact()])
    add_result(made, MISMATCH, ["failed"], "numerical_mismatch", "regression")
    add_result(made, PASSING, ["passed"])
    capture.record_run_start(made)
    return made


def environment(run, index: int, host: str, torch: str, only_for: str) -> WorkerEnvironment:
    shard, _ = Shard.objects.get_or_create(run=run, index=index)
    return WorkerEnvironment.objects.create(
        run=run, shard=shard, shard_attempt=1, hostname=host, python_version="3.11.7",
        torch_version=torch, os="Linux", cpu_arch="x86_64",
        env_vars={"PYTORCH_TESTING_DEVICE_ONLY_FOR": only_for},
        pip_freeze=f"Django==5.2\ntorch=={torch}\n",
    )  # fmt: skip


def test_a_viewer_reads_trigger_artifacts_config_plan_and_attempts(client, run):
    client.force_login(make_user("vera"))
    page = client.get(f"/runs/{run.uuid}/reproducibility/").content.decode()
    assert "4242" in page and "closed" in page  # the PR and the action
    # The raw payload is a download, not JSON on the page.
    assert "&quot;delivery_id&quot;" not in page
    assert f"/dispatches/{run.trigger.dispatch.uuid}/payload.json" in page
    assert "1" * 64 in page  # the artifact's full SHA-256
    assert "&lt;b&gt;why&lt;/b&gt;" in page and "<b>why</b>" not in page
    assert MISMATCH in page and "Tensor-likes are not close!" in page
    assert "PYTHONHASHSEED=0" in page
    assert "No bundle yet" in page


def test_environments_that_differ_between_hosts_are_highlighted(client, run):
    environment(run, 0, "gpu-host-a", "2.13.0+cpu", "privateuse1")
    environment(run, 1, "gpu-host-b", "2.13.1+cpu", "privateuse1")
    client.force_login(make_user("vera"))
    page = client.get(f"/runs/{run.uuid}/reproducibility/").content.decode()
    assert "2 different environments on 2 host(s)" in page
    assert "<mark>2.13.0+cpu</mark>" in page and "<mark>2.13.1+cpu</mark>" in page
    assert "<mark>torch==2.13.1+cpu</mark>" in page  # the pip freeze line that differs
    assert "<mark>privateuse1</mark>" not in page and "<mark>3.11.7</mark>" not in page


def test_shards_on_identical_hosts_share_one_column_without_highlights(client, run):
    environment(run, 0, "host-a", "2.13.0+cpu", "privateuse1")
    environment(run, 1, "host-a", "2.13.0+cpu", "privateuse1")
    client.force_login(make_user("vera"))
    page = client.get(f"/runs/{run.uuid}/reproducibility/").content.decode()
    assert "shards 0, 1" in page and "<mark>" not in page


def test_the_attempt_filter_shows_only_that_outcome(client, run):
    client.force_login(make_user("vera"))
    page = client.get(f"/runs/{run.uuid}/reproducibility/?outcome=failed").content.decode()
    assert MISMATCH in page and PASSING not in page
    bad = client.get(f"/runs/{run.uuid}/reproducibility/?outcome=<script>")
    assert bad.status_code == 200 and b"<script>" not in bad.content


def test_the_bundle_section_polls_while_a_bundle_builds_and_stops_when_ready(client, run):
    bundle = Bundle.objects.create(run=run, status=Bundle.Status.BUILDING)
    client.force_login(make_user("vera"))
    url = f"/runs/{run.uuid}/reproducibility/"
    building = client.get(url, HTTP_HX_REQUEST="true")
    assert building.status_code == 200 and b'hx-trigger="every 2s"' in building.content
    bundle.status = Bundle.Status.READY
    bundle.file.save(f"{bundle.uuid}.tar.gz", ContentFile(b"x"))
    ready = client.get(url, HTTP_HX_REQUEST="true")
    assert ready.status_code == 286  # htmx stops polling
    assert f"/bundles/{bundle.uuid}/download/".encode() in ready.content


def test_a_reviewer_asks_for_a_bundle_with_the_wheels(client, run):
    client.force_login(make_user("rita", role="reviewer"))
    response = client.post(
        f"/runs/{run.uuid}/reproducibility/bundles/", {"include_artifacts": "on"}
    )
    assert response.status_code == 302
    assert run.bundles.get().include_artifacts is True


def test_bisecting_a_run_without_a_green_one_says_why_and_creates_nothing(client, run):
    client.force_login(make_user("rita", role="reviewer"))
    response = client.post(f"/runs/{run.uuid}/reproducibility/bisections/", follow=True)
    assert "has no green run before this one" in response.content.decode()
    assert not Bisection.objects.exists()


def test_the_api_gives_the_metadata_the_bundles_and_the_attestation(client, run):
    auth = {
        "HTTP_AUTHORIZATION": f"Token {make_token(make_user('ci-bot', role=None), run.backend)}"
    }
    meta = client.get(f"/api/runs/{run.uuid}/reproducibility/", **auth).json()
    assert meta["recorded"] is True and meta["trigger"]["pr_number"] == 4242
    assert {a["node_id"]: a["outcome"] for a in meta["attempts"]} == {
        MISMATCH: "failed",
        PASSING: "passed",
    }
    statement = client.get(f"/api/runs/{run.uuid}/attestation/", **auth).json()
    assert statement["predicate"]["failedTests"] == [MISMATCH]
    assert client.get(f"/api/runs/{run.uuid}/bundles/", **auth).json() == []
    rita = make_token(make_user("rita", role="reviewer"), run.backend)
    reviewer = {"HTTP_AUTHORIZATION": f"Token {rita}"}
    made = client.post(f"/api/runs/{run.uuid}/bundles/", {"include_artifacts": True}, **reviewer)
    assert made.status_code == 202 and made["Location"].endswith(f"/bundles/{made.json()['uuid']}/")
    assert made.json()["status"] == "pending" and made.json()["download_url"] is None
    assert client.get(f"/api/runs/{run.uuid}/reproducibility/").status_code == 401


def test_the_page_offers_the_attestation_as_a_download(client, run):
    client.force_login(make_user("vera"))
    response = client.get(f"/runs/{run.uuid}/reproducibility/attestation.json")
    assert response.status_code == 200 and "attachment" in response["Content-Disposition"]
    assert response.json()["_type"] == "https://in-toto.io/Statement/v1"


def test_the_openapi_schema_describes_the_reproducibility_api(client):
    token = make_token(make_user("ci-bot", role=None))
    schema = client.get("/api/schema/", HTTP_AUTHORIZATION=f"Token {token}").content.decode()
    for path in ("/api/runs/{uuid}/reproducibility/", "/api/runs/{uuid}/bundles/{bundle_uuid}/download/",
                 "/api/runs/{uuid}/bisections/", "/api/reruns/{uuid}/"):  # fmt: skip
        assert path in schema
    assert "run_bundle_download" in schema
