"""A whole run over the bundled upstream-style tree on the reference device,
planned and executed by a real Celery worker on Redis and PostgreSQL."""

import os
import subprocess
import sys
from collections import defaultdict

import pytest
from crcr_reuse.outcomes import read_progress

from runs import planning, triggers
from runs.models import Dispatch, Failure, Run, Shard, TestResult
from runs.relay.simulator import RelaySimulator
from tests.dispatches import pr_dispatch
from tests.factories import make_backend, make_config
from tests.runs.treeconfig import TREE, tree_config
from tests.waiting import wait_for

REPO = "acme/torch-treerun"
PLANTED = "test/test_planted_faults.py"
FLAKY = "test_flaky_counter"

pytestmark = pytest.mark.django_db


def direct_outcomes(tmp_path) -> dict[str, str]:
    """The same tests run by plain pytest with the plugin: the ground truth."""
    config = tmp_path / "direct.yaml"
    config.write_text(tree_config())
    progress = tmp_path / "direct.jsonl"
    env = dict(os.environ, TORCH_ROOT=str(TREE), TMPDIR=str(tmp_path))
    subprocess.run(
        [
            sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
            "-p", "crcr_reuse.progress_log", f"--crcr-progress={progress}",
            "-p", "crcr_reuse", f"--reuse-config={config}", f"--reuse-torch-root={TREE}",
            f"--deselect={PLANTED}",
        ],
        cwd=TREE, env=env, capture_output=True, timeout=600,
    )  # fmt: skip
    # Read as crcr reads a shard's log (a strict XPASS is an unexpected pass). A direct
    # run reports the config's skips as skipped; a crcr run never plans them.
    records = read_progress(progress, ended=True).records
    return {
        node_id: record.outcome
        for node_id, record in records.items()
        if ["mode", "skip"] not in record.properties
    }


@pytest.fixture(scope="module")
def finished_run(django_db_setup, django_db_blocker, celery_worker_session, tmp_path_factory):
    """One run of the whole tree, shared by the assertions below."""
    from django.conf import settings

    storage = tmp_path_factory.mktemp("storage")
    old = settings.MEDIA_ROOT, settings.CRCR_TEST_TIMEOUT, settings.CRCR_HEARTBEAT_SECONDS
    settings.MEDIA_ROOT, settings.CRCR_TEST_TIMEOUT = str(storage), 20
    settings.CRCR_HEARTBEAT_SECONDS = 1
    token = tmp_path_factory.mktemp("relay") / "token"
    token.write_text("s3cret")
    with (
        django_db_blocker.unblock(),
        RelaySimulator(token="s3cret", allowlist={REPO: "L2"}, strict=True) as sim,
    ):
        backend = make_backend(
            "treerun", repository=REPO, relay_mode="per_job", relay_url=sim.url,
            relay_token=f"file:{token}",
        )  # fmt: skip
        make_config(backend, tree_config())
        body = pr_dispatch()
        sim.dispatch(body["delivery_id"], REPO, body["payload"])
        dispatch = Dispatch.objects.create(
            backend=backend, delivery_id=body["delivery_id"], event_type="pull_request",
            raw_body="{}", payload=body["payload"], verdict="accepted",
        )  # fmt: skip
        trigger = triggers.start(backend, "dispatch", "a" * 40, dispatch=dispatch)
        progress: list[tuple[int, int]] = []  # (done, of) of running shards, as polled

        def finished() -> Run | None:
            running = Shard.objects.filter(run__trigger=trigger, status="running")
            progress.extend((shard.tests_done, len(shard.test_ids)) for shard in running)
            return Run.objects.filter(trigger=trigger, status__in=Run.FINISHED).first()

        run = wait_for(finished, timeout=900, what="the run to finish")
        run.progress_seen = progress
        wait_for(
            lambda: not run.callbacks.exclude(status="delivered").exists(),
            what="the callbacks",
        )
        run.relay_record = list(sim.accepted)
        yield run
        Run.objects.filter(pk=run.pk).delete()
        trigger.delete()
        dispatch.delete()
        backend.proposals.all().delete()  # the run's promotion proposal
        backend.config_versions.all().delete()
        backend.delete()
    settings.MEDIA_ROOT, settings.CRCR_TEST_TIMEOUT, settings.CRCR_HEARTBEAT_SECONDS = old


def attempts_of(run: Run) -> dict[str, list[TestResult]]:
    by_test: dict[str, list[TestResult]] = defaultdict(list)
    for result in run.results.order_by("attempt"):
        by_test[result.node_id.rsplit("::", 1)[1]].append(result)
    return by_test


def failure_of(run: Run, name_part: str) -> Failure:
    return Failure.objects.get(run=run, result__node_id__contains=name_part)


def test_the_planted_crash_and_hang_are_pinned(finished_run):
    by_test = attempts_of(finished_run)
    crash = next(v for k, v in by_test.items() if "test_lerp_crashes_the_process" in k)
    hang = next(v for k, v in by_test.items() if "test_cumprod_hangs" in k)
    assert [r.outcome for r in crash] == ["crashed"]
    assert [r.outcome for r in hang] == ["timed_out"]
    assert failure_of(finished_run, "test_lerp_crashes").category == "crash"
    assert failure_of(finished_run, "test_cumprod_hangs").category == "timeout"


def test_the_mismatch_and_the_unsupported_op_are_classified(finished_run):
    mismatch = failure_of(finished_run, "test_addcmul_matches_cpu")
    assert mismatch.category == "numerical_mismatch"
    unsupported = failure_of(finished_run, "test_lgamma_is_unsupported")
    assert unsupported.category == "unsupported_op" and unsupported.op_name == "lgamma"
    # A deterministic failure is not re-run; a mismatch is, up to three attempts.
    by_test = attempts_of(finished_run)
    assert len(next(v for k, v in by_test.items() if "test_lgamma_is_unsupported" in k)) == 1
    assert len(next(v for k, v in by_test.items() if "test_addcmul_matches_cpu" in k)) == 3


def test_the_flaky_test_passes_on_retry_and_is_flaky(finished_run):
    flaky = next(v for k, v in attempts_of(finished_run).items() if FLAKY in k)
    assert [r.outcome for r in flaky] == ["failed", "passed"]
    assert failure_of(finished_run, FLAKY).verdict == "flaky"


def test_every_other_test_has_its_real_outcome(finished_run, tmp_path):
    truth = direct_outcomes(tmp_path)
    final = {}
    for result in finished_run.results.order_by("attempt"):
        final[result.node_id] = result.outcome
    others = {k: v for k, v in final.items() if PLANTED not in k and FLAKY not in k}
    truth = {k: v for k, v in truth.items() if FLAKY not in k}
    assert len(others) > 50
    assert others == truth


def test_the_run_is_red_for_its_regressions_and_its_page_shows_them(finished_run, client):
    from tests.factories import make_user

    assert finished_run.status == Run.Status.FAILED
    assert finished_run.shards.filter(status="done").count() == finished_run.shards.count()
    client.force_login(make_user("vera"))
    page = client.get(f"/runs/{finished_run.uuid}/").content.decode()
    assert "numerical mismatch" in page and "unsupported op" in page
    assert "<svg" in page and "estimated" in page
    response = client.get(f"/runs/{finished_run.uuid}/", HTTP_HX_REQUEST="true")
    assert response.status_code == 286  # finished: htmx stops polling


def test_a_running_shard_showed_how_many_of_its_tests_were_done(finished_run):
    # The hang alone keeps a shard running for the test timeout, tests done before it.
    assert any(0 < done < of for done, of in finished_run.progress_seen)
    for shard in finished_run.shards.all():
        assert shard.tests_done == len(shard.test_ids)


def test_planning_stored_estimates_and_the_history_learned(finished_run):
    from runs.models import TestDuration

    assert sum(len(s.test_ids) for s in finished_run.shards.all()) == len(
        set(finished_run.results.values_list("node_id", flat=True))
    )
    assert TestDuration.objects.filter(device=finished_run.backend.device_module).count() > 50
    assert planning.workdir_for(finished_run).is_dir()


def test_each_shard_is_a_hud_job_with_one_in_progress_then_one_completed(finished_run):
    jobs: dict[str, list[str]] = {}
    for key, status, body in finished_run.relay_record:
        jobs.setdefault(key.job_name, []).append(status)
        if status == "completed":
            index = int(key.job_name.rsplit(" ", 1)[1])
            shard = finished_run.shards.get(index=index)
            assert body["workflow"]["test_results"] == shard.test_counts()
    shards = finished_run.shards.count()
    assert jobs == {f"treerun / shard {i}": ["in_progress", "completed"] for i in range(shards)}


def test_the_strict_xfail_that_passed_is_an_unexpected_pass_proposed_for_promotion(finished_run):
    passes_today = next(v for k, v in attempts_of(finished_run).items() if "test_passes_today" in k)
    assert [(r.outcome, r.mode) for r in passes_today] == [("xpassed", "xfail_strict")]
    assert not Failure.objects.filter(run=finished_run, result__in=passes_today).exists()
    promoted = finished_run.backend.proposals.get(stage="promote")
    assert (promoted.test_name, promoted.mode) == ("test_passes_today", "mandatory_success")
