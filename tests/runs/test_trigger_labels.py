"""A run started with labels runs only the tests they select: the trigger keeps the
selection and every pytest process of its runs gets it (`--reuse-labels`)."""

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from runs import planning
from runs.models import Run, Trigger
from tests.factories import make_user


def test_a_manual_run_with_labels_passes_them_to_its_pytest_processes(
    client, backend, settings, tmp_path
):
    settings.CRCR_WORK_DIR = str(tmp_path / "work")
    client.force_login(make_user("rita", role="reviewer"))
    started = client.post(
        reverse("runs:trigger_create"),
        {
            "backend": "acme",
            "kind": "manual",
            "target": "b" * 40,
            "labels": "smoke, suite_inductor",
        },
    )
    assert started.status_code == 302
    run = Run.objects.select_related("trigger").get()
    assert run.trigger.labels == "smoke,suite_inductor"
    command = planning.pytest_for(run, tmp_path / "tree").argv()
    assert "--reuse-labels=smoke,suite_inductor" in command


def test_a_run_without_labels_runs_every_test_of_its_config(client, backend, settings, tmp_path):
    settings.CRCR_WORK_DIR = str(tmp_path / "work")
    client.force_login(make_user("rita", role="reviewer"))
    client.post(
        reverse("runs:trigger_create"), {"backend": "acme", "kind": "manual", "target": "c" * 40}
    )
    run = Run.objects.get()
    assert not any(
        arg.startswith("--reuse-labels") for arg in planning.pytest_for(run, tmp_path).argv()
    )


def test_the_form_refuses_what_is_not_a_label_and_starts_nothing(client, backend):
    client.force_login(make_user("rita", role="reviewer"))
    page = client.post(
        reverse("runs:trigger_create"),
        {"backend": "acme", "kind": "manual", "target": "d" * 40, "labels": "smoke tests"},
    )
    assert page.status_code == 200
    assert "&#x27;smoke tests&#x27; is not a label" in page.content.decode()
    assert not Trigger.objects.exists()


def test_the_trigger_command_takes_labels(backend):
    call_command("trigger", "--backend", "acme", "--sha", "e" * 40, "--labels", "core")
    assert Trigger.objects.get().labels == "core"
    with pytest.raises(CommandError, match="is not a label"):
        call_command("trigger", "--backend", "acme", "--sha", "f" * 40, "--labels", "suite_")
