"""Attempts: an upstream "re-run failed jobs" re-runs the failed shards of a run.

The HUD job of a dispatched run links to the GitHub Actions run that reports it. A PR's
"re-run failed jobs" re-runs that Actions job with `run_attempt` + 1, and the job asks crcr
for the same attempt of the run (`POST /api/runs/<uuid>/attempts/`). `start` runs in that
request and does only what is cheap:
1. the run named stands for its first attempt (a later attempt names its first);
2. an attempt already made with that number is the answer (a repeated request);
3. the previous attempt (the highest number below) is the answer while it is still
   going (its Actions job gave up first) or when it passed: nothing is re-run;
4. else the new attempt is a run of its own (results kept apart), with the first
   attempt's trigger, job and parts and the previous attempt's artifacts, queued for
   planning, which copies the previous attempt's failed shards (lost to infrastructure,
   or holding a test whose final outcome failed; same index, same tests) instead of
   collecting (`shards_to_rerun`); with none (it never got as far as shards) the
   attempt runs in full.
Every attempt reports to the HUD under its first attempt's run (`Run.hud_run_id`).
"""

from dataclasses import dataclass

from django.db import transaction
from django.db.models import Q

from crcr_site.lib import enqueue
from runs.models import Run, Shard, TestResult


@dataclass(frozen=True)
class Attempt:
    run: Run
    created: bool


def start(run: Run, number: int) -> Attempt:
    """The run's attempt `number` (2 or more): made now and queued, made before, or the
    previous attempt when it is still going or passed."""
    from runs.tasks import plan_run

    with transaction.atomic():
        # Concurrency guard: the first attempt's row lock makes two requests for the same
        # attempt (a retried POST) make it once.
        first = Run.objects.select_for_update().get(pk=run.retry_of_id or run.pk)
        made = first.attempts.filter(run_attempt=number).first()
        if made is not None:
            return Attempt(made, created=False)
        previous = _latest(first, before=number)
        if not previous.is_finished or previous.status == Run.Status.PASSED:
            return Attempt(previous, created=False)
        made = Run.objects.create(
            trigger=first.trigger, backend=first.backend, job_name=first.job_name,
            is_primary=first.is_primary, backend_version=first.backend_version,
            pytorch_sha=first.pytorch_sha, test_suite_sha=first.test_suite_sha,
            config_version=first.config_version, changed_since_green=first.changed_since_green,
            retry_of=first, run_attempt=number,
        )  # fmt: skip
        made.artifacts.set(previous.artifacts.all())
        enqueue.after_commit(plan_run, made.pk)
    return Attempt(made, created=True)


def _latest(first: Run, before: int) -> Run:
    """The first attempt's run or its latest attempt numbered below `before`."""
    earlier = Q(pk=first.pk) | Q(retry_of=first.pk, run_attempt__lt=before)
    return Run.objects.filter(earlier).order_by("-run_attempt").first() or first


def failed_shards(run: Run) -> list[Shard]:
    """The run's shards lost to infrastructure or holding a test whose final outcome failed."""
    final: dict[tuple[int, str], str] = {}
    rows = TestResult.objects.filter(run=run).order_by("attempt")
    for shard_id, node_id, outcome in rows.values_list("shard_id", "node_id", "outcome"):
        final[(shard_id, node_id)] = outcome
    failing = {
        shard_id for (shard_id, _), outcome in final.items() if outcome in TestResult.FAILING
    }
    return [
        shard
        for shard in run.shards.order_by("index")
        if shard.status == Shard.Status.ERROR or shard.pk in failing
    ]


def shards_to_rerun(run: Run) -> list[Shard]:
    """For a later attempt, unsaved copies of the previous attempt's failed shards; empty for
    a first attempt, or when the previous attempt has none (planning then collects)."""
    if run.retry_of is None:
        return []
    previous = _latest(run.retry_of, before=run.run_attempt)
    return [
        Shard(run=run, index=s.index, test_ids=s.test_ids, estimated_seconds=s.estimated_seconds)
        for s in failed_shards(previous)
    ]
