"""A worker SIGKILLed while it plans a run (mid-build): beat's sweep hands the run to
another worker once the claim's heartbeat has gone silent, and the run finishes."""

import signal

from crcr_site.lib import leases
from runs import planning
from runs.models import Run
from tests.factories import make_backend, make_config
from tests.runs.test_build_on_worker import BLOCKING_BUILD, WHEELS
from tests.waiting import wait_for
from tests.workers import SMALL, Beat, environment, start_worker, stop, trigger


def test_a_planning_whose_worker_was_killed_is_taken_over(transactional_db, broker, tmp_path):
    backend = make_backend("takeover")
    make_config(backend, SMALL)
    gate = tmp_path / "gate"
    gate.mkdir()
    env = environment(
        tmp_path, broker, CRCR_BUILD_COMMAND=BLOCKING_BUILD, BUILD_GATE=str(gate),
        CRCR_LOST_WORK_SECONDS="1",
    )  # fmt: skip
    first = start_worker(env, "first", log=tmp_path / "first.log")
    second = None
    try:
        trigger(env, "takeover", "d" * 40)  # returns at once: the build is the worker's
        run = wait_for(
            lambda: Run.objects.filter(backend=backend, stage__startswith="building").first(),
            timeout=120,
            what="the first worker to start building",
        )
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
        run.refresh_from_db()
        assert run.status == "planning" and run.claims == 1

        second = start_worker(env, "second", log=tmp_path / "second.log")
        beat = Beat(broker, "runs.tasks.resend_lost_work", every=3)
        wait_for(
            lambda: beat.tick() and Run.objects.filter(pk=run.pk, claims=2).exists(),
            timeout=120,
            what="the sweep to hand the run to the second worker",
        )
        (gate / "go").touch()
        run = wait_for(
            lambda: Run.objects.filter(pk=run.pk, status__in=Run.FINISHED).first(),
            timeout=300,
            what="the run to finish on the second worker",
        )
    finally:
        (gate / "go").touch()
        stop(first, second)
    assert run.status == "passed", run.error
    assert run.claims == 2 and run.last_failure == leases.WORKER_STOPPED
    assert sorted(a.location for a in run.artifacts.all()) == WHEELS
    log = (tmp_path / "storage" / "runs" / str(run.uuid) / planning.BUILD_LOG).read_text()
    assert log == "waiting for go\ncompiling aten\n"
