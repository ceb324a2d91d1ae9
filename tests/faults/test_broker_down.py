"""The broker down at the intake: the dispatch is answered 202 and kept, and gated
by beat's sweep once the broker is back; a run whose planning message the broker
lost is sent again; nothing is gated twice."""

import json
import urllib.request

import pytest

from demo.localgit import PyTorchShapedRepo
from runs.models import Dispatch, Run
from tests.dispatches import pr_dispatch
from tests.factories import make_backend, make_config, make_token, make_user
from tests.waiting import wait_for
from tests.workers import (
    Beat,
    PrivateRedis,
    environment,
    free_port,
    start_web,
    start_worker,
    stop,
)


@pytest.fixture
def redis(tmp_path):
    # Never the shared server on 6379: other tests (and people) use it.
    with PrivateRedis(tmp_path) as server:
        yield server


def post(base_url: str, token: str, body: dict) -> int:
    request = urllib.request.Request(
        f"{base_url}/api/dispatches/?backend=brokerdown",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Token {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return response.status


def test_a_dispatch_taken_while_the_broker_is_down_is_gated_once_it_is_back(
    transactional_db, redis, tmp_path
):
    backend = make_backend("brokerdown")
    make_config(backend)
    token = make_token(make_user("forwarder", role="machine"), backend)
    upstream = PyTorchShapedRepo(tmp_path / "pytorch")
    env = environment(
        tmp_path, redis.url, CRCR_UPSTREAM=f"git:{upstream.path}", CRCR_LOST_WORK_SECONDS="1"
    )
    port = free_port()
    web = start_web(env, port, tmp_path / "web.log")
    worker = None
    try:
        base_url = f"http://127.0.0.1:{port}"
        redis.kill()  # the broker is really gone: nothing listens on its port

        assert post(base_url, token, pr_dispatch()) == 202
        dispatch = Dispatch.objects.get()
        assert dispatch.verdict == Dispatch.Verdict.PENDING

        redis.start()
        worker = start_worker(env, "brokerdown", log=tmp_path / "worker.log", queues="default")
        # Beat sends the sweep every minute; the test sends it every few seconds.
        beat = Beat(redis.url, "runs.tasks.resend_lost_work", every=3)
        wait_for(
            lambda: (
                beat.tick() and Dispatch.objects.filter(pk=dispatch.pk, verdict="accepted").exists()
            ),
            timeout=120,
            what="the sweep to gate the kept dispatch",
        )
        # Its run waits for a device worker; a restart of the broker loses that message.
        wait_for(lambda: redis.waiting("device") == 1, what="the run's planning message")
        stop(worker)
        redis.kill()
        redis.start()
        worker = start_worker(env, "brokerdown", log=tmp_path / "worker.log", queues="default")
        wait_for(
            lambda: beat.tick() and redis.waiting("device") == 1,
            timeout=120,
            what="the sweep to send the lost planning message again",
        )
    finally:
        stop(worker, web)
    # Gated once: one trigger, one run for the merged PR (its planning waits for a device).
    assert Run.objects.filter(trigger__dispatch=dispatch).count() == 1
