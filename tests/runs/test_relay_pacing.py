"""Callbacks paced to the relay's limit: a 60-shard per-job run and two nightly self-reports
of the same repository, finishing together, through real Celery worker processes and the
relay simulator enforcing its limit. The minute is scaled down to a few seconds (the relay's
limit and crcr's budget with it, in the same ratio as 100 and 90 a minute): the same code."""

from collections import Counter

import pytest

from runs.models import RelayCallback, Run, Shard, Trigger
from runs.relay import outbox
from runs.relay.simulator import RelaySimulator
from tests.factories import make_backend, make_config, make_user
from tests.runs.relay_runs import REPO, dispatched_run, make_run, relay_backend
from tests.waiting import wait_for
from tests.workers import Beat, environment, start_worker, stop

WINDOW, RELAY_LIMIT, BUDGET = 4, 20, 18
SHARDS = 60


@pytest.fixture
def simulator():
    with RelaySimulator(
        token="s3cret", allowlist={REPO: "L2"}, strict=True,
        rate_limit=RELAY_LIMIT, rate_window=WINDOW,
    ) as relay:  # fmt: skip
        yield relay


@pytest.fixture
def paced(settings):
    # The test process sends nothing itself, but the suite's in-process worker, when one
    # runs, would: it then shares the same budget.
    settings.CRCR_RELAY_CALLBACKS_PER_MINUTE = BUDGET
    settings.CRCR_RELAY_RATE_WINDOW_SECONDS = WINDOW


def nightly(backend, sha: str) -> Run:
    trigger = Trigger.objects.create(
        backend=backend, kind="nightly", pytorch_sha=sha, ref="nightly"
    )
    return make_run(backend, trigger)


def test_a_60_shard_run_and_two_nightlies_finishing_together_stay_under_the_relays_limit(
    simulator, paced, tmp_path, broker, transactional_db, client
):
    sharded = relay_backend(simulator, tmp_path, relay_mode="per_job")
    # Two more backends of the same repository, sharing its relay token and its budget.
    others = [
        make_backend(
            slug, repository=REPO, relay_url=simulator.url, relay_token=sharded.relay_token
        )
        for slug in ("acme-gpu", "acme-npu")
    ]
    for other in others:
        make_config(other)
    env = environment(
        tmp_path, broker,
        CRCR_RELAY_CALLBACKS_PER_MINUTE=str(BUDGET), CRCR_RELAY_RATE_WINDOW_SECONDS=str(WINDOW),
    )  # fmt: skip
    workers = [
        start_worker(env, f"relay{n}", tmp_path / f"relay{n}.log", queues="default,relay")
        for n in range(2)
    ]
    beat = Beat(broker, "runs.tasks.deliver_due_callbacks", every=1)
    client.force_login(make_user("vera"))
    try:
        run = dispatched_run(sharded, simulator)
        shards = [Shard.objects.create(run=run, index=i, status="running") for i in range(SHARDS)]
        for shard in shards:
            outbox.job_started(run, shard)
        nightlies = [nightly(backend, sha * 40) for backend, sha in zip(others, "cd", strict=True)]
        # Every shard ends at once, and both nightlies with them.
        Shard.objects.filter(run=run).update(status="done")
        for shard in Shard.objects.filter(run=run):
            outbox.shard_finished(shard)
        for other in nightlies:
            Run.objects.filter(pk=other.pk).update(status="passed")
            outbox.run_finished(Run.objects.get(pk=other.pk))
        callbacks = RelayCallback.objects.all()
        assert callbacks.count() == 2 * SHARDS + 2

        page = f"/runs/{run.uuid}/"
        seen_waiting = []

        def all_delivered() -> bool:
            beat.tick()
            if "waiting for its turn" in client.get(page).content.decode():
                seen_waiting.append(True)
            return not callbacks.exclude(status="delivered").exists()

        wait_for(all_delivered, timeout=600, what="every callback delivered")
    finally:
        stop(*workers)

    assert not simulator.refused  # no 429, no repeat, nothing out of order
    assert simulator.rate_peaks[REPO] <= RELAY_LIMIT
    sent = Counter((key.delivery_id, key.job_name, status) for key, status, _ in simulator.accepted)
    assert len(sent) == 2 * SHARDS + 2 and set(sent.values()) == {1}  # none lost, none twice
    order: dict[str, list[str]] = {}
    for key, status, _ in simulator.accepted:
        order.setdefault(key.job_name, []).append(status)
    assert all(order[f"acme / shard {i}"] == ["in_progress", "completed"] for i in range(SHARDS))
    assert seen_waiting, "the run page never showed a callback waiting for its turn"
