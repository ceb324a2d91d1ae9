"""Release, manual and nightly triggers, combinations and the dispatch pages."""

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from runs import artifacts, gate, planning, triggers
from runs.models import Artifact, Dispatch, Run, Trigger
from tests.dispatches import pr_dispatch
from tests.factories import make_backend, make_config, make_token, make_user

pytestmark = pytest.mark.django_db


def test_a_reviewer_starts_a_release_run_from_the_page(client, backend, upstream):
    client.force_login(make_user("rita", role="reviewer"))
    response = client.post(
        reverse("runs:trigger_create"),
        {"backend": "acme", "kind": "release", "target": "release/2.14"},
    )
    assert response.status_code == 302
    run = Run.objects.get()
    assert run.trigger.kind == "release" and run.pytorch_sha == upstream.head("release/2.14")
    assert run.trigger.requested_by.username == "rita"


def test_a_viewer_cannot_start_a_run(client, backend, upstream):
    client.force_login(make_user("vera", role="viewer"))
    response = client.post(
        reverse("runs:trigger_create"), {"backend": "acme", "kind": "manual", "target": "a" * 40}
    )
    assert response.status_code == 403
    assert not Trigger.objects.exists()


@pytest.mark.parametrize(
    ("kind", "target", "message"),
    [
        ("release", "main", "is not a release branch"),
        ("release", "release/9.9", "does not exist"),
        ("manual", "HEAD~1", "is not a 40-hex commit SHA"),
    ],
)
def test_a_bad_trigger_is_refused_with_the_reason(client, backend, upstream, kind, target, message):
    client.force_login(make_user("rita", role="reviewer"))
    response = client.post(
        reverse("runs:trigger_create"), {"backend": "acme", "kind": kind, "target": target}
    )
    assert response.status_code == 200
    assert message in response.content.decode()
    assert not Trigger.objects.exists()


def test_the_nightly_command_builds_the_nightly_source_once(backend, upstream, capsys):
    source = upstream.head("main")
    upstream.nightly(source)
    call_command("trigger", backend="acme", nightly=True)
    call_command("trigger", backend="acme", nightly=True)
    trigger = Trigger.objects.get()
    assert trigger.kind == "nightly" and trigger.pytorch_sha == source
    assert source in capsys.readouterr().out


def test_the_nightly_command_fails_clearly_without_a_source_sha(backend, upstream):
    upstream.nightly(None)
    with pytest.raises(CommandError, match="names no source commit"):
        call_command("trigger", backend="acme", nightly=True)
    assert not Trigger.objects.exists()


def test_extra_backend_versions_make_one_run_and_job_each(backend, upstream):
    backend.version, backend.extra_versions = "2.0", ["1.9", "1.8"]
    backend.save()
    trigger = triggers.start_manual(backend, "b" * 40)
    jobs = sorted(trigger.runs.values_list("job_name", "backend_version", "is_primary"))
    assert jobs == [
        ("acme", "2.0", True),
        ("acme (backend 1.8)", "1.8", False),
        ("acme (backend 1.9)", "1.9", False),
    ]


def test_a_run_records_what_changed_since_the_jobs_last_green_run(backend, upstream):
    first = triggers.start_manual(backend, "b" * 40).runs.get()
    assert first.changed_since_green == ["no green run yet"]
    Run.objects.filter(pk=first.pk).update(status=Run.Status.PASSED)
    second = triggers.start_manual(backend, "c" * 40).runs.get()
    assert second.changed_since_green == ["PyTorch"]
    make_config(backend, "test_suite_config:\n  files: []\n  labels: [trunk]\n")
    third = triggers.start_manual(backend, "d" * 40).runs.get()
    assert third.changed_since_green == ["PyTorch", "config"]


def test_artifacts_are_registered_once_and_verified_by_hash(backend, upstream, tmp_path):
    one = triggers.start_manual(backend, "b" * 40).runs.get()
    two = triggers.start_manual(backend, "c" * 40).runs.get()
    assert not one.artifacts.exists()  # registered when the run is planned, on a worker
    planning.prepare_artifacts(one)
    planning.prepare_artifacts(two)
    assert set(one.artifacts.all()) == set(two.artifacts.all())
    assert Artifact.objects.count() == 2
    for artifact in one.artifacts.all():
        artifacts.verify(artifact)
    tampered = Artifact.objects.get(kind="backend")
    tampered.sha256 = "0" * 64
    with pytest.raises(artifacts.ArtifactError, match="does not match its hash"):
        artifacts.verify(tampered)


def test_a_build_command_produces_stored_wheels(backend, upstream, settings, tmp_path):
    settings.CRCR_BUILD_COMMAND = (
        'printf "wheel for %s" "$CRCR_PYTORCH_SHA" '
        '> "$CRCR_OUTPUT_DIR/torch-2.13.0a0-cp311-cp311-linux_x86_64.whl"'
    )
    settings.MEDIA_ROOT = str(tmp_path / "storage")
    run = triggers.start_manual(backend, "b" * 40).runs.get()
    planning.prepare_artifacts(run)
    wheel = run.artifacts.get()
    assert wheel.kind == "pytorch" and wheel.version == "2.13.0a0"
    assert wheel.file.read() == b"wheel for " + b"b" * 40
    artifacts.verify(wheel)


def test_the_dispatch_page_shows_the_verdict_reason_and_the_raw_payload(client, backend, upstream):
    body = pr_dispatch(action="opened", labels=("<script>alert(1)</script>",))
    import json

    from runs import dispatch as intake

    raw = json.dumps(body).encode()
    received = intake.receive(backend, body, raw, Dispatch.Source.CRCR)
    gate.gate(received.dispatch.pk)
    client.force_login(make_user("vera"))
    page = client.get(
        reverse("runs:dispatch_detail", args=[received.dispatch.uuid])
    ).content.decode()
    assert "was opened: only merged PRs are built" in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script>alert(1)" not in page
    listing = client.get(reverse("runs:dispatch_list")).content.decode()
    assert "recorded, not built" in listing


def test_a_merged_pr_for_a_backend_without_a_config_is_recorded_saying_so(client, upstream):
    machine_token = make_token(make_user("relay-forwarder", role="machine"), make_backend("bare"))
    response = client.post(
        "/api/dispatches/?backend=bare",
        data=pr_dispatch(),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Token {machine_token}",
    )
    assert response.status_code == 202

    dispatch = gate.gate(Dispatch.objects.get().pk)

    assert dispatch.verdict == Dispatch.Verdict.RECORDED
    assert "not built: backend 'bare' has no config version yet" in dispatch.verdict_reason
    assert not Trigger.objects.exists() and not Run.objects.exists()
