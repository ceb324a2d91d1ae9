"""What CI runs propose: a strict xfail that passed is an unexpected pass (the run stays
green) and a promotion proposal; a test flaky in enough recent runs is a quarantine one."""

import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from runs.models import Failure, Run, Shard, TestResult, Trigger
from selection import promotion
from selection.models import Proposal
from tests.factories import make_backend, make_config, make_user
from tests.waiting import wait_for

PLAIN = "test/test_plain_reuse.py"
# test_passes_today passes although listed strict xfail; test_wrong_on_purpose fails as listed.
STRICT = """test_suite_config:
  files:
    - path: ${TORCH_ROOT}/test/test_plain_reuse.py
      unlisted_test_mode: skip
      tests:
        - names: [TestPlainMath::test_sum]
          mode: mandatory_success
        # Why: the bool kernels were missing.
        - names: [TestPlainMath::test_passes_today]
          mode: xfail_strict
        - names: [TestPlainMath::test_wrong_on_purpose]
          mode: xfail
"""


def test_a_strict_xpass_leaves_the_run_green_and_proposes_a_promotion(
    client, backend, upstream, celery_worker, settings, tmp_path
):
    settings.MEDIA_ROOT = str(tmp_path / "storage")
    make_config(backend, STRICT)
    client.force_login(make_user("rita", role="reviewer"))
    started = client.post(
        reverse("runs:trigger_create"), {"backend": "acme", "kind": "manual", "target": "b" * 40}
    )
    assert started.status_code == 302
    run = wait_for(
        lambda: Run.objects.filter(status__in=Run.FINISHED).first(),
        timeout=600,
        what="the run to finish",
    )

    assert run.status == Run.Status.PASSED, run.error
    final = {r.test_name: r.outcome for r in run.results.order_by("attempt")}
    assert final == {
        "test_sum": "passed",
        "test_passes_today": "xpassed",
        "test_wrong_on_purpose": "xfailed",
    }
    assert not Failure.objects.filter(run=run).exists()
    assert run.test_counts() == {"passed": 3, "failed": 0, "skipped": 0, "total": 3}

    # The HUD's cell for the run is green (an "O"), not red.
    hud = client.get(reverse("runs:hud")).content.decode()
    cell = re.search(rf'<td class="cell cell-(.) tone-(\w+)[^"]*"><a href="/runs/{run.uuid}/"', hud)
    assert cell and cell.groups() == ("O", "green"), cell

    proposal = Proposal.objects.get(backend=backend)
    assert (proposal.test_name, proposal.class_name, proposal.file_path) == (
        "test_passes_today", "TestPlainMath", PLAIN,
    )  # fmt: skip
    assert (proposal.mode, proposal.stage, proposal.status) == (
        "mandatory_success", "promote", "pending",
    )  # fmt: skip
    assert "1 of 1 variant(s) passed though listed xfail_strict" in proposal.reason

    page = client.get(reverse("runs:run_detail", args=[run.uuid])).content.decode()
    assert "Unexpectedly passing (1)" in page
    assert f"{PLAIN}::TestPlainMath::test_passes_today" in page
    assert "?backend=acme&amp;stage=promote" in page
    queue = client.get(reverse("selection:proposal_list"), {"stage": "promote"}).content.decode()
    assert "test_passes_today" in queue and "test_wrong_on_purpose" not in queue
    evidence = client.get(reverse("selection:proposal_detail", args=[proposal.uuid])).content
    assert f'in CI run <a href="/runs/{run.uuid}/">acme</a>: 1 of 1' in evidence.decode()

    # The same run finishing again (a redelivered message) proposes nothing twice.
    assert promotion.from_run(run=run) == {"created": 0, "updated": 1, "unchanged": 0}
    assert Proposal.objects.filter(backend=backend).count() == 1


# -- the same decisions, from stored runs ---------------------------------------------------


def a_run(backend, minutes_ago: int, outcomes: dict[str, list[str]], mode="mandatory_success"):
    """A finished run of TestPlainMath's tests, each with its attempts' outcomes."""
    trigger = Trigger.objects.create(backend=backend, kind="nightly", pytorch_sha="c" * 40)
    run = Run.objects.create(
        trigger=trigger, backend=backend, job_name=backend.slug, backend_version="1",
        pytorch_sha="c" * 40, test_suite_sha="c" * 40, status="passed",
        config_version=backend.config_versions.first(),
        created_at=timezone.now() - timedelta(minutes=minutes_ago),
    )  # fmt: skip
    shard = Shard.objects.create(run=run, index=0)
    for node, attempts in outcomes.items():
        name, _, variant = node.partition("[")
        for attempt, outcome in enumerate(attempts, 1):
            result = TestResult.objects.create(
                shard=shard, run=run, attempt=attempt,
                node_id=f"{PLAIN}::TestPlainMath::{node}", file_path=PLAIN,
                class_name="TestPlainMath", test_name=name, mode=mode, outcome=outcome,
            )  # fmt: skip
            if attempt == 1 and outcome == "failed" and attempts[-1] == "passed":
                Failure.objects.create(
                    result=result, run=run, category="other", verdict=Failure.Verdict.FLAKY
                )
    return run


@pytest.mark.django_db
def test_a_test_flaky_in_enough_recent_runs_becomes_a_quarantine_proposal(settings):
    settings.CRCR_QUARANTINE_FLAKY_RUNS, settings.CRCR_QUARANTINE_WINDOW = 3, 5
    backend = make_backend("acme")
    make_config(backend)
    flaky = {"test_sum": ["failed", "passed"], "test_other": ["passed"]}
    a_run(backend, 50, flaky)
    a_run(backend, 40, {"test_sum": ["passed"]})
    second = a_run(backend, 30, flaky)
    assert promotion.from_run(run=second) == {}  # flaky twice: not yet
    assert not Proposal.objects.exists()

    third = a_run(backend, 20, flaky)
    assert promotion.from_run(run=third)["created"] == 1
    proposal = Proposal.objects.get()
    assert (proposal.test_name, proposal.mode, proposal.stage) == (
        "test_sum",
        "xfail",
        "quarantine",
    )
    assert proposal.reason.startswith("flaky in 3 of the backend's last 5 runs")
    assert len(proposal.evidence["flaky_history"]) == 3

    # Past the window, the oldest flaky run no longer counts.
    Proposal.objects.all().delete()
    a_run(backend, 15, {"test_other": ["passed"]})
    a_run(backend, 10, {"test_other": ["passed"]})
    fourth = a_run(backend, 5, flaky)
    assert promotion.from_run(run=fourth) == {"created": 1, "updated": 0, "unchanged": 0}
    assert len(Proposal.objects.get().evidence["flaky_history"]) == 3  # runs 30, 20 and 5


@pytest.mark.django_db
def test_a_test_still_failing_in_some_variants_is_not_promoted():
    backend = make_backend("acme")
    make_config(backend)
    run = a_run(
        backend,
        5,
        {"test_dtype[float32]": ["xpassed"], "test_dtype[float16]": ["xfailed"],
         "test_all[a]": ["xpassed"], "test_all[b]": ["passed"]},
        mode="xfail",
    )  # fmt: skip
    assert promotion.from_run(run=run)["created"] == 1
    promoted = Proposal.objects.get()
    assert promoted.test_name == "test_all"
    assert promoted.evidence["ci_run"]["unexpected_passes"] == 1
    assert promoted.evidence["ci_run"]["variants"] == 2
