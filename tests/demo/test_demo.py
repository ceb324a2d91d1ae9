"""The embedded demo feeds a merged PR through the intake once, with a relay to report to,
and builds the nightly of the same commit once."""

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command

from demo import main_job
from runs.models import Dispatch, Run
from selection import configprs
from tests.factories import make_proposal
from tests.waiting import wait_for


def test_the_demo_feeds_a_merged_pr_through_the_intake_once(
    settings, tmp_path, celery_worker, capsys
):
    settings.VAR_DIR = tmp_path
    settings.CRCR_UPSTREAM = f"git:{tmp_path / 'upstream'}"
    # An empty test tree: the run is created and planned, and ends at once.
    settings.CRCR_TORCH_ROOT = tmp_path / "no-tests"
    call_command("demo", no_selection=True)
    finished = Run.objects.filter(status__in=Run.FINISHED)
    run = wait_for(lambda: finished.filter(trigger__kind="dispatch").first(), what="the demo run")
    dispatch = Dispatch.objects.get()
    assert dispatch.verdict == "accepted"
    assert "PR #160000 merged into main" in dispatch.verdict_reason
    assert run.trigger.dispatch == dispatch and run.job_name == "reference"
    assert (tmp_path / "upstream" / ".git").is_dir()
    assert run.backend.relay_url.endswith("/github/callback")
    # The nightly of the same commit: the same job again, a nightly run (the summary's tab).
    nightly = wait_for(lambda: finished.filter(trigger__kind="nightly").first(), what="a nightly")
    assert (nightly.job_name, nightly.pytorch_sha) == (run.job_name, run.pytorch_sha)
    call_command("demo", no_selection=True)
    assert Dispatch.objects.count() == 1 and Run.objects.count() == 2
    out = capsys.readouterr().out
    assert "pull-request and nightly figures at http://127.0.0.1:8000/summary/" in out
    assert "sign in at http://127.0.0.1:8000/ as demo / crcr-demo" in out
    assert "or as demo-reviewer / crcr-demo (the second reviewer)" in out
    assert "relay simulator at http://127.0.0.1:" in out


def test_the_demo_leaves_a_config_pr_of_what_the_device_verified(db):
    main_job.create_demo_user()
    backend = main_job.load_backend().backend
    refined = {"file_path": "test/test_plain_reuse.py", "class_name": "TestPlainMath"}
    make_proposal(backend, **refined, test_name="test_sum", stage="refine")
    make_proposal(backend, **refined, test_name="test_wrong_on_purpose", stage="refine",
                  mode="xfail", reason="asserts 11 == 10 on purpose")  # fmt: skip
    make_proposal(backend, **refined, test_name="test_passes_today", stage="classify")
    change = main_job.open_config_pr(backend)
    assert change is not None and change.status == "open"
    assert sorted(change.proposals.values_list("test_name", flat=True)) == [
        "test_sum",
        "test_wrong_on_purpose",
    ]
    assert "# Why: asserts 11 == 10 on purpose" in change.proposed_text
    # The unverified proposal waits in the queue; a second demo run opens nothing new.
    assert backend.proposals.get(test_name="test_passes_today").status == "pending"
    assert main_job.open_config_pr(backend) == change
    assert backend.config_changes.count() == 1
    # Its author cannot approve it; the demo's second reviewer can, and then merge it.
    admin, second = (User.objects.get(username=name) for name in ("demo", "demo-reviewer"))
    with pytest.raises(configprs.ChangeError, match="another reviewer must approve"):
        configprs.approve(change, admin, change.revision)
    configprs.approve(change, second, change.revision)
    assert configprs.merge(change, second, change.revision).number == 2
