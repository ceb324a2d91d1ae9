"""PostgreSQL drops every connection of a worker mid-shard: the worker reconnects,
keeps its claim alive, and the run ends with each test's result stored once."""

from datetime import timedelta

import psycopg
from django.db import connection
from django.db.models import F
from django.utils import timezone

from runs.models import Run
from tests.factories import make_backend, make_config
from tests.waiting import wait_for
from tests.workers import (
    SMALL,
    database_url,
    environment,
    finished,
    own_redis,
    results_once,
    shard_log,
    start_worker,
    stop,
    trigger,
)


def drop_connections() -> int:
    """Terminate every backend of the test database but the test's own (what a
    PostgreSQL restart or a proxy's failover does to the workers)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (mine,) = cursor.fetchone()
    with psycopg.connect(database_url(), autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() AND pid <> %s",
            [mine],
        ).fetchall()
    return len(rows)


def test_dropped_database_connections_mid_shard_lose_no_result_and_duplicate_none(
    transactional_db, tmp_path
):
    backend = make_backend("pgfault")
    make_config(backend, SMALL)
    with own_redis() as broker:
        # Persistent connections, as deployed: the worker must notice a dead one.
        env = environment(tmp_path, broker, CRCR_MAX_SHARD_SECONDS="8", DATABASE_CONN_MAX_AGE="60")
        worker = start_worker(env, "pgfault", log=tmp_path / "worker.log")
        try:
            trigger(env, "pgfault", "e" * 40)
            run = wait_for(
                lambda: Run.objects.filter(backend=backend, status="running").first(),
                timeout=300,
                what="the run to be planned",
            )
            for index in range(run.shards.count()):
                wait_for(shard_log(tmp_path, run.uuid, index).exists, what=f"shard {index}")
                # The heartbeat thread has a connection of its own once it has beaten.
                wait_for(
                    lambda i=index: run.shards.filter(
                        index=i, heartbeat_at__gt=F("started_at")
                    ).exists(),
                    what=f"shard {index}'s first heartbeat",
                )
                dropped_at = timezone.now()
                assert drop_connections() >= 1  # the worker's task and heartbeat
                # The claim stays fresh: the heartbeat reconnects instead of dying,
                # so no sweep hands the shard to another worker while it runs.
                wait_for(
                    lambda i=index, t=dropped_at: run.shards.filter(
                        index=i, heartbeat_at__gt=t + timedelta(seconds=1)
                    ).exists(),
                    timeout=60,
                    what=f"shard {index}'s heartbeat after the drop",
                )
            run = finished(run)
        finally:
            stop(worker)
    assert set(run.shards.values_list("status", "attempts")) == {("done", 1)}
    results_once(run)
    assert run.status == "passed"
